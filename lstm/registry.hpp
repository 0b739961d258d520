#pragma once

// The ordered list of variants built into this binary. Tests and benchmarks iterate it, so a new
// variant is tested and benchmarked by adding one line to lstm/registry.cpp.
//
// The variants themselves are compiled once, in the library (lstm_variants): this header only
// declares the lookup, so a program that includes <lstm/lstm.hpp> compiles none of the kernels
// (Eigen, oneDNN and the CUDA glue stay out of its translation units), and their speed does not
// depend on the flags it is compiled with. Code that needs one variant's own controls (such as
// lstm::cpu::set_fused_isa) includes its header from lstm/variants/.

#include <string_view>
#include <vector>

#include "lstm/variant.hpp"

namespace lstm {

// Every variant built into this binary, in registry order (CPU first, then CUDA).
const std::vector<const Variant*>& variants();

// Variants of one device, in registry order.
std::vector<const Variant*> variants_on(Device device);

// Looks a variant up by name and device; the error lists what this binary has.
const Variant& find_variant(std::string_view name, Device device);

}  // namespace lstm
