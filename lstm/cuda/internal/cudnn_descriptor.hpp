#pragma once

// Owned cuDNN descriptors: created with their owner, destroyed with it, also when the owner's
// constructor throws after they were made. For lstm_cuda's sources only (includes cuDNN).

#include "lstm/cuda/internal/check.hpp"

#if LSTM_WITH_CUDNN

namespace lstm::cuda::detail {

// One descriptor of type D, made by Create and released by Destroy; not copyable.
template <typename D, cudnnStatus_t (*Create)(D*), cudnnStatus_t (*Destroy)(D)>
struct CudnnDescriptor {
    D desc = nullptr;
    CudnnDescriptor() { LSTM_CUDNN_CHECK(Create(&desc)); }
    CudnnDescriptor(const CudnnDescriptor&) = delete;
    CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
    ~CudnnDescriptor() {
        if (desc) Destroy(desc);
    }
};

using TensorDescriptor = CudnnDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor,
                                         cudnnDestroyTensorDescriptor>;
using RnnDescriptor =
    CudnnDescriptor<cudnnRNNDescriptor_t, cudnnCreateRNNDescriptor, cudnnDestroyRNNDescriptor>;
using RnnDataDescriptor = CudnnDescriptor<cudnnRNNDataDescriptor_t, cudnnCreateRNNDataDescriptor,
                                          cudnnDestroyRNNDataDescriptor>;
using DropoutDescriptor = CudnnDescriptor<cudnnDropoutDescriptor_t, cudnnCreateDropoutDescriptor,
                                          cudnnDestroyDropoutDescriptor>;
using CtcLossDescriptor = CudnnDescriptor<cudnnCTCLossDescriptor_t, cudnnCreateCTCLossDescriptor,
                                          cudnnDestroyCTCLossDescriptor>;

}  // namespace lstm::cuda::detail

#endif
