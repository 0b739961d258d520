// lstm_onednn: the `onednn` variant's entry in the registry and its path report
// (lstm/detail/onednn_hooks.hpp). The only part of the library that links oneDNN.

#include <oneapi/dnnl/dnnl.hpp>
#include <string>

#include "lstm/detail/onednn_hooks.hpp"
#include "lstm/variants/onednn.hpp"

extern "C" const lstm::Variant* lstm_onednn_variant() {
    static const lstm::cpu::OnednnVariant variant;
    return &variant;
}

// Asking fixes oneDNN's instruction-set limit (DNNL_MAX_CPU_ISA) for the process, which is
// harmless here: nothing in the library sets it.
extern "C" const char* lstm_onednn_cpu_isa() {
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
        default: {
            // Other oneDNN versions add (and drop) values; the number still identifies it.
            static const std::string other =
                "dnnl_cpu_isa_t " + std::to_string(static_cast<int>(dnnl_get_effective_cpu_isa()));
            return other.c_str();
        }
    }
}
