#pragma once

// CTC loss and its gradient on raw host pointers: log-space alpha/beta in double, OpenMP over the
// batch. Nothing from lstm/ is included, the caller validates every index and length, nothing
// throws, prints or allocates.
//
// Why double inside even for float inputs: log alpha grows like T * log C (about 2e4 at
// T = 5000), where a float's spacing is about 2e-3, so a float recursion loses the posterior
// exp(alpha + beta - loglik) to rounding (PyTorch's float CTC is off by percent there). Doing
// alpha, beta, the log-softmax and the posterior sums in double leaves the final rounding to T as
// the only float error.
//
// The per-sample arithmetic (emissions, both recursions, the gradient) is compiled once per
// instruction set in lstm_cpu (kernels/cpu/ctc_simd.hpp) and dispatched at run time, so it runs
// in vector code whatever flags the including program is compiled with; this header is the batch
// driver: workspace, the order of samples, OpenMP.
//
// Layout: all tensors are host memory; the input and the gradient are time-major
// (max_time, batch, classes), so one sample's frames are batch * classes elements apart.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/ctc_simd.hpp"
#include "kernels/cpu/simd.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "kernels/cpu/ctc.hpp tests losses for +inf; do not build with -ffast-math"
#endif

namespace lstm::kernels::cpu {

namespace ctc_detail {

// Hands out 64-byte aligned pieces of one buffer; with a null base it only counts, so sizing and
// carving are the same code.
class Carver {
public:
    explicit Carver(void* base) : base_(static_cast<char*>(base)) {}
    template <typename T>
    T* take(int64_t count) {
        offset_ = (offset_ + 63) / 64 * 64;
        T* out = base_ ? reinterpret_cast<T*>(base_ + offset_) : nullptr;
        offset_ += static_cast<size_t>(count) * sizeof(T);
        return out;
    }
    size_t bytes() const { return (offset_ + 63) / 64 * 64; }

private:
    char* base_;
    size_t offset_ = 0;
};

// The part shared by all threads: per sample the losses, where its labels start, and the order
// in which samples are handed out.
struct CtcShared {
    double* losses;
    int64_t* label_start;
    int64_t* order;
};

inline CtcShared carve_shared(Carver& carver, int64_t batch) {
    CtcShared shared;
    shared.losses = carver.take<double>(batch);
    shared.label_start = carver.take<int64_t>(batch);
    shared.order = carver.take<int64_t>(batch);
    return shared;
}

inline size_t shared_bytes(int64_t batch) {
    Carver carver(nullptr);
    carve_shared(carver, batch);
    return carver.bytes();
}

inline size_t slot_bytes(int64_t max_time, int64_t classes, int64_t max_labels) {
    return carve_ctc_scratch(nullptr, max_time, classes, max_labels, nullptr);
}

}  // namespace ctc_detail

// Everything the kernel reads and writes. All pointers are host memory; the caller has checked
// that 1 <= input_lengths[n] <= max_time, target_lengths[n] >= 0, and that every label used is in
// [0, classes) and differs from blank.
template <typename T>
struct CtcProblem {
    int64_t max_time = 0, batch = 0, classes = 0;
    // (max_time, batch, classes) time-major, contiguous. Logits (softmax applied inside) when
    // `logits` is true, else log-probabilities used as given (-inf allowed). A sample with NaN or
    // +inf on a valid frame (or a logits frame of all -inf) gets loss NaN and a NaN gradient on
    // its valid frames.
    const T* input = nullptr;
    bool logits = true;
    // Labels of sample n: targets[n * target_stride + i] (padded (batch, target_stride)), or with
    // target_stride 0 concatenated: targets[target_lengths[0] + ... + target_lengths[n-1] + i];
    // i < target_lengths[n] <= max_labels.
    const int64_t* targets = nullptr;
    int64_t target_stride = 0;
    const int64_t* input_lengths = nullptr;   // (batch)
    const int64_t* target_lengths = nullptr;  // (batch)
    int64_t max_labels = 0;
    int64_t blank = 0;
    bool zero_infinity = false;
    // d(returned loss)/d(loss_n) = grad_scale, divided by max(target_lengths[n], 1) when
    // divide_by_target_length (PyTorch's mean).
    double grad_scale = 1.0;
    bool divide_by_target_length = false;
    // (max_time, batch, classes), optional: overwritten; w.r.t. the input as given.
    T* grad = nullptr;
};

// Workspace for up to `slots` samples in flight at once (one per thread), each with up to
// max_time frames and max_labels labels; includes 64 bytes to align an arbitrary pointer.
inline size_t ctc_workspace_bytes(int64_t max_time, int64_t batch, int64_t classes,
                                  int64_t max_labels, int slots) {
    return 64 + ctc_detail::shared_bytes(batch) +
           static_cast<size_t>(std::max(slots, 1)) *
               ctc_detail::slot_bytes(max_time, classes, max_labels);
}

// Computes every sample's loss -log p(labels | input) in double: +inf when no alignment has
// nonzero probability, 0 instead of +inf under zero_infinity, NaN for NaN/+inf input, -inf when
// log-probs far above 0 give a likelihood beyond the double range. Returns them
// as an array of p.batch doubles inside the workspace, valid until the workspace is reused. When
// p.grad is set, overwrites it with the gradient of sum_n scale_n * loss_n w.r.t. the input as
// given (scale_n as described in CtcProblem); padded frames and samples with an infinite loss get
// exact zeros. workspace: host, at least ctc_workspace_bytes(max_time, batch, classes, max_labels,
// 1) bytes, any alignment. Runs min(omp_get_max_threads(), batch, slots that fit) threads; each
// sample is computed start to end by one thread with the same code, so results are bit-identical
// for every thread count.
template <typename T>
const double* ctc_loss(const CtcProblem<T>& p, void* workspace, size_t workspace_bytes) {
    const auto address = reinterpret_cast<std::uintptr_t>(workspace);
    const size_t skew = (64 - address % 64) % 64;
    char* base = static_cast<char*>(workspace) + skew;
    ctc_detail::Carver carver(base);
    const ctc_detail::CtcShared shared = ctc_detail::carve_shared(carver, p.batch);
    if (p.batch == 0) return shared.losses;

    const size_t shared_size = ctc_detail::shared_bytes(p.batch);
    const size_t slot_size = ctc_detail::slot_bytes(p.max_time, p.classes, p.max_labels);
#ifdef _OPENMP
    // As many threads as there are slots in the workspace, samples, and OpenMP threads.
    const size_t fit = (workspace_bytes - skew - shared_size) / slot_size;
    const size_t most = std::min(fit, static_cast<size_t>(p.batch));
    const int threads = static_cast<int>(
        std::max<size_t>(1, std::min(most, static_cast<size_t>(omp_get_max_threads()))));
#else
    (void)workspace_bytes;
#endif

    int64_t start = 0;
    for (int64_t n = 0; n < p.batch; ++n) {
        shared.label_start[n] = p.target_stride > 0 ? n * p.target_stride : start;
        start += p.target_lengths[n];
    }
    // Longest work first, so that dynamic scheduling ends with short samples and balances.
    for (int64_t n = 0; n < p.batch; ++n) shared.order[n] = n;
    auto work = [&](int64_t n) { return p.input_lengths[n] * (2 * p.target_lengths[n] + 1); };
    std::stable_sort(shared.order, shared.order + p.batch,
                     [&](int64_t a, int64_t b) { return work(a) > work(b); });

    // A malformed LSTM_MAX_CPU_ISA is reported here, on the calling thread: thrown inside the
    // team, the error could not leave the parallel region.
    apply_isa_cap();
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
#endif
    {
#ifdef _OPENMP
        const size_t slot_index = static_cast<size_t>(omp_get_thread_num());
#else
        const size_t slot_index = 0;
#endif
        CtcScratch slot;
        carve_ctc_scratch(base + shared_size + slot_index * slot_size, p.max_time, p.classes,
                          p.max_labels, &slot);
        CtcSampleDims dims;
        dims.max_time = p.max_time;
        dims.stride = p.batch * p.classes;
        dims.classes = p.classes;
        dims.blank = p.blank;
        dims.logits = p.logits;
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (int64_t i = 0; i < p.batch; ++i) {
            const int64_t n = shared.order[i];
            double scale = p.grad_scale;
            if (p.divide_by_target_length)
                scale /= static_cast<double>(std::max<int64_t>(p.target_lengths[n], 1));
            dims.frames = p.input_lengths[n];
            dims.labels = p.target_lengths[n];
            dims.scale = scale;
            const double loss =
                ctc_sample(p.input + n * p.classes, p.grad ? p.grad + n * p.classes : nullptr,
                           p.targets + shared.label_start[n], dims, slot);
            // An infinite loss already got a zero gradient, which is what zero_infinity wants.
            shared.losses[n] = std::isinf(loss) && p.zero_infinity ? 0.0 : loss;
        }
    }
    return shared.losses;
}

}  // namespace lstm::kernels::cpu
