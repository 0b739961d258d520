#pragma once

// How a team of threads splits work: contiguous, balanced shares fixed by (count, threads)
// alone, so which thread does what never depends on timing.

#include <cstdint>

namespace lstm::kernels::cpu {

// The unit blocks [begin, end) a thread owns: a balanced, contiguous split of nb blocks among
// `threads`, fixed by (nb, threads) alone.
struct BlockRange {
    int64_t begin, end;
    int64_t count() const { return end - begin; }
};
inline BlockRange block_range(int64_t blocks, int thread, int threads) {
    return {blocks * thread / threads, blocks * (thread + 1) / threads};
}

// Rows [begin, end) of `rows` for one thread: the split used by row-partitioned work.
inline BlockRange row_range(int64_t rows, int thread, int threads) {
    return {rows * thread / threads, rows * (thread + 1) / threads};
}

}  // namespace lstm::kernels::cpu
