#pragma once

#include <cstddef>
#include <cstdint>

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

}  // namespace lstm::detail
