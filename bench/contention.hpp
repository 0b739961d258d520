#pragma once

// --lstm_busy_processes=N: competing load for measuring how a case copes with a shared machine.
// Each busy process spins on the CPU (no memory traffic to speak of) for as long as lstm_bench
// runs, as an unrelated job on the same cores would; the OS schedules them against the bench's
// threads. A 2-thread step that synchronises its team every time step loses a whole scheduler
// slice whenever one of its threads is descheduled (docs/benchmarks.md, "Contention").

#include <sys/types.h>

#include <vector>

namespace lstm::bench {

class BusyProcesses {
public:
    BusyProcesses() = default;
    // Starts `count` spinning child processes; throws std::runtime_error naming fork's error.
    explicit BusyProcesses(int count);
    // Stops and reaps them (they also die with lstm_bench if it is killed).
    ~BusyProcesses();
    BusyProcesses(const BusyProcesses&) = delete;
    BusyProcesses& operator=(const BusyProcesses&) = delete;

    int count() const { return static_cast<int>(children_.size()); }

private:
    std::vector<pid_t> children_;
};

}  // namespace lstm::bench
