// The safetensors writer of lstm/io/safetensors.hpp, compiled once in lstm_variants; the reader
// is lstm/io/safetensors.cpp.
//
// A file is written in one of two ways (classify_output): a regular file, or a new path, goes to
// a temporary beside it that is flushed and renamed over it (write_replacing); anything that
// streams (a character device, a FIFO, a descriptor reached through /proc such as /dev/stdout)
// is written in place (write_in_place), because renaming over it would replace the node itself,
// and /dev/null replaced by a regular file breaks every program on the machine.

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string_view>
#include <thread>

#include "lstm/io/safetensors.hpp"

namespace lstm::io {

namespace {

using Json = nlohmann::json;

// ---- The file's layout ----

// The header and where each tensor's bytes go, computed from the descriptions alone.
struct Layout {
    std::string prefix;          // the 8-byte length, then the padded JSON header
    std::vector<size_t> order;   // the tensors in data order (8-byte types first)
    std::vector<uint64_t> size;  // bytes of each tensor, in the tensors' order
    uint64_t total = 0;          // bytes of the whole file
};

Layout layout_of(const std::vector<TensorSource>& tensors,
                 const std::map<std::string, std::string>& metadata) {
    Layout out;
    out.size.resize(tensors.size());
    std::set<std::string_view> names;
    for (size_t k = 0; k < tensors.size(); ++k) {
        const TensorSource& t = tensors[k];
        check(t.name != TensorFile::kMetadataKey, "tensor '", t.name,
              "': the name is reserved for metadata and cannot name a tensor");
        check(names.insert(t.name).second, "duplicate tensor name '", t.name, "'");
        out.size[k] = t.byte_count();
        check(out.size[k] == 0 || t.host != nullptr || t.fill, "tensor '", t.name,
              "': a TensorSource needs `host` or `fill` for its ", out.size[k], " bytes");
    }
    out.order.resize(tensors.size());
    for (size_t k = 0; k < tensors.size(); ++k) out.order[k] = k;
    std::stable_sort(out.order.begin(), out.order.end(), [&](size_t a, size_t b) {
        return element_size(tensors[a].dtype) > element_size(tensors[b].dtype);
    });
    std::vector<uint64_t> begin(tensors.size());
    uint64_t offset = 0;
    for (size_t k : out.order) {
        begin[k] = offset;
        check(!__builtin_add_overflow(offset, out.size[k], &offset),
              "the tensors hold more than 2^64 - 1 bytes together");
    }

    // Written entry by entry in the tensors' order (names escaped by the JSON library): linear
    // in the number of tensors, where building one JSON object that keeps insertion order is not.
    std::string text = "{";
    if (!metadata.empty())
        text += Json(TensorFile::kMetadataKey).dump() + ":" + Json(metadata).dump();
    for (size_t k = 0; k < tensors.size(); ++k) {
        const TensorSource& t = tensors[k];
        const Json entry = {{"dtype", to_string(t.dtype)},
                            {"shape", t.shape},
                            {"data_offsets", {begin[k], begin[k] + out.size[k]}}};
        if (text.size() > 1) text += ",";
        text += Json(t.name).dump() + ":" + entry.dump();
    }
    text += "}";
    text.append((8 - text.size() % 8) % 8, ' ');
    // A file every safetensors reader (this one included) would refuse is not written.
    check(text.size() <= kMaxHeaderBytes, "the header of ", tensors.size(), " tensors would be ",
          text.size(), " bytes, more than the ", kMaxHeaderBytes,
          " bytes safetensors readers accept");

    out.prefix.resize(8);
    const uint64_t n = text.size();
    for (int i = 0; i < 8; ++i)
        out.prefix[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
    out.prefix += text;
    check(!__builtin_add_overflow(offset, uint64_t(out.prefix.size()), &out.total),
          "the file would hold more than 2^64 - 1 bytes");
    return out;
}

// The staging buffer for the sources that `fill`: one chunk, no more than the largest of them.
std::vector<unsigned char> staging_for(const std::vector<TensorSource>& tensors,
                                       const Layout& layout) {
    uint64_t need = 0;
    for (size_t k = 0; k < tensors.size(); ++k)
        if (tensors[k].host == nullptr)
            need = std::max(need, std::min<uint64_t>(layout.size[k], kWriteChunkBytes));
    MemoryRequest().add("staging", need).check("writing safetensors (a chunk of the tensors)");
    return std::vector<unsigned char>(static_cast<size_t>(need));
}

// Hands the file's bytes to sink(const void* data, size_t size) in order.
template <typename Sink>
void emit(const std::vector<TensorSource>& tensors, const Layout& layout,
          std::vector<unsigned char>& staging, Sink&& sink) {
    sink(layout.prefix.data(), layout.prefix.size());
    for (size_t k : layout.order) {
        const TensorSource& t = tensors[k];
        const uint64_t size = layout.size[k];
        if (size == 0) continue;
        if (t.host != nullptr) {
            sink(t.host, static_cast<size_t>(size));
            continue;
        }
        for (uint64_t offset = 0; offset < size;) {
            const size_t n = static_cast<size_t>(std::min<uint64_t>(size - offset, staging.size()));
            t.fill(offset, n, staging.data());
            sink(staging.data(), n);
            offset += n;
        }
    }
}

// ---- Failures injected by tests ----

thread_local detail::WriteStep injected_step = detail::WriteStep::none;
thread_local int injected_error = 0;

// -1 with errno set when the test hook targets `step` (then cleared), else what call() returns.
template <typename Call>
auto unless_injected(detail::WriteStep step, Call&& call) -> decltype(call()) {
    if (injected_step == step && step != detail::WriteStep::none) {
        injected_step = detail::WriteStep::none;
        errno = injected_error;
        return -1;
    }
    return call();
}

// ---- POSIX helpers ----

std::string error_text(int error) { return std::strerror(error); }

int retry_open(int dir, const char* name, int flags, mode_t mode = 0) {
    int fd;
    do fd = ::openat(dir, name, flags, mode);
    while (fd < 0 && errno == EINTR);
    return fd;
}

int retry_fsync(int fd, detail::WriteStep step) {
    int rc;
    do rc = unless_injected(step, [&] { return ::fsync(fd); });
    while (rc != 0 && errno == EINTR);
    return rc;
}

// Writes all `size` bytes at `data` to fd, through short writes and EINTR; on failure returns
// the errno and the bytes written so far in `written`.
int write_all(int fd, const void* data, size_t size, uint64_t& written) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
        // Pieces of at most 1 GiB: Linux writes at most 2 GiB - 4 KiB in one call anyway.
        const size_t piece = std::min<size_t>(size, size_t{1} << 30);
        const ssize_t n =
            unless_injected(detail::WriteStep::write, [&] { return ::write(fd, p, piece); });
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) return EIO;  // a write that makes no progress would loop forever
        p += n;
        size -= static_cast<size_t>(n);
        written += static_cast<uint64_t>(n);
    }
    return 0;
}

// An error a sink throws with the errno of the failed write, caught by the writers below, which
// know what to say about the file.
struct WriteFailure {
    int error;
};

bool on_kernel_interface(const struct statfs& fs) {
    switch (static_cast<unsigned long>(fs.f_type)) {
        case PROC_SUPER_MAGIC:
        case SYSFS_MAGIC:
        case DEBUGFS_MAGIC:
        case SECURITYFS_MAGIC:
        case CGROUP_SUPER_MAGIC:
#ifdef TRACEFS_MAGIC
        case TRACEFS_MAGIC:
#endif
#ifdef CGROUP2_SUPER_MAGIC
        case CGROUP2_SUPER_MAGIC:
#endif
#ifdef BPF_FS_MAGIC
        case BPF_FS_MAGIC:
#endif
#ifdef EFIVARFS_MAGIC
        case EFIVARFS_MAGIC:
#endif
#ifdef PSTOREFS_MAGIC
        case PSTOREFS_MAGIC:
#endif
            return true;
        default:
            return false;
    }
}

std::string parent_of(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

// ---- What the path names ----

enum class OutputKind { replace, in_place };

struct Output {
    OutputKind kind = OutputKind::replace;
    std::string file;  // replace: the file to replace (links followed); in_place: the path given
    bool exists = false;
    struct stat st {};
};

// Follows the links of the last component one by one, as the kernel would, to tell a file from
// a descriptor reached through /proc (whose "link" names a pipe or a terminal, or a file the
// shell opened for `>`, which must be written through that descriptor, not replaced).
Output classify_output(const std::string& path) {
    check(!path.empty(), "cannot write a safetensors file to an empty path");
    Output out;
    std::string p = path;
    for (int hops = 0;; ++hops) {
        check(hops <= 40, "cannot write '", path, "': too many levels of symbolic links");
        struct stat ls {};
        if (::lstat(p.c_str(), &ls) != 0) {
            const int error = errno;
            check(error == ENOENT, "cannot write '", path, "': ", error_text(error));
            break;  // a new file (the directory is checked when the temporary is made)
        }
        if (!S_ISLNK(ls.st_mode)) {
            out.exists = true;
            out.st = ls;
            break;
        }
        struct statfs fs {};
        if (::statfs(parent_of(p).c_str(), &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC) {
            out.kind = OutputKind::in_place;
            out.file = path;
            return out;
        }
        std::string target(static_cast<size_t>(ls.st_size > 0 ? ls.st_size : 255) + 1, '\0');
        const ssize_t n = ::readlink(p.c_str(), target.data(), target.size());
        check(n >= 0, "cannot write '", path, "': cannot read the link '", p,
              "': ", error_text(errno));
        check(static_cast<size_t>(n) < target.size(), "cannot write '", path, "': the link '", p,
              "' changed while it was read");
        target.resize(static_cast<size_t>(n));
        p = target.front() == '/' ? target : parent_of(p) + "/" + target;
    }
    out.file = p;
    struct statfs fs {};
    if (::statfs(out.exists ? p.c_str() : parent_of(p).c_str(), &fs) == 0)
        check(!on_kernel_interface(fs), "refusing to write '", path,
              "': ", p == path ? "it" : "'" + p + "'",
              " is on a kernel interface (/proc, /sys, ...), where a write is a command to the "
              "kernel, not a file");
    if (!out.exists) return out;
    const mode_t type = out.st.st_mode & S_IFMT;
    check(type != S_IFDIR, "cannot replace '", path, "': it is a directory");
    check(type != S_IFBLK, "refusing to write '", path,
          "': it is a block device, whose contents a file written in place would overwrite");
    check(type != S_IFSOCK, "cannot write '", path, "': it is a socket, which cannot be opened");
    if (type == S_IFCHR || type == S_IFIFO) {
        out.kind = OutputKind::in_place;
        out.file = path;
    }
    return out;
}

// ---- Writing in place ----

// Blocks SIGPIPE on this thread for its lifetime, so that a reader that leaves a pipe makes
// write() fail with EPIPE instead of killing the process; a SIGPIPE raised meanwhile is taken
// back before the old mask returns, unless one was already pending.
class SigpipeBlock {
public:
    SigpipeBlock() {
        sigset_t pipe;
        sigemptyset(&pipe);
        sigaddset(&pipe, SIGPIPE);
        sigset_t pending;
        sigpending(&pending);
        was_pending_ = sigismember(&pending, SIGPIPE) == 1;
        pthread_sigmask(SIG_BLOCK, &pipe, &old_);
    }
    ~SigpipeBlock() {
        if (!was_pending_) {
            sigset_t pipe;
            sigemptyset(&pipe);
            sigaddset(&pipe, SIGPIPE);
            const timespec zero{0, 0};
            while (sigtimedwait(&pipe, nullptr, &zero) == SIGPIPE) {
            }
        }
        pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    }
    SigpipeBlock(const SigpipeBlock&) = delete;
    SigpipeBlock& operator=(const SigpipeBlock&) = delete;

private:
    sigset_t old_{};
    bool was_pending_ = false;
};

struct Descriptor {
    int fd = -1;
    ~Descriptor() {
        if (fd >= 0) ::close(fd);
    }
};

std::string described_in_place(mode_t mode) {
    switch (mode & S_IFMT) {
        case S_IFCHR:
            return "a character device";
        case S_IFIFO:
            return "a pipe";
        case S_IFREG:
            return "a file opened through /proc";
        default:
            return "not a regular file";
    }
}

void write_in_place(const Output& output, const std::vector<TensorSource>& tensors,
                    const Layout& layout, std::vector<unsigned char>& staging) {
    const std::string& path = output.file;
    const SigpipeBlock no_sigpipe;
    Descriptor out;
    // O_TRUNC empties a regular file reached through /proc (as `>` does) and is ignored by
    // devices and pipes; a FIFO waits here for its reader, as for a shell.
    out.fd = unless_injected(detail::WriteStep::create, [&] {
        return retry_open(AT_FDCWD, path.c_str(), O_WRONLY | O_TRUNC | O_NOCTTY | O_CLOEXEC);
    });
    check(out.fd >= 0, "cannot open '", path, "' for writing: ", error_text(errno));
    struct stat st {};
    check(::fstat(out.fd, &st) == 0, "cannot write '", path, "': ", error_text(errno));
    check(!S_ISBLK(st.st_mode), "refusing to write '", path,
          "': it leads to a block device, whose contents a file written in place would overwrite");
    const std::string what = described_in_place(st.st_mode);
    uint64_t written = 0;
    try {
        emit(tensors, layout, staging, [&](const void* data, size_t size) {
            if (const int error = write_all(out.fd, data, size, written)) throw WriteFailure{error};
        });
    } catch (const WriteFailure& failure) {
        fail("error while writing '", path, "': ", error_text(failure.error),
             failure.error == EPIPE ? " (its reader closed it)" : "", "; ", written, " of ",
             layout.total, " bytes were written to it (", what,
             ", written in place, never replaced)");
    }
    // Durability is a file's property: devices and pipes have nothing to flush.
    if (S_ISREG(st.st_mode) && retry_fsync(out.fd, detail::WriteStep::fsync_file) != 0)
        fail("cannot flush '", path, "' to disk (fsync: ", error_text(errno), "); its ",
             layout.total, " bytes were written in place");
}

// ---- Replacing a file ----

constexpr std::string_view kTempTag = ".tmp-";
constexpr size_t kTempRandom = 6;
// Room for kTempTag and the random part within a file name's 255 bytes.
constexpr size_t kTempStemMax = 255 - kTempTag.size() - kTempRandom;

const char kTempAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

// "<name>.tmp-" for a target called `base`: temporaries are this and 6 characters of
// kTempAlphabet. A name too long to take the suffix is cut, so that long names still work;
// targets that share the cut prefix only ever remove each other's stale temporaries.
std::string temp_stem(const std::string& base) {
    return base.substr(0, std::min(base.size(), kTempStemMax)) + std::string(kTempTag);
}

bool is_temp_of(const char* name, const std::string& stem) {
    const size_t n = std::strlen(name);
    if (n != stem.size() + kTempRandom || std::strncmp(name, stem.data(), stem.size()) != 0)
        return false;
    for (size_t i = stem.size(); i < n; ++i)
        if (std::strchr(kTempAlphabet, name[i]) == nullptr) return false;
    return true;
}

// Removes the temporaries of earlier writes of this target that no writer holds. A live writer
// holds an exclusive flock on its temporary from just after creating it until after it is
// renamed or removed, and the lock dies with its process; so an unlocked temporary that still
// has its name is stale. Nothing depends on process ids, which another process (or container)
// may reuse. The check and the removal happen under the lock, and a writer that finds its new
// temporary removed before it could lock it makes another. Best effort: what cannot be removed
// (no flock on this file system, no permission) stays, and the write goes on.
void remove_stale_temporaries(int dir, const std::string& stem) {
    const int list_fd = retry_open(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (list_fd < 0) return;
    DIR* listing = ::fdopendir(list_fd);
    if (listing == nullptr) {
        ::close(list_fd);
        return;
    }
    std::vector<std::string> candidates;
    while (const dirent* entry = ::readdir(listing))
        if (is_temp_of(entry->d_name, stem)) candidates.emplace_back(entry->d_name);
    ::closedir(listing);
    for (const std::string& name : candidates) {
        // O_NONBLOCK: a FIFO given such a name must not stop the write.
        Descriptor held;
        held.fd = retry_open(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (held.fd < 0) continue;
        struct stat opened {
        }, named{};
        if (::fstat(held.fd, &opened) != 0 || !S_ISREG(opened.st_mode)) continue;
        if (::flock(held.fd, LOCK_EX | LOCK_NB) != 0) continue;  // a live writer's
        if (::fstatat(dir, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (named.st_dev != opened.st_dev || named.st_ino != opened.st_ino) continue;
        ::unlinkat(dir, name.c_str(), 0);
    }
}

// A random name for a temporary; the generator is per thread, seeded from the OS, the time and
// the thread, so that threads and processes draw different names.
std::string random_temp_name(const std::string& stem) {
    thread_local std::mt19937_64 generator([] {
        std::random_device device;
        std::seed_seq seed{
            device(), device(), static_cast<unsigned>(::getpid()),
            static_cast<unsigned>(std::hash<std::thread::id>()(std::this_thread::get_id())),
            static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count())};
        return std::mt19937_64(seed);
    }());
    std::string name = stem;
    std::uniform_int_distribution<size_t> pick(0, sizeof(kTempAlphabet) - 2);
    for (size_t i = 0; i < kTempRandom; ++i) name += kTempAlphabet[pick(generator)];
    return name;
}

// The temporary of one write: created (O_EXCL, mode 0666 less the umask, as a new file), locked,
// and removed again unless commit() was called.
class Temporary {
public:
    Temporary(int dir, const std::string& stem, const std::string& path,
              const std::string& dir_name, const std::string& kept)
        : dir_(dir) {
        for (int attempt = 0;; ++attempt) {
            name_ = random_temp_name(stem);
            fd_ = unless_injected(detail::WriteStep::create, [&] {
                return retry_open(dir, name_.c_str(),
                                  O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
            });
            if (fd_ < 0) {
                const int error = errno;
                if (error == EEXIST && attempt < 100) continue;
                fail("cannot write '", path, "': cannot create a temporary file in '", dir_name,
                     "': ", error_text(error), "; ", kept);
            }
            // A file system without flock (ENOLCK, EOPNOTSUPP) leaves temporaries unlocked; its
            // stale-temporary removal cannot lock them either, so it removes none.
            int rc;
            do rc = ::flock(fd_, LOCK_EX);
            while (rc != 0 && errno == EINTR);
            struct stat st {};
            if (::fstat(fd_, &st) == 0 && st.st_nlink > 0) break;
            // Removed as stale between its creation and the lock: make another.
            ::close(fd_);
            fd_ = -1;
            check(attempt < 100, "cannot write '", path, "': its temporary files in '", dir_name,
                  "' keep being removed; ", kept);
        }
    }
    ~Temporary() {
        if (!committed_) remove();
        if (fd_ >= 0) ::close(fd_);  // after the rename or removal: the lock marks it live
    }
    Temporary(const Temporary&) = delete;
    Temporary& operator=(const Temporary&) = delete;

    int fd() const { return fd_; }
    const std::string& name() const { return name_; }
    void commit() { committed_ = true; }

    // Unlinks the temporary; the errno of a failure, or 0.
    int remove() {
        committed_ = true;
        return ::unlinkat(dir_, name_.c_str(), 0) == 0 || errno == ENOENT ? 0 : errno;
    }

private:
    int dir_;
    int fd_ = -1;
    std::string name_;
    bool committed_ = false;
};

void write_replacing(const Output& output, const std::string& path,
                     const std::vector<TensorSource>& tensors, const Layout& layout,
                     std::vector<unsigned char>& staging) {
    const std::string dir_name = parent_of(output.file);
    const std::string base = base_of(output.file);
    const std::string kept =
        output.exists ? "the previous file is unchanged" : "no file was created";
    Descriptor dir;
    dir.fd = retry_open(AT_FDCWD, dir_name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    check(dir.fd >= 0, "cannot write '", path, "': cannot open its directory '", dir_name,
          "': ", error_text(errno));
    const std::string stem = temp_stem(base);
    // First, so that the space a killed write held is free for this one.
    remove_stale_temporaries(dir.fd, stem);

    Temporary temp(dir.fd, stem, path, dir_name, kept);
    // Says what became of the temporary after a failure.
    const auto removed = [&]() -> std::string {
        const int error = temp.remove();
        if (error == 0) return "the partial copy was removed";
        return "the partial copy '" + dir_name + "/" + temp.name() + "' could not be removed (" +
               error_text(error) + ")";
    };
    // A replaced file keeps its owner where this process may give it (root) and its permissions
    // (a private checkpoint stays private); chown first, as it clears set-id bits.
    if (output.exists) {
        if (::fchown(temp.fd(), output.st.st_uid, output.st.st_gid) != 0) {
            // Not permitted (another owner, and not root): the file is this process's, as new.
        }
        ::fchmod(temp.fd(), output.st.st_mode & 07777);
    }
    // Reserving the whole size first makes a full disk fail before any data is written, and
    // keeps the file in few extents; file systems without fallocate are written as they come.
    if (layout.total > 0 && ::fallocate(temp.fd(), 0, 0, static_cast<off_t>(layout.total)) != 0) {
        const int error = errno;
        if (error == ENOSPC || error == EFBIG || error == EDQUOT) {
            const std::string after = removed();
            fail("error while writing '", path, "': ", error_text(error), " (", layout.total,
                 " bytes needed); ", kept, ", ", after);
        }
    }
    uint64_t written = 0;
    try {
        emit(tensors, layout, staging, [&](const void* data, size_t size) {
            if (const int error = write_all(temp.fd(), data, size, written))
                throw WriteFailure{error};
        });
    } catch (const WriteFailure& failure) {
        const std::string after = removed();
        fail("error while writing '", path, "': ", error_text(failure.error), "; ", kept, ", ",
             after);
    }
    if (retry_fsync(temp.fd(), detail::WriteStep::fsync_file) != 0) {
        const int error = errno;
        const std::string after = removed();
        fail("cannot flush the new contents of '", path, "' to disk (fsync: ", error_text(error),
             "); ", kept, ", ", after);
    }
    if (unless_injected(detail::WriteStep::rename, [&] {
            return ::renameat(dir.fd, temp.name().c_str(), dir.fd, base.c_str());
        }) != 0) {
        const int error = errno;
        const std::string after = removed();
        fail("cannot replace '", path, "' with the file written: ", error_text(error), "; ", kept,
             ", ", after);
    }
    temp.commit();
    // Some file systems cannot flush a directory (EINVAL): their renames are as durable as
    // they get.
    if (retry_fsync(dir.fd, detail::WriteStep::fsync_directory) != 0 && errno != EINVAL) {
        const int error = errno;
        fail("'", path, "' holds the new file, but its directory '", dir_name,
             "' could not be flushed to disk (fsync: ", error_text(error),
             "): running programs see the new file, and a crash of the machine soon after may "
             "bring back the previous one");
    }
}

}  // namespace

namespace detail {

void inject_write_failure(WriteStep step, int error) {
    injected_step = step;
    injected_error = error;
}

}  // namespace detail

std::vector<unsigned char> serialize_safetensors(
    const std::vector<TensorSource>& tensors, const std::map<std::string, std::string>& metadata) {
    const Layout layout = layout_of(tensors, metadata);
    std::vector<unsigned char> staging = staging_for(tensors, layout);
    MemoryRequest().add("file bytes", layout.total).check([&] {
        return "serialize_safetensors (" + std::to_string(tensors.size()) + " tensors)";
    });
    std::vector<unsigned char> out(static_cast<size_t>(layout.total));
    size_t at = 0;
    emit(tensors, layout, staging, [&](const void* data, size_t size) {
        std::memcpy(out.data() + at, data, size);
        at += size;
    });
    return out;
}

namespace {

std::vector<TensorSource> sources_of(const TensorFile& file) {
    std::vector<TensorSource> out;
    out.reserve(file.size());
    for (const Tensor& t : file.tensors()) {
        // TensorFile::add checked this, but the fields are public; the header must not lie.
        t.check_bytes();
        out.push_back(TensorSource::of(t));
    }
    return out;
}

}  // namespace

std::vector<unsigned char> serialize_safetensors(const TensorFile& file) {
    return serialize_safetensors(sources_of(file), file.metadata);
}

void write_safetensors(const std::string& path, const std::vector<TensorSource>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    const Layout layout = layout_of(tensors, metadata);
    std::vector<unsigned char> staging = staging_for(tensors, layout);
    const Output output = classify_output(path);
    if (output.kind == OutputKind::in_place)
        write_in_place(output, tensors, layout, staging);
    else
        write_replacing(output, path, tensors, layout, staging);
}

void write_safetensors(const std::string& path, const TensorFile& file) {
    write_safetensors(path, sources_of(file), file.metadata);
}

}  // namespace lstm::io
