#pragma once

// Registers the CTC loss kernel case of docs/benchmarks.md, "The cases": forward + gradient on
// Braun's CTC shape, named loss/ctc/cpu/threads:K.

#include "flags.hpp"

namespace lstm::bench {

void register_ctc_cases(const BenchFlags& flags);

}  // namespace lstm::bench
