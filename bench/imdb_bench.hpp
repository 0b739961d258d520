#pragma once

// Registers the Bahrampour 2016 IMDB sentiment-model cases (BENCHMARKS.md section 2) for every
// CPU variant: bahrampour/imdb/<fwd|grad>/cpu/<variant>/threads:K.

#include "flags.hpp"

namespace lstm::bench {

void register_imdb_cases(const BenchFlags& flags);

}  // namespace lstm::bench
