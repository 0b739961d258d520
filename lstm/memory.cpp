// host_memory_available (lstm/memory.hpp): what the machine can still give, from the files Linux
// keeps for it.

#include "lstm/memory.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <string>

namespace lstm {

namespace {

// The first number in a file (cgroup's memory.max reads "max" when unlimited: no number).
bool read_first_number(const char* path, uint64_t& value) {
    std::ifstream in(path);
    return static_cast<bool>(in >> value);
}

}  // namespace

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

}  // namespace lstm
