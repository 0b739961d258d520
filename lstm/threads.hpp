#pragma once

// How many threads the CPU variants, losses and optimizers use. They run OpenMP teams, so this is
// OpenMP's thread count (omp_set_num_threads, or OMP_NUM_THREADS before the program starts),
// which applies to the calls made from the thread that sets it. The fused variant may run its
// time loops with fewer while other processes take cores (kernels/cpu/team.hpp); LSTM_TEAM=fixed
// keeps the count exact.

#include <omp.h>

#include "lstm/error.hpp"

namespace lstm {

// Sets the thread count for CPU calls made from the calling thread; throws lstm::InvalidArgument
// for a count below 1.
inline void set_num_threads(int threads) {
    check(threads >= 1, "set_num_threads: threads must be >= 1, got ", threads);
    omp_set_num_threads(threads);
}

// The thread count CPU calls from this thread use (at most).
inline int num_threads() { return omp_get_max_threads(); }

}  // namespace lstm
