#include "threads.hpp"

#include <omp.h>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace lstm::bench {

int all_cpu_threads() { return omp_get_num_procs(); }

void set_cpu_threads(int threads) {
    // Eigen's GEMM (basic, fused's portable path, the dense layer) follows this too: left unset,
    // its thread count is omp_get_max_threads().
    omp_set_num_threads(threads);
#if defined(__SSE__)
    // Gradients reaching back over 1000 steps decay into denormals, which cost ~100x per
    // operation on x86; a variant that flushes them (fused does, as TensorFlow does by default)
    // would otherwise win CE-long by that alone. Every thread of the OpenMP pool (which Eigen's
    // and oneDNN's products run on, and which libgomp keeps alive between regions) flushes, so
    // every variant is timed under the same floating-point mode.
#pragma omp parallel
    _mm_setcsr(_mm_getcsr() | 0x8040);  // bit 15: flush to zero; bit 6: denormals are zero
#endif
}

}  // namespace lstm::bench
