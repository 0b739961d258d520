// lstm_cuda's entry in the registry (lstm/detail/onednn_hooks.hpp): the CUDA variants, in
// registry order. The registry asks for them through a weak reference, so they (and the CUDA
// libraries behind them) are in a program exactly when it links lstm::cuda.

#include "lstm/detail/onednn_hooks.hpp"
#include "lstm/variants/cuda_basic.hpp"
#include "lstm/variants/cuda_fused.hpp"
#if LSTM_WITH_CUDNN
#include "lstm/variants/cudnn.hpp"
#endif

extern "C" const lstm::Variant* const* lstm_cuda_variants(size_t* count) {
    static const lstm::cuda::BasicVariant basic;
    static const lstm::cuda::FusedVariant fused;
#if LSTM_WITH_CUDNN
    static const lstm::cuda::CudnnVariant cudnn;
#endif
    static const lstm::Variant* const all[] = {
        &basic,
        &fused,
#if LSTM_WITH_CUDNN
        &cudnn,
#endif
    };
    *count = sizeof(all) / sizeof(all[0]);
    return all;
}
