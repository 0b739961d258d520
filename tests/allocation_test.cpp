// Steady-state training calls allocate nothing per time step: every array comes from the
// workspace and the reserve, sized once. Counted by replacing the test executable's malloc (and
// its global operator new, which allocates through it), since what allocated per step here came
// from C code (libgomp's team of a one-thread parallel region) and from Eigen's aligned_malloc,
// neither of which goes through operator new.

#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdlib>
#include <new>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "lstm/layer.hpp"
#include "lstm/variants/fused.hpp"
#include "test_util.hpp"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

// The sanitizers bring their own malloc, which a definition here would displace; under them only
// operator new is counted.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LSTM_COUNT_MALLOC 0
#else
#define LSTM_COUNT_MALLOC 1
#endif

#if LSTM_COUNT_MALLOC
// glibc's own entry points, which the replacements below forward to (the executable's
// definitions take the names for every shared library of the process too).
extern "C" {
void* __libc_malloc(size_t bytes);
void* __libc_calloc(size_t count, size_t bytes);
void* __libc_realloc(void* p, size_t bytes);
void* __libc_memalign(size_t alignment, size_t bytes);
}

namespace {
void count_allocation() { g_allocations.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

extern "C" {
void* malloc(size_t bytes) {
    count_allocation();
    return __libc_malloc(bytes);
}
void* calloc(size_t count, size_t bytes) {
    count_allocation();
    return __libc_calloc(count, bytes);
}
void* realloc(void* p, size_t bytes) {
    count_allocation();
    return __libc_realloc(p, bytes);
}
void* memalign(size_t alignment, size_t bytes) {
    count_allocation();
    return __libc_memalign(alignment, bytes);
}
void* aligned_alloc(size_t alignment, size_t bytes) {
    count_allocation();
    return __libc_memalign(alignment, bytes);
}
int posix_memalign(void** out, size_t alignment, size_t bytes) {
    if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
    count_allocation();
    void* p = __libc_memalign(alignment, bytes);
    if (p == nullptr) return ENOMEM;
    *out = p;
    return 0;
}
}
#endif

namespace {
void* counted_new(size_t bytes) {
#if !LSTM_COUNT_MALLOC
    g_allocations.fetch_add(1, std::memory_order_relaxed);
#endif
    return std::malloc(bytes ? bytes : 1);
}
}  // namespace

// GCC pairs its built-in operator new with delete and warns when a replacement frees with
// std::free; here both sides are replaced together, so malloc/free do match.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
// Every form is replaced (array, nothrow, sized), so any new is paired with a delete of the same
// allocator: Catch2 uses the nothrow form, and AddressSanitizer reports a malloc'd block freed
// by the library's operator delete (or the reverse) as a mismatch.
void* operator new(size_t bytes) {
    if (void* p = counted_new(bytes)) return p;
    throw std::bad_alloc();
}
void* operator new[](size_t bytes) { return operator new(bytes); }
void* operator new(size_t bytes, const std::nothrow_t&) noexcept { return counted_new(bytes); }
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

// The team governor (kernels/cpu/team.hpp) sizes fused's teams by the machine's load, and libgomp
// allocates a new team when a region's size differs from the last one's (and for every region of
// one thread); the counts here are of the library's own allocations, so teams keep their size.
const char* const kFixedTeams = "fixed";

// Allocations of one training forward + backward after a first one has sized every buffer.
long steady_state_allocations(const char* variant) {
    const test::EnvScope teams("LSTM_TEAM", kFixedTeams);
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

namespace {

// Allocations of kernels::cpu::gemm on every transpose case of an m x n x k product.
template <typename T>
long gemm_allocations(int64_t m, int64_t n, int64_t k, T alpha, T beta) {
    std::vector<T> a(static_cast<size_t>(m * k), T(0.5)), b(static_cast<size_t>(k * n), T(0.25));
    std::vector<T> c(static_cast<size_t>(m * n), T(1));
    const long before = g_allocations.load();
    for (bool ta : {false, true})
        for (bool tb : {false, true})
            kernels::cpu::gemm<T>(ta, tb, m, n, k, alpha, a.data(), ta ? m : k, b.data(),
                                  tb ? k : n, beta, c.data(), n);
    return g_allocations.load() - before;
}

}  // namespace

TEST_CASE("gemm with one row or one column allocates nothing", "[memory]") {
    // Eigen runs these as a GEMV on one row or column of an operand, and copied that row of a
    // scaled operand to the heap (a GEMM of one active sequence, once per time step).
    const int64_t shapes[][3] = {{1, 64, 16}, {1, 5, 40}, {7, 1, 16}, {1, 1, 16}};
    for (const auto& s : shapes)
        for (double alpha : {1.0, 0.5})
            for (double beta : {0.0, 1.0, 2.0}) {
                INFO("m " << s[0] << " n " << s[1] << " k " << s[2] << " alpha " << alpha
                          << " beta " << beta);
                CHECK(gemm_allocations<float>(s[0], s[1], s[2], float(alpha), float(beta)) == 0);
                CHECK(gemm_allocations<double>(s[0], s[1], s[2], alpha, beta) == 0);
            }
}

TEST_CASE("the allocation counter sees allocations", "[memory]") {
    // Guards the test above against a counter that never counts.
    const long before = g_allocations.load();
    auto* p = new std::vector<int>(100);
    delete p;
    CHECK(g_allocations.load() - before >= 2);
}
