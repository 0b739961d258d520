#pragma once

// The two entry points of lstm_onednn (lstm/registry_onednn.cpp), the optional part that brings
// the `onednn` variant and with it oneDNN itself. The registry and lstm/host_info.cpp (in
// lstm_variants) refer to them weakly: in a program that links lstm::onednn, whose link options
// make the linker take that object, they resolve; otherwise they stay null, the registry has no
// `onednn`, and nothing of oneDNN is linked. Not for user code.

#include "lstm/variant.hpp"

extern "C" {
// The registry's onednn variant (a static object of lstm_onednn).
__attribute__((weak)) const lstm::Variant* lstm_onednn_variant();
// oneDNN's name of the widest instruction set its JIT uses on this CPU, as a static string.
__attribute__((weak)) const char* lstm_onednn_cpu_isa();
}
