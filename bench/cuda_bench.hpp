#pragma once

// The CUDA side of lstm_bench, shared by the Braun and DeepBench fixtures: whether a cuda case
// can run here, a step timer of CUDA events on the case's stream (manual time), and the
// reference check of a variant on either device. Every function also accepts cpu variants and
// layers (then it does what the host fixtures do), so a fixture is written once.

#include <benchmark/benchmark.h>

#include <optional>
#include <string>

#include "lstm/layer.hpp"

namespace lstm::bench {

// Why cases of `variant` cannot run in this process: a cuda variant with no device visible
// ("no CUDA device visible: ..."). std::nullopt for cpu variants and when a device is there.
// Asks the driver only, so listing the cases (--benchmark_list_tests) needs no GPU.
std::optional<std::string> why_device_unavailable(const Variant& variant);

// Times one step of a case. With a context (a cuda case, registered with UseManualTime()): CUDA
// events on the context's stream around the step, the stop event waited for, the elapsed time
// given to state.SetIterationTime. Without one (a host case, real time): does nothing, the
// benchmark's own clock times the step.
class StepTimer {
public:
    explicit StepTimer(cuda::Context* context);
    ~StepTimer();
    StepTimer(const StepTimer&) = delete;
    StepTimer& operator=(const StepTimer&) = delete;

    void start();
    void stop(benchmark::State& state);

private:
    cuda::Context* context_;
    void* start_ = nullptr;  // cudaEvent_t
    void* stop_ = nullptr;
};

// check_against_reference (reference_check.hpp) for a variant on either device: x (T, N, I) and
// lengths (N) on the host, the parameters read from `layer` wherever they live, on the path and in
// the precision the layer takes. A cuda variant runs on device buffers
// (reference::run_variant_parts), so the same check code covers it.
std::optional<std::string> check_layer_against_reference(
    const Variant& variant, const Config& config, TensorView<const float> x,
    Span<const int64_t> lengths, const LstmT<float>& layer, bool with_split = false);

// The same with host parameters (param_count(config)).
std::optional<std::string> check_on_device_against_reference(
    const Variant& variant, const Config& config, TensorView<const float> x,
    Span<const int64_t> lengths, Span<const float> params, bool with_split = false,
    const std::string& path = {}, Precision precision = Precision::full);

}  // namespace lstm::bench
