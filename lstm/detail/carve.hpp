#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "lstm/tensor.hpp"

namespace lstm::detail {

// Hands out aligned sub-buffers of one byte buffer. With a null base it only counts, so a variant
// sizes its workspace and reserve with exactly the function that later carves them.
class Carver {
public:
    // 64 bytes: a cache line and an AVX-512 register, so every carved array starts aligned.
    static constexpr size_t kAlignment = 64;

    explicit Carver(void* base) : base_(static_cast<char*>(base)) {}

    template <typename T>
    T* take(int64_t count) {
        offset_ = (offset_ + kAlignment - 1) / kAlignment * kAlignment;
        T* out = base_ ? reinterpret_cast<T*>(base_ + offset_) : nullptr;
        offset_ += static_cast<size_t>(count) * sizeof(T);
        return out;
    }

    size_t bytes() const { return offset_; }

private:
    char* base_;
    size_t offset_ = 0;
};

// Bytes a carving function takes in `dtype`: calls carve(counter, T{}) with T float or double, the
// element type of the buffers it carves, on a counting Carver.
template <typename CarveFn>
size_t carved_bytes(DType dtype, CarveFn&& carve) {
    Carver counter(nullptr);
    if (dtype == DType::f32)
        carve(counter, float{});
    else
        carve(counter, double{});
    return counter.bytes();
}

// The alignment cudaMalloc gives. The CUDA variants carve device buffers from the first such
// boundary, so that a caller's buffer at any address (a sub-buffer of its own) gets exactly the
// layout a cudaMalloc'ed one gets: cuBLAS and cuDNN choose kernels by how their pointers are
// aligned, cuDNN documents no smaller alignment for its RNN buffers, and the variants' double
// and int64 arrays need at least 8 bytes.
inline constexpr size_t kDeviceAlignment = 256;

// Bytes from `address` to the first multiple of `boundary` at or after it (0 when aligned).
// `boundary` is a power of two.
constexpr size_t padding_to_boundary(uintptr_t address, size_t boundary) {
    return static_cast<size_t>((boundary - address % boundary) % boundary);
}

// A Carver over a caller's buffer that starts at the buffer's first `Boundary`-byte boundary, so
// its arrays are aligned in memory, not only relative to the base: for kernels that use aligned
// or streaming stores (64) and for device buffers (kDeviceAlignment), where the interface leaves
// the caller's alignment open (malloc gives 16). Every take() then stays aligned to kAlignment
// in memory, because Boundary is a multiple of it. Size such buffers with
// carved_bytes_from_boundary of the same Boundary. A null base stays null (counting).
template <size_t Boundary = Carver::kAlignment>
Carver carver_from_boundary(void* base) {
    static_assert(Boundary % Carver::kAlignment == 0 && (Boundary & (Boundary - 1)) == 0,
                  "the boundary must be a power of two and a multiple of Carver::kAlignment");
    const size_t pad = padding_to_boundary(reinterpret_cast<uintptr_t>(base), Boundary);
    return Carver(base ? static_cast<char*>(base) + pad : nullptr);
}

// carved_bytes plus the largest padding carver_from_boundary<Boundary> can skip.
template <size_t Boundary = Carver::kAlignment, typename CarveFn>
size_t carved_bytes_from_boundary(DType dtype, CarveFn&& carve) {
    return carved_bytes(dtype, std::forward<CarveFn>(carve)) + Boundary - 1;
}

}  // namespace lstm::detail
