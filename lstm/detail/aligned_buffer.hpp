#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <utility>

#include "lstm/error.hpp"
#include "lstm/memory.hpp"

namespace lstm::detail {

// A host byte buffer aligned for SIMD loads that only grows, so repeated calls of the same or a
// smaller size allocate nothing. An allocation beyond what the machine can give (lstm/memory.hpp)
// or a failed one throws lstm::OutOfMemory with the size.
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
            // Large buffers take whole huge pages (kHugePageBytes, lstm/memory.hpp).
            const size_t align = bytes >= kHugePageBytes ? kHugePageBytes : kAlignment;
            size_t rounded = 0;
            if (__builtin_add_overflow(bytes, align - 1, &rounded))
                rounded = kUnknownMemory;  // refused below
            else
                rounded = rounded / align * align;
            MemoryRequest().add("buffer", rounded).check("host buffer");
            void* p = std::aligned_alloc(align, rounded);
            if (!p)
                fail_as<OutOfMemory>("host allocation of ", rounded, " bytes (", rounded >> 20,
                                     " MiB) failed");
            if (align == kHugePageBytes) advise_huge_pages(p, rounded);
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
