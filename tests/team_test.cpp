// The team governor of the fused time loops (kernels/cpu/team.hpp): its decisions for reports of
// known usage, and the measurement each member takes of itself.

#include "kernels/cpu/team.hpp"

#include <stdlib.h>
#include <time.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "lstm/error.hpp"
#include "lstm/threads.hpp"

using lstm::kernels::cpu::TeamGovernor;
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

// Sets LSTM_TEAM for the scope (unset: nullptr) and restores it.
struct EnvScope {
    std::string saved;
    bool had;
    explicit EnvScope(const char* value) : had(getenv("LSTM_TEAM") != nullptr) {
        if (had) saved = getenv("LSTM_TEAM");
        if (value)
            setenv("LSTM_TEAM", value, 1);
        else
            unsetenv("LSTM_TEAM");
    }
    ~EnvScope() {
        if (had)
            setenv("LSTM_TEAM", saved.c_str(), 1);
        else
            unsetenv("LSTM_TEAM");
    }
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

TEST_CASE("team governor: a member counts time off the CPU as lost", "[team]") {
    // A member that sleeps 30 ms is off the CPU for about that long (voluntarily: no preemption
    // needed). The bounds allow for a loaded machine's wake-up delays.
    TeamUsage usage;
    {
        const lstm::kernels::cpu::TeamMember member(usage);
        const timespec pause{0, 30'000'000};
        nanosleep(&pause, nullptr);
    }
    INFO("lost " << usage.lost_ns() << " ns");
    CHECK(usage.lost_ns() >= 25'000'000);
    CHECK(usage.lost_ns() < 2'000'000'000);
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
