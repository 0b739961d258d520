#pragma once

// The ordered list of variants this program has. Tests and benchmarks iterate it, so a new
// variant is tested and benchmarked by registering it: one line in lstm/registry.cpp for a
// built-in one, or register_variant (or a VariantRegistration) from the program's own code.
//
// Registry order: the CPU variants built into lstm::lstm (basic, fused), onednn where the program
// links lstm::onednn, the CUDA variants (basic, fused, cudnn) where it links lstm::cuda, then the
// variants the program registered, in the order it registered them.
//
// The variants themselves are compiled once, in the library (lstm_variants, and lstm_onednn and
// lstm_cuda for the optional parts): this header only declares the lookup, so a program that
// includes <lstm/lstm.hpp> compiles none of the kernels (Eigen, oneDNN and the CUDA glue stay out
// of its translation units), and their speed does not depend on the flags it is compiled with.
// Code that needs one variant's own controls (such as lstm::cpu::set_fused_isa) includes its
// header from lstm/variants/.

#include <string_view>
#include <vector>

#include "lstm/variant.hpp"

namespace lstm {

// Every variant this program has, in registry order. Returned by value: a snapshot taken under
// the registry's lock, so that iterating it is safe while another thread, or another static
// initializer, registers a variant (the new one shows in the next call).
std::vector<const Variant*> variants();

// Variants of one device, in registry order.
std::vector<const Variant*> variants_on(Device device);

// Looks a variant up by name and device; the error lists what this program has, and for a
// variant of an optional part the program does not link (onednn, the CUDA variants) names the
// target that brings it (lstm::Unsupported).
const Variant& find_variant(std::string_view name, Device device);

// Adds `variant` after the built-in variants and those registered before it. The registry keeps
// the address: the variant must outlive every use of the registry (a static object, say).
// Throws lstm::Error naming the name and device when the registry already has a variant of that
// name and device (built in or registered). Safe to call from a static initializer (the registry
// is constructed on first use) and from any thread.
void register_variant(const Variant& variant);

// Registers a variant of the program's own at static-initialization time, without editing the
// library:
//
//     static const MyVariant my_variant;
//     static const lstm::VariantRegistration register_my_variant(my_variant);
//
// Both in one translation unit of the program (objects of one unit are initialized in order).
// In a static library of the program's own, that unit must also be referenced, or linked whole,
// or the linker drops it and the registration with it.
class VariantRegistration {
public:
    explicit VariantRegistration(const Variant& variant) { register_variant(variant); }
};

}  // namespace lstm
