#pragma once

// The entry points of the library's optional compiled parts, which the registry (lstm/registry.cpp)
// and lstm/host_info.cpp (both in lstm_variants) refer to weakly. A weak reference does not make
// the linker take an archive member, so in a program that does not link a part its hooks stay
// null, the registry lacks its variants and nothing of its dependencies is linked; the part's
// target makes the linker take the member that defines them. Not for user code.
//
// - lstm_onednn (lstm/registry_onednn.cpp, target lstm::onednn): the `onednn` variant and with
//   it oneDNN itself; its link option --undefined=lstm_onednn_variant takes the object.
// - lstm_cuda (lstm/registry_cuda.cpp, target lstm::cuda): the CUDA variants and with them the
//   CUDA runtime, cuBLAS and cuDNN; lstm::cuda links the whole archive (lstm/cuda/link.hpp).

#include <cstddef>

#include "lstm/variant.hpp"

extern "C" {
// The registry's onednn variant (a static object of lstm_onednn).
__attribute__((weak)) const lstm::Variant* lstm_onednn_variant();
// oneDNN's name of the widest instruction set its JIT uses on this CPU, as a static string.
__attribute__((weak)) const char* lstm_onednn_cpu_isa();
// The CUDA variants in registry order (static objects of lstm_cuda); *count is set to how many.
__attribute__((weak)) const lstm::Variant* const* lstm_cuda_variants(size_t* count);
}
