#pragma once

// Moves rows between a caller's batch order and the length-sorted order the CPU variants compute
// in. "Sorted row r" is original batch entry order[r]; only rows r < active[t] are valid at step t.
// Sequence planes are compact: step t's rows are [offsets[t], offsets[t] + active[t]) of an
// (S, width) plane, S = offsets[T] the valid frames (lstm/stack_loop.hpp's RowLayout).

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace lstm::kernels::cpu {

// dst (S, ld_dst) compact sorted <- src (T, N, width) original, host; columns [width, ld_dst) of
// every row are zeroed. Rows of steps [t_begin, t_end) only, so threads can split the steps.
template <typename T>
void gather_compact(const T* src, int64_t batch, int64_t width, const int64_t* order,
                    const int64_t* active, const int64_t* offsets, int64_t t_begin, int64_t t_end,
                    T* dst, int64_t ld_dst) {
    for (int64_t t = t_begin; t < t_end; ++t)
        for (int64_t r = 0; r < active[t]; ++r) {
            T* out = dst + (offsets[t] + r) * ld_dst;
            std::memcpy(out, src + (t * batch + order[r]) * width, sizeof(T) * width);
            std::fill(out + width, out + ld_dst, T(0));
        }
}

// dst (T, N, width) original <- src (S, ld_src) compact sorted, host, steps [t_begin, t_end);
// overwrites every row of those steps, padded rows with zeros.
template <typename T>
void scatter_compact(const T* src, int64_t ld_src, int64_t batch, int64_t width,
                     const int64_t* order, const int64_t* active, const int64_t* offsets,
                     int64_t t_begin, int64_t t_end, T* dst) {
    for (int64_t t = t_begin; t < t_end; ++t)
        for (int64_t r = 0; r < batch; ++r) {
            T* out = dst + (t * batch + order[r]) * width;
            if (r < active[t])
                std::memcpy(out, src + (offsets[t] + r) * ld_src, sizeof(T) * width);
            else
                std::memset(out, 0, sizeof(T) * width);
        }
}

// dst (N, W) sorted <- src (N, W) original, host; a null src gives zeros (omitted h0/c0/dhn/dcn).
template <typename T>
void gather_rows(const T* src, int64_t batch, int64_t width, const int64_t* order, T* dst) {
    for (int64_t r = 0; r < batch; ++r) {
        if (src)
            std::memcpy(dst + r * width, src + order[r] * width, sizeof(T) * width);
        else
            std::memset(dst + r * width, 0, sizeof(T) * width);
    }
}

// dst (N, W) original <- src (N, W) sorted, host; overwrites.
template <typename T>
void scatter_rows(const T* src, int64_t batch, int64_t width, const int64_t* order, T* dst) {
    for (int64_t r = 0; r < batch; ++r)
        std::memcpy(dst + order[r] * width, src + r * width, sizeof(T) * width);
}

}  // namespace lstm::kernels::cpu
