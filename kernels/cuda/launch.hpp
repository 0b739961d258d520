#pragma once

// The one convention of every launcher in kernels/cuda/*.cu:
//
//     LaunchStatus launch_<what>(arguments..., void* stream);
//
// - `stream` comes last, a cudaStream_t passed as void*, so that the launchers' headers need no
//   CUDA header and host code compiled by the C++ compiler calls them (kernels/cpu/optim.hpp
//   shares its update rules with optim.cu through one of them).
// - A launcher queues its kernels and returns at once: it never waits, throws or prints (kernels
//   never print). Nothing to do (zero elements, an empty batch) queues nothing and returns success.
// - It returns the launch status: cudaGetLastError() after its last launch, or the first failure
//   when it launches several kernels. LaunchStatus is [[nodiscard]], so a caller cannot drop it;
//   lstm_cuda's host code turns it into lstm::Error with LSTM_CUDA_CHECK_LAUNCH(launch_x(...))
//   (lstm/cuda/internal/check.hpp), which names the launcher, file and line. Reading the status
//   from the return value rather than from a later cudaGetLastError() keeps a sticky error of
//   unrelated earlier work from being blamed on this launch, and the reverse.
// - Element-wise kernels take their grid from kernels/cuda/grid_stride.cuh (grid::kThreads,
//   grid::blocks_for): one block size and one grid cap for the whole library. Kernels with a shape
//   of their own (a warp per row, a block per sample) say why next to their launcher.

namespace lstm::kernels::cuda {

// A cudaError_t value (0 = cudaSuccess) without the CUDA header that defines it.
struct [[nodiscard]] LaunchStatus {
    int code = 0;
    bool ok() const { return code == 0; }
};

}  // namespace lstm::kernels::cuda
