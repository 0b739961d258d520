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

// A Carver over a caller's buffer that starts at the buffer's first 64-byte boundary, so its
// arrays are aligned in memory, not only relative to the base: for kernels that use aligned or
// streaming stores, where the interface leaves the caller's alignment open (malloc gives 16).
// Size such buffers with carved_bytes_from_boundary. A null base stays null (counting).
inline Carver carver_from_boundary(void* base) {
    const auto address = reinterpret_cast<uintptr_t>(base);
    const uintptr_t pad = (Carver::kAlignment - address % Carver::kAlignment) % Carver::kAlignment;
    return Carver(base ? static_cast<char*>(base) + pad : nullptr);
}

// carved_bytes plus the largest padding carver_from_boundary can skip.
template <typename CarveFn>
size_t carved_bytes_from_boundary(DType dtype, CarveFn&& carve) {
    return carved_bytes(dtype, std::forward<CarveFn>(carve)) + Carver::kAlignment - 1;
}

}  // namespace lstm::detail
