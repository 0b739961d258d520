// Host memory is checked before it is allocated (lstm/memory.hpp): sizes whose products overflow,
// requests beyond the caller's budget and beyond what the machine can give are refused with
// lstm::OutOfMemory naming the call, each buffer and its size; and nothing is allocated first.
// The budget bounds what the library holds over all its objects and threads, and the test hook
// fails the k-th next request.

#include "lstm/memory.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lstm/buffer.hpp"
#include "lstm/detail/aligned_buffer.hpp"
#include "lstm/io/safetensors.hpp"
#include "lstm/layer.hpp"
#include "lstm/loss/ctc.hpp"
#include "lstm/nn/batch.hpp"
#include "test_util.hpp"

namespace {

using Catch::Contains;

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
        // 1 MiB on top of what the library holds (the layer's parameters and gradients).
        const uint64_t held = lstm::host_memory_held();
        const lstm::test::MemoryLimitScope limit(held + (uint64_t{1} << 20));
        const std::string message = lstm::test::out_of_memory_message([&] { layer.forward(view); });
        CHECK_THAT(message, Contains("Lstm::forward (basic, T 200, N 64, H 64): needs "));
        CHECK_THAT(message, Contains("y 6.25 MiB (6553600 bytes)"));
        CHECK_THAT(message, Contains("reserve "));
        CHECK_THAT(message, Contains("the library holds " + lstm::format_bytes(held) + " of the " +
                                     lstm::format_bytes(held + (uint64_t{1} << 20)) +
                                     " budget, the limit set with lstm::set_host_memory_limit"));
        CHECK(layer.y().empty());  // nothing was computed, nothing kept
        CHECK(lstm::host_memory_held() == held);
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
    const std::string message = lstm::test::out_of_memory_message([&] { layer.forward(huge); });
    CHECK_THAT(message, Contains("Lstm::forward (basic, T 1048576, N 4096, H 256)"));
    CHECK_THAT(message, Contains("y 4.00 TiB"));
    CHECK_THAT(message, Contains("this machine can give"));
    // Parameters from an absurd configuration: 4 * 2^20 * (2^20 + 2^20 + 2) floats per
    // direction.
    lstm::Config wide;
    wide.input_size = int64_t{1} << 20;
    wide.hidden_size = int64_t{1} << 20;
    const std::string params =
        lstm::test::out_of_memory_message([&] { lstm::Lstm big(wide, "basic"); });
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
        const lstm::test::MemoryLimitScope limit(64 << 10);
        CHECK_THAT(lstm::test::out_of_memory_message([&] { lstm::loss::ctc_loss(args); }),
                   Contains("ctc_loss: needs "));
        CHECK_THAT(lstm::test::out_of_memory_message([&] { lstm::loss::ctc_loss(args); }),
                   Contains("(workspace "));
    }
    CHECK(std::isfinite(lstm::loss::ctc_loss(args)));
    // Sizes whose workspace does not fit in 64 bits.
    CHECK_THAT(lstm::test::out_of_memory_message([&] {
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
        const lstm::test::MemoryLimitScope limit(128 << 10);
        const std::string message =
            lstm::test::out_of_memory_message([&] { lstm::io::read_safetensors(path); });
        CHECK_THAT(message, Contains("reading '" + path + "': needs "));
        // Only the tensors are asked for: their bytes are read straight into them, without a
        // copy of the whole file first.
        CHECK_THAT(message, Contains("(tensors 256."));
    }
    CHECK(lstm::io::read_safetensors(path).at("w").numel() == 256 * 256);
    std::filesystem::remove(path);
}

TEST_CASE("memory: padding one long sequence among many short ones is refused by name",
          "[memory]") {
    // 2000 sequences of one frame and one of 2000 frames: 16 KiB of data, 15.3 MiB padded.
    std::vector<std::vector<float>> sequences(2000, std::vector<float>(1, 1.0f));
    sequences.push_back(std::vector<float>(2000, 1.0f));
    const lstm::test::MemoryLimitScope limit(uint64_t{1} << 20);
    const std::string message =
        lstm::test::out_of_memory_message([&] { lstm::nn::pad_sequences(sequences, 1); });
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

TEST_CASE("memory: the limit is a budget for everything the library holds, not each request",
          "[memory]") {
    lstm::Config config;
    config.input_size = 64;
    config.hidden_size = 64;
    const uint64_t held0 = lstm::host_memory_held();
    // One layer's parameters and gradients, as counted: the oracle for how many fit.
    uint64_t per_layer = 0;
    {
        lstm::Lstm probe(config, "basic");
        per_layer = lstm::host_memory_held() - held0;
    }
    REQUIRE(lstm::host_memory_held() == held0);  // freeing gave everything back
    REQUIRE(per_layer >= 2 * 4 * 64 * (64 + 64 + 2) * sizeof(float));
    // Each layer's request is far below the budget; together they pass it.
    const uint64_t budget = held0 + 16 * per_layer + per_layer / 2;
    const lstm::test::MemoryLimitScope limit(budget);
    std::vector<std::unique_ptr<lstm::Lstm>> layers;
    std::string message;
    uint64_t held_at_refusal = 0, most_held = 0;
    while (layers.size() < 100) {
        held_at_refusal = lstm::host_memory_held();
        message = lstm::test::out_of_memory_message(
            [&] { layers.push_back(std::make_unique<lstm::Lstm>(config, "basic")); });
        most_held = std::max(most_held, lstm::host_memory_held());
        if (!message.empty()) break;
    }
    INFO("held before " << held0 << ", per layer " << per_layer << ", budget " << budget
                        << ", most held " << most_held << ", layers " << layers.size());
    CHECK(layers.size() == 16);
    CHECK(most_held <= budget);
    CHECK(lstm::host_memory_held() == held_at_refusal);  // the refused layer allocated nothing
    CHECK_THAT(message, Contains(" parameters): needs "));
    CHECK_THAT(message, Contains("the library holds " + lstm::format_bytes(held_at_refusal) +
                                 " of the " + lstm::format_bytes(budget) +
                                 " budget, the limit set with lstm::set_host_memory_limit"));
    // Forward buffers count too: a forward that would pass the budget is refused, and after
    // freeing layers the same forward runs and its buffers stay counted.
    const int64_t seq_len = 50, batch = 16;
    std::vector<float> x(static_cast<size_t>(seq_len * batch * config.input_size), 0.5f);
    const lstm::TensorView<const float> view(x.data(), {seq_len, batch, config.input_size});
    CHECK_THAT(lstm::test::out_of_memory_message([&] { layers[0]->forward(view); }),
               Contains("budget, the limit set with lstm::set_host_memory_limit"));
    CHECK(layers[0]->y().empty());
    layers.resize(2);
    CHECK(lstm::host_memory_held() == held0 + 2 * per_layer);
    layers[0]->forward(view);
    CHECK(!layers[0]->y().empty());
    CHECK(lstm::host_memory_held() <= budget);
    CHECK(lstm::host_memory_held() >
          held0 + 2 * per_layer + uint64_t(seq_len * batch * config.hidden_size) * 4);
    layers.clear();
    CHECK(lstm::host_memory_held() == held0);
}

TEST_CASE("memory: buffers count what they allocate and give it back when freed", "[memory]") {
    const uint64_t held0 = lstm::host_memory_held();
    const uint64_t MiB = uint64_t{1} << 20;
    {
        lstm::detail::AlignedBuffer small, large;
        small.reserve(1000);     // 64-byte granules: 1024
        large.reserve(3 * MiB);  // whole 2 MiB pages: 4 MiB
        CHECK(lstm::host_memory_held() == held0 + 1024 + 4 * MiB);
        small.reserve(500);  // no growth, no change
        CHECK(lstm::host_memory_held() == held0 + 1024 + 4 * MiB);
        lstm::detail::AlignedBuffer moved(std::move(large));  // the count moves with it
        CHECK(lstm::host_memory_held() == held0 + 1024 + 4 * MiB);
        moved = std::move(small);  // frees the 4 MiB
        CHECK(lstm::host_memory_held() == held0 + 1024);
    }
    CHECK(lstm::host_memory_held() == held0);
    {
        lstm::Buffer a(lstm::Device::cpu, 5000);  // 5056
        CHECK(lstm::host_memory_held() == held0 + 5056);
        a = lstm::Buffer(lstm::Device::cpu, 100);  // frees the 5056, holds 128
        CHECK(lstm::host_memory_held() == held0 + 128);
        a.reserve(200);  // grows to 256; the 128 are freed
        CHECK(lstm::host_memory_held() == held0 + 256);
    }
    CHECK(lstm::host_memory_held() == held0);
    // Under a budget: a growing buffer holds its old storage until the new one exists, so both
    // must fit; a refused growth keeps the storage and its contents.
    const lstm::test::MemoryLimitScope limit(held0 + 3 * MiB);
    lstm::detail::AlignedBuffer grows;
    grows.reserve(MiB);
    grows.reserve(MiB + MiB / 2);  // 1 + 1.5 MiB fit in 3
    CHECK(lstm::host_memory_held() == held0 + MiB + MiB / 2);
    auto* data = static_cast<unsigned char*>(grows.data());
    for (size_t k = 0; k < MiB; ++k) data[k] = static_cast<unsigned char>(k * 7);
    const std::string message = lstm::test::out_of_memory_message([&] { grows.reserve(2 * MiB); });
    CHECK_THAT(message, Contains("host buffer: needs 2.00 MiB (2097152 bytes) more host memory"));
    CHECK_THAT(message, Contains("the library holds " + lstm::format_bytes(held0 + MiB + MiB / 2) +
                                 " of the " + lstm::format_bytes(held0 + 3 * MiB) + " budget"));
    CHECK(grows.data() == data);
    CHECK(grows.capacity() == MiB + MiB / 2);
    CHECK(lstm::host_memory_held() == held0 + MiB + MiB / 2);
    size_t changed = 0;
    for (size_t k = 0; k < MiB; ++k) changed += data[k] != static_cast<unsigned char>(k * 7);
    CHECK(changed == 0);
    // A request that grows a counted buffer is checked for the moment both are held.
    lstm::MemoryRequest request;
    request.add("y", 2 * MiB, MiB + MiB / 2);  // adds 0.5 MiB, keeps 1.5 MiB meanwhile
    CHECK(request.total() == MiB / 2);
    CHECK_THAT(lstm::test::out_of_memory_message([&] { request.check("growing y"); }),
               Contains("and keeps a growing buffer's old 1.50 MiB (1572864 bytes) until its "
                        "new one is allocated"));
    // Freeing returns bytes to the budget: the same growth fits once the buffer is gone.
    grows = lstm::detail::AlignedBuffer();
    CHECK(lstm::host_memory_held() == held0);
    grows.reserve(2 * MiB);
    CHECK(lstm::host_memory_held() == held0 + 2 * MiB);
}

TEST_CASE("memory: threads growing buffers at once never pass the budget together", "[memory]") {
    // 4 threads try 16 buffers of 256 KiB each against a budget of 16 of them: exactly 16 fit,
    // whichever thread gets them.
    const uint64_t piece = uint64_t{256} << 10;
    const uint64_t held0 = lstm::host_memory_held();
    const uint64_t budget = held0 + 16 * piece;
    const lstm::test::MemoryLimitScope limit(budget);
    constexpr int kThreads = 4, kTries = 16;
    std::vector<std::vector<lstm::detail::AlignedBuffer>> buffers(kThreads);
    std::vector<int> refused(kThreads, 0), other_errors(kThreads, 0);
    std::atomic<uint64_t> most_held{0};
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            ready.fetch_add(1);
            while (ready.load() < kThreads) {
            }
            for (int k = 0; k < kTries; ++k) {
                lstm::detail::AlignedBuffer b;
                try {
                    b.reserve(piece);
                    buffers[t].push_back(std::move(b));
                } catch (const lstm::OutOfMemory& e) {
                    const std::string what = e.what();
                    if (what.find("budget") != std::string::npos)
                        ++refused[t];
                    else
                        ++other_errors[t];
                }
                uint64_t now = lstm::host_memory_held(), seen = most_held.load();
                while (now > seen && !most_held.compare_exchange_weak(seen, now)) {
                }
            }
        });
    for (std::thread& t : threads) t.join();
    size_t kept = 0;
    int refusals = 0, errors = 0;
    for (int t = 0; t < kThreads; ++t) {
        kept += buffers[t].size();
        refusals += refused[t];
        errors += other_errors[t];
    }
    INFO("kept " << kept << ", refused " << refusals << ", other errors " << errors
                 << ", most held " << most_held.load() << " of budget " << budget);
    CHECK(kept == 16);
    CHECK(refusals == kThreads * kTries - 16);
    CHECK(errors == 0);
    CHECK(most_held.load() <= budget);
    CHECK(lstm::host_memory_held() == held0 + 16 * piece);
    buffers.clear();
    CHECK(lstm::host_memory_held() == held0);
}

TEST_CASE("memory: a lifted limit (0) leaves only the machine's", "[memory]") {
    const uint64_t held0 = lstm::host_memory_held();
    lstm::detail::AlignedBuffer b;
    {
        const lstm::test::MemoryLimitScope limit(held0 + (uint64_t{1} << 20));
        CHECK_THAT(lstm::test::out_of_memory_message([&] { b.reserve(uint64_t{2} << 20); }),
                   Contains("budget, the limit set with lstm::set_host_memory_limit"));
        CHECK(b.capacity() == 0);
        // A budget below what is held frees nothing and refuses any growth.
        lstm::set_host_memory_limit(1);
        CHECK_THAT(lstm::test::out_of_memory_message([&] { b.reserve(64); }),
                   Contains("of the 1 bytes budget"));
        lstm::set_host_memory_limit(0);
        CHECK(lstm::host_memory_limit() == 0);
        CHECK_NOTHROW(b.reserve(uint64_t{2} << 20));
    }
    CHECK(b.capacity() == (uint64_t{2} << 20));
    CHECK(lstm::host_memory_held() == held0 + (uint64_t{2} << 20));
}

TEST_CASE("memory: the test hook fails exactly the k-th next request on its thread, then disarms",
          "[memory]") {
    const lstm::test::MemoryFailureDisarm disarm_at_exit;
    const uint64_t held0 = lstm::host_memory_held();
    for (int64_t k = 0; k < 4; ++k) {
        lstm::testing::fail_memory_request_after(k);
        std::vector<lstm::detail::AlignedBuffer> buffers(6);
        std::vector<std::string> messages;
        for (size_t i = 0; i < buffers.size(); ++i) {
            // A request for nothing (no growth) is not counted.
            lstm::MemoryRequest().add("nothing", 0).check("empty request");
            if (i > 0 && buffers[i - 1].capacity() != 0) buffers[i - 1].reserve(64);
            messages.push_back(lstm::test::out_of_memory_message([&] { buffers[i].reserve(100); }));
        }
        INFO("k = " << k);
        for (size_t i = 0; i < messages.size(); ++i) {
            INFO("request " << i << ": '" << messages[i] << "'");
            if (static_cast<int64_t>(i) == k) {
                CHECK_THAT(messages[i], Contains("host buffer: needs 128 bytes more host memory "
                                                 "(buffer 128 bytes); failure injected by "
                                                 "lstm::testing::fail_memory_request_after"));
                CHECK(buffers[i].capacity() == 0);
            } else {
                CHECK(messages[i].empty());
                CHECK(buffers[i].capacity() == 128);
            }
        }
        // Counted up to the failure, then disarmed: later requests are neither failed nor counted.
        CHECK(lstm::testing::memory_requests_seen() == k + 1);
        buffers.clear();
        CHECK(lstm::host_memory_held() == held0);
    }
    // Checks on other threads neither count nor fail (OpenMP workers never throw).
    lstm::testing::fail_memory_request_after(0);
    std::string other;
    std::thread([&] {
        other = lstm::test::out_of_memory_message(
            [] { lstm::MemoryRequest().add("a", 100).check("worker"); });
    }).join();
    CHECK(other.empty());
    CHECK(lstm::testing::memory_requests_seen() == 0);
    // -1 disarms and keeps the count; std::numeric_limits<int64_t>::max() only counts.
    lstm::testing::fail_memory_request_after(-1);
    CHECK(lstm::test::out_of_memory_message([] {
              lstm::MemoryRequest().add("a", 100).check("x");
          }).empty());
    lstm::testing::fail_memory_request_after(std::numeric_limits<int64_t>::max());
    lstm::Config config;
    config.input_size = 4;
    config.hidden_size = 8;
    {
        lstm::Lstm layer(config, "basic");
        const int64_t seen = lstm::testing::memory_requests_seen();
        CHECK(seen >= 3);  // the constructor's request, then parameters and gradients
        // Each of the constructor's requests fails in turn when armed for it, and none leaks.
        for (int64_t k = 0; k < seen; ++k) {
            lstm::testing::fail_memory_request_after(k);
            CHECK_THAT(
                lstm::test::out_of_memory_message([&] { lstm::Lstm failed(config, "basic"); }),
                Contains("failure injected by lstm::testing::fail_memory_request_after"));
            CHECK(lstm::testing::memory_requests_seen() == k + 1);
        }
    }
    CHECK(lstm::host_memory_held() == held0);
    CHECK_THROWS_AS(lstm::testing::fail_memory_request_after(-2), lstm::Error);
}
