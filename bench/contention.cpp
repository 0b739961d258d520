#include "contention.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace lstm::bench {

namespace {

// The child's whole life: spin until a signal ends it. volatile keeps the loop from being
// optimised away.
[[noreturn]] void spin_forever() {
    // Dies with lstm_bench even if the bench is killed before it can stop its children.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    volatile unsigned long counter = 0;
    for (;;) counter = counter + 1;
}

}  // namespace

BusyProcesses::BusyProcesses(int count) {
    for (int i = 0; i < count; ++i) {
        const pid_t pid = fork();
        if (pid < 0)
            throw std::runtime_error(std::string("--lstm_busy_processes: fork failed: ") +
                                     std::strerror(errno));
        if (pid == 0) spin_forever();
        children_.push_back(pid);
    }
}

BusyProcesses::~BusyProcesses() {
    for (pid_t pid : children_) kill(pid, SIGKILL);
    for (pid_t pid : children_) waitpid(pid, nullptr, 0);
}

}  // namespace lstm::bench
