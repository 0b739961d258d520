#pragma once

// What this host is and which code path each registered variant takes on it: the one place that
// answers "why is variant X this fast here", for lstm_bench's report context and
// `lstm_tool info`. A GFLOP/s figure means little without it: the same binary runs fused's
// AVX-512 kernels on one machine and its Eigen path on another.
//
// Compiled in lstm_variants (lstm/host_info.cpp) beside the variants themselves, so the Eigen
// answer is the instruction set the variants' Eigen code was compiled for, whatever flags the
// program that asks was built with.

#include <string>
#include <vector>

#include "lstm/variant.hpp"

namespace lstm {

// One line of the host description: a snake_case key (a JSON key in the bench's report) and its
// value.
struct HostFact {
    std::string key;
    std::string value;
};

// The processor's "model name" from /proc/cpuinfo; on ARM, which does not write it, "CPU
// implementer 0x41, part 0xd0c" from the same file; "unknown" where neither is there.
std::string cpu_model_name();

// "AVX2 yes, FMA yes, AVX-512F no": the x86 instruction sets the kernels choose between, as the
// processor and the OS report them (__builtin_cpu_supports also checks that the OS saves the
// wider registers); on 64-bit ARM Linux "NEON yes, SVE no, SVE2 no", as the kernel reports them.
std::string cpu_instruction_sets();

// "AVX3 (16 float lanes)": the instruction set Highway dispatched the compiled CPU kernels to.
std::string simd_dispatch();

// The instruction sets the library's compiled variants (lstm_variants) use through Eigen: what
// that library was compiled for, not what the CPU could do.
std::string eigen_instruction_sets();

// Which code path `variant` takes on this host, e.g. "avx512 kernels (...)" for fused on an
// AVX-512 machine; for a GPU variant, the device it would run on or that none is visible.
// Empty for a variant this function does not know, so a new variant without an entry here shows
// up in tests/host_info_test.cpp.
std::string variant_path(const Variant& variant);

// What `variant` runs at Precision::bf16 (Variant::describe_precision) for a plain LSTM (no
// projection), or "none: " and why not.
std::string variant_bf16_path(const Variant& variant);

// The CTC loss kernel's path (it is not a variant: every model's CTC head runs it).
std::string ctc_kernel_path();

// The host itself: cpu_model, cpu_isa, simd_target, eigen_isa.
std::vector<HostFact> host_facts();

// Which path one piece of code takes on this host.
struct CodePath {
    std::string name;    // the variant's name, or "ctc" for the CTC kernel
    std::string device;  // "cpu" or "cuda"
    std::string path;    // variant_path(), or "unknown (...)" where it has no entry
    std::string bf16;    // variant_bf16_path(); empty for the CTC kernel
    bool is_variant;     // false for the CTC kernel
};

// Every registered variant in registry order, then the CTC kernel.
std::vector<CodePath> code_paths();

}  // namespace lstm
