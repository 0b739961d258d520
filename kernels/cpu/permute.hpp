#pragma once

// Moves rows between a caller's batch order and the length-sorted order the CPU variants compute
// in. "Sorted row r" is original batch entry order[r]; only rows r < active[t] are valid at step t.

#include <cstdint>
#include <cstring>

namespace lstm::kernels::cpu {

// dst (T, N, W) sorted <- src (T, N, W) original, host; rows r >= active[t] are left untouched.
template <typename T>
void gather_steps(const T* src, int64_t seq_len, int64_t batch, int64_t width, const int64_t* order,
                  const int64_t* active, T* dst) {
    for (int64_t t = 0; t < seq_len; ++t)
        for (int64_t r = 0; r < active[t]; ++r)
            std::memcpy(dst + (t * batch + r) * width, src + (t * batch + order[r]) * width,
                        sizeof(T) * width);
}

// dst (T, N, W) original <- src (T, N, W) sorted, host; overwrites every row, padded rows with 0.
template <typename T>
void scatter_steps(const T* src, int64_t seq_len, int64_t batch, int64_t width,
                   const int64_t* order, const int64_t* active, T* dst) {
    for (int64_t t = 0; t < seq_len; ++t)
        for (int64_t r = 0; r < batch; ++r) {
            T* out = dst + (t * batch + order[r]) * width;
            if (r < active[t])
                std::memcpy(out, src + (t * batch + r) * width, sizeof(T) * width);
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
