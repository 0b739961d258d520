#pragma once

#include <cstddef>
#include <cstdint>

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

}  // namespace lstm::detail
