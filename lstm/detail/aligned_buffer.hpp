#pragma once

#include <cstddef>
#include <cstdlib>
#include <utility>

#include "lstm/error.hpp"
#include "lstm/memory.hpp"

namespace lstm::detail {

// A host byte buffer aligned for SIMD loads that only grows, so repeated calls of the same or a
// smaller size allocate nothing. Its storage counts towards the library's host memory budget
// (host_memory_held, lstm/memory.hpp) from allocation to free. An allocation beyond the budget or
// what the machine can give, or a failed one, throws lstm::OutOfMemory with the size and leaves
// the buffer (its storage and contents) as it was.
class AlignedBuffer {
public:
    static constexpr size_t kAlignment = 64;

    AlignedBuffer() = default;
    ~AlignedBuffer() { reset(); }
    // A moved-from buffer is empty (capacity 0), so its next reserve() allocates again; the
    // storage moves with its count.
    AlignedBuffer(AlignedBuffer&& other) noexcept
        : data_(std::exchange(other.data_, nullptr)),
          capacity_(std::exchange(other.capacity_, 0)) {}
    AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
        if (this != &other) {
            reset();
            data_ = std::exchange(other.data_, nullptr);
            capacity_ = std::exchange(other.capacity_, 0);
        }
        return *this;
    }
    AlignedBuffer(const AlignedBuffer&) = delete;
    AlignedBuffer& operator=(const AlignedBuffer&) = delete;

    // At least `bytes` of storage (contents are lost when it grows; host memory).
    void* reserve(size_t bytes) {
        if (bytes > capacity_) {
            // Large buffers take whole huge pages (kHugePageBytes, lstm/memory.hpp).
            const size_t align = bytes >= kHugePageBytes ? kHugePageBytes : kAlignment;
            size_t rounded = 0;
            if (__builtin_add_overflow(bytes, align - 1, &rounded))
                rounded = kUnknownMemory;  // refused below
            else
                rounded = rounded / align * align;
            // The old storage is freed only once the new one exists, so that a failure keeps
            // it: both count for that moment.
            MemoryRequest().add("buffer", rounded).hold("host buffer");
            void* p = std::aligned_alloc(align, rounded);
            if (!p) {
                detail::release_host_memory(rounded);
                fail_as<OutOfMemory>("host allocation of ", rounded, " bytes (", rounded >> 20,
                                     " MiB) failed");
            }
            if (align == kHugePageBytes) advise_huge_pages(p, rounded);
            reset();
            data_ = p;
            capacity_ = rounded;
        }
        return data_;
    }
    void* data() const { return data_; }
    size_t capacity() const { return capacity_; }

private:
    // Frees the storage and gives its bytes back to the budget.
    void reset() noexcept {
        std::free(data_);
        detail::release_host_memory(capacity_);
        data_ = nullptr;
        capacity_ = 0;
    }

    void* data_ = nullptr;
    size_t capacity_ = 0;
};

}  // namespace lstm::detail
