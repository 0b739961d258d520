#pragma once

// The element-wise part of one LSTM step as separate passes over memory, the way a cell loop of
// framework ops computes it (PyTorch's LSTMCell-basic): each pass reads and writes whole arrays.
// This is the `basic` variant's arithmetic; the fused variant does the same math in one pass.
// All arrays are host, row-major; `rows` is the active batch, gate blocks are i, f, g, o.

#include <omp.h>

#include <cstdint>

#include "kernels/common/gates.hpp"

namespace lstm::kernels::cpu {

// Pass threshold for OpenMP: below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelElements = 1 << 14;

// Whether a pass over `elements` runs on an OpenMP team. A region that would get one thread (small
// work, one thread set, or nested inside a region where no more levels may be active) is not
// entered at all: libgomp mallocs and frees a team for every one-thread region, which here would
// be several times per time step, and the time loops must not allocate.
inline bool parallel_pass(int64_t elements) {
    return elements > kParallelElements && omp_get_max_threads() > 1 &&
           omp_get_active_level() < omp_get_max_active_levels();
}

// body(r) for every r in [0, rows), split over a team when parallel_pass(elements). Each row is
// computed the same way on either branch, so the results do not depend on which one runs.
template <typename Body>
void for_rows(int64_t rows, int64_t elements, const Body& body) {
    if (parallel_pass(elements)) {
#pragma omp parallel for
        for (int64_t r = 0; r < rows; ++r) body(r);
    } else {
        for (int64_t r = 0; r < rows; ++r) body(r);
    }
}

// gates (rows, 4H) += b_ih + b_hh, broadcast over rows; adds.
template <typename T>
void add_biases(T* gates, int64_t rows, int64_t hidden, const T* b_ih, const T* b_hh) {
    const int64_t width = 4 * hidden;
    for_rows(rows, rows * width, [&](int64_t r) {
        for (int64_t j = 0; j < width; ++j) gates[r * width + j] += b_ih[j] + b_hh[j];
    });
}

// gates (rows, 4H): pre-activations -> activations in place (sigmoid on i, f, o; tanh on g).
template <typename T>
void activate_gates(T* gates, int64_t rows, int64_t hidden) {
    const int64_t width = 4 * hidden;
    for_rows(rows, rows * width, [&](int64_t r) {
        T* row = gates + r * width;
        for (int64_t j = 0; j < width; ++j)
            row[j] = (j >= 2 * hidden && j < 3 * hidden) ? tanh_act(row[j]) : sigmoid(row[j]);
    });
}

// c (rows, H) = f * c_prev + i * g from activated gates (rows, 4H); overwrites c (may alias
// c_prev).
template <typename T>
void update_cell(const T* gates, int64_t rows, int64_t hidden, const T* c_prev, T* c) {
    for_rows(rows, rows * hidden, [&](int64_t r) {
        const T* a = gates + r * 4 * hidden;
        for (int64_t k = 0; k < hidden; ++k) {
            const Gates<T> g{a[k], a[hidden + k], a[2 * hidden + k], a[3 * hidden + k]};
            c[r * hidden + k] = cell_state(g, c_prev[r * hidden + k]);
        }
    });
}

// h (rows, H; row stride ldh) = o * tanh(c) from gates (rows, 4H) and c (rows, H); overwrites h.
template <typename T>
void update_hidden(const T* gates, int64_t rows, int64_t hidden, const T* c, T* h, int64_t ldh) {
    for_rows(rows, rows * hidden, [&](int64_t r) {
        for (int64_t k = 0; k < hidden; ++k)
            h[r * ldh + k] = gates[r * 4 * hidden + 3 * hidden + k] * tanh_act(c[r * hidden + k]);
    });
}

// dh (rows, H) = dh_carry (rows, H) + dy (rows, H; row stride ldy); overwrites dh.
template <typename T>
void add_output_grad(const T* dh_carry, const T* dy, int64_t ldy, int64_t rows, int64_t hidden,
                     T* dh) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < hidden; ++k)
            dh[r * hidden + k] = dh_carry[r * hidden + k] + dy[r * ldy + k];
}

// Backward of h = o tanh(c): writes the o block of dgates (rows, 4H) and dc (rows, H) =
// dc_carry + dh * o * (1 - tanh(c)^2); overwrites both. dgates may alias gates (basic computes in
// place in its reserve): each element is read before it is written.
template <typename T>
void hidden_backward(const T* gates, const T* c, const T* dh, const T* dc_carry, int64_t rows,
                     int64_t hidden, T* dgates, T* dc) {
    for_rows(rows, rows * hidden, [&](int64_t r) {
        for (int64_t k = 0; k < hidden; ++k) {
            const int64_t e = r * hidden + k;
            const T o = gates[r * 4 * hidden + 3 * hidden + k];
            const T tanh_c = tanh_act(c[e]);
            dgates[r * 4 * hidden + 3 * hidden + k] = dh[e] * tanh_c * sigmoid_grad_from_output(o);
            dc[e] = dc_carry[e] + dh[e] * o * tanh_grad_from_output(tanh_c);
        }
    });
}

// Backward of c = f c_prev + i g: writes the i, f, g blocks of dgates (rows, 4H) and
// dc_prev (rows, H) = dc * f; overwrites both (dc_prev may alias dc, dgates may alias gates: a
// unit's i, f, g are all read before any of them is written).
template <typename T>
void cell_backward_pass(const T* gates, const T* c_prev, const T* dc, int64_t rows, int64_t hidden,
                        T* dgates, T* dc_prev) {
    for_rows(rows, rows * hidden, [&](int64_t r) {
        const T* a = gates + r * 4 * hidden;
        T* da = dgates + r * 4 * hidden;
        for (int64_t k = 0; k < hidden; ++k) {
            const int64_t e = r * hidden + k;
            const T i = a[k], f = a[hidden + k], g = a[2 * hidden + k];
            const T d = dc[e];
            da[k] = d * g * sigmoid_grad_from_output(i);
            da[hidden + k] = d * c_prev[e] * sigmoid_grad_from_output(f);
            da[2 * hidden + k] = d * i * tanh_grad_from_output(g);
            dc_prev[e] = d * f;
        }
    });
}

// sums (width) = column sums of m (rows, width), each summed from zero in row order; overwrites
// (zeros when rows is 0).
template <typename T>
void column_sums(const T* m, int64_t rows, int64_t width, T* sums) {
    for (int64_t j = 0; j < width; ++j) sums[j] = rows > 0 ? m[j] : T(0);
    for (int64_t r = 1; r < rows; ++r)
        for (int64_t j = 0; j < width; ++j) sums[j] += m[r * width + j];
}

// dst (n) += src (n); adds.
template <typename T>
void add_into(const T* src, int64_t n, T* dst) {
    for (int64_t j = 0; j < n; ++j) dst[j] += src[j];
}

}  // namespace lstm::kernels::cpu
