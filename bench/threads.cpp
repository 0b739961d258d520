#include "threads.hpp"

#include <omp.h>

// Only Eigen's thread setting is used here; no product is instantiated in this file, so the
// warnings kernels/cpu/gemm.hpp silences around Eigen cannot arise.
#include <Eigen/Core>

namespace lstm::bench {

int all_cpu_threads() { return omp_get_num_procs(); }

void set_cpu_threads(int threads) {
    omp_set_num_threads(threads);
    Eigen::setNbThreads(threads);
}

}  // namespace lstm::bench
