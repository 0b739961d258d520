#pragma once

// Registers the Braun 2018 training-step cases (docs/benchmarks.md, "The cases") for every
// registered variant, named braun/<scenario>/<device>/<variant>/threads:K.

#include "flags.hpp"

namespace lstm::bench {

void register_braun_cases(const BenchFlags& flags);

}  // namespace lstm::bench
