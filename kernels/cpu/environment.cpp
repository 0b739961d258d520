#include "kernels/cpu/environment.hpp"

#include <omp.h>
#include <pthread.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/team.hpp"
#include "lstm/error.hpp"

namespace lstm::kernels::cpu {

lstm::cpu::FusedIsa fused_isa_from_environment() {
    using lstm::cpu::FusedIsa;
    const char* env = std::getenv("LSTM_FUSED_ISA");
    if (env == nullptr || *env == '\0' || std::strcmp(env, "auto") == 0) return FusedIsa::automatic;
    if (std::strcmp(env, "avx512") == 0) return FusedIsa::avx512;
    if (std::strcmp(env, "avx2") == 0) return FusedIsa::avx2;
    if (std::strcmp(env, "neon") == 0) return FusedIsa::neon;
    if (std::strcmp(env, "eigen") == 0) return FusedIsa::eigen;
    fail("LSTM_FUSED_ISA = '", env, "' is not one of auto, avx512, avx2, neon, eigen");
}

namespace {

// Whether a CPU variant call ran with more than one thread (and so, most likely, started
// OpenMP's thread pool), and whether this process is a child of fork() after that.
std::atomic<bool> pool_started{false};
std::atomic<bool> forked_after_pool{false};

void on_fork_child() {
    if (pool_started.load()) forked_after_pool.store(true);
}

}  // namespace

void check_cpu_environment() {
    // Registered before the first call can start the pool.
    static const int registered = pthread_atfork(nullptr, nullptr, on_fork_child);
    (void)registered;
    isa_cap();
    fused_isa_from_environment();
    team_policy_from_environment();
    const int threads = omp_get_max_threads();
    if (threads <= 1) return;
    // libgomp's pool does not survive fork(): the child's first parallel region of several
    // threads waits for threads that no longer exist, forever.
    if (forked_after_pool.load())
        fail_as<Unsupported>(
            "this process is a child of fork() from one that had already run CPU calls on "
            "several threads; OpenMP's thread pool does not survive fork, so a call on ",
            threads,
            " threads would wait forever. Call lstm::set_num_threads(1) in the child, or start "
            "it with exec");
    pool_started.store(true);
}

}  // namespace lstm::kernels::cpu
