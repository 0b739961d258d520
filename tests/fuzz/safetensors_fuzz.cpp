// libFuzzer target of the safetensors reader and the nn.LSTM state_dict inference on top of it.
// Any input must either parse or raise lstm::Error; anything else (a crash, a sanitizer report,
// another exception, a hang) is a bug. What parses must also survive a write/read round trip
// unchanged. Built and run by tests/fuzz/run-smoke.sh (clang++
// -fsanitize=fuzzer,address,undefined).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "lstm/error.hpp"
#include "lstm/io/safetensors.hpp"
#include "lstm/io/state_dict.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    lstm::io::TensorFile file;
    try {
        file = lstm::io::parse_safetensors(data, size, "fuzz");
    } catch (const lstm::Error&) {
        return 0;  // rejected with a message: the expected outcome for most inputs
    }
    // Re-serialising what was read and reading it again must give the same tensors and metadata.
    const lstm::io::TensorFile again =
        lstm::io::parse_safetensors(lstm::io::serialize_safetensors(file), "fuzz-again");
    if (again != file) std::abort();
    for (const char* prefix : {"", "lstm."}) {
        try {
            const lstm::Config config = lstm::io::infer_lstm_config(file, prefix);
            const auto params = lstm::io::import_lstm_params<double>(file, config, prefix);
            if (static_cast<int64_t>(params.size()) != lstm::param_count(config)) std::abort();
        } catch (const lstm::Error&) {
        }
    }
    return 0;
}
