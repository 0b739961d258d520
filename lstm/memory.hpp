#pragma once

// Host memory is checked before it is allocated. Linux overcommits: an allocation far beyond what
// the machine has usually succeeds, and the process is killed later, when the pages are touched,
// with no message at all. So every entry point that sizes host buffers from its input (Lstm's
// constructor, forward and backward, the allocating ctc_loss, lstm::io's file reader,
// nn::pad_sequences, lstm_tool, and every growing host buffer as a last line) first compares the
// bytes it is about to add with what the machine can still give and with a limit the caller may
// set, and throws lstm::OutOfMemory naming each buffer and its size when they do not fit. Device
// memory is the CUDA allocator's to refuse (also lstm::OutOfMemory, with the size).

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <string>
#include <type_traits>

#include "lstm/error.hpp"

namespace lstm {

namespace detail {
inline std::atomic<uint64_t> host_memory_limit_bytes{0};
}  // namespace detail

constexpr uint64_t kUnknownMemory = std::numeric_limits<uint64_t>::max();

// A ceiling on the host bytes any one request may add, for callers that share the machine or
// want an early, clear refusal; 0 (the default) leaves only the machine's own limit.
inline void set_host_memory_limit(uint64_t bytes) { detail::host_memory_limit_bytes = bytes; }
inline uint64_t host_memory_limit() { return detail::host_memory_limit_bytes; }

// Bytes the machine can still give this process without swapping: MemAvailable from
// /proc/meminfo, capped by the room left under the cgroup's memory.max where one is set (a
// container's limit, which MemAvailable does not see). kUnknownMemory where neither can be read.
// Compiled in the library (lstm/memory.cpp), which keeps <fstream> out of this header.
uint64_t host_memory_available();

// Host buffers from this size on start on a 2 MiB boundary, span whole 2 MiB pages and are offered
// to Linux for transparent huge pages (advise_huge_pages). A training step streams its reserve and
// workspace (hundreds of MiB on Braun's shapes), and with 4 KiB pages walks tens of thousands of
// TLB entries per step: with huge pages braun/1x320-CE-long took 1-2% less time at 2 threads
// (fused, 6 of 6 alternated runs) and 0.5-1.5% at one (fused and onednn, whose reserve and
// workspace are these buffers too); CE-short, with a fifth of the memory, showed no difference
// (AMD EPYC Zen 4, 2026-12-04). The rounding costs at most one partly used huge page per buffer.
constexpr uint64_t kHugePageBytes = uint64_t{2} << 20;

// Asks the kernel to back [data, data + bytes) with transparent huge pages (madvise
// MADV_HUGEPAGE), which Debian's default THP mode ("madvise") grants only on request. Advice
// only: where the kernel has no THP or refuses, the pages stay 4 KiB and nothing else changes.
// data and bytes are multiples of kHugePageBytes. Compiled in the library (lstm/memory.cpp).
void advise_huge_pages(void* data, uint64_t bytes);

// "1.50 GiB (1610612736 bytes)", for messages.
inline std::string format_bytes(uint64_t bytes) {
    const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double value = static_cast<double>(bytes);
    int unit = 0;
    while (value >= 1024.0 && unit < 6) value /= 1024.0, ++unit;
    if (unit == 0) return std::to_string(bytes) + " bytes";
    char text[64];
    std::snprintf(text, sizeof(text), "%.2f %s (%llu bytes)", value, units[unit],
                  static_cast<unsigned long long>(bytes));
    return text;
}

// The host buffers one call is about to allocate, each by name, checked together before any of
// them is allocated. Sizes are computed with overflow checks: a size that does not fit in 64
// bits is refused like one that does not fit in memory. Nothing here allocates unless the request
// is refused (calls that allocate nothing in steady state check on every call).
class MemoryRequest {
public:
    static constexpr int kMaxParts = 12;

    // Bytes of a tensor of `sizes` (each >= 0) with elements of element_size bytes, or
    // kUnknownMemory when the product overflows.
    static uint64_t bytes(std::initializer_list<int64_t> sizes, uint64_t element_size) {
        uint64_t out = element_size;
        for (int64_t s : sizes) {
            if (s < 0) return kUnknownMemory;
            if (__builtin_mul_overflow(out, static_cast<uint64_t>(s), &out)) return kUnknownMemory;
        }
        return out;
    }

    // `bytes` for the buffer `name` (a string literal: it is kept by pointer), of which `have`
    // bytes already exist (a buffer that only grows adds bytes - have, or nothing).
    MemoryRequest& add(const char* name, uint64_t bytes, uint64_t have = 0) {
        if (bytes <= have) return *this;
        const uint64_t more = bytes == kUnknownMemory ? kUnknownMemory : bytes - have;
        if (count_ < kMaxParts) parts_[count_++] = {name, more};
        if (__builtin_add_overflow(total_, more, &total_)) total_ = kUnknownMemory;
        return *this;
    }

    uint64_t total() const { return total_; }

    // Throws lstm::OutOfMemory when the request exceeds the caller's limit, or what the machine
    // can give. `what` names the call and its sizes, e.g. "Lstm::forward (basic, T 100, N 32)":
    // a string, or a function returning one, called only to refuse. The machine is asked only
    // from 1 MiB on: below that, reading /proc costs more than the allocation, and the
    // allocator's own failure is answer enough.
    template <typename What>
    void check(const What& what) const {
        if (total_ == 0) return;
        const uint64_t limit = host_memory_limit();
        if (total_ == kUnknownMemory) refuse(what, "no machine has that much");
        if (limit != 0 && total_ > limit)
            refuse(what,
                   "the limit set with lstm::set_host_memory_limit is " + format_bytes(limit));
        constexpr uint64_t kAskFrom = uint64_t{1} << 20;
        if (total_ < kAskFrom) return;
        const uint64_t available = host_memory_available();
        if (available != kUnknownMemory && total_ > available)
            refuse(what, "this machine can give " + format_bytes(available) +
                             " (MemAvailable, or the cgroup's memory.max)");
    }

private:
    struct Part {
        const char* name;
        uint64_t bytes;
    };

    static std::string size_text(uint64_t bytes) {
        return bytes == kUnknownMemory ? "more than 2^64 bytes" : format_bytes(bytes);
    }

    template <typename What>
    [[noreturn]] void refuse(const What& what, const std::string& bound) const {
        std::string call;
        if constexpr (std::is_invocable_v<What>)
            call = what();
        else
            call = what;
        std::string parts;
        for (int k = 0; k < count_; ++k)
            parts +=
                (k ? ", " : "") + std::string(parts_[k].name) + " " + size_text(parts_[k].bytes);
        fail_as<OutOfMemory>(call, ": needs ", size_text(total_), " more host memory (", parts,
                             "); ", bound);
    }

    std::array<Part, kMaxParts> parts_{};
    int count_ = 0;
    uint64_t total_ = 0;
};

}  // namespace lstm
