#include "kernels/cpu/team.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "lstm/error.hpp"

namespace lstm::kernels::cpu {

namespace {

// A team is judged short of cores when its members together were runnable but off the CPU for
// at least this share of the region's wall time. A quiet machine loses well under 1% (kernel
// threads, interrupts); one busy process on 2 cores takes 30-60% from a 2-thread team.
constexpr double kLostShare = 0.15;

// Regions between probes of the full team after the first shrink, and the most it backs off to
// (doubling per probe that finds the load still there). A training step is 2 regions, so the
// longest wait before a freed core is used again is 128 steps.
constexpr int kFirstProbe = 8;
constexpr int kLastProbe = 256;

// Full-team regions without a shortage after which a new shortage counts as a new load, whose
// back-off starts again from kFirstProbe. Under a steady load a probe now and then finds the
// cores free by chance, and the load shows again in one of the next few regions: restarting the
// back-off then kept a third of a small model's regions on the full team under one busy process
// (bahrampour/imdb/grad, 2 threads, AMD EPYC Zen 4).
constexpr int kCalmRegions = 2 * kFirstProbe;

// Probes in a row that the run queues may cancel before one runs regardless: the view is one
// instant and counts runnable threads, not their needs (a process about to sleep, an OpenMP
// runtime's spinning worker elsewhere), so it must not keep the team small for good.
constexpr int kMostSkips = 3;

int64_t clock_ns(clockid_t clock) {
    timespec ts{};
    clock_gettime(clock, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Involuntary context switches of the calling thread: the kernel took the CPU while the thread
// could still run. Voluntary ones (sleeping in a barrier) are not counted, so a runtime that
// sleeps while it waits (OMP_WAIT_POLICY=passive) is not mistaken for a shortage of cores.
int64_t preemptions_now() {
    rusage usage{};
    getrusage(RUSAGE_THREAD, &usage);
    return usage.ru_nivcsw;
}

// The calling thread's /proc/thread-self/schedstat, opened once per thread: its fields are the
// nanoseconds on the CPU, the nanoseconds runnable but waiting on a run queue, and the count of
// time slices. Reading it again from offset 0 regenerates the numbers (one pread per sample).
class SchedstatFile {
public:
    SchedstatFile() : fd_(open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)) {}
    ~SchedstatFile() {
        if (fd_ >= 0) close(fd_);
    }
    SchedstatFile(const SchedstatFile&) = delete;
    SchedstatFile& operator=(const SchedstatFile&) = delete;

    // The run-queue delay in ns, or -1 where the file is missing or unreadable (a kernel
    // without CONFIG_SCHED_INFO, or not Linux) or reads "0 0 0" (kernels that keep no
    // statistics print that; the thread reading it has run, so a real file shows CPU time).
    int64_t run_delay_ns() const {
        if (fd_ < 0) return -1;
        char text[96];
        const ssize_t got = pread(fd_, text, sizeof(text) - 1, 0);
        if (got <= 0) return -1;
        text[got] = '\0';
        char* end = nullptr;
        const long long on_cpu = std::strtoll(text, &end, 10);
        if (end == text || on_cpu <= 0) return -1;
        const char* second = end;
        const long long delay = std::strtoll(second, &end, 10);
        return end == second || delay < 0 ? -1 : static_cast<int64_t>(delay);
    }

private:
    int fd_;
};

int64_t run_delay_now() {
    thread_local const SchedstatFile file;
    return file.run_delay_ns();
}

}  // namespace

TeamPolicy team_policy_from_environment() {
    const char* env = std::getenv("LSTM_TEAM");
    if (env == nullptr || *env == '\0' || std::strcmp(env, "adaptive") == 0)
        return TeamPolicy::adaptive;
    if (std::strcmp(env, "fixed") == 0) return TeamPolicy::fixed;
    fail("LSTM_TEAM = '", env, "' is not one of adaptive, fixed");
}

void TeamUsage::add(int64_t lost_ns, int64_t preemptions) {
    lost_ns_.fetch_add(lost_ns, std::memory_order_relaxed);
    preemptions_.fetch_add(preemptions, std::memory_order_relaxed);
}

TeamMember::TeamMember(TeamUsage& usage)
    : usage_(usage),
      run_delay_ns_(run_delay_now()),
      wall_ns_(run_delay_ns_ >= 0 ? 0 : clock_ns(CLOCK_MONOTONIC)),
      cpu_ns_(run_delay_ns_ >= 0 ? 0 : clock_ns(CLOCK_THREAD_CPUTIME_ID)),
      preemptions_(preemptions_now()) {}

TeamMember::~TeamMember() {
    const int64_t preemptions = preemptions_now() - preemptions_;
    const int64_t run_delay = run_delay_now();
    // Only the run-queue delay is time a missing core took. Wall minus CPU time (the fallback)
    // also counts time asleep, and a member that waits at a barrier past libgomp's spin sleeps
    // in a futex: on a quiet 2-core machine that came to 9-50 ms per member in some regions of
    // 65-370 ms whose run-queue delay was 0.1-3 ms, and each such region shrank the team for the
    // next 8 (4 s of braun/1x320-CE-long at one thread).
    if (run_delay_ns_ >= 0) {
        // The file read at the start is open for the thread's life, so it reads again here.
        usage_.add(std::max<int64_t>(0, run_delay - run_delay_ns_), preemptions);
        return;
    }
    const int64_t wall = clock_ns(CLOCK_MONOTONIC) - wall_ns_;
    const int64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu_ns_;
    usage_.add(std::max<int64_t>(0, wall - cpu), preemptions);
}

bool TeamMember::measures_run_delay() { return run_delay_now() >= 0; }

void TeamGovernor::set_policy(TeamPolicy policy) {
    const std::lock_guard<std::mutex> lock(mutex_);
    policy_ = policy;
    reduced_ = 0;
    calls_since_probe_ = 0;
    probe_interval_ = 0;
    calm_regions_ = 0;
    skipped_ = 0;
}

TeamPolicy TeamGovernor::policy() const {
    TeamPolicy policy;
    {
        const std::lock_guard<std::mutex> lock(mutex_);
        policy = policy_;
    }
    return policy == TeamPolicy::automatic ? team_policy_from_environment() : policy;
}

int TeamGovernor::team_size(int max_threads) {
    max_threads = std::max(1, max_threads);
    if (policy() == TeamPolicy::fixed) return max_threads;
    const std::lock_guard<std::mutex> lock(mutex_);
    if (reduced_ == 0 || reduced_ >= max_threads) return max_threads;
    if (++calls_since_probe_ >= probe_interval_) {
        calls_since_probe_ = 0;
        if (skipped_ < kMostSkips && run_queues_ != nullptr) {
            const RunQueues queues = run_queues_();
            // The full team needs max_threads CPUs beside the other processes' runnable threads.
            // Lacking them, the probe would fail: back off as after a failed one, at no cost.
            if (queues.known && queues.others + max_threads > queues.cpus) {
                ++skipped_;
                probe_interval_ = std::min(2 * probe_interval_, kLastProbe);
                return reduced_;
            }
        }
        skipped_ = 0;
        return max_threads;
    }
    return reduced_;
}

int TeamGovernor::size_in_force(int max_threads) const {
    max_threads = std::max(1, max_threads);
    if (policy() == TeamPolicy::fixed) return max_threads;
    const std::lock_guard<std::mutex> lock(mutex_);
    return reduced_ == 0 || reduced_ >= max_threads ? max_threads : reduced_;
}

void TeamGovernor::report(int max_threads, int threads, const TeamUsage& usage, int64_t wall_ns) {
    if (threads <= 1 || wall_ns <= 0 || policy() == TeamPolicy::fixed) {
        return;
    }
    const double lost_cores = static_cast<double>(usage.lost_ns()) / static_cast<double>(wall_ns);
    const bool short_of_cores = lost_cores >= kLostShare && usage.preemptions() > 0;
    // The cores the team missed, rounded, and at least one: a team that lost time gives up a
    // thread even when the loss was spread thinly over many members, since every barrier waits
    // for whichever member is off the CPU.
    const int shrunk = std::max(1, threads - std::max(1, static_cast<int>(lost_cores + 0.5)));
    const std::lock_guard<std::mutex> lock(mutex_);
    if (threads < max_threads) {
        if (short_of_cores) reduced_ = shrunk;
        return;
    }
    if (!short_of_cores) {
        reduced_ = 0;
        calm_regions_ = std::min(calm_regions_ + 1, kCalmRegions);
        return;
    }
    // A failed probe, or a shortage soon after one succeeded: the same load, so back off further.
    const bool same_load = probe_interval_ > 0 && (reduced_ > 0 || calm_regions_ < kCalmRegions);
    probe_interval_ = same_load ? std::min(2 * probe_interval_, kLastProbe) : kFirstProbe;
    calls_since_probe_ = 0;
    calm_regions_ = 0;
    reduced_ = shrunk;
}

TeamGovernor& time_loop_governor() {
    static TeamGovernor governor(&read_run_queues);
    return governor;
}

int loop_team_size() { return time_loop_governor().size_in_force(omp_get_max_threads()); }

}  // namespace lstm::kernels::cpu
