// The fused variant's float paths (lstm/variants/fused.hpp) in tests: which of them this CPU
// runs, and a scope that makes one the default path of the plans made inside it.
#pragma once

#include <string>
#include <vector>

#include "lstm/registry.hpp"
#include "lstm/variants/fused.hpp"
#include "test_util.hpp"

namespace lstm::test {

// The fused float paths this CPU (and build) runs (Variant::paths): eigen first, then each SIMD
// path it has, widest first.
inline std::vector<cpu::FusedIsa> available_fused_isas() {
    std::vector<cpu::FusedIsa> out = {cpu::FusedIsa::eigen};
    for (const std::string& path : find_variant("fused", Device::cpu).paths(DType::f32))
        if (path != cpu::fused_isa_name(cpu::FusedIsa::eigen))
            out.push_back(cpu::fused_isa_named(path));
    return out;
}

// Makes `isa` the fused variant's default path for the scope, through LSTM_FUSED_ISA, which a
// plan request without a path reads (so the registry-driven helpers run it), then restores the
// environment. automatic: the environment names none for the scope.
struct FusedIsaScope {
    explicit FusedIsaScope(cpu::FusedIsa isa)
        : env_("LSTM_FUSED_ISA",
               isa == cpu::FusedIsa::automatic ? nullptr : cpu::fused_isa_name(isa)) {}

private:
    EnvScope env_;
};

}  // namespace lstm::test
