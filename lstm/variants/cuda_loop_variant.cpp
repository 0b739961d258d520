// Entry points of the CUDA `basic` and `fused` variants: the shared loop in the variant's style.

#include "lstm/variants/cuda_loop_variant.hpp"

namespace lstm::cuda {

template <LoopStyle Style>
void LoopVariant<Style>::run_forward(const Config& config, const ForwardArgs<float>& args) const {
    run_cuda_forward(Style, config, args);
}
template <LoopStyle Style>
void LoopVariant<Style>::run_forward(const Config& config, const ForwardArgs<double>& args) const {
    run_cuda_forward(Style, config, args);
}
template <LoopStyle Style>
void LoopVariant<Style>::run_backward(const Config& config, const BackwardArgs<float>& args) const {
    run_cuda_backward(Style, config, args);
}
template <LoopStyle Style>
void LoopVariant<Style>::run_backward(const Config& config,
                                      const BackwardArgs<double>& args) const {
    run_cuda_backward(Style, config, args);
}

template class LoopVariant<LoopStyle::basic>;
template class LoopVariant<LoopStyle::fused>;

}  // namespace lstm::cuda
