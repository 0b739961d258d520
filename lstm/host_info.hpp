#pragma once

// What this host is and which code path each registered variant takes on it: the one place that
// answers "why is variant X this fast here", for lstm_bench's report context and
// `lstm_tool info`. A GFLOP/s figure means little without it: the same binary runs fused's
// AVX-512 kernels on one machine and its Eigen path on another, and Eigen runs whatever the
// including program was compiled for.
//
// Header-only on purpose: the Eigen answer is the instruction set of the translation unit that
// includes this header, which is the one that instantiates the Eigen-based variants (they are
// header-only too), so the binary reports what it actually runs.

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

// Eigen through the library's own include, which silences GCC 12's false warnings in it.
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/simd.hpp"
#include "lstm/error.hpp"
#include "lstm/registry.hpp"
#include "lstm/variant.hpp"
#include "lstm/variants/basic.hpp"
#include "lstm/variants/fused.hpp"
#if LSTM_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>

#include "lstm/variants/onednn.hpp"
#endif
#if LSTM_WITH_CUDA
#include "lstm/cuda/runtime.hpp"
#endif

namespace lstm {

// One line of the host description: a snake_case key (a JSON key in the bench's report) and its
// value.
struct HostFact {
    std::string key;
    std::string value;
};

// The processor's "model name" from /proc/cpuinfo; "unknown" where the file or the field is
// missing (ARM kernels, for one, do not write it).
inline std::string cpu_model_name() {
    std::ifstream in("/proc/cpuinfo");
    const std::string field = "model name";
    for (std::string line; std::getline(in, line);) {
        if (line.compare(0, field.size(), field) != 0) continue;
        const size_t colon = line.find(':');
        if (colon == std::string::npos) continue;
        const size_t start = line.find_first_not_of(" \t", colon + 1);
        if (start == std::string::npos) continue;
        return line.substr(start);
    }
    return "unknown";
}

// "AVX2 yes, FMA yes, AVX-512F no": the x86 instruction sets the kernels choose between, as the
// processor and the OS report them (__builtin_cpu_supports also checks that the OS saves the
// wider registers).
inline std::string cpu_instruction_sets() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    const auto yes_no = [](bool has) { return has ? std::string(" yes") : std::string(" no"); };
    return "AVX2" + yes_no(__builtin_cpu_supports("avx2")) + ", FMA" +
           yes_no(__builtin_cpu_supports("fma")) + ", AVX-512F" +
           yes_no(__builtin_cpu_supports("avx512f"));
#else
    return "not x86-64 (AVX2, FMA, AVX-512F do not apply)";
#endif
}

// "AVX3 (16 float lanes)": the instruction set Highway dispatched the compiled CPU kernels to.
inline std::string simd_dispatch() {
    return std::string(kernels::cpu::simd_target_name()) + " (" +
           std::to_string(kernels::cpu::simd_float_lanes()) + " float lanes)";
}

// The instruction sets Eigen was compiled for in this translation unit (the flags of the program
// that includes this header, not what the CPU could do).
inline std::string eigen_instruction_sets() { return Eigen::SimdInstructionSetsInUse(); }

#if LSTM_WITH_ONEDNN
// oneDNN's name of the widest instruction set its JIT generates code for on this CPU (it honours
// DNNL_MAX_CPU_ISA). Asking fixes that limit for the process, which is harmless here: nothing in
// the library sets it.
inline std::string onednn_cpu_isa() {
    switch (dnnl::get_effective_cpu_isa()) {
        case dnnl::cpu_isa::sse41:
            return "sse41";
        case dnnl::cpu_isa::avx:
            return "avx";
        case dnnl::cpu_isa::avx2:
            return "avx2";
        case dnnl::cpu_isa::avx2_vnni:
            return "avx2_vnni";
        case dnnl::cpu_isa::avx512_core:
            return "avx512_core";
        case dnnl::cpu_isa::avx512_core_vnni:
            return "avx512_core_vnni";
        case dnnl::cpu_isa::avx512_core_bf16:
            return "avx512_core_bf16";
        case dnnl::cpu_isa::avx512_core_amx:
            return "avx512_core_amx";
        default:
            // Other oneDNN versions add (and drop) values; the number still identifies it.
            return "dnnl_cpu_isa_t " +
                   std::to_string(static_cast<int>(dnnl_get_effective_cpu_isa()));
    }
}
#endif

// Which code path `variant` takes on this host, e.g. "avx512 kernels (...)" for fused on an
// AVX-512 machine; for a GPU variant, the device it would run on or that none is visible.
// Empty for a variant this function does not know, so a new variant without an entry here shows
// up in tests/host_info_test.cpp.
inline std::string variant_path(const Variant& variant) {
    if (variant.device() == Device::cuda) {
#if LSTM_WITH_CUDA
        if (cuda::device_count() == 0) return "no CUDA device visible";
        try {
            return "CUDA device visible: " + cuda::device_description(0);
        } catch (const std::exception& e) {
            return std::string("CUDA device visible, but it cannot be described: ") + e.what();
        }
#else
        return "no CUDA device visible (this build has no CUDA back-end)";
#endif
    }
    if (dynamic_cast<const cpu::BasicVariant*>(&variant) != nullptr)
        return "Eigen GEMMs compiled for " + eigen_instruction_sets();
    if (dynamic_cast<const cpu::FusedVariant*>(&variant) != nullptr) {
        // fused_isa() throws on a malformed LSTM_FUSED_ISA; the report says so instead of
        // stopping. Paths are told apart by name, so a path added to FusedIsa still reports.
        try {
            const std::string isa = cpu::fused_isa_name(cpu::fused_isa());
            if (isa == "avx512") return "avx512 kernels (own AVX-512 GEMMs, avx512_gemm.hpp)";
            // The Highway kernel set, held to its AVX2 target whatever simd_target says.
            if (isa == "avx2") return "avx2 kernels (Highway, AVX2 target)";
            if (isa == "eigen")
                return "eigen kernels (Eigen compiled for " + eigen_instruction_sets() + ")";
            return isa + " kernels";
        } catch (const Error& e) {
            return std::string("cannot run: ") + e.what();
        }
    }
#if LSTM_WITH_ONEDNN
    if (dynamic_cast<const cpu::OnednnVariant*>(&variant) != nullptr)
        return "oneDNN JIT up to " + onednn_cpu_isa();
#endif
    return "";
}

// The CTC loss kernel's path (it is not a variant: every model's CTC head runs it).
inline std::string ctc_kernel_path() {
    return std::string("Highway ") + kernels::cpu::simd_target_name();
}

// The host itself: cpu_model, cpu_isa, simd_target, eigen_isa.
inline std::vector<HostFact> host_facts() {
    return {
        {"cpu_model", cpu_model_name()},
        {"cpu_isa", cpu_instruction_sets()},
        {"simd_target", simd_dispatch()},
        {"eigen_isa", eigen_instruction_sets()},
    };
}

// Which path one piece of code takes on this host.
struct CodePath {
    std::string name;    // the variant's name, or "ctc" for the CTC kernel
    std::string device;  // "cpu" or "cuda"
    std::string path;    // variant_path(), or "unknown (...)" where it has no entry
    bool is_variant;     // false for the CTC kernel
};

// Every registered variant in registry order, then the CTC kernel.
inline std::vector<CodePath> code_paths() {
    std::vector<CodePath> out;
    for (const Variant* v : variants()) {
        std::string path = variant_path(*v);
        if (path.empty()) path = "unknown (lstm/host_info.hpp has no entry for it)";
        out.push_back({v->name(), to_string(v->device()), std::move(path), true});
    }
    out.push_back({"ctc", "cpu", ctc_kernel_path(), false});
    return out;
}

}  // namespace lstm
