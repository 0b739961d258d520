// libFuzzer target of lstm_tool's commands end to end, on fuzzed files: the first byte picks a
// command and its options (info, ctc with a reduction, blank and zero_infinity, lstm forward or
// backward on a variant), the next two give the length of a first file (the lstm command's
// parameters), the rest is the second file (the inputs). The tool must exit 0 and write a file
// that reads back, or exit 1 with a message; exit 2 (usage) cannot happen with these arguments,
// and anything else (a crash, a sanitizer report, an escaped exception) is a bug. Built by
// tests/fuzz/CMakeLists.txt, run by tests/fuzz/run-smoke.sh; seeds: tests/fuzz/make_seeds.py.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "lstm/io/safetensors.hpp"
#include "lstm/memory.hpp"
#include "tools/lstm_tool/tool.hpp"

namespace {

// A file in this process's scratch folder, made on first use.
std::string scratch(const char* name) {
    static const std::filesystem::path dir = [] {
        const auto d = std::filesystem::temp_directory_path() /
                       ("lstm_tool_fuzz_" + std::to_string(::getpid()));
        std::filesystem::create_directories(d);
        return d;
    }();
    return (dir / name).string();
}

std::string write(const char* name, const uint8_t* data, size_t size) {
    const std::string path = scratch(name);
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    return path;
}

}  // namespace

// A 64 KiB file can ask for work far larger than itself (a long sequence, a wide layer); the
// tool must refuse what does not fit, and a limit well under libFuzzer's -rss_limit_mb makes
// that refusal, not the fuzzer's out-of-memory report, the outcome.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
    lstm::set_host_memory_limit(uint64_t{256} << 20);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 3) return 0;
    const uint8_t choice = data[0];
    const size_t first = std::min<size_t>(size - 3, static_cast<size_t>(data[1]) << 8 | data[2]);
    const std::string params = write("params.safetensors", data + 3, first);
    const std::string inputs = write("inputs.safetensors", data + 3 + first, size - 3 - first);
    const std::string out = scratch("out.safetensors");
    std::filesystem::remove(out);

    std::vector<std::string> args;
    // Bits 0-1: the command (0 info, 1 ctc, 2 and 3 lstm); the higher bits: its options.
    switch (choice & 3) {
        case 0:
            args = {"info", inputs};
            break;
        case 1: {
            const char* reductions[] = {"none", "sum", "mean"};
            args = {"ctc",
                    "--inputs",
                    inputs,
                    "--out",
                    out,
                    "--blank",
                    std::to_string((choice >> 2) % 4),
                    "--reduction",
                    reductions[(choice >> 4) % 3]};
            if (choice & 0x40) args.push_back("--zero-infinity");
            break;
        }
        default: {
            const char* variants[] = {"basic", "fused"};
            args = {"lstm",     "--params",  params,
                    "--inputs", inputs,      "--out",
                    out,        "--variant", variants[(choice >> 2) & 1]};
            if (choice & 0x10) args.push_back("--backward");
            if (choice & 0x20) args.insert(args.end(), {"--prefix", "lstm."});
            break;
        }
    }
    std::ostringstream out_text, err_text;
    const int rc = lstm::tool::run_tool(args, out_text, err_text);
    if (rc == 1 && err_text.str().empty()) std::abort();  // a failure says why
    if (rc != 0 && rc != 1) std::abort();
    if (rc == 0 && args[0] != "info") {
        // What the tool wrote must read back.
        try {
            lstm::io::read_safetensors(out);
        } catch (const lstm::Error&) {
            std::abort();
        }
    }
    return 0;
}
