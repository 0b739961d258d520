#pragma once

// Paired cases: a CPU variant and oneDNN train the same Braun scenario in one process, one step
// each in turn, named pair/<scenario>/cpu/<variant>:onednn/threads:K. On a shared machine
// whose speed drifts from minute to minute (and from one process to the next), two cases timed
// apart each carry their own share of that drift; two steps timed a quarter of a second apart
// carry nearly the same, so the ratio of each pair is steadier than the ratio of two medians.

#include "flags.hpp"

namespace lstm::bench {

void register_pair_cases(const BenchFlags& flags);

}  // namespace lstm::bench
