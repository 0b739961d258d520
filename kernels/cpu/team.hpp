#pragma once

// How many threads a time loop's OpenMP team gets. A team that meets at a barrier every time
// step runs at the pace of its slowest thread: when another process takes one of the cores, the
// thread it displaces misses barriers for a whole scheduler slice (milliseconds, against a step
// of tens to hundreds of microseconds) and the others wait. On a 2-core machine with one busy
// process, 2 threads took 1.7x to 2.9x as long as 1 thread under the same load.
//
// The governor measures what each team actually got (time its threads were runnable but off the
// CPU, and how often the kernel preempted them) and shrinks the next teams by the cores that
// were missing; now and then it probes the full size again, backing off while the load stays.
// Before a probe it looks at the run queues (kernels/cpu/run_queues.hpp) and skips a probe they
// show to be futile, since a failed probe costs a scheduler slice at every barrier of a region.
// Time a thread sleeps (in the runtime's wait at a barrier, in the kernel) is not a missing core:
// where Linux keeps the scheduler's run-queue delay per thread, that is what counts.
// Peers leave this to the OpenMP runtime: libgomp's OMP_DYNAMIC sizes teams from the 15-minute
// load average, which reacts far too slowly and counts the team's own threads as load.
//
// Numerics: only code whose bits do not depend on the team size may be governed (fused's avx512
// and avx2 paths); otherwise a run's results would depend on the machine's load.

#include <omp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>

#include "kernels/cpu/run_queues.hpp"

namespace lstm::kernels::cpu {

// What the threads of one parallel region received, summed over its members (lock-free, so a
// region adds to it without allocating).
class TeamUsage {
public:
    // Adds one member's share: nanoseconds it was runnable but not running, and the kernel's
    // preemptions of it.
    void add(int64_t lost_ns, int64_t preemptions);
    int64_t lost_ns() const { return lost_ns_.load(std::memory_order_relaxed); }
    int64_t preemptions() const { return preemptions_.load(std::memory_order_relaxed); }

private:
    std::atomic<int64_t> lost_ns_{0};
    std::atomic<int64_t> preemptions_{0};
};

// Measures the calling thread from construction to destruction and adds the result to `usage`.
// One per member, constructed first thing in the region (the destructor runs before the
// region's closing barrier).
class TeamMember {
public:
    explicit TeamMember(TeamUsage& usage);
    ~TeamMember();
    TeamMember(const TeamMember&) = delete;
    TeamMember& operator=(const TeamMember&) = delete;

    // Whether members measure the scheduler's run-queue delay (Linux with per-thread schedstat);
    // without it they count wall time minus CPU time, which includes time spent asleep.
    static bool measures_run_delay();

private:
    TeamUsage& usage_;
    int64_t run_delay_ns_, wall_ns_, cpu_ns_, preemptions_;  // clocks only without run delay
};

enum class TeamPolicy { automatic, adaptive, fixed };

// LSTM_TEAM: unset, empty or "adaptive" -> adaptive; "fixed". Throws lstm::InvalidArgument
// naming the variable for anything else.
TeamPolicy team_policy_from_environment();

class TeamGovernor {
public:
    // Without a view of the run queues every probe runs (the tests' deterministic governor).
    TeamGovernor() = default;
    // Probes consult `run_queues` (read_run_queues for the process's governor).
    explicit TeamGovernor(RunQueues (*run_queues)()) : run_queues_(run_queues) {}

    // Team size for the next region, 1..max_threads.
    int team_size(int max_threads);
    // The size the governor holds now, 1..max_threads, without counting a region: for short
    // parallel loops beside the time loops (an optimizer's update) whose bits do not depend on
    // the team. They follow the governor's judgement but never probe the full team themselves,
    // since a failed probe costs a scheduler slice and these loops are too short to measure one.
    int size_in_force(int max_threads) const;
    // What a region run with `threads` members (team_size's answer for `max_threads`) got in
    // `wall_ns` of wall time.
    void report(int max_threads, int threads, const TeamUsage& usage, int64_t wall_ns);
    // fixed: every team gets max_threads (for timing a fixed team); automatic: the environment
    // variable LSTM_TEAM (adaptive or fixed, read per region), else adaptive.
    void set_policy(TeamPolicy policy);
    // The policy in force; throws lstm::Error naming LSTM_TEAM if it holds something else.
    TeamPolicy policy() const;

private:
    mutable std::mutex mutex_;
    TeamPolicy policy_ = TeamPolicy::automatic;
    int reduced_ = 0;  // the team size in force while the full team lost time; 0: none
    int calls_since_probe_ = 0;
    int probe_interval_ = 0;  // 0 until the first shortage
    int calm_regions_ = 0;    // full-team regions without a shortage since the last one
    int skipped_ = 0;         // probes skipped in a row on the run queues' word
    RunQueues (*run_queues_)() = nullptr;
};

// The governor of the fused time loops (one per process: the cores are the machine's).
TeamGovernor& time_loop_governor();

// time_loop_governor().size_in_force(omp_get_max_threads()): the team for a parallel loop outside
// the time loops whose bits do not depend on the team size.
int loop_team_size();

// Runs body() on every thread of a team the governor sizes (at most omp_get_max_threads()) and
// reports what the team got; without a governor (nullptr), on a team of omp_get_max_threads().
// Each member measures itself around body; work inside must be split by omp_get_num_threads(),
// never by the maximum.
template <typename Body>
void run_governed_team(TeamGovernor* governor, Body&& body) {
    const int max_threads = omp_get_max_threads();
    if (governor == nullptr) {
#pragma omp parallel
        body();
        return;
    }
    const int threads = governor->team_size(max_threads);
    TeamUsage usage;
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
        const TeamMember member(usage);
        body();
    }
    const auto wall = std::chrono::steady_clock::now() - start;
    governor->report(max_threads, threads, usage,
                     std::chrono::duration_cast<std::chrono::nanoseconds>(wall).count());
}

}  // namespace lstm::kernels::cpu
