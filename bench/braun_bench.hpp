#pragma once

// Registers the Braun 2018 training-step cases (docs/benchmarks.md, "The cases") for every
// registered variant, named braun/<scenario>/<device>/<variant>/threads:K, and the pieces the
// paired cases (pair_bench.hpp) share with them.

#include <optional>
#include <string>

#include "braun.hpp"
#include "flags.hpp"
#include "lstm/nn/model.hpp"
#include "lstm/variant.hpp"

namespace lstm::bench {

// Any fixed value; fixed so that every run and every variant starts from the same parameters.
constexpr uint64_t kBraunModelSeed = 0;

void register_braun_cases(const BenchFlags& flags);

// The model a scenario trains: its LSTM, a dense head without bias, Adam at Braun's rate.
nn::ModelConfig braun_model_config(const BraunScenario& s);

// Why `v` cannot train scenario `s` at all (its configuration or its lengths), or nullopt.
std::optional<std::string> why_braun_not_runnable(const BraunScenario& s, const Variant& v);

// The reference check of `v` on `s` before timing (reference_check.hpp), through `model`'s
// layer: nullopt when it passes, else why not. Cached per (scenario, device, variant).
std::optional<std::string> braun_reference_verdict(const BraunScenario& s, const Variant& v,
                                                   const nn::ModelConfig& m,
                                                   nn::SequenceModel<float>& model,
                                                   const BraunData& data);

}  // namespace lstm::bench
