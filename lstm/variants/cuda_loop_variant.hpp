#pragma once

// The CUDA `basic` and `fused` variants as one class template over the loop style: both run the
// engine of lstm/variants/cuda_common.hpp on the stack loop and differ only in its LoopStyle, so
// the Variant plumbing is written once. lstm/variants/cuda_basic.hpp and cuda_fused.hpp name them
// and say what each style does. Declared here without CUDA headers; build_plan lives in
// cuda_loop_variant.cpp (lstm_cuda), instantiated for both styles.
//
// Precision: float and double (cublasSgemm / cublasDgemm; the kernels are templates).

#include <optional>
#include <string>

#include "lstm/variants/cuda_common.hpp"

namespace lstm::cuda {

template <LoopStyle Style>
class LoopVariant final : public Variant {
public:
    const char* name() const override { return to_string(Style); }
    Device device() const override { return Device::cuda; }

    // Every nn.LSTM option a Variant sees: bias=False skips the bias work, proj_size > 0 adds the
    // projection GEMM per step (see the top of cuda_common.hpp). Sizes past cuBLAS's 32-bit
    // dimensions are refused (loop_size_problem; T and N are checked by the sizing queries).
    std::optional<std::string> supports(const Config& config, DType) const override {
        return loop_size_problem(config, Style, 1, 1);
    }
    // The data part leaves every frame's dgates in the reserve; the weights part computes the
    // weight gradients from them (basic: replaying its per-step GEMMs in the order of
    // BackwardPart::all, so the same bits; fused: the GEMMs over all steps).
    std::optional<std::string> supports_split_backward() const override { return std::nullopt; }

protected:
    // A (T, N) that cuBLAS cannot take is refused when the plan is made, before any device work.
    std::unique_ptr<Plan> build_plan(const PlanRequest& request) const override;

private:
    void require_sizes(const Config& config, int64_t seq_len, int64_t batch) const {
        if (auto why = loop_size_problem(config, Style, seq_len, batch))
            fail_as<Unsupported>("variant '", name(), "' (cuda) cannot run T = ", seq_len,
                                 ", N = ", batch, ": ", *why);
    }
};

}  // namespace lstm::cuda
