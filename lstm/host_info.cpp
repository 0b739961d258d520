// lstm/host_info.hpp's answers, compiled in lstm_variants next to the variants they describe.

#include "lstm/host_info.hpp"

#include <fstream>
#include <utility>
#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>  // HWCAP_ASIMD, HWCAP_SVE, HWCAP2_SVE2
#include <sys/auxv.h>   // getauxval
#endif

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/fused_simd.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/simd.hpp"
#include "lstm/detail/onednn_hooks.hpp"
#include "lstm/error.hpp"
#include "lstm/registry.hpp"
#include "lstm/variants/basic.hpp"
#include "lstm/variants/fused.hpp"
#if LSTM_WITH_CUDA
#include "lstm/cuda/runtime.hpp"
#endif

namespace lstm {

namespace {

// The value of the first "<field> : value" line of /proc/cpuinfo; empty where there is none.
std::string cpuinfo_field(const std::string& field) {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
        if (line.compare(0, field.size(), field) != 0) continue;
        const size_t colon = line.find(':');
        if (colon == std::string::npos) continue;
        const size_t start = line.find_first_not_of(" \t", colon + 1);
        if (start == std::string::npos) continue;
        return line.substr(start);
    }
    return "";
}

}  // namespace

std::string cpu_model_name() {
    const std::string model = cpuinfo_field("model name");
    if (!model.empty()) return model;
    // ARM kernels write the core's designer and part number instead (0x41 / 0xd0c: an Arm
    // Neoverse N1), which identify it as well.
    const std::string implementer = cpuinfo_field("CPU implementer");
    const std::string part = cpuinfo_field("CPU part");
    if (!implementer.empty() && !part.empty())
        return "CPU implementer " + implementer + ", part " + part;
    return "unknown";
}

std::string cpu_instruction_sets() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    const auto yes_no = [](bool has) { return has ? std::string(" yes") : std::string(" no"); };
    const std::string sets = "AVX2" + yes_no(__builtin_cpu_supports("avx2")) + ", FMA" +
                             yes_no(__builtin_cpu_supports("fma")) + ", AVX-512F" +
                             yes_no(__builtin_cpu_supports("avx512f")) + ", AVX512_BF16" +
                             yes_no(kernels::cpu::cpu_reports_avx512_bf16());
    const kernels::cpu::SimdCap cap = kernels::cpu::isa_cap();
    if (cap == kernels::cpu::SimdCap::all) return sets;
    return sets + "; LSTM_MAX_CPU_ISA = " + kernels::cpu::isa_cap_name(cap) + ": " +
           (cap == kernels::cpu::SimdCap::avx2 ? "AVX-512" : "AVX2 and AVX-512") + " left unused";
#elif defined(__aarch64__) && defined(__linux__)
    // What the kernel reports the processor has: NEON (ASIMD) on every 64-bit ARM core, SVE and
    // SVE2 on some (Highway's dispatch of the CTC kernel takes them; fused runs NEON).
    const unsigned long caps = getauxval(AT_HWCAP), caps2 = getauxval(AT_HWCAP2);
    const auto yes_no = [](bool has) { return has ? std::string(" yes") : std::string(" no"); };
    return "NEON" + yes_no((caps & HWCAP_ASIMD) != 0) + ", SVE" + yes_no((caps & HWCAP_SVE) != 0) +
           ", SVE2" + yes_no((caps2 & HWCAP2_SVE2) != 0);
#else
    return "neither x86-64 nor 64-bit ARM Linux: not known";
#endif
}

std::string simd_dispatch() {
    return std::string(kernels::cpu::simd_target_name()) + " (" +
           std::to_string(kernels::cpu::simd_float_lanes()) + " float lanes)";
}

std::string eigen_instruction_sets() { return kernels::cpu::gemm_instruction_sets(); }

std::string variant_path(const Variant& variant) {
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
    if (variant.device() == Device::cpu) {
        // default_path() throws on a malformed LSTM_FUSED_ISA; the report says so instead of
        // stopping.
        try {
            return variant.describe_path(variant.default_path(DType::f32));
        } catch (const Error& e) {
            return std::string("cannot run: ") + e.what();
        }
    }
    return "";
}

std::string variant_bf16_path(const Variant& variant) {
    // A two-layer bidirectional LSTM without a projection (oneDNN has no bf16 one with).
    const Config config{8, 16, 2, true};
    if (auto why = variant.supports(config, DType::f32)) return "none: " + *why;
    if (auto why = variant.supports_precision(config, DType::f32, Precision::bf16))
        return "none: " + *why;
    return variant.describe_precision(Precision::bf16);
}

std::string ctc_kernel_path() { return std::string("Highway ") + kernels::cpu::simd_target_name(); }

std::vector<HostFact> host_facts() {
    return {
        {"cpu_model", cpu_model_name()},
        {"cpu_isa", cpu_instruction_sets()},
        {"simd_target", simd_dispatch()},
        {"eigen_isa", eigen_instruction_sets()},
    };
}

std::vector<CodePath> code_paths() {
    std::vector<CodePath> out;
    for (const Variant* v : variants()) {
        std::string path = variant_path(*v);
        if (path.empty()) path = "unknown (lstm/host_info.hpp has no entry for it)";
        out.push_back(
            {v->name(), to_string(v->device()), std::move(path), variant_bf16_path(*v), true});
    }
    out.push_back({"ctc", "cpu", ctc_kernel_path(), "", false});
    return out;
}

}  // namespace lstm
