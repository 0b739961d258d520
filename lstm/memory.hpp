#pragma once

// Host memory is checked before it is allocated. Linux overcommits: an allocation far beyond what
// the machine has usually succeeds, and the process is killed later, when the pages are touched,
// with no message at all. So every entry point that sizes host buffers from its input (Lstm's
// constructor, forward and backward, the allocating ctc_loss, lstm::io's file reader,
// nn::pad_sequences, lstm_tool, and every growing host buffer as a last line) first compares the
// bytes it is about to add with what the machine can still give and with the budget the caller
// may set, and throws lstm::OutOfMemory naming each buffer and its size when they do not fit.
// Device memory is the CUDA allocator's to refuse (also lstm::OutOfMemory, with the size).
//
// The budget (set_host_memory_limit) bounds the host memory the library holds in this process,
// across all its objects and threads, not each call on its own: the library counts the bytes of
// its long-lived host buffers (host_memory_held), and refuses a request when what it holds plus
// what the request adds would pass the budget. What counts:
// - Counted from allocation to free, at the size allocated (rounded up to 64 bytes, or to whole
//   2 MiB pages from 2 MiB on): the host storage of every lstm::Buffer on Device::cpu and every
//   lstm::detail::AlignedBuffer. That is Lstm's parameters, gradients and the buffers its
//   forward and backward keep (y, hn, cn, workspace, reserve, dx, dh0, dc0, the batch-first
//   copies, the layer stages), the optimizers' state of host parameters (Sgd's momentum, Adam's
//   moments), nn::SequenceModel's buffers and CTC workspace. A buffer that grows keeps its old
//   storage until the new one is allocated, so both count for that moment (and a request that
//   grows buffers is checked for it).
// - Checked against the budget when allocated (held + what the call allocates) but not counted
//   afterwards: memory the caller owns once the call returns (io::read_safetensors' tensors,
//   io::Tensor::from's bytes, nn::pad_sequences' batch, nn::Dense's parameter and gradient
//   vectors) and scratch freed before the call returns (the file reader's copy of the file, the
//   allocating ctc_loss's workspace).
// - Neither checked nor counted: other libraries' own memory (oneDNN's primitives and
//   scratchpads, the OpenMP runtime's threads and stacks, the CUDA runtime's pinned staging
//   buffers), the caller's vectors and views, small bookkeeping (sequence lengths, offsets, the
//   variant registry), and device memory.
// So the process's resident memory is more than host_memory_held(): the budget bounds the part
// that grows with the shapes and models the library is given. A refusal happens before anything
// of its request is allocated. Counting costs one atomic add when a buffer grows or is freed,
// nothing in steady state.

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
inline std::atomic<uint64_t> host_memory_held_bytes{0};
// Threads that have armed lstm::testing::fail_memory_request_after: while 0, a check pays one
// relaxed load for the hook.
inline std::atomic<int> memory_failure_armed_threads{0};
// Whether the check this thread makes now is the one the hook was armed to fail (lstm/memory.cpp).
bool inject_memory_failure();

// Bytes a counted buffer gives back when it shrinks or frees its storage (see the header comment;
// growth is counted by MemoryRequest::hold, which refuses what passes the budget).
inline void release_host_memory(uint64_t bytes) {
    if (bytes != 0) host_memory_held_bytes.fetch_sub(bytes, std::memory_order_relaxed);
}
}  // namespace detail

constexpr uint64_t kUnknownMemory = std::numeric_limits<uint64_t>::max();

// The budget for the host memory the library holds in this process (see the header comment for
// what counts), for callers that share the machine or want an early, clear refusal; 0 (the
// default) leaves only the machine's own limit. A budget below what is held already frees
// nothing: it refuses every further growth until enough is freed.
inline void set_host_memory_limit(uint64_t bytes) { detail::host_memory_limit_bytes = bytes; }
inline uint64_t host_memory_limit() { return detail::host_memory_limit_bytes; }

// The host bytes the library holds now in its counted buffers, over all threads.
inline uint64_t host_memory_held() {
    return detail::host_memory_held_bytes.load(std::memory_order_relaxed);
}

namespace testing {
// A test hook, for tests that fail each allocation point of a call in turn: after
// fail_memory_request_after(k) with k >= 0, the next k MemoryRequest checks made on this thread
// that would pass do pass, and the one after them throws lstm::OutOfMemory saying that the
// failure was injected; the hook then disarms itself. Checks that request nothing (every buffer
// already large enough) are not counted, nor are checks made on other threads (OpenMP workers
// never throw). k = -1 disarms; k = std::numeric_limits<int64_t>::max() only counts. Costs one
// relaxed atomic load per check while no thread has it armed.
void fail_memory_request_after(int64_t k);
// The checks counted on this thread since fail_memory_request_after last armed the hook (the
// injected failure included); kept when it disarms.
int64_t memory_requests_seen();
}  // namespace testing

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
    // bytes already exist (a buffer that only grows adds bytes - have, or nothing). A counted
    // buffer that grows frees its `have` bytes only once the new storage is allocated, so the
    // budget check also makes room for the largest such `have`.
    MemoryRequest& add(const char* name, uint64_t bytes, uint64_t have = 0) {
        if (bytes <= have) return *this;
        const uint64_t more = bytes == kUnknownMemory ? kUnknownMemory : bytes - have;
        if (count_ < kMaxParts) parts_[count_++] = {name, more};
        if (__builtin_add_overflow(total_, more, &total_)) total_ = kUnknownMemory;
        kept_ = std::max(kept_, have);
        return *this;
    }

    uint64_t total() const { return total_; }

    // Throws lstm::OutOfMemory when the request does not fit in the budget (what the library
    // holds, plus the request, over set_host_memory_limit) or in what the machine can give.
    // `what` names the call and its sizes, e.g. "Lstm::forward (basic, T 100, N 32)": a string,
    // or a function returning one, called only to refuse. The machine is asked only from 1 MiB
    // on: below that, reading /proc costs more than the allocation, and the allocator's own
    // failure is answer enough.
    template <typename What>
    void check(const What& what) const {
        verify(what, false);
    }

    // check, and counts total() as held by the library in the same atomic step as the budget
    // comparison, so that threads growing buffers at once never pass the budget together. For
    // the counted buffers (the header comment), which give the bytes back with
    // detail::release_host_memory when they free them or when their allocation fails.
    template <typename What>
    void hold(const What& what) const {
        verify(what, true);
    }

private:
    struct Part {
        const char* name;
        uint64_t bytes;
    };

    static std::string size_text(uint64_t bytes) {
        return bytes == kUnknownMemory ? "more than 2^64 bytes" : format_bytes(bytes);
    }

    // Whether `held` plus this request passes `limit` (a nonzero budget).
    bool over(uint64_t held, uint64_t limit) const {
        uint64_t need = 0;
        return __builtin_add_overflow(held, total_, &need) ||
               __builtin_add_overflow(need, kept_, &need) || need > limit;
    }

    template <typename What>
    void verify(const What& what, bool hold) const {
        if (total_ == 0) return;
        if (total_ == kUnknownMemory) refuse(what, "no machine has that much");
        const uint64_t limit = host_memory_limit();
        if (limit != 0) {
            const uint64_t held = host_memory_held();
            if (over(held, limit)) refuse_budget(what, held, limit);
        }
        constexpr uint64_t kAskFrom = uint64_t{1} << 20;
        if (total_ >= kAskFrom) {
            const uint64_t available = host_memory_available();
            if (available != kUnknownMemory && total_ > available)
                refuse(what, "this machine can give " + format_bytes(available) +
                                 " (MemAvailable, or the cgroup's memory.max)");
        }
        if (detail::memory_failure_armed_threads.load(std::memory_order_relaxed) != 0 &&
            detail::inject_memory_failure())
            refuse(what,
                   "failure injected by lstm::testing::fail_memory_request_after (a test hook)");
        if (!hold) return;
        auto& held = detail::host_memory_held_bytes;
        if (limit == 0) {
            held.fetch_add(total_, std::memory_order_relaxed);
            return;
        }
        uint64_t now = held.load(std::memory_order_relaxed);
        do {
            if (over(now, limit)) refuse_budget(what, now, limit);
        } while (!held.compare_exchange_weak(now, now + total_, std::memory_order_relaxed));
    }

    template <typename What>
    [[noreturn]] void refuse_budget(const What& what, uint64_t held, uint64_t limit) const {
        std::string bound = "the library holds " + format_bytes(held) + " of the " +
                            format_bytes(limit) +
                            " budget, the limit set with lstm::set_host_memory_limit";
        if (kept_ != 0)
            bound += ", and keeps a growing buffer's old " + format_bytes(kept_) +
                     " until its new one is allocated";
        refuse(what, bound);
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
    uint64_t kept_ = 0;  // the largest `have` of a growing buffer (add)
};

}  // namespace lstm
