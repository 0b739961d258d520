#pragma once

// --lstm_shape: any stack shape, timed for every registered variant by the per-pass fixture
// (pass_bench.hpp) as DeepBench's sizes are, with the reference check before timing. Names:
// shape/T:<T>/N:<N>/I:<I>/H:<H>/layers:<L>/dirs:<D>[/proj:<P>][/bias:0]/<fwd|fwd_bwd>/cpu/
// <variant>/threads:K, and .../cuda/<variant>.

#include <string>
#include <vector>

#include "flags.hpp"
#include "pass_bench.hpp"

namespace lstm::bench {

// The fields a shape is written with, for help and messages.
constexpr const char* kShapeSyntax =
    "T=<steps>,N=<batch>,I=<input>,H=<hidden>[,layers=<L>][,dirs=1|2][,proj=<P>][,bias=0|1]";

// The shapes of every --lstm_shape value (`values`: what followed '=' in each flag; a value may
// list several shapes separated by ';'), in order. Fields in any order; T, N, I and H required;
// layers 1, dirs 1, proj 0 (none), bias 1 by default. Throws std::invalid_argument naming the
// field, what it must be and what came, for an unknown, repeated, missing or malformed field, a
// value out of range (nothing is clamped), a shape given twice or one too large to allocate.
std::vector<PassShape> parse_shapes(const std::vector<std::string>& values);

// Registers the fwd and fwd_bwd cases of every shape for every variant (pass_bench.hpp).
void register_shape_cases(const std::vector<PassShape>& shapes, const BenchFlags& flags);

}  // namespace lstm::bench
