#pragma once

// CPU thread control for the benchmark cases. The variants run OpenMP loops and Eigen products,
// and Eigen keeps its own thread count, so a case pins both or it measures a mix.

namespace lstm::bench {

// All processors the OS reports, the bench's default ("default: all cores", docs/benchmarks.md).
int all_cpu_threads();

// Sets the OpenMP team size and Eigen's product thread count to `threads`.
void set_cpu_threads(int threads);

}  // namespace lstm::bench
