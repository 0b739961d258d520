// The plans of the CUDA `basic` and `fused` variants: the stack loop on their engine, in the
// variant's style.

#include "lstm/variants/cuda_loop_variant.hpp"

namespace lstm::cuda {

template <LoopStyle Style>
std::unique_ptr<Plan> LoopVariant<Style>::build_plan(const PlanRequest& request) const {
    require_sizes(request.config, request.seq_len, request.batch);
    return make_loop_plan(Style, *this, request);
}

template class LoopVariant<LoopStyle::basic>;
template class LoopVariant<LoopStyle::fused>;

}  // namespace lstm::cuda
