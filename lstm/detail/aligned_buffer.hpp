#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <utility>

#include "lstm/error.hpp"

namespace lstm::detail {

// A host byte buffer aligned for SIMD loads that only grows, so repeated calls of the same or a
// smaller size allocate nothing. A failed allocation throws lstm::OutOfMemory with the size.
class AlignedBuffer {
public:
    static constexpr size_t kAlignment = 64;

    AlignedBuffer() = default;
    // A moved-from buffer is empty (capacity 0), so its next reserve() allocates again.
    AlignedBuffer(AlignedBuffer&& other) noexcept
        : data_(std::move(other.data_)), capacity_(std::exchange(other.capacity_, 0)) {}
    AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
        data_ = std::move(other.data_);
        capacity_ = std::exchange(other.capacity_, 0);
        return *this;
    }

    void* reserve(size_t bytes) {
        if (bytes > capacity_) {
            const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
            void* p = std::aligned_alloc(kAlignment, rounded);
            if (!p)
                fail_as<OutOfMemory>("host allocation of ", rounded, " bytes (", rounded >> 20,
                                     " MiB) failed");
            data_.reset(p);
            capacity_ = rounded;
        }
        return data_.get();
    }
    void* data() const { return data_.get(); }
    size_t capacity() const { return capacity_; }

private:
    struct Free {
        void operator()(void* p) const { std::free(p); }
    };
    std::unique_ptr<void, Free> data_;
    size_t capacity_ = 0;
};

}  // namespace lstm::detail
