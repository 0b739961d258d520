#pragma once

// Launchers of lstm::Lstm's device kernels around a variant's calls (kernels/cuda/layer_ops.cu),
// in the convention of kernels/cuda/launch.hpp; the element bodies are in
// kernels/common/layer_ops.hpp, which the CPU path runs too. Device memory, one thread per element
// written.

#include <cstdint>

#include "kernels/cuda/launch.hpp"

namespace lstm::kernels::cuda {

// dst (count) = src * mask with mask (count) overwritten by the dropout mask of `key` and p
// (scale or 0 per element, dropout_element). Overwrites mask and dst.
template <typename T>
LaunchStatus launch_dropout_mask(int64_t count, uint64_t key, double p, T scale, const T* src,
                                 T* mask, T* dst, void* stream);
// dst (count) = src * mask element-wise; dst may alias src. Overwrites dst.
template <typename T>
LaunchStatus launch_mask_multiply(int64_t count, const T* src, const T* mask, T* dst, void* stream);
// dst (b, a, c) = src (a, b, c) with its two leading dimensions swapped. Overwrites dst.
template <typename T>
LaunchStatus launch_swap_leading_dims(int64_t a, int64_t b, int64_t c, const T* src, T* dst,
                                      void* stream);

}  // namespace lstm::kernels::cuda
