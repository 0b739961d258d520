#pragma once

// How the CPU part of the library (lstm::lstm) refers to the compiled CUDA part (lstm_cuda, the
// lstm::cuda target) without linking it. A program that does not link lstm::cuda must link no
// CUDA library at all (no cudart, cuBLAS, cuBLASLt, cuDNN), yet the library's headers and its
// compiled CPU part (the Lstm, SequenceModel and optimizer instances of lstm/templates.cpp) name
// the CUDA entry points on their device paths. Two kinds of declaration keep those names from
// pulling lstm_cuda into such a program:
//
// - The entry points a program can reach with no CUDA object in hand (constructing a Context,
//   the device queries and device memory of lstm/cuda/runtime.hpp) are ordinary declarations.
//   The CPU part defines them weakly (lstm/cuda/absent.cpp): there they throw lstm::Unsupported
//   saying that the program does not link lstm::cuda (device_count() answers 0). lstm_cuda's
//   strong definitions replace those wherever it is linked.
// - Every other entry point takes a Context (or is a member of one), so it is never called where
//   no Context could be made: those are declared LSTM_CUDA_ENTRY (weak). A weak reference does
//   not make the linker take an archive member, and stays null where nothing defines it.
//
// For the same reason lstm::cuda links lstm_cuda as a whole archive (cmake/lstm_cuda_target.cmake):
// every definition is then present, whichever of them the program's objects happen to name, and
// the registry's weak hook (lstm/detail/onednn_hooks.hpp) finds the CUDA variants. Not for user
// code.

#define LSTM_CUDA_ENTRY __attribute__((weak))
