#pragma once

// `lstm_tool info FILE`: lists the tensors of a safetensors file and, where the file holds an
// nn.LSTM state_dict (possibly under a module prefix), the configuration inferred from it.
// `lstm_tool info` without a FILE describes the host instead (lstm/host_info.hpp): the CPU, its
// instruction sets, and which path every registered variant takes on it.

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "lstm/host_info.hpp"
#include "lstm/io/safetensors.hpp"
#include "lstm/io/state_dict.hpp"
#include "lstm/registry.hpp"
#include "tools/lstm_tool/cli.hpp"

namespace lstm::tool {

inline const char* info_help() {
    return R"(usage: lstm_tool info FILE
       lstm_tool info

Lists the tensors of the safetensors FILE (name, dtype, shape, bytes) and its metadata. For every
nn.LSTM state_dict in it (tensors named [PREFIX]weight_ih_l0 and so on), prints the inferred
configuration, or why the tensors do not form a valid one (missing, extra, mis-shaped).

Without a FILE, describes this host: the CPU model (/proc/cpuinfo), whether it has AVX2, FMA and
AVX-512F, the instruction set the compiled kernels dispatch to (Highway's target), the one Eigen
was compiled for, and for every variant built into this binary its device and the path it takes
here (fused: avx512, avx2 or eigen kernels, LSTM_FUSED_ISA honoured; basic: Eigen; onednn:
oneDNN's JIT instruction set; GPU variants: whether a device is visible), then the CTC kernel's
path.
lstm_bench prints the same lines in its context.

options:
  --help    this text
)";
}

// Prefixes under which the file has a "weight_ih_l0": "" for a bare nn.LSTM state_dict,
// "encoder.lstm." for one inside a model.
inline std::vector<std::string> lstm_prefixes(const io::TensorFile& file) {
    const std::string key = "weight_ih_l0";
    std::vector<std::string> out;
    for (const io::Tensor& t : file.tensors())
        if (t.name.size() >= key.size() &&
            t.name.compare(t.name.size() - key.size(), key.size(), key) == 0)
            out.push_back(t.name.substr(0, t.name.size() - key.size()));
    return out;
}

inline void print_info(const io::TensorFile& file, std::ostream& out) {
    uint64_t data_bytes = 0;
    size_t width = 4;
    for (const io::Tensor& t : file.tensors()) {
        data_bytes += t.bytes.size();
        width = std::max(width, t.name.size());
    }
    out << file.source << ": " << file.size() << " tensor" << (file.size() == 1 ? "" : "s") << ", "
        << data_bytes << " bytes of data\n";
    size_t shape_width = 0;
    for (const io::Tensor& t : file.tensors())
        shape_width = std::max(shape_width, t.shape_string().size());
    for (const io::Tensor& t : file.tensors()) {
        const std::string shape = t.shape_string();
        out << "  " << t.name << std::string(width - t.name.size() + 2, ' ')
            << io::to_string(t.dtype) << "  " << shape
            << std::string(shape_width - shape.size() + 2, ' ') << t.bytes.size() << " bytes\n";
    }
    if (!file.metadata.empty()) {
        out << "metadata:\n";
        for (const auto& kv : file.metadata) out << "  " << kv.first << " = " << kv.second << "\n";
    }
    for (const std::string& prefix : lstm_prefixes(file)) {
        const std::string label = prefix.empty()
                                      ? std::string("nn.LSTM state_dict")
                                      : "nn.LSTM state_dict under prefix '" + prefix + "'";
        try {
            const Config c = io::infer_lstm_config(file, prefix);
            out << label << ": input_size " << c.input_size << ", hidden_size " << c.hidden_size
                << ", num_layers " << c.num_layers << ", "
                << (c.bidirectional ? "bidirectional" : "unidirectional")
                << (c.proj_size > 0 ? ", proj_size " + std::to_string(c.proj_size) : "")
                << (c.bias ? "" : ", bias=False") << " (" << param_count(c) << " parameters)\n";
        } catch (const Error& e) {
            out << label << ": invalid: " << e.what() << "\n";
        }
    }
}

// The host description of `lstm_tool info` without a FILE.
inline void print_host_info(std::ostream& out) {
    const std::vector<HostFact> facts = host_facts();
    size_t width = 0;
    for (const HostFact& f : facts) width = std::max(width, f.key.size());
    out << "host:\n";
    for (const HostFact& f : facts)
        out << "  " << f.key << std::string(width - f.key.size() + 2, ' ') << f.value << "\n";

    const std::vector<CodePath> paths = code_paths();
    size_t name_width = 0;
    for (const CodePath& p : paths) name_width = std::max(name_width, p.name.size());
    constexpr size_t kDeviceColumn = 6;  // "cuda", the longest device name, and two spaces
    for (size_t k = 0; k < paths.size(); ++k) {
        const CodePath& p = paths[k];
        if (k == 0 || p.is_variant != paths[k - 1].is_variant)
            out << (p.is_variant ? "variants" : "kernels")
                << " (name, device, path on this host):\n";
        const std::string indent = "  " + std::string(name_width + 2 + kDeviceColumn, ' ');
        out << "  " << p.name << std::string(name_width - p.name.size() + 2, ' ') << p.device
            << std::string(kDeviceColumn - std::min(p.device.size(), kDeviceColumn - 2), ' ')
            << p.path << "\n";
        if (!p.bf16.empty()) out << indent << "bf16: " << p.bf16 << "\n";
    }
}

inline int info_command(const std::vector<std::string>& args, std::ostream& out) {
    const ParsedArgs parsed = parse_args(args, {});
    if (parsed.help) {
        out << info_help();
        return kExitOk;
    }
    if (parsed.positional.empty()) {
        print_host_info(out);
        return kExitOk;
    }
    if (parsed.positional.size() != 1)
        throw UsageError("info takes at most one FILE, got " +
                         std::to_string(parsed.positional.size()));
    print_info(read_input_file("FILE", parsed.positional.front()), out);
    return kExitOk;
}

}  // namespace lstm::tool
