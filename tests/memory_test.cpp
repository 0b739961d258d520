// Host memory is checked before it is allocated (lstm/memory.hpp): sizes whose products overflow,
// requests beyond the caller's limit and beyond what the machine can give are refused with
// lstm::OutOfMemory naming the call, each buffer and its size; and nothing is allocated first.

#include "lstm/memory.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "lstm/detail/aligned_buffer.hpp"
#include "lstm/io/safetensors.hpp"
#include "lstm/layer.hpp"
#include "lstm/loss/ctc.hpp"
#include "lstm/nn/batch.hpp"

namespace {

using Catch::Contains;

// Sets the host memory limit for the scope of a test, and lifts it afterwards even when a check
// fails, so later cases run unlimited.
struct LimitScope {
    explicit LimitScope(uint64_t bytes) { lstm::set_host_memory_limit(bytes); }
    ~LimitScope() { lstm::set_host_memory_limit(0); }
};

// The message of the lstm::OutOfMemory that `body` throws ("" when it throws nothing, which the
// caller's CHECK_THAT then reports).
template <typename Body>
std::string out_of_memory_message(Body body) {
    try {
        body();
    } catch (const lstm::OutOfMemory& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("memory: sizes multiply with overflow checks", "[memory]") {
    using lstm::MemoryRequest;
    CHECK(MemoryRequest::bytes({3, 5, 7}, 4) == 420);
    CHECK(MemoryRequest::bytes({}, 8) == 8);
    CHECK(MemoryRequest::bytes({0, int64_t{1} << 62}, 8) == 0);
    CHECK(MemoryRequest::bytes({int64_t{1} << 31, int64_t{1} << 30}, 4) == uint64_t{1} << 63);
    // 2^62 * 2^2 = 2^64 overflows, as does anything negative.
    CHECK(MemoryRequest::bytes({int64_t{1} << 62}, 4) == lstm::kUnknownMemory);
    CHECK(MemoryRequest::bytes({-1, 3}, 4) == lstm::kUnknownMemory);
    // Buffers that already hold enough add nothing; the rest adds what is missing.
    MemoryRequest r;
    r.add("a", 100, 200).add("b", 300, 100).add("c", 5);
    CHECK(r.total() == 205);
    CHECK(lstm::format_bytes(1536) == "1.50 KiB (1536 bytes)");
    CHECK(lstm::format_bytes(12) == "12 bytes");
}

TEST_CASE("memory: what the machine can give is read and plausible", "[memory]") {
    const uint64_t available = lstm::host_memory_available();
    INFO("host_memory_available = " << available);
    // Linux always has /proc/meminfo; a machine that runs this suite has more than 16 MiB free
    // and less than the 64-bit address space.
    CHECK(available > (uint64_t{16} << 20));
    CHECK(available < (uint64_t{1} << 56));
}

TEST_CASE("memory: Lstm refuses buffers beyond the limit by name, before allocating", "[memory]") {
    lstm::Config config;
    config.input_size = 8;
    config.hidden_size = 64;
    config.num_layers = 2;
    config.bidirectional = true;
    lstm::Lstm layer(config, "basic");
    const int64_t seq_len = 200, batch = 64;
    std::vector<float> x(static_cast<size_t>(seq_len * batch * config.input_size), 0.5f);
    const lstm::TensorView<const float> view(x.data(), {seq_len, batch, config.input_size});
    {
        const LimitScope limit(uint64_t{1} << 20);
        const std::string message = out_of_memory_message([&] { layer.forward(view); });
        CHECK_THAT(message, Contains("Lstm::forward (basic, T 200, N 64, H 64): needs "));
        CHECK_THAT(message, Contains("y 6.25 MiB (6553600 bytes)"));
        CHECK_THAT(message, Contains("reserve "));
        CHECK_THAT(message, Contains("the limit set with lstm::set_host_memory_limit is 1.00 MiB"));
        CHECK(layer.y().empty());  // nothing was computed, nothing kept
    }
    // Unlimited, the same call runs; a backward within the limit then runs too.
    layer.forward(view);
    CHECK(!layer.y().empty());
}

TEST_CASE("memory: a shape implying terabytes is refused against the machine, not attempted",
          "[memory]") {
    lstm::Config config;
    config.input_size = 1;
    config.hidden_size = 256;
    lstm::Lstm layer(config, "basic");
    // y alone would be 2^20 * 2^12 * 256 floats = 4 TiB. The view's memory is a single float:
    // the refusal must come before anything reads x.
    float one = 1.0f;
    const lstm::TensorView<const float> huge(&one, {int64_t{1} << 20, int64_t{1} << 12, 1});
    const std::string message = out_of_memory_message([&] { layer.forward(huge); });
    CHECK_THAT(message, Contains("Lstm::forward (basic, T 1048576, N 4096, H 256)"));
    CHECK_THAT(message, Contains("y 4.00 TiB"));
    CHECK_THAT(message, Contains("this machine can give"));
    // Parameters from an absurd configuration: 4 * 2^20 * (2^20 + 2^20 + 2) floats per
    // direction.
    lstm::Config wide;
    wide.input_size = int64_t{1} << 20;
    wide.hidden_size = int64_t{1} << 20;
    const std::string params = out_of_memory_message([&] { lstm::Lstm big(wide, "basic"); });
    CHECK_THAT(params, Contains("parameters 32.00 TiB"));
}

TEST_CASE("memory: ctc_loss and the file reader refuse by name beyond the limit", "[memory]") {
    // ctc_loss's own workspace: T 500, longest target 100 needs well over 64 KiB.
    const int64_t T = 500, N = 2, C = 5;
    std::vector<float> logits(static_cast<size_t>(T * N * C), 0.0f);
    std::vector<int64_t> targets(200, 1), input_lengths = {T, T}, target_lengths = {100, 100};
    lstm::loss::CtcArgs<float> args;
    args.logits = lstm::TensorView<const float>(logits.data(), {T, N, C});
    args.targets = lstm::TensorView<const int64_t>(targets.data(), {200});
    args.input_lengths = lstm::Span<const int64_t>(input_lengths.data(), N);
    args.target_lengths = lstm::Span<const int64_t>(target_lengths.data(), N);
    {
        const LimitScope limit(64 << 10);
        CHECK_THAT(out_of_memory_message([&] { lstm::loss::ctc_loss(args); }),
                   Contains("ctc_loss: needs "));
        CHECK_THAT(out_of_memory_message([&] { lstm::loss::ctc_loss(args); }),
                   Contains("(workspace "));
    }
    CHECK(std::isfinite(lstm::loss::ctc_loss(args)));
    // Sizes whose workspace does not fit in 64 bits.
    CHECK_THAT(out_of_memory_message([&] {
                   lstm::loss::ctc_workspace_bytes(int64_t{1} << 40, 1, 5, int64_t{1} << 40, 1);
               }),
               Contains("the workspace's size does not fit in 64 bits"));

    // A file larger than the limit is not read.
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("lstm_memory_test_" + std::to_string(::getpid()) + ".safetensors"))
                                 .string();
    lstm::io::TensorFile file;
    file.add(lstm::io::Tensor::from("w", {256, 256}, std::vector<float>(256 * 256, 1.0f)));
    lstm::io::write_safetensors(path, file);
    {
        const LimitScope limit(128 << 10);
        const std::string message =
            out_of_memory_message([&] { lstm::io::read_safetensors(path); });
        CHECK_THAT(message, Contains("reading '" + path + "': needs "));
        CHECK_THAT(message, Contains("file contents 256."));
    }
    CHECK(lstm::io::read_safetensors(path).at("w").numel() == 256 * 256);
    std::filesystem::remove(path);
}

TEST_CASE("memory: padding one long sequence among many short ones is refused by name",
          "[memory]") {
    // 2000 sequences of one frame and one of 2000 frames: 16 KiB of data, 15.3 MiB padded.
    std::vector<std::vector<float>> sequences(2000, std::vector<float>(1, 1.0f));
    sequences.push_back(std::vector<float>(2000, 1.0f));
    const LimitScope limit(uint64_t{1} << 20);
    const std::string message =
        out_of_memory_message([&] { lstm::nn::pad_sequences(sequences, 1); });
    CHECK_THAT(message, Contains("pad_sequences (T 2000, N 2001, features 1): needs "));
    CHECK_THAT(message, Contains("padded x 15.27 MiB"));
}

namespace {

// The VmFlags line of the /proc/self/smaps mapping that holds `address` ("" if none does).
std::string mapping_flags(const void* address) {
    const auto at = reinterpret_cast<uintptr_t>(address);
    std::ifstream smaps("/proc/self/smaps");
    std::string line;
    bool inside = false;
    while (std::getline(smaps, line)) {
        unsigned long long begin = 0, end = 0;
        char dash = 0;
        std::istringstream head(line);
        // A mapping starts with its address range ("begin-end perms ..."); its fields follow as
        // "Name: value" lines, whose colon comes before the first space.
        if (line.find(':') > line.find(' ') && head >> std::hex >> begin >> dash >> end &&
            dash == '-') {
            inside = at >= begin && at < end;
        } else if (inside && line.rfind("VmFlags:", 0) == 0) {
            return line;
        }
    }
    return "";
}

}  // namespace

TEST_CASE("memory: host buffers from 2 MiB on take whole huge pages and ask for THP", "[memory]") {
    constexpr size_t huge = lstm::kHugePageBytes;
    lstm::detail::AlignedBuffer small, large;
    small.reserve(1000);
    large.reserve(huge + 1);
    const auto small_at = reinterpret_cast<uintptr_t>(small.data());
    const auto large_at = reinterpret_cast<uintptr_t>(large.data());
    INFO("small at " << small_at << ", capacity " << small.capacity() << "; large at " << large_at
                     << ", capacity " << large.capacity());
    CHECK(small_at % lstm::detail::AlignedBuffer::kAlignment == 0);
    CHECK(small.capacity() == 1024);
    CHECK(large_at % huge == 0);
    CHECK(large.capacity() == 2 * huge);
    // The advice shows as "hg" among the mapping's flags where the kernel has THP at all.
    if (!std::filesystem::exists("/sys/kernel/mm/transparent_hugepage")) {
        WARN("skipped the THP check: this kernel has no transparent huge pages");
        return;
    }
    const std::string flags = mapping_flags(large.data());
    INFO("VmFlags of the large buffer: '" << flags << "'");
    CHECK_THAT(flags, Contains(" hg"));
}
