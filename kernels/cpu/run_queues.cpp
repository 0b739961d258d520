#include "kernels/cpu/run_queues.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace lstm::kernels::cpu {

namespace {

// Reads up to `size - 1` bytes of a small /proc file into `text`, NUL-terminated; false on error.
bool read_small_file(const char* path, char* text, size_t size) {
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const ssize_t got = read(fd, text, size - 1);
    close(fd);
    if (got <= 0) return false;
    text[got] = '\0';
    return true;
}

// The state letter of /proc/self/task/<tid>/stat: the field after the command name, which is in
// parentheses and may itself hold spaces or parentheses (hence the last ')').
bool task_runnable(const char* tid) {
    char path[sizeof("/proc/self/task//stat") + sizeof(dirent64::d_name)];
    std::snprintf(path, sizeof(path), "/proc/self/task/%s/stat", tid);
    char text[96];  // tid, a name of at most 15 characters and the state fit with room to spare
    if (!read_small_file(path, text, sizeof(text))) return false;
    const char* close_paren = std::strrchr(text, ')');
    return close_paren != nullptr && close_paren[1] == ' ' && close_paren[2] == 'R';
}

// Runnable threads of the whole machine: the numerator of /proc/loadavg's fourth field
// ("runnable/total"); -1 where unreadable.
int system_runnable_threads() {
    char text[128];
    if (!read_small_file("/proc/loadavg", text, sizeof(text))) return -1;
    const char* field = text;
    for (int skip = 0; skip < 3; ++skip) {
        field = std::strchr(field, ' ');
        if (field == nullptr) return -1;
        ++field;
    }
    char* end = nullptr;
    const long runnable = std::strtol(field, &end, 10);
    return end == field || *end != '/' || runnable < 0 ? -1 : static_cast<int>(runnable);
}

// CPUs this process may run on when they are all the online ones, else -1.
int whole_machine_cpus() {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return -1;
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    const int usable = CPU_COUNT(&allowed);
    return online > 0 && usable == online ? usable : -1;
}

}  // namespace

int own_runnable_threads() {
    const int dir = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return -1;
    // getdents64 rather than opendir/readdir, which allocate: the governor asks between the
    // regions of a forward or backward call.
    alignas(dirent64) char buffer[4096];
    int runnable = 0;
    for (;;) {
        const ssize_t got = getdents64(dir, buffer, sizeof(buffer));
        if (got < 0) runnable = -1;
        if (got <= 0) break;
        for (ssize_t at = 0; at < got;) {
            const auto* entry = reinterpret_cast<const dirent64*>(buffer + at);
            if (entry->d_name[0] != '.' && task_runnable(entry->d_name)) ++runnable;
            at += entry->d_reclen;
        }
    }
    close(dir);
    return runnable;
}

RunQueues read_run_queues() {
    RunQueues view;
    view.cpus = whole_machine_cpus();
    if (view.cpus <= 0) return view;
    const int own = own_runnable_threads();
    const int all = system_runnable_threads();
    // The system's count includes this process's runnable threads (the caller's at least); one
    // below it comes from a /proc that does not count them (a sandbox's), which says nothing.
    if (own < 0 || all < own) return view;
    view.others = all - own;
    view.known = true;
    return view;
}

}  // namespace lstm::kernels::cpu
