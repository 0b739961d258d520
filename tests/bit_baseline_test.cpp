// The raw output bits of every variant x path x dtype, against a record made before a refactor
// (tests/data/bit_baseline.txt): a change of orchestration that claims to leave the numbers alone
// (issue 51's plans and step engines) must give the same bits, not just bits within tolerance.
//
// Every CPU variant on every path it takes on this host, in every precision it supports, and the
// CUDA time loop run on the host (tests/cuda_host_emulation.hpp), each on the small shapes of
// tests/variant_runner.hpp and on Braun's 1x320-CE-short (T 100, N 64, I 123, H 320; fixed seeds).
// For each it hashes (FNV-1a over the IEEE bits) the training forward's y, hn and cn, an inference
// forward's y, and a whole backward's dx, dh0, dc0 and dparams (accumulated onto fixed nonzero
// values).
//
// Bits depend on the machine: Eigen's GEMMs follow the instruction sets they were compiled for and
// block by the cache sizes they find, oneDNN picks its kernels per CPU, and the eigen path's bits
// follow the team size. So each record carries its host's domain (CPU model, instruction sets and
// caps, Eigen's instruction sets, the cache sizes Eigen blocks by, OpenMP threads), and a host
// checks the records of its own domain.
// A host with none reports the test as skipped and says how to make one: build the commit the
// record must come from (the one before the refactor) and run
//   LSTM_BIT_BASELINE_RECORD=tests/data/bit_baseline.txt build/tests/lstm_tests "[bit_baseline]"
// from the repository root, which replaces that domain's lines and keeps the others'.

#include <omp.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cuda_host_emulation.hpp"
#include "lstm/host_info.hpp"
#include "lstm/reference/variant_check.hpp"
#include "lstm/registry.hpp"
#include "test_data.hpp"
#include "test_util.hpp"
#include "variant_runner.hpp"

using namespace lstm;
using namespace lstm::test;

namespace {

uint64_t fnv1a(const std::vector<double>& values) {
    uint64_t h = 1469598103934665603ull;
    for (double v : values) {
        unsigned char bytes[sizeof v];
        std::memcpy(bytes, &v, sizeof v);
        for (unsigned char b : bytes) {
            h ^= b;
            h *= 1099511628211ull;
        }
    }
    return h;
}

// What the bits of this host depend on, as one line without tabs.
std::string host_domain() {
    const char* dnnl_cap = std::getenv("DNNL_MAX_CPU_ISA");
    std::string d = cpu_model_name() + " | " + cpu_instruction_sets() + " | Eigen " +
                    eigen_instruction_sets() + " | DNNL_MAX_CPU_ISA " +
                    (dnnl_cap ? dnnl_cap : "unset") + " | caches " +
                    std::to_string(sysconf(_SC_LEVEL1_DCACHE_SIZE)) + "/" +
                    std::to_string(sysconf(_SC_LEVEL2_CACHE_SIZE)) + "/" +
                    std::to_string(sysconf(_SC_LEVEL3_CACHE_SIZE)) + " | threads " +
                    std::to_string(omp_get_max_threads());
    for (char& ch : d)
        if (ch == '\t' || ch == '\n') ch = ' ';
    return d;
}

// One hashed output: "variant/device/path/dtype/case" and the output's name.
struct Record {
    std::string entry, output;
    size_t count = 0;
    uint64_t hash = 0;
};

struct Problem {
    std::string name;
    LstmCase c;
};

std::vector<Problem> problems() {
    std::vector<Problem> out;
    uint64_t seed = 51000;
    for (const Shape& s : small_shapes()) {
        out.push_back(
            {s.name, make_case(s.config, s.seq_len, s.batch, s.lengths, s.with_state, seed)});
        seed += 10;
    }
    // Braun 2018's 1x320-CE-short (bench/braun.hpp): zero initial state, every sequence full, and
    // values of the size PyTorch's initialisation gives (1/sqrt(H) = 0.056).
    out.push_back({"braun 1x320-CE-short",
                   make_case(Config{123, 320, 1, false}, 100, 64, {}, false, seed, 0.1)});
    return out;
}

// The outputs of one run, hashed.
void add_records(const std::string& entry, const VariantResult& trained,
                 const VariantResult& inferred, std::vector<Record>& out) {
    const std::pair<const char*, const std::vector<double>*> outputs[] = {
        {"y", &trained.y},
        {"hn", &trained.hn},
        {"cn", &trained.cn},
        {"dx", &trained.dx},
        {"dh0", &trained.dh0},
        {"dc0", &trained.dc0},
        {"dparams", &trained.dparams},
        {"y_inference", &inferred.y},
    };
    for (const auto& [name, values] : outputs)
        out.push_back({entry, name, values->size(), fnv1a(*values)});
}

// dparams before backward: fixed nonzero values, so the records cover the accumulation.
std::vector<double> dparams_before(const LstmCase& c) {
    return random_vector(c.in.params.size(), 77, -0.5, 0.5);
}

template <typename T>
void record_variant(const Variant& v, const std::string& path, const Problem& p,
                    std::vector<Record>& out) {
    const std::string entry = std::string(v.name()) + "/" + to_string(v.device()) + "/" + path +
                              "/" + to_string(dtype_of<T>()) + "/" + p.name;
    const VariantResult trained = run_variant<T>(v, p.c, dparams_before(p.c), path);
    const VariantResult inferred = reference::run_variant_parts<T>(v, p.c, {}, {}, false, path);
    add_records(entry, trained, inferred, out);
}

template <typename T>
void record_emulated(LoopStyle style, const Problem& p, std::vector<Record>& out) {
    const std::string entry = std::string("cuda-loop-on-host/") + cuda::to_string(style) +
                              "/default/" + to_string(dtype_of<T>()) + "/" + p.name;
    add_records(entry, emulate<T>(style, p.c, true, false, dparams_before(p.c)),
                emulate<T>(style, p.c, false, false), out);
}

std::vector<Record> compute_records() {
    std::vector<Record> out;
    for (const Problem& p : problems()) {
        const bool variable =
            lstm::detail::has_variable_lengths(Span<const int64_t>(p.c.in.lengths), p.c.in.seq_len);
        for (const Variant* v : variants_on(Device::cpu)) {
            if (variable && v->supports_variable_lengths()) continue;
            for (DType dt : {DType::f32, DType::f64}) {
                if (v->supports(p.c.in.config, dt)) continue;
                for (const std::string& path : v->paths(dt)) {
                    if (dt == DType::f32)
                        record_variant<float>(*v, path, p, out);
                    else
                        record_variant<double>(*v, path, p, out);
                }
            }
        }
        // The CUDA loop's naive host GEMMs make Braun's case take minutes in double; float covers
        // its orchestration there.
        const bool large = p.c.in.config.hidden_size > 64;
        for (LoopStyle style : {LoopStyle::basic, LoopStyle::fused}) {
            record_emulated<float>(style, p, out);
            if (!large) record_emulated<double>(style, p, out);
        }
    }
    return out;
}

std::string hex(uint64_t v) {
    std::ostringstream s;
    s << std::hex << v;
    return s.str();
}

std::string baseline_path() { return data_path("bit_baseline.txt"); }

// The file: comment lines (#); a line "domain<TAB>..." opens the records of one domain; each
// record is a line of entry, output, count and hash with tabs between them.
std::vector<std::pair<std::string, Record>> read_baseline(const std::string& path) {
    std::vector<std::pair<std::string, Record>> out;
    std::ifstream in(path);
    std::string line, domain;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::vector<std::string> fields;
        std::stringstream s(line);
        std::string field;
        while (std::getline(s, field, '\t')) fields.push_back(field);
        if (fields.size() == 2 && fields[0] == "domain") {
            domain = fields[1];
            continue;
        }
        INFO(path << ": " << line);
        REQUIRE(fields.size() == 4);
        REQUIRE_FALSE(domain.empty());
        Record r{fields[0], fields[1], std::stoull(fields[2]), std::stoull(fields[3], nullptr, 16)};
        out.emplace_back(domain, r);
    }
    return out;
}

void write_baseline(const std::string& path, const std::string& domain,
                    const std::vector<Record>& records) {
    std::map<std::string, std::vector<Record>> by_domain;
    for (auto& [d, r] : read_baseline(path))
        if (d != domain) by_domain[d].push_back(r);
    by_domain[domain] = records;
    std::ofstream out(path, std::ios::trunc);
    REQUIRE(out.good());
    out << "# Output bits of every variant x path x dtype (tests/bit_baseline_test.cpp): per "
           "domain,\n"
           "# entry, output, element count, FNV-1a 64 of the values as IEEE doubles.\n";
    for (const auto& [d, rs] : by_domain) {
        out << "domain\t" << d << '\n';
        for (const Record& r : rs)
            out << r.entry << '\t' << r.output << '\t' << r.count << '\t' << hex(r.hash) << '\n';
    }
    REQUIRE(out.good());
}

}  // namespace

TEST_CASE("every variant, path and dtype gives the recorded bits", "[bit_baseline]") {
    const std::string domain = host_domain();
    if (const char* record_to = std::getenv("LSTM_BIT_BASELINE_RECORD")) {
        const std::vector<Record> records = compute_records();
        write_baseline(record_to, domain, records);
        LSTM_SKIP("recorded " << records.size() << " outputs of domain '" << domain << "' into "
                              << record_to);
    }
    std::map<std::string, Record> recorded;
    std::set<std::string> domains;
    for (auto& [d, r] : read_baseline(baseline_path())) {
        domains.insert(d);
        if (d == domain) recorded[r.entry + "\t" + r.output] = r;
    }
    if (recorded.empty()) {
        std::string known;
        for (const std::string& d : domains) known += "\n  " + d;
        LSTM_SKIP("no bits recorded for this host's domain '"
                  << domain << "' in " << baseline_path() << " (it has:" << known
                  << "); see tests/bit_baseline_test.cpp for how to record them");
    }
    const std::vector<Record> now = compute_records();
    std::set<std::string> seen;
    std::vector<std::string> changed, missing, extra;
    for (const Record& r : now) {
        const std::string key = r.entry + "\t" + r.output;
        seen.insert(key);
        auto it = recorded.find(key);
        if (it == recorded.end()) {
            extra.push_back(r.entry + " " + r.output);
            continue;
        }
        if (it->second.count != r.count || it->second.hash != r.hash)
            changed.push_back(r.entry + " " + r.output + ": " + std::to_string(r.count) +
                              " values hashing to " + hex(r.hash) + ", recorded " +
                              std::to_string(it->second.count) + " hashing to " +
                              hex(it->second.hash));
    }
    for (const auto& [key, r] : recorded)
        if (!seen.count(key)) missing.push_back(r.entry + " " + r.output);
    auto list = [](const std::vector<std::string>& items) {
        std::string s;
        for (size_t i = 0; i < items.size() && i < 40; ++i) s += "\n  " + items[i];
        if (items.size() > 40) s += "\n  ... and " + std::to_string(items.size() - 40) + " more";
        return s;
    };
    INFO("domain '" << domain << "', " << now.size() << " outputs checked");
    INFO(changed.size() << " outputs changed their bits:" << list(changed));
    INFO(missing.size() << " recorded outputs no longer produced:" << list(missing));
    INFO(extra.size() << " outputs without a record (record them at the baseline commit):"
                      << list(extra));
    CHECK(changed.empty());
    CHECK(missing.empty());
    CHECK(extra.empty());
}
