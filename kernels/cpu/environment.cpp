#include "kernels/cpu/environment.hpp"

#include <cstdlib>
#include <cstring>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/team.hpp"
#include "lstm/error.hpp"

namespace lstm::kernels::cpu {

lstm::cpu::FusedIsa fused_isa_from_environment() {
    using lstm::cpu::FusedIsa;
    const char* env = std::getenv("LSTM_FUSED_ISA");
    if (env == nullptr || *env == '\0' || std::strcmp(env, "auto") == 0) return FusedIsa::automatic;
    if (std::strcmp(env, "avx512") == 0) return FusedIsa::avx512;
    if (std::strcmp(env, "avx2") == 0) return FusedIsa::avx2;
    if (std::strcmp(env, "eigen") == 0) return FusedIsa::eigen;
    fail("LSTM_FUSED_ISA = '", env, "' is not one of auto, avx512, avx2, eigen");
}

void check_cpu_environment() {
    isa_cap();
    fused_isa_from_environment();
    team_policy_from_environment();
}

}  // namespace lstm::kernels::cpu
