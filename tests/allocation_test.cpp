// Steady-state training calls allocate nothing: every array comes from the workspace and the
// reserve, sized once. Counted by replacing the global operator new of the test executable.

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <new>
#include <vector>

#include "lstm/layer.hpp"
#include "lstm/variants/fused.hpp"
#include "test_util.hpp"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

// GCC pairs its built-in operator new with delete and warns when a replacement frees with
// std::free; here both sides are replaced together, so malloc/free do match.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
// Every form is replaced (array, nothrow, sized), so any new is paired with a delete of the same
// allocator: Catch2 uses the nothrow form, and AddressSanitizer reports a malloc'd block freed
// by the library's operator delete (or the reverse) as a mismatch.
void* operator new(size_t bytes) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(bytes ? bytes : 1)) return p;
    throw std::bad_alloc();
}
void* operator new[](size_t bytes) { return operator new(bytes); }
void* operator new(size_t bytes, const std::nothrow_t&) noexcept {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    return std::malloc(bytes ? bytes : 1);
}
void* operator new[](size_t bytes, const std::nothrow_t& tag) noexcept {
    return operator new(bytes, tag);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
#pragma GCC diagnostic pop

using namespace lstm;

namespace {

// Allocations of one training forward + backward after a first one has sized every buffer.
long steady_state_allocations(const char* variant) {
    const Config config{7, 33, 2, true};  // odd sizes: remainder paths run too
    const int64_t seq_len = 9, batch = 5;
    Lstm layer(config, variant);
    std::vector<float> x(seq_len * batch * config.input_size, 0.25f);
    std::vector<float> dy(seq_len * batch * config.output_size(), 0.5f);
    const std::vector<int64_t> lengths = {9, 4, 9, 1, 6};
    const TensorView<const float> xv(x.data(), {seq_len, batch, config.input_size});
    const TensorView<const float> dyv(dy.data(), {seq_len, batch, config.output_size()});
    layer.forward(xv, lengths);
    layer.backward(dyv);
    const long before = g_allocations.load();
    layer.forward(xv, lengths);
    layer.backward(dyv);
    return g_allocations.load() - before;
}

}  // namespace

TEST_CASE("fused (avx512, avx2) training forward and backward allocate nothing in steady state",
          "[memory]") {
    bool ran = false;
    for (cpu::FusedIsa isa : {cpu::FusedIsa::avx512, cpu::FusedIsa::avx2}) {
        if (!cpu::fused_isa_available(isa)) continue;
        INFO("isa " << cpu::fused_isa_name(isa));
        cpu::set_fused_isa(isa);
        const long count = steady_state_allocations("fused");
        cpu::set_fused_isa(cpu::FusedIsa::automatic);
        CHECK(count == 0);
        ran = true;
    }
    if (!ran)
        LSTM_SKIP("no AVX-512F and no AVX2 with FMA on this CPU"
                  << kernels::cpu::isa_cap_note() << ": no SIMD fused path runs here");
}

TEST_CASE("the allocation counter sees allocations", "[memory]") {
    // Guards the test above against a counter that never counts.
    const long before = g_allocations.load();
    auto* p = new std::vector<int>(100);
    delete p;
    CHECK(g_allocations.load() - before >= 2);
}
