// host_memory_available (lstm/memory.hpp): what the machine can still give, from the files Linux
// keeps for it; advise_huge_pages: the request for transparent huge pages; the test hook that
// fails the k-th next memory request (lstm::testing::fail_memory_request_after).

#include "lstm/memory.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace lstm {

namespace {

// The first number in a file (cgroup's memory.max reads "max" when unlimited: no number).
bool read_first_number(const char* path, uint64_t& value) {
    std::ifstream in(path);
    return static_cast<bool>(in >> value);
}

// The failure-injection hook's state, per thread: the index of the check to fail (-1: disarmed)
// and the checks counted since it was armed.
thread_local int64_t t_fail_at = -1;
thread_local int64_t t_seen = 0;

void disarm() {
    if (t_fail_at < 0) return;
    t_fail_at = -1;
    detail::memory_failure_armed_threads.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace

namespace detail {

bool inject_memory_failure() {
    if (t_fail_at < 0) return false;  // armed on another thread
    if (t_seen++ != t_fail_at) return false;
    disarm();
    return true;
}

}  // namespace detail

namespace testing {

void fail_memory_request_after(int64_t k) {
    check(k >= -1,
          "lstm::testing::fail_memory_request_after: k must be >= 0, or -1 to disarm; got ", k);
    if (k < 0) {
        disarm();
        return;
    }
    if (t_fail_at < 0) detail::memory_failure_armed_threads.fetch_add(1, std::memory_order_relaxed);
    t_fail_at = k;
    t_seen = 0;
}

int64_t memory_requests_seen() { return t_seen; }

}  // namespace testing

uint64_t host_memory_available() {
    uint64_t available = kUnknownMemory;
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    uint64_t kib = 0;
    while (meminfo >> key >> kib) {
        if (key == "MemAvailable:") {
            available = kib * 1024;
            break;
        }
        meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    }
    uint64_t max = 0, current = 0;
    if (read_first_number("/sys/fs/cgroup/memory.max", max) &&
        read_first_number("/sys/fs/cgroup/memory.current", current))
        available = std::min(available, max > current ? max - current : 0);
    return available;
}

void advise_huge_pages(void* data, uint64_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    // The result is ignored on purpose: EINVAL (a kernel without THP) leaves ordinary pages,
    // which hold the same data.
    (void)madvise(data, static_cast<size_t>(bytes), MADV_HUGEPAGE);
#else
    (void)data;
    (void)bytes;
#endif
}

}  // namespace lstm
