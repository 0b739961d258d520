#pragma once

// What the machine's run queues hold at this instant, for the team governor (kernels/cpu/team.hpp):
// before it probes the full team again it looks whether other processes' runnable threads leave
// cores free for it. A probe that runs into a busy process costs every barrier of a region a wait
// for the descheduled member (a Braun CE-short region took 250-430 ms so on 2 cores, against
// 50-90 on the one free core), so one that the run queues already show futile is better skipped.
//
// Reads Linux's /proc, as the governor's own measurements do; where it cannot, or where the view
// would be misleading, `known` is false.

namespace lstm::kernels::cpu {

struct RunQueues {
    bool known = false;  // false: no usable view (not Linux, or /proc unreadable, or see cpus)
    int cpus = 0;        // online CPUs, all of which this process may run on
    int others = 0;      // runnable threads of other processes (and kernel threads) right now
};

// Reads /proc/loadavg's count of runnable threads and subtracts this process's own runnable
// threads (/proc/self/task/*/stat; the calling thread is one of them). Unknown where the process
// may run on fewer CPUs than are online (a cpuset), since the system-wide count then says
// nothing about its own CPUs, and where the system's count is below the process's own (an
// emulated /proc). Allocates nothing; a few system calls per thread of the process.
RunQueues read_run_queues();

// This process's threads that are runnable (state R) now, the caller included; -1 where
// /proc/self/task cannot be read.
int own_runnable_threads();

}  // namespace lstm::kernels::cpu
