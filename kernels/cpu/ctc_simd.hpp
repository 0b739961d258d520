#pragma once

// The hot part of the CPU CTC kernel, compiled once per instruction set in lstm_cpu
// (kernels/cpu/ctc_simd.cpp, Google Highway) and dispatched at run time like the kernels of
// kernels/cpu/simd.hpp: one sample's emissions (log-softmax), alpha and beta recursions (scaled
// probabilities for float logits, log space otherwise and as the fallback) and gradient, in
// double, on raw host pointers. kernels/cpu/ctc.hpp drives it over the batch.
// Nothing here throws, prints or allocates; the caller validated every index and length.

#include <cstddef>
#include <cstdint>

namespace lstm::kernels::cpu {

// Scratch of one sample in flight, carved by carve_ctc_scratch for up to max_time frames,
// `classes` classes and max_labels labels. Every row has room for one vector of the widest
// instruction set past its end, so the vector loops need no scalar remainder on scratch.
struct CtcScratch {
    double* alpha;      // (max_time, state row) alpha (log, or scaled): blanks, then labels
    double* emit;       // (max_time, emission row) log-probs of the blank and of each label
    double* emit_lin;   // (max_time, emission row) the same as probabilities (scaled passes)
    double* scales;     // (max_time, 2) alpha's scale per frame: mantissa, binary exponent
    double* log_norm;   // (max_time, 2) per frame max and log-sum-exp(x - max) of the logits
    double* beta;       // (2, state row) beta (log, or scaled) of frames t and t + 1, ping-pong
    double* next;       // (state row) emission and beta of frame t + 1, combined
    double* skip;       // (max_labels + 1 + slack) 0 where label k may follow label k - 1, -inf
    double* frame;      // (classes + slack) one frame of the input in double
    double* work;       // (max(classes, max_labels + 1) + slack) exps of one frame
    double* posterior;  // (classes) occupation probability per class of one frame
};

// Carves one sample's scratch from `base` (64-byte aligned; null only counts) and returns its
// size in bytes, a multiple of 64; `scratch` (may be null) receives the pieces.
size_t carve_ctc_scratch(void* base, int64_t max_time, int64_t classes, int64_t max_labels,
                         CtcScratch* scratch);

// The shape of one sample's call.
struct CtcSampleDims {
    int64_t max_time = 0;  // frames of the gradient slice written (padding included)
    int64_t frames = 0;    // valid frames, 1..max_time
    int64_t stride = 0;    // elements between consecutive frames of the sample (batch * classes)
    int64_t classes = 0;
    int64_t labels = 0;  // label count, <= the scratch's max_labels
    int64_t blank = 0;
    bool logits = true;  // softmax applied inside, else the input holds log-probs
    double scale = 1.0;  // gradient factor: d(returned loss) / d(this sample's loss)
};

// One sample's loss -log p(labels | input) in double (+inf when no alignment has nonzero
// probability). input: frame t at input[t * stride + c], c < classes, t < frames; labels:
// (labels) in [0, classes), none equal to blank; grad (may be null): frame t at
// grad[t * stride + c] for t < max_time, overwritten with scale times the derivative on valid
// frames, exact zeros on padded frames and everywhere when the loss is infinite.
double ctc_sample(const float* input, float* grad, const int64_t* labels, const CtcSampleDims& dims,
                  const CtcScratch& scratch);
double ctc_sample(const double* input, double* grad, const int64_t* labels,
                  const CtcSampleDims& dims, const CtcScratch& scratch);

}  // namespace lstm::kernels::cpu
