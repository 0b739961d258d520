// The fused variant's float paths (lstm/variants/fused.hpp) in tests: which of them this CPU
// runs, and a scope that selects one.
#pragma once

#include <vector>

#include "lstm/variants/fused.hpp"

namespace lstm::test {

// The fused float paths this CPU (and build) runs: eigen, then each SIMD path it has, widest
// first.
inline std::vector<cpu::FusedIsa> available_fused_isas() {
    std::vector<cpu::FusedIsa> out = {cpu::FusedIsa::eigen};
    for (cpu::FusedIsa isa : cpu::kSimdFusedIsas)
        if (cpu::fused_isa_available(isa)) out.push_back(isa);
    return out;
}

// Selects a fused path for the scope, then hands the choice back to automatic.
struct FusedIsaScope {
    explicit FusedIsaScope(cpu::FusedIsa isa) { cpu::set_fused_isa(isa); }
    ~FusedIsaScope() { cpu::set_fused_isa(cpu::FusedIsa::automatic); }
    FusedIsaScope(const FusedIsaScope&) = delete;
    FusedIsaScope& operator=(const FusedIsaScope&) = delete;
};

}  // namespace lstm::test
