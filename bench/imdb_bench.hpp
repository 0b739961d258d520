#pragma once

// Registers the Bahrampour 2016 IMDB sentiment-model cases (docs/benchmarks.md, "Bahrampour 2016")
// for every CPU variant: bahrampour/imdb/<fwd|grad>/cpu/<variant>/threads:K.

#include <vector>

#include "flags.hpp"

namespace lstm::bench {

// The CPU thread counts the cases run with: --lstm_threads when given, else the paper's sweep
// 1, 2, 4, ... below the processor count, then the processor count.
std::vector<int> imdb_thread_counts(const BenchFlags& flags);

void register_imdb_cases(const BenchFlags& flags);

}  // namespace lstm::bench
