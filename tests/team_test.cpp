// The team governor of the fused time loops (kernels/cpu/team.hpp): its decisions for reports of
// known usage, and the measurement each member takes of itself.

#include "kernels/cpu/team.hpp"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/run_queues.hpp"
#include "lstm/error.hpp"
#include "lstm/threads.hpp"
#include "test_util.hpp"

using lstm::kernels::cpu::TeamGovernor;
using lstm::kernels::cpu::TeamMember;
using lstm::kernels::cpu::TeamPolicy;
using lstm::kernels::cpu::TeamUsage;

namespace {

constexpr int64_t kWallNs = 100'000'000;  // a 100 ms region

// Reports one region of `threads` members that together lost `lost_cores` of the wall time
// (0.5: half a core's worth) and were preempted `preemptions` times.
void report(TeamGovernor& governor, int max_threads, int threads, double lost_cores,
            int64_t preemptions) {
    TeamUsage usage;
    usage.add(static_cast<int64_t>(lost_cores * kWallNs), preemptions);
    governor.report(max_threads, threads, usage, kWallNs);
}

// The team sizes of the next `regions` regions, each reported as `lost_cores` lost.
std::vector<int> sizes(TeamGovernor& governor, int max_threads, int regions, double lost_cores) {
    std::vector<int> out;
    for (int i = 0; i < regions; ++i) {
        const int threads = governor.team_size(max_threads);
        out.push_back(threads);
        report(governor, max_threads, threads, threads == max_threads ? lost_cores : 0.0, 3);
    }
    return out;
}

std::string show(const std::vector<int>& v) {
    std::string s;
    for (int x : v) s += std::to_string(x) + " ";
    return s;
}

// LSTM_TEAM for the scope (unset: nullptr).
struct EnvScope : lstm::test::EnvScope {
    explicit EnvScope(const char* value) : lstm::test::EnvScope("LSTM_TEAM", value) {}
};

}  // namespace

TEST_CASE("team governor: a quiet team keeps every thread", "[team]") {
    const EnvScope env(nullptr);
    TeamGovernor governor;
    const std::vector<int> got = sizes(governor, 2, 20, 0.01);
    INFO("sizes: " << show(got));
    CHECK(got == std::vector<int>(20, 2));
}

TEST_CASE("team governor: a team short of a core shrinks, probes, backs off and recovers",
          "[team]") {
    const EnvScope env(nullptr);
    TeamGovernor governor;
    // Under load: the full team loses half a core; the next 7 regions run 1 thread, the 8th
    // probes 2 and finds the load, so the next probe waits 16 regions.
    std::vector<int> expected = {2};
    expected.insert(expected.end(), 7, 1);
    expected.push_back(2);
    expected.insert(expected.end(), 15, 1);
    expected.push_back(2);
    const std::vector<int> loaded = sizes(governor, 2, static_cast<int>(expected.size()), 0.5);
    INFO("sizes under load: " << show(loaded));
    CHECK(loaded == expected);
    // The load ends: the next probe (32 regions on) finds the team whole and keeps it.
    std::vector<int> expected_after(31, 1);
    expected_after.insert(expected_after.end(), 5, 2);
    const std::vector<int> after = sizes(governor, 2, 36, 0.0);
    INFO("sizes after the load: " << show(after));
    CHECK(after == expected_after);
}

TEST_CASE(
    "team governor: a probe that finds the cores free by chance does not restart the back-off",
    "[team]") {
    const EnvScope env(nullptr);
    TeamGovernor governor;
    const auto run = [&governor](int regions, double lost) {
        return sizes(governor, 2, regions, lost);
    };
    std::vector<int> expected = {2};  // short: 7 regions on 1 thread, then a probe
    expected.insert(expected.end(), 7, 1);
    expected.push_back(2);
    CHECK(run(9, 0.5) == expected);  // the probe is short too: the next waits 16 regions
    CHECK(run(15, 0.5) == std::vector<int>(15, 1));
    CHECK(run(1, 0.0) == std::vector<int>{2});  // this probe finds the cores free
    // The load is back on the next region: the same load, so the next probe waits 32, not 8.
    CHECK(run(1, 0.5) == std::vector<int>{2});
    const std::vector<int> backed_off = run(32, 0.0);
    INFO("sizes after the lucky probe: " << show(backed_off));
    std::vector<int> expected_back(31, 1);
    expected_back.push_back(2);
    CHECK(backed_off == expected_back);
    // After 16 calm full-team regions a shortage is a new load: its first probe comes after 8.
    CHECK(run(16, 0.0) == std::vector<int>(16, 2));
    std::vector<int> fresh = {2};
    fresh.insert(fresh.end(), 7, 1);
    fresh.push_back(2);
    const std::vector<int> new_load = run(9, 0.5);
    INFO("sizes for a new load: " << show(new_load));
    CHECK(new_load == fresh);
}

TEST_CASE("team governor: loops beside the time loops get the size in force and never probe",
          "[team]") {
    const EnvScope env(nullptr);
    TeamGovernor governor;
    CHECK(governor.size_in_force(2) == 2);
    report(governor, 2, governor.team_size(2), 0.5, 3);  // a shortage: regions now get 1 thread
    // Asking often changes nothing: the time loops still probe on their 8th region.
    for (int i = 0; i < 20; ++i) CHECK(governor.size_in_force(2) == 1);
    std::vector<int> expected(7, 1);
    expected.push_back(2);
    const std::vector<int> got = sizes(governor, 2, 8, 0.0);
    INFO("sizes: " << show(got));
    CHECK(got == expected);
    CHECK(governor.size_in_force(2) == 2);  // the probe found the cores free
    CHECK(governor.size_in_force(0) == 1);
    report(governor, 2, governor.team_size(2), 0.5, 3);
    CHECK(governor.size_in_force(2) == 1);
    const EnvScope fixed("fixed");  // a fixed team ignores the shortage just measured
    CHECK(governor.size_in_force(2) == 2);
}

namespace {

// Run-queue views for a 2-CPU machine: another process's thread runnable, or none.
lstm::kernels::cpu::RunQueues one_other_busy() { return {true, 2, 1}; }
lstm::kernels::cpu::RunQueues nothing_else_busy() { return {true, 2, 0}; }
lstm::kernels::cpu::RunQueues no_view() { return {}; }

}  // namespace

TEST_CASE("team governor: probes the run queues show futile are skipped, backing off as failed",
          "[team]") {
    const EnvScope env(nullptr);
    SECTION("another process holds a core: three probes skipped, the fourth runs") {
        TeamGovernor governor(&one_other_busy);
        // Skipped 8, 16 and 32 regions on (each doubling the wait); the fourth, 64 regions on,
        // runs, finds the load and doubles the wait to 128. Then three more skips (128, 256 and
        // 256 regions on, the longest wait) before the next probe runs.
        const std::pair<int, bool> waits[] = {{8, false},   {16, false},  {32, false},
                                              {64, true},   {128, false}, {256, false},
                                              {256, false}, {256, true}};
        std::vector<int> expected = {2};
        for (const auto& [wait, probes] : waits) {
            expected.insert(expected.end(), wait - 1, 1);
            expected.push_back(probes ? 2 : 1);
        }
        const std::vector<int> got =
            sizes(governor, 2, static_cast<int>(expected.size()), /*lost_cores=*/0.5);
        INFO("sizes: " << show(got));
        CHECK(got == expected);
    }
    SECTION("free cores, or no view: every probe runs, as without run queues") {
        for (auto* view : {&nothing_else_busy, &no_view}) {
            TeamGovernor governor(view);
            std::vector<int> expected = {2};
            expected.insert(expected.end(), 7, 1);
            expected.push_back(2);
            expected.insert(expected.end(), 15, 1);
            expected.push_back(2);
            const std::vector<int> got =
                sizes(governor, 2, static_cast<int>(expected.size()), /*lost_cores=*/0.5);
            INFO("sizes: " << show(got));
            CHECK(got == expected);
        }
    }
}

TEST_CASE("run queues: a busy child counts as another process, a busy thread as this one's",
          "[team]") {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    REQUIRE(sched_getaffinity(0, sizeof(allowed), &allowed) == 0);
    const bool whole_machine = CPU_COUNT(&allowed) == sysconf(_SC_NPROCESSORS_ONLN);
    const lstm::kernels::cpu::RunQueues quiet = lstm::kernels::cpu::read_run_queues();
    // Only a process that may run on every online CPU can read the system's count as its own.
    if (!whole_machine) REQUIRE_FALSE(quiet.known);
    REQUIRE(lstm::kernels::cpu::own_runnable_threads() >= 1);  // the caller runs
    std::atomic<bool> spinning{false}, stop{false};
    std::thread spinner([&] {
        spinning = true;
        while (!stop.load(std::memory_order_relaxed)) {
        }
    });
    while (!spinning) std::this_thread::yield();
    const int own = lstm::kernels::cpu::own_runnable_threads();
    stop = true;
    spinner.join();
    CHECK(own >= 2);
    if (!quiet.known) {
        // A cpuset, or a /proc that does not count this process (a sandbox's): nothing to read.
        WARN("no view of the run queues here (whole machine: " << whole_machine << ")");
        return;
    }
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        // Spins until killed; touches nothing of the parent's state (no OpenMP after fork).
        for (;;) {
        }
    }
    // The child is runnable from its first instruction; give the scheduler a moment to list it.
    const timespec pause{0, 20'000'000};
    nanosleep(&pause, nullptr);
    const lstm::kernels::cpu::RunQueues busy = lstm::kernels::cpu::read_run_queues();
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    INFO("cpus " << busy.cpus << ", other runnable threads " << busy.others);
    CHECK(busy.known);
    CHECK(busy.cpus == CPU_COUNT(&allowed));
    CHECK(busy.others >= 1);
}

TEST_CASE("team governor: a large team gives up the cores it missed, at least one", "[team]") {
    const EnvScope env(nullptr);
    for (const auto& [lost, expected] :
         std::vector<std::pair<double, int>>{{0.2, 15}, {0.94, 15}, {2.6, 13}, {20.0, 1}}) {
        TeamGovernor governor;
        report(governor, 16, 16, lost, 5);
        INFO("lost " << lost << " cores");
        CHECK(governor.team_size(16) == expected);
    }
}

TEST_CASE("team governor: lost time without preemptions (sleeping at barriers) is no shortage",
          "[team]") {
    const EnvScope env(nullptr);
    TeamGovernor governor;
    report(governor, 2, 2, 0.9, 0);
    CHECK(governor.team_size(2) == 2);
}

TEST_CASE("team governor: the fixed policy and LSTM_TEAM", "[team]") {
    {
        const EnvScope env("fixed");
        TeamGovernor governor;
        report(governor, 2, 2, 0.9, 10);
        CHECK(governor.team_size(2) == 2);
    }
    {
        const EnvScope env(nullptr);
        TeamGovernor governor;
        governor.set_policy(TeamPolicy::fixed);
        report(governor, 4, 4, 2.0, 10);
        CHECK(governor.team_size(4) == 4);
        governor.set_policy(TeamPolicy::adaptive);
        report(governor, 4, 4, 2.0, 10);
        CHECK(governor.team_size(4) == 2);
        // A smaller maximum than the shrunk size is taken as it is.
        CHECK(governor.team_size(1) == 1);
    }
    {
        const EnvScope env("sometimes");
        TeamGovernor governor;
        CHECK_THROWS_WITH(governor.team_size(2), Catch::Contains("LSTM_TEAM = 'sometimes'") &&
                                                     Catch::Contains("adaptive, fixed"));
    }
}

TEST_CASE("team governor: a member counts waiting for its core, not sleeping", "[team]") {
    // Sleeping 100 ms leaves the core free: where the kernel keeps run-queue delays it is not
    // lost (only the wake-up's wait for a core on a loaded machine is, well under half of it);
    // otherwise the fallback, wall minus CPU time, counts all of it.
    {
        TeamUsage usage;
        {
            const TeamMember member(usage);
            const timespec pause{0, 100'000'000};
            nanosleep(&pause, nullptr);
        }
        INFO("lost " << usage.lost_ns() << " ns while asleep");
        if (TeamMember::measures_run_delay())
            CHECK(usage.lost_ns() < 50'000'000);
        else
            CHECK(usage.lost_ns() >= 90'000'000);
    }
    // Spinning for 100 ms of wall time beside another spinning thread on the same core leaves
    // the member about half of it: the other half it was runnable and waiting.
    cpu_set_t saved;
    REQUIRE(pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved) == 0);
    int cpu = 0;
    while (!CPU_ISSET(cpu, &saved)) ++cpu;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    REQUIRE(pthread_setaffinity_np(pthread_self(), sizeof(one), &one) == 0);
    std::atomic<bool> stop{false};
    std::thread rival([&] {
        pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
        while (!stop.load(std::memory_order_relaxed)) {
        }
    });
    TeamUsage usage;
    {
        const TeamMember member(usage);
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
        while (std::chrono::steady_clock::now() < until) {
        }
    }
    stop = true;
    rival.join();
    REQUIRE(pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved) == 0);
    INFO("lost " << usage.lost_ns() << " ns, preempted " << usage.preemptions() << " times");
    CHECK(usage.lost_ns() >= 20'000'000);
    CHECK(usage.lost_ns() < 2'000'000'000);
    CHECK(usage.preemptions() > 0);
}

TEST_CASE("set_num_threads sets the OpenMP thread count and refuses less than one", "[team]") {
    const int saved = lstm::num_threads();
    lstm::set_num_threads(3);
    CHECK(lstm::num_threads() == 3);
    CHECK(omp_get_max_threads() == 3);
    CHECK_THROWS_WITH(lstm::set_num_threads(0),
                      Catch::Contains("set_num_threads: threads must be >= 1, got 0"));
    CHECK(lstm::num_threads() == 3);
    lstm::set_num_threads(saved);
}
