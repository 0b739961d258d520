#pragma once

// The environment variables the CPU code reads: LSTM_MAX_CPU_ISA (kernels/cpu/cpu_features.hpp),
// LSTM_FUSED_ISA (the fused variant's path) and LSTM_TEAM (kernels/cpu/team.hpp).

namespace lstm::cpu {

// Instruction set of the fused variant's float path.
enum class FusedIsa { automatic, avx512, avx2, neon, eigen };

}  // namespace lstm::cpu

namespace lstm::kernels::cpu {

// LSTM_FUSED_ISA: unset, empty or "auto" -> automatic; "avx512", "avx2", "neon", "eigen". Throws
// lstm::InvalidArgument naming the variable for anything else. Read at every call.
lstm::cpu::FusedIsa fused_isa_from_environment();

// Refuses a malformed value of any of the three variables (lstm::InvalidArgument naming it).
// Every CPU variant call runs this, so a mistyped setting shows up whichever variant runs, not
// only where a path that reads it happens to run (LSTM_MAX_CPU_ISA is read once per process, the
// other two at every call, as their users read them). Also refuses (lstm::Unsupported) a call of
// several threads in a child of fork() whose parent had made one: it would hang in OpenMP.
void check_cpu_environment();

}  // namespace lstm::kernels::cpu
