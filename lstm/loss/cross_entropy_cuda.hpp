#pragma once

// The CUDA half of lstm::loss::cross_entropy and cross_entropy_frames
// (lstm/loss/cross_entropy.hpp), which dispatch here when the logits are tagged Device::cuda.
// Declarations only, no CUDA header; defined in lstm/loss/cross_entropy_cuda.cpp, part of the
// compiled lstm_cuda library (present when LSTM_WITH_CUDA is 1). Call the functions in
// cross_entropy.hpp, not these.

#include <cstdint>

#include "kernels/cpu/cross_entropy.hpp"  // CeOptions
#include "lstm/cuda/link.hpp"

namespace lstm::cuda {

class Context;

// Rows of a time-major frame batch on the device, already validated by the caller: logits (rows,
// classes) device; targets (rows) host, in range for every counted row; lengths (batch) host or
// null (every row valid; plain (M, C) logits pass batch = rows); options as the CPU kernel takes
// them, options.weight (classes) host or null. Row r = t * batch + n counts when lengths is null
// or t < lengths[n], and its target is not options.ignore_index. Overwrites losses (rows, device,
// optional) with each row's loss (0 when not counted) and grad (rows, classes, device, optional)
// with scale * d(loss)/d(logits) (0 when not counted), as kernels/cpu/cross_entropy.hpp defines
// them. Returns the double sum of the counted rows' losses, added in a fixed order; waits on the
// context's stream. Per-call scratch is kept in a plan of the context that only grows, so
// steady-state calls allocate nothing.
LSTM_CUDA_ENTRY double cross_entropy_rows(Context& context, int64_t rows, int64_t classes,
                                          int64_t batch, const int64_t* lengths,
                                          const float* logits, const int64_t* targets,
                                          const kernels::cpu::CeOptions<float>& options,
                                          float scale, float* losses, float* grad);
LSTM_CUDA_ENTRY double cross_entropy_rows(Context& context, int64_t rows, int64_t classes,
                                          int64_t batch, const int64_t* lengths,
                                          const double* logits, const int64_t* targets,
                                          const kernels::cpu::CeOptions<double>& options,
                                          double scale, double* losses, double* grad);

}  // namespace lstm::cuda
