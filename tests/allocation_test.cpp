// Steady-state training calls allocate nothing per time step: every array comes from the
// workspace and the reserve, sized once. Counted by replacing the test executable's malloc (and
// its global operator new, which allocates through it), since what allocated per step here came
// from C code (libgomp's team of a one-thread parallel region) and from Eigen's aligned_malloc,
// neither of which goes through operator new.

#include <omp.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "fused_paths.hpp"
#include "kernels/cpu/gemm.hpp"
#include "lstm/layer.hpp"
#include "lstm/memory.hpp"
#include "lstm/plan_cache.hpp"
#include "lstm/registry.hpp"
#include "lstm/variants/fused.hpp"
#include "test_util.hpp"

namespace {
std::atomic<long> g_allocations{0};
// Where a test lets a pointer escape, so the compiler cannot elide the allocation behind it (C++14
// allows eliding a new-expression whose result is never observed, and GCC does).
void* volatile g_escape = nullptr;
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

TEST_CASE("fused's SIMD paths: training forward and backward allocate nothing in steady state",
          "[memory]") {
    bool ran = false;
    for (cpu::FusedIsa isa : cpu::kSimdFusedIsas) {
        if (!cpu::fused_isa_available(isa)) continue;
        INFO("isa " << cpu::fused_isa_name(isa));
        long count = 0;
        {
            const test::FusedIsaScope scope(isa);
            count = steady_state_allocations("fused");
        }
        CHECK(count == 0);
        ran = true;
    }
    if (!ran)
        LSTM_SKIP("no AVX-512, no AVX2 with FMA and no NEON on this CPU"
                  << kernels::cpu::isa_cap_note() << ": no SIMD fused path runs here");
}

namespace {

// Sets the OpenMP thread count of the calling thread for a scope.
class ThreadsScope {
public:
    explicit ThreadsScope(int threads) : saved_(omp_get_max_threads()) {
        omp_set_num_threads(threads);
    }
    ~ThreadsScope() { omp_set_num_threads(saved_); }
    ThreadsScope(const ThreadsScope&) = delete;
    ThreadsScope& operator=(const ThreadsScope&) = delete;

private:
    int saved_;
};

// A layer shape and batch the time-loop test runs at two sequence lengths. Shapes stay small:
// Eigen takes its GEMM blocking buffers from the heap only above 128 KiB.
struct LoopShape {
    const char* name;
    Config config;
    int64_t batch;   // ignored when unbatched
    bool unbatched;  // x is (T, I)
    bool one_long;   // variable lengths: one sequence of T among short ones
};

std::vector<LoopShape> loop_shapes() {
    return {
        {"unbatched x", {5, 16, 1, false}, 1, true, false},
        {"batch of 1", {5, 16, 1, false}, 1, false, false},
        {"variable lengths, one long sequence", {5, 16, 1, false}, 4, false, true},
        {"bidirectional, 2 layers", {5, 16, 2, true}, 3, false, false},
    };
}

struct CallAllocations {
    long forward, backward;
};

// Allocations of one training forward and of its backward at sequence length seq_len, after a
// first pair has sized every buffer of the layer.
template <typename T>
CallAllocations steady_call_allocations(const Variant& variant, const std::string& path,
                                        Precision precision, const LoopShape& shape,
                                        int64_t seq_len) {
    const Config& config = shape.config;
    const int64_t batch = shape.unbatched ? 1 : shape.batch;
    LstmT<T> layer(config, variant.name());
    layer.set_path(path);
    layer.set_precision(precision);
    std::vector<T> x(static_cast<size_t>(seq_len * batch * config.input_size), T(0.25));
    std::vector<T> dy(static_cast<size_t>(seq_len * batch * config.output_size()), T(0.5));
    std::vector<int64_t> lengths;
    if (shape.one_long) {
        lengths.assign(static_cast<size_t>(batch), 1);
        lengths[0] = seq_len;
        lengths[1] = 3;
    }
    const TensorView<const T> xv =
        shape.unbatched ? TensorView<const T>(x.data(), {seq_len, config.input_size})
                        : TensorView<const T>(x.data(), {seq_len, batch, config.input_size});
    const TensorView<const T> dyv =
        shape.unbatched ? TensorView<const T>(dy.data(), {seq_len, config.output_size()})
                        : TensorView<const T>(dy.data(), {seq_len, batch, config.output_size()});
    const Span<const int64_t> lens(lengths.data(), static_cast<int64_t>(lengths.size()));
    layer.forward(xv, lens);
    layer.backward(dyv);
    const long start = g_allocations.load();
    layer.forward(xv, lens);
    const long middle = g_allocations.load();
    layer.backward(dyv);
    return {middle - start, g_allocations.load() - middle};
}

// One way to run a CPU variant: its name, a dtype, a path of its (Variant::paths) and a compute
// precision it has.
struct CpuRun {
    const Variant* variant;
    bool is_double;
    std::string path;
    Precision precision;
    std::string label;
};

std::vector<CpuRun> cpu_runs() {
    std::vector<CpuRun> runs;
    for (const Variant* v : variants_on(Device::cpu)) {
        const std::string name = v->name();
        // oneDNN 2.6 allocates inside its own execute (about 4 times per time step, in libdnnl),
        // which this library cannot change; lstm/variants/onednn.hpp says so.
        if (name == "onednn") continue;
        const bool bf16 =
            !v->supports_precision(Config{5, 16, 2, true}, DType::f32, Precision::bf16);
        for (const std::string& path : v->paths(DType::f32)) {
            runs.push_back({v, false, path, Precision::full, name + " float " + path});
            if (bf16) runs.push_back({v, false, path, Precision::bf16, name + " bf16 " + path});
        }
        for (const std::string& path : v->paths(DType::f64))
            runs.push_back({v, true, path, Precision::full, name + " double " + path});
    }
    return runs;
}

}  // namespace

TEST_CASE("CPU variants allocate nothing per time step in forward and backward", "[memory]") {
    const test::EnvScope teams("LSTM_TEAM", kFixedTeams);
    std::vector<int> thread_counts = {1};
    if (omp_get_max_threads() > 1) thread_counts.push_back(omp_get_max_threads());
    for (const CpuRun& run : cpu_runs())
        for (const LoopShape& shape : loop_shapes())
            for (int threads : thread_counts) {
                INFO(run.label << ", " << shape.name << ", " << threads << " thread(s)");
                const ThreadsScope scope(threads);
                const auto counts = [&](int64_t seq_len) {
                    return run.is_double
                               ? steady_call_allocations<double>(*run.variant, run.path,
                                                                 run.precision, shape, seq_len)
                               : steady_call_allocations<float>(*run.variant, run.path,
                                                                run.precision, shape, seq_len);
                };
                const CallAllocations short_run = counts(10), long_run = counts(50);
                INFO("forward " << short_run.forward << " at T 10, " << long_run.forward
                                << " at T 50; backward " << short_run.backward << " at T 10, "
                                << long_run.backward << " at T 50");
                CHECK(long_run.forward <= short_run.forward);
                CHECK(long_run.backward <= short_run.backward);
            }
}

namespace {

// Allocations of kernels::cpu::gemm on every transpose case of an m x n x k product, after one
// call: the OpenMP runtime allocates a thread's own settings once, the first time the thread
// changes its team size (gemm holds small products to one thread), and never again.
template <typename T>
long gemm_allocations(int64_t m, int64_t n, int64_t k, T alpha, T beta) {
    std::vector<T> a(static_cast<size_t>(m * k), T(0.5)), b(static_cast<size_t>(k * n), T(0.25));
    std::vector<T> c(static_cast<size_t>(m * n), T(1));
    kernels::cpu::gemm<T>(false, false, m, n, k, alpha, a.data(), k, b.data(), n, beta, c.data(),
                          n);
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

TEST_CASE("Lstm::backward without dx neither sizes nor allocates a dx buffer", "[memory]") {
    // A wide input makes dx (T, N, I), 512 KiB here, most of what a first backward adds.
    const Config config{64, 8, 1, false};
    const int64_t seq_len = 64, batch = 32;
    Lstm layer(config, "basic");
    std::vector<float> x(static_cast<size_t>(seq_len * batch * config.input_size), 0.25f);
    std::vector<float> dy(static_cast<size_t>(seq_len * batch * config.output_size()), 0.5f);
    const TensorView<const float> xv(x.data(), {seq_len, batch, config.input_size});
    const TensorView<const float> dyv(dy.data(), {seq_len, batch, config.output_size()});
    layer.forward(xv);
    // The budget counts what the layer holds already: 256 KiB on top of it.
    struct Limit {
        Limit() { set_host_memory_limit(host_memory_held() + (uint64_t{256} << 10)); }
        ~Limit() { set_host_memory_limit(0); }
    } limit;
    CHECK_NOTHROW(layer.backward(dyv, {}, {}, false));
    layer.forward(xv);
    // The same backward with dx does not fit: the limit is what the call above stayed under.
    CHECK_THROWS_AS(layer.backward(dyv), OutOfMemory);
}

TEST_CASE("a plan cache lookup that hits allocates nothing", "[memory]") {
    // Every call of a layer looks its plan up; lstm/plan_cache.hpp promises the hit is free.
    const Variant& basic = find_variant("basic", Device::cpu);
    PlanCache cache;
    const PlanRequest request(Config{3, 5, 2, true}, DType::f32, 7, 3);
    const std::shared_ptr<const Plan> first = cache.get(basic, request);
    const long before = g_allocations.load();
    for (int k = 0; k < 10; ++k)
        if (cache.get(basic, request) != first) FAIL("the hit returned another plan");
    CHECK(g_allocations.load() - before == 0);
}

TEST_CASE("the allocation counter sees allocations", "[memory]") {
    // Guards the test above against a counter that never counts.
    const long before = g_allocations.load();
    auto* p = new std::vector<int>(100);
    g_escape = p;
    delete p;
    CHECK(g_allocations.load() - before >= 2);
}
