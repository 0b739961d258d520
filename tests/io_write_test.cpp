// Output paths of lstm/io (write_safetensors and save_checkpoint on top of it): a file is
// replaced whole or not at all and survives a crash once the call returns; devices, FIFOs and
// descriptors are written in place and never replaced; concurrent writers and killed writers
// leave whole files and no temporaries; checkpoints stream from the model's buffers.

#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lstm/io/checkpoint.hpp"
#include "lstm/io/safetensors.hpp"
#include "lstm/nn/model.hpp"
#include "test_data.hpp"
#include "test_util.hpp"
#include "tools/lstm_tool/tool.hpp"

using namespace lstm;
using namespace lstm::io;
using Catch::Contains;
using Catch::StartsWith;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A fresh directory, removed with everything in it at the end of the scope.
class TempDir {
public:
    TempDir() {
        std::string pattern = (fs::temp_directory_path() / "io_write_test_XXXXXX").string();
        REQUIRE(::mkdtemp(pattern.data()) != nullptr);
        path_ = pattern;
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string operator/(const std::string& name) const {
        return (fs::path(path_) / name).string();
    }
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

// A tmpfs mounted on `dir` for the scope (lazily unmounted however the test ends); mounted()
// is false, with the reason in why(), where this host does not let the test mount.
class TmpfsMount {
public:
    TmpfsMount(const std::string& dir, const std::string& options) : dir_(dir) {
        if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) == 0)
            mounted_ = true;
        else
            why_ = "cannot mount a tmpfs (" + std::string(std::strerror(errno)) +
                   "): the test needs CAP_SYS_ADMIN, as CI's root has";
    }
    ~TmpfsMount() {
        if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
    }
    TmpfsMount(const TmpfsMount&) = delete;
    TmpfsMount& operator=(const TmpfsMount&) = delete;
    bool mounted() const { return mounted_; }
    const std::string& why() const { return why_; }
    // Makes the mount read-only; false where the kernel refuses.
    bool make_read_only() {
        return ::mount(nullptr, dir_.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) == 0;
    }

private:
    std::string dir_, why_;
    bool mounted_ = false;
};

std::vector<std::string> entries(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

// "equal", or the sizes and where two byte strings first differ: Catch would print them whole.
std::string compare_bytes(const std::vector<unsigned char>& got,
                          const std::vector<unsigned char>& want) {
    if (got == want) return "equal";
    size_t k = 0;
    while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
    return std::to_string(got.size()) + " bytes where " + std::to_string(want.size()) +
           " were expected, the first difference at byte " + std::to_string(k);
}

std::vector<unsigned char> file_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}

// A file of one F32 tensor of n elements, all `value`, plus a tag in the metadata.
TensorFile filled(float value, int64_t n) {
    TensorFile f;
    f.metadata["value"] = std::to_string(value);
    f.add(Tensor::from("w", {n}, std::vector<float>(static_cast<size_t>(n), value)));
    return f;
}

// Mixed dtypes (8-byte types go first in the data), a scalar, an empty tensor, metadata.
TensorFile mixed_file() {
    TensorFile f;
    f.metadata["format"] = "test";
    f.metadata["note"] = "quotes \" and unicode \xc3\xa9";
    f.add(Tensor::from("a.f32", {3, 5}, test::random_vector<float>(15, 1)));
    f.add(Tensor::from("b.i64", {4}, std::vector<int64_t>{1, -2, 3, int64_t{1} << 40}));
    f.add(Tensor::from("c.scalar", {}, std::vector<double>{2.5}));
    f.add(Tensor::from("d.empty", {0, 7}, std::vector<float>{}));
    f.add(Tensor::from("e.i32", {2, 2}, std::vector<int32_t>{7, 8, 9, -10}));
    f.add(Tensor::from("f.f64", {6}, test::random_vector<double>(6, 2)));
    return f;
}

std::string error_of(const std::function<void()>& call) {
    try {
        call();
    } catch (const lstm::Error& e) {
        return e.what();
    }
    return "(no error)";
}

struct NodeId {
    mode_t type = 0;
    dev_t rdev = 0;
    ino_t ino = 0;
    bool operator==(const NodeId& o) const {
        return type == o.type && rdev == o.rdev && ino == o.ino;
    }
};

NodeId node_of(const std::string& path) {
    struct stat st {};
    REQUIRE(::lstat(path.c_str(), &st) == 0);
    return {st.st_mode & S_IFMT, st.st_rdev, st.st_ino};
}

std::string describe(const NodeId& n) {
    return "type " + std::to_string(n.type) + ", device " + std::to_string(major(n.rdev)) + ":" +
           std::to_string(minor(n.rdev)) + ", inode " + std::to_string(n.ino);
}

// Everything read from fd until end of file.
std::vector<unsigned char> read_all(int fd) {
    std::vector<unsigned char> out;
    unsigned char buffer[65536];
    for (;;) {
        const ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        out.insert(out.end(), buffer, buffer + n);
    }
    return out;
}

// The checkpointed model of the kill and memory tests: only its size matters.
nn::ModelConfig checkpoint_config(int64_t input, int64_t hidden, int64_t layers) {
    nn::ModelConfig c;
    c.lstm = Config{input, hidden, layers, false};
    c.lstm.dropout = 0.25;
    c.classes = 5;
    c.dense_bias = true;
    c.adam = nn::adamw_options(0.01, 0.05);
    return c;
}

// One training step, so that the moments, steps and dropout count are not at their defaults.
void step(nn::SequenceModel<float>& model, int64_t input, uint64_t seed) {
    const int64_t T = 3, N = 2;
    const std::vector<float> x = test::random_vector<float>(T * N * input, seed);
    const std::vector<int64_t> lengths{3, 2}, targets{1, 4};
    model.train_step(TensorView<const float>(x.data(), {T, N, input}), Span<const int64_t>(lengths),
                     Span<const int64_t>(targets));
}

TensorFile checkpoint_file(nn::SequenceModel<float>& model) {
    TensorFile f;
    add_checkpoint(f, model);
    return f;
}

int64_t kb_of_status(const char* key) {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::strlen(key)));
    return -1;
}

}  // namespace

TEST_CASE("write_safetensors streams exactly the bytes serialize_safetensors gives",
          "[io][write]") {
    TempDir dir;
    const std::string path = dir / "mixed.safetensors";
    const TensorFile file = mixed_file();
    write_safetensors(path, file);
    CHECK(compare_bytes(file_bytes(path), serialize_safetensors(file)) == "equal");
    CHECK(read_safetensors(path) == file);

    // Sources that fill chunks: a tensor of several chunks, asked for in order, none larger than
    // kWriteChunkBytes, give the bytes of the same tensors held whole.
    const int64_t n = int64_t(kWriteChunkBytes / sizeof(double)) * 2 + 1234;
    const std::vector<double> big = test::random_vector<double>(static_cast<size_t>(n), 3);
    TensorFile whole = mixed_file();
    whole.add(Tensor::from("g.big", {n}, big));
    std::vector<TensorSource> sources;
    for (const Tensor& t : file.tensors()) sources.push_back(TensorSource::of(t));
    uint64_t next = 0;
    int calls = 0;
    bool in_order = true;
    TensorSource streamed;
    streamed.name = "g.big";
    streamed.dtype = ScalarType::f64;
    streamed.shape = {n};
    streamed.fill = [&](uint64_t offset, size_t size, void* dst) {
        in_order = in_order && offset == next && size <= kWriteChunkBytes && size > 0;
        next = offset + size;
        ++calls;
        std::memcpy(dst, reinterpret_cast<const unsigned char*>(big.data()) + offset, size);
    };
    sources.push_back(streamed);
    const std::string big_path = dir / "big.safetensors";
    write_safetensors(big_path, sources, whole.metadata);
    CHECK(in_order);
    CHECK(calls == 3);
    CHECK(next == uint64_t(n) * sizeof(double));
    CHECK(compare_bytes(file_bytes(big_path), serialize_safetensors(whole)) == "equal");
    CHECK(compare_bytes(serialize_safetensors(sources, whole.metadata),
                        serialize_safetensors(whole)) == "equal");

    // Descriptions are checked before the path is touched.
    std::vector<TensorSource> twice{TensorSource::of(file.tensors()[0]),
                                    TensorSource::of(file.tensors()[0])};
    const std::string untouched = dir / "untouched.safetensors";
    CHECK_THAT(error_of([&] { write_safetensors(untouched, twice); }),
               Contains("duplicate tensor name 'a.f32'"));
    TensorSource empty_handed;
    empty_handed.name = "nothing";
    empty_handed.shape = {2};
    CHECK_THAT(error_of([&] { write_safetensors(untouched, {empty_handed}); }),
               Contains("tensor 'nothing': a TensorSource needs `host` or `fill` for its 8 bytes"));
    TensorSource negative = empty_handed;
    negative.shape = {-1};
    CHECK_THAT(error_of([&] { write_safetensors(untouched, {negative}); }),
               Contains("has a negative size"));
    CHECK(entries(dir.path()) == std::vector<std::string>{"big.safetensors", "mixed.safetensors"});
}

TEST_CASE("save_checkpoint streams the bytes of add_checkpoint's file from the model",
          "[io][write]") {
    TempDir dir;
    const int64_t input = 6;
    nn::SequenceModel<float> model(checkpoint_config(input, 9, 2), "basic", Device::cpu, 3);
    step(model, input, 1);
    step(model, input, 2);
    const std::string path = dir / "model.ckpt";
    save_checkpoint(path, model);
    // add_checkpoint copies everything into a TensorFile; save_checkpoint writes from the
    // model's buffers: the same bytes.
    const TensorFile expected = checkpoint_file(model);
    const std::vector<unsigned char> bytes = file_bytes(path);
    CHECK(compare_bytes(bytes, serialize_safetensors(expected)) == "equal");
    CHECK(parse_safetensors(bytes) == expected);
    const CheckpointSources sources = checkpoint_sources(model);
    CHECK(compare_bytes(serialize_safetensors(sources.tensors, sources.metadata), bytes) ==
          "equal");

    nn::SequenceModel<float> back(checkpoint_config(input, 9, 2), "basic", Device::cpu, 99);
    load_checkpoint(path, back);
    CHECK(compare_bytes(serialize_safetensors(checkpoint_file(back)), bytes) == "equal");
}

TEST_CASE("saving a checkpoint adds no copy of the file to host memory", "[io][write]") {
    // Issue 50: a 103 MB checkpoint added about 200 MB of peak memory (the file built whole,
    // then copied). A host model is now written from its buffers: the peak grows by the header.
    const int64_t input = 64;
    nn::SequenceModel<float> model(checkpoint_config(input, 448, 2), "basic", Device::cpu, 5);
    TempDir dir;
    const std::string path = dir / "model.ckpt";
    save_checkpoint(path, model);  // first use of the code paths, outside the measurement
    const uint64_t file_size = fs::file_size(path);
    REQUIRE(file_size > (24u << 20));
    ::malloc_trim(0);
    {
        std::ofstream clear("/proc/self/clear_refs");
        clear << "5";
        clear.flush();
        if (!clear) LSTM_SKIP("cannot reset the peak resident size (/proc/self/clear_refs)");
    }
    if (!LSTM_MEMORY_MEASURABLE)
        LSTM_SKIP("a sanitizer's allocator keeps freed memory in quarantine: no peak to measure");
    // The growth of the peak resident size over what call() adds, measured from a reset peak.
    const auto peak_growth = [](const std::function<void()>& call) -> uint64_t {
        ::malloc_trim(0);
        std::ofstream("/proc/self/clear_refs") << "5";
        const int64_t before_kb = kb_of_status("VmRSS:");
        call();
        const int64_t peak_kb = kb_of_status("VmHWM:");
        REQUIRE(before_kb > 0);
        REQUIRE(peak_kb > 0);
        return uint64_t(std::max<int64_t>(0, peak_kb - before_kb)) * 1024;
    };
    const uint64_t extra = peak_growth([&] { save_checkpoint(path, model); });
    // The measurement itself must see a copy of the file: the old way, built whole in memory.
    const uint64_t whole =
        peak_growth([&] { (void)serialize_safetensors(checkpoint_file(model)).size(); });
    INFO("file " << file_size << " bytes; peak extra resident memory " << extra
                 << " bytes saving it, " << whole << " bytes building it in memory");
    CHECK(whole > file_size);
    CHECK(extra < file_size / 8);
}

TEST_CASE("a FIFO is written in place: its reader gets the bytes and the FIFO stays",
          "[io][write]") {
    TempDir dir;
    const std::string fifo = dir / "pipe";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    const NodeId node = node_of(fifo);
    const TensorFile file = mixed_file();
    std::vector<unsigned char> got;
    std::thread reader([&] {
        const int fd = ::open(fifo.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) return;
        got = read_all(fd);
        ::close(fd);
    });
    write_safetensors(fifo, file);
    reader.join();
    CHECK(compare_bytes(got, serialize_safetensors(file)) == "equal");
    CHECK(node_of(fifo) == node);
    CHECK(entries(dir.path()) == std::vector<std::string>{"pipe"});

    // A reader that leaves early: EPIPE as an error (no SIGPIPE kills the process), the bytes
    // written so far counted, the FIFO still there.
    const TensorFile large = filled(1.0f, 1 << 20);
    std::thread quitter([&] {
        const int fd = ::open(fifo.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) return;
        unsigned char some[100];
        (void)::read(fd, some, sizeof some);
        ::close(fd);
    });
    const std::string message = error_of([&] { write_safetensors(fifo, large); });
    quitter.join();
    CHECK_THAT(message, StartsWith("error while writing '" + fifo + "': Broken pipe"));
    CHECK_THAT(message,
               Contains("bytes were written to it (a pipe, written in place, never replaced)"));
    CHECK(node_of(fifo) == node);
}

TEST_CASE("a character device made with mknod is written, never replaced", "[io][write]") {
    // Issue 50: `lstm_tool ... --out /tmp/mynull` (mknod c 1 3) left a regular 728-byte file.
    TempDir dir;
    const std::string null_node = dir / "mynull", full_node = dir / "myfull";
    if (::mknod(null_node.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)
        LSTM_SKIP("mknod of a character device failed (" << std::strerror(errno)
                                                         << "): the test needs CAP_MKNOD");
    REQUIRE(::mknod(full_node.c_str(), S_IFCHR | 0666, makedev(1, 7)) == 0);
    const NodeId null_id = node_of(null_node), full_id = node_of(full_node);
    write_safetensors(null_node, mixed_file());
    CHECK(node_of(null_node) == null_id);
    INFO("after: " << describe(node_of(null_node)));
    CHECK_THAT(error_of([&] { write_safetensors(full_node, mixed_file()); }),
               StartsWith("error while writing '" + full_node + "': No space left on device"));
    CHECK(node_of(full_node) == full_id);
    CHECK(entries(dir.path()) == std::vector<std::string>{"myfull", "mynull"});
}

TEST_CASE("/dev/null takes a file and /dev/full refuses one, and both stay devices",
          "[io][write]") {
    // Issue 50: `--out /dev/full` replaced the device node with a regular file.
    if (!fs::exists("/dev/null") || !fs::exists("/dev/full"))
        LSTM_SKIP("this host has no /dev/null or /dev/full");
    const NodeId null_before = node_of("/dev/null"), full_before = node_of("/dev/full");
    REQUIRE(null_before.type == S_IFCHR);
    REQUIRE(full_before.type == S_IFCHR);
    write_safetensors("/dev/null", mixed_file());
    const std::string message = error_of([] { write_safetensors("/dev/full", mixed_file()); });
    CHECK_THAT(message, StartsWith("error while writing '/dev/full': No space left on device"));
    CHECK_THAT(message, Contains("0 of "));
    CHECK_THAT(message, Contains("bytes were written to it (a character device, written in place"));
    const NodeId null_after = node_of("/dev/null"), full_after = node_of("/dev/full");
    INFO("/dev/null before: " << describe(null_before) << ", after: " << describe(null_after));
    INFO("/dev/full before: " << describe(full_before) << ", after: " << describe(full_after));
    CHECK(null_after == null_before);
    CHECK(full_after == full_before);
    // Nothing was left beside them either.
    for (const std::string& name : entries("/dev"))
        CHECK_FALSE((name.rfind("null.tmp-", 0) == 0 || name.rfind("full.tmp-", 0) == 0 ||
                     name.find(".partial-") != std::string::npos));
}

TEST_CASE("/dev/stdout and /dev/fd/N are written through the descriptor", "[io][write]") {
    const TensorFile file = mixed_file();
    const std::vector<unsigned char> expected = serialize_safetensors(file);

    // A pipe, as in `lstm_tool ... --out /dev/stdout | consumer`.
    int ends[2];
    REQUIRE(::pipe2(ends, O_CLOEXEC) == 0);
    std::vector<unsigned char> got;
    std::thread reader([&] { got = read_all(ends[0]); });
    write_safetensors("/dev/fd/" + std::to_string(ends[1]), file);
    ::close(ends[1]);
    reader.join();
    ::close(ends[0]);
    CHECK(compare_bytes(got, expected) == "equal");

    // A regular file the shell opened for `>`: written through that descriptor (the file
    // is emptied and filled, as `cat > /dev/stdout` does), not replaced behind the shell's back.
    TempDir dir;
    const std::string redirected = dir / "redirected.safetensors";
    write_safetensors(redirected, filled(9.0f, 5000));  // longer: the write must truncate
    const int fd = ::open(redirected.c_str(), O_WRONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    const NodeId node = node_of(redirected);
    write_safetensors("/proc/self/fd/" + std::to_string(fd), file);
    ::close(fd);
    CHECK(node_of(redirected) == node);
    CHECK(compare_bytes(file_bytes(redirected), expected) == "equal");
    CHECK(entries(dir.path()) == std::vector<std::string>{"redirected.safetensors"});

    // /dev/stdout itself, pointed at a pipe for the call.
    std::fflush(stdout);
    const int saved = ::dup(STDOUT_FILENO);
    REQUIRE(saved >= 0);
    REQUIRE(::pipe2(ends, O_CLOEXEC) == 0);
    std::vector<unsigned char> from_stdout;
    std::thread stdout_reader([&] { from_stdout = read_all(ends[0]); });
    ::dup2(ends[1], STDOUT_FILENO);
    ::close(ends[1]);
    const std::string message = error_of([&] { write_safetensors("/dev/stdout", file); });
    ::dup2(saved, STDOUT_FILENO);
    ::close(saved);
    stdout_reader.join();
    ::close(ends[0]);
    CHECK(message == "(no error)");
    CHECK(compare_bytes(from_stdout, expected) == "equal");
}

TEST_CASE("kernel interfaces, block devices and directories are refused by name", "[io][write]") {
    const TensorFile file = mixed_file();
    // A byte of a header length written to /proc/sysrq-trigger would be a command; this
    // process's own name stands in for such a file (harmless should the refusal ever break).
    CHECK_THAT(error_of([&] { write_safetensors("/proc/self/comm", file); }),
               StartsWith("refusing to write '/proc/self/comm': it is on a kernel interface"));
    CHECK_THAT(error_of([&] { write_safetensors("/proc/new.safetensors", file); }),
               StartsWith("refusing to write '/proc/new.safetensors'"));
    TempDir dir;
    const std::string block = dir / "block";
    if (::mknod(block.c_str(), S_IFBLK | 0600, makedev(7, 200)) == 0) {
        const NodeId node = node_of(block);
        CHECK_THAT(error_of([&] { write_safetensors(block, file); }),
                   StartsWith("refusing to write '" + block + "': it is a block device"));
        CHECK(node_of(block) == node);
        ::unlink(block.c_str());
    }
    CHECK_THAT(error_of([&] { write_safetensors(dir.path(), file); }),
               StartsWith("cannot replace '" + dir.path() + "': it is a directory"));
    CHECK(entries(dir.path()).empty());
}

TEST_CASE("a read-only directory refuses the write and keeps the previous file", "[io][write]") {
    TempDir dir;
    TmpfsMount mount(dir.path(), "size=1m");
    if (!mount.mounted()) LSTM_SKIP(mount.why());
    const std::string path = dir / "model.safetensors";
    const TensorFile before = filled(1.0f, 100), after = filled(2.0f, 100);
    write_safetensors(path, before);
    if (!mount.make_read_only()) LSTM_SKIP("cannot remount the tmpfs read-only");
    CHECK_THAT(
        error_of([&] { write_safetensors(path, after); }),
        StartsWith("cannot write '" + path + "': cannot create a temporary file in '" + dir.path() +
                   "': Read-only file system; the previous file is "
                   "unchanged"));
    CHECK(read_safetensors(path) == before);
    const std::string fresh = dir / "fresh.safetensors";
    CHECK_THAT(error_of([&] { write_safetensors(fresh, after); }),
               Contains("Read-only file system; no file was created"));
    CHECK(entries(dir.path()) == std::vector<std::string>{"model.safetensors"});
}

TEST_CASE("a full file system refuses the write, keeps the previous file, leaves no temporary",
          "[io][write]") {
    TempDir dir;
    TmpfsMount mount(dir.path(), "size=64k");
    if (!mount.mounted()) LSTM_SKIP(mount.why());
    const std::string path = dir / "model.safetensors";
    const TensorFile small = filled(1.0f, 1000);
    write_safetensors(path, small);
    const std::string message = error_of([&] { write_safetensors(path, filled(2.0f, 40000)); });
    CHECK_THAT(message, StartsWith("error while writing '" + path + "': No space left on device"));
    CHECK_THAT(message, Contains("the previous file is unchanged, the partial copy was removed"));
    CHECK(read_safetensors(path) == small);
    CHECK(entries(dir.path()) == std::vector<std::string>{"model.safetensors"});

    // The space a killed write left in its temporary is given back before the next write, which
    // then fits (issue 50: such temporaries stayed forever).
    {
        std::ofstream stale(dir / "model.safetensors.tmp-K1lled", std::ios::binary);
        stale << std::string(40000, 'x');
    }
    const TensorFile medium = filled(3.0f, 6000);
    write_safetensors(path, medium);
    CHECK(read_safetensors(path) == medium);
    CHECK(entries(dir.path()) == std::vector<std::string>{"model.safetensors"});
}

TEST_CASE("a failed write, flush or rename says what was kept and leaves no temporary",
          "[io][write]") {
    TempDir dir;
    const std::string path = dir / "model.safetensors";
    const TensorFile before = filled(1.0f, 64), after = filled(2.0f, 64);
    write_safetensors(path, before);
    struct Case {
        io::detail::WriteStep step;
        int error;
        std::string start;
    };
    const std::vector<Case> cases{
        {io::detail::WriteStep::create, EACCES,
         "cannot write '" + path + "': cannot create a temporary file in '" + dir.path() +
             "': Permission denied; the previous file is unchanged"},
        {io::detail::WriteStep::write, EIO,
         "error while writing '" + path +
             "': Input/output error; the previous file is "
             "unchanged, the partial copy was removed"},
        {io::detail::WriteStep::fsync_file, EIO,
         "cannot flush the new contents of '" + path +
             "' to disk (fsync: Input/output error); "
             "the previous file is unchanged, the "
             "partial copy was removed"},
        {io::detail::WriteStep::rename, EXDEV,
         "cannot replace '" + path +
             "' with the file written: Invalid cross-device link; the "
             "previous file is unchanged, the partial copy was removed"}};
    for (const Case& c : cases) {
        INFO("step " << int(c.step));
        io::detail::inject_write_failure(c.step, c.error);
        CHECK(error_of([&] { write_safetensors(path, after); }) == c.start);
        CHECK(read_safetensors(path) == before);
        CHECK(entries(dir.path()) == std::vector<std::string>{"model.safetensors"});
    }
    // A new path that fails creates nothing.
    io::detail::inject_write_failure(io::detail::WriteStep::fsync_file, EIO);
    CHECK_THAT(error_of([&] { write_safetensors(dir / "new.safetensors", after); }),
               Contains("no file was created, the partial copy was removed"));
    CHECK(entries(dir.path()) == std::vector<std::string>{"model.safetensors"});

    // The directory's flush comes after the rename: the error says the new file is there.
    io::detail::inject_write_failure(io::detail::WriteStep::fsync_directory, EIO);
    CHECK(error_of([&] { write_safetensors(path, after); }) ==
          "'" + path + "' holds the new file, but its directory '" + dir.path() +
              "' could not be flushed to disk (fsync: Input/output error): running programs "
              "see the new file, and a crash of the machine soon after may bring back the "
              "previous one");
    CHECK(read_safetensors(path) == after);
    CHECK(entries(dir.path()) == std::vector<std::string>{"model.safetensors"});
    io::detail::inject_write_failure(io::detail::WriteStep::none, 0);
}

TEST_CASE("stale temporaries of killed writes are removed, live ones and others kept",
          "[io][write]") {
    TempDir dir;
    const std::string path = dir / "m.st";
    for (const char* name :
         {"m.st.tmp-AbC123", "m.st.tmp-zzzzzz", "m.st.tmp-short", "m.st.tmp-ABCDEFG",
          "m.st.tmp-AB_DEF", "other.tmp-ABCDEF", "m.st.partial-1", "m.st.tmp-Live01"}) {
        std::ofstream(dir / name) << "x";
    }
    // A concurrent writer's temporary: locked while it is written.
    const int live = ::open((dir / "m.st.tmp-Live01").c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(live >= 0);
    REQUIRE(::flock(live, LOCK_EX) == 0);
    write_safetensors(path, mixed_file());
    CHECK(entries(dir.path()) ==
          std::vector<std::string>{"m.st", "m.st.partial-1", "m.st.tmp-ABCDEFG", "m.st.tmp-AB_DEF",
                                   "m.st.tmp-Live01", "m.st.tmp-short", "other.tmp-ABCDEF"});
    ::close(live);  // its writer died: the next write removes it
    write_safetensors(path, mixed_file());
    CHECK(entries(dir.path()) == std::vector<std::string>{"m.st", "m.st.partial-1",
                                                          "m.st.tmp-ABCDEFG", "m.st.tmp-AB_DEF",
                                                          "m.st.tmp-short", "other.tmp-ABCDEF"});
    CHECK(read_safetensors(path) == mixed_file());

    // Through a link, the temporaries are those of the file it names, in its directory.
    TempDir other;
    const std::string link = other / "latest";
    fs::create_symlink(path, link);
    std::ofstream(dir / "m.st.tmp-Stale9") << "x";
    const TensorFile next = filled(4.0f, 10);
    write_safetensors(link, next);
    CHECK(fs::is_symlink(link));
    CHECK(read_safetensors(path) == next);
    CHECK(entries(other.path()) == std::vector<std::string>{"latest"});
    CHECK(!fs::exists(dir / "m.st.tmp-Stale9"));
}

TEST_CASE("two threads writing one path each leave a whole file and readers see whole files",
          "[io][write]") {
    // Issue 50: both threads used <target>.partial-<pid>; readers saw the target truncated and
    // writers failed with "cannot replace ... No such file or directory".
    TempDir dir;
    const std::string path = dir / "shared.safetensors";
    const std::vector<TensorFile> contents{filled(1.0f, 50000), filled(2.0f, 120000),
                                           filled(3.0f, 20000)};
    std::vector<std::vector<unsigned char>> expected;
    for (const TensorFile& f : contents) expected.push_back(serialize_safetensors(f));
    write_safetensors(path, contents[0]);

    const auto deadline = Clock::now() + std::chrono::milliseconds(1500);
    std::atomic<int> writes{0}, reads{0}, bad{0};
    std::vector<std::string> errors;
    std::mutex errors_mutex;
    const auto note = [&](const std::string& what) {
        ++bad;
        std::lock_guard<std::mutex> lock(errors_mutex);
        if (errors.size() < 8) errors.push_back(what);
    };
    std::vector<std::thread> threads;
    for (size_t w = 0; w < contents.size(); ++w)
        threads.emplace_back([&, w] {
            while (Clock::now() < deadline) {
                try {
                    write_safetensors(path, contents[w]);
                    ++writes;
                } catch (const std::exception& e) {
                    note(std::string("writer: ") + e.what());
                }
            }
        });
    for (int r = 0; r < 2; ++r)
        threads.emplace_back([&] {
            while (Clock::now() < deadline) {
                const std::vector<unsigned char> got = file_bytes(path);
                ++reads;
                if (std::find(expected.begin(), expected.end(), got) == expected.end())
                    note("reader: " + std::to_string(got.size()) + " bytes, not a whole file");
            }
        });
    for (std::thread& t : threads) t.join();
    INFO(writes << " writes, " << reads << " reads; first problems:");
    for (const std::string& e : errors) INFO(e);
    CHECK(bad == 0);
    CHECK(writes > 3);
    CHECK(entries(dir.path()) == std::vector<std::string>{"shared.safetensors"});
}

TEST_CASE("writers in two processes leave whole files while readers loop", "[io][write]") {
    TempDir dir;
    const std::string path = dir / "shared.safetensors";
    const TensorFile mine = filled(1.0f, 80000), theirs = filled(2.0f, 30000);
    const std::vector<std::vector<unsigned char>> expected{serialize_safetensors(mine),
                                                           serialize_safetensors(theirs)};
    write_safetensors(path, mine);
    const auto run_for = std::chrono::milliseconds(1200);
    // Forked before any thread starts; the child only writes, then leaves without unwinding.
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        const auto end = Clock::now() + run_for;
        int failures = 0;
        while (Clock::now() < end) {
            try {
                write_safetensors(path, theirs);
            } catch (...) {
                ++failures;
            }
        }
        ::_exit(failures == 0 ? 0 : 1);
    }
    const auto deadline = Clock::now() + run_for;
    std::atomic<int> reads{0}, bad{0}, writes{0};
    std::thread writer([&] {
        while (Clock::now() < deadline) {
            try {
                write_safetensors(path, mine);
                ++writes;
            } catch (...) {
                ++bad;
            }
        }
    });
    std::thread reader([&] {
        while (Clock::now() < deadline) {
            ++reads;
            if (std::find(expected.begin(), expected.end(), file_bytes(path)) == expected.end())
                ++bad;
        }
    });
    writer.join();
    reader.join();
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    INFO(writes << " writes here, " << reads << " reads");
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(bad == 0);
    CHECK(read_safetensors(path).size() == 1);
    CHECK(entries(dir.path()) == std::vector<std::string>{"shared.safetensors"});
}

TEST_CASE("a checkpoint save killed at random moments leaves a whole, loadable checkpoint",
          "[io][write]") {
    // Issue 50: killed saves left their .partial-<pid> temporaries forever. Here a child process
    // saves two distinguishable checkpoints in turn until it is killed (SIGKILL); after every
    // kill the file on disk must be one of the two, whole, and at most the killed write's
    // temporary may be beside it (the next write removes it).
    const int64_t input = 32;
    const nn::ModelConfig config = checkpoint_config(input, 160, 2);
    nn::SequenceModel<float> a(config, "basic", Device::cpu, 1), b(config, "basic", Device::cpu, 2);
    step(a, input, 10);
    step(b, input, 20);
    step(b, input, 21);
    const std::vector<unsigned char> bytes_a = serialize_safetensors(checkpoint_file(a)),
                                     bytes_b = serialize_safetensors(checkpoint_file(b));
    REQUIRE(compare_bytes(bytes_a, bytes_b) != "equal");
    TempDir dir;
    const std::string path = dir / "model.ckpt";
    save_checkpoint(path, a);

    std::mt19937 random(2026);
    std::uniform_int_distribution<int> wait_us(0, 40000);
    nn::SequenceModel<float> loaded(config, "basic", Device::cpu, 77);
    int kills = 0, mid_write = 0, of_a = 0, of_b = 0;
    const auto deadline = Clock::now() + std::chrono::seconds(4);
    while (kills < 25 && Clock::now() < deadline) {
        const pid_t child = ::fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            try {
                for (;;) {
                    save_checkpoint(path, a);
                    save_checkpoint(path, b);
                }
            } catch (...) {
            }
            ::_exit(1);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(wait_us(random)));
        ::kill(child, SIGKILL);
        int status = 0;
        REQUIRE(::waitpid(child, &status, 0) == child);
        INFO("kill " << kills);
        REQUIRE(WIFSIGNALED(status));  // it did not stop by itself with an error
        ++kills;
        const std::vector<std::string> names = entries(dir.path());
        REQUIRE(names.size() <= 2);
        REQUIRE(names.front() == "model.ckpt");
        if (names.size() == 2) {
            CHECK_THAT(names.back(), StartsWith("model.ckpt.tmp-"));
            ++mid_write;
        }
        const std::vector<unsigned char> on_disk = file_bytes(path);
        const bool is_a = on_disk == bytes_a, is_b = on_disk == bytes_b;
        INFO("the file has " << on_disk.size() << " bytes; a checkpoint has " << bytes_a.size());
        REQUIRE((is_a || is_b));
        of_a += is_a;
        of_b += is_b;
        load_checkpoint(path, loaded);
        CHECK(compare_bytes(serialize_safetensors(checkpoint_file(loaded)), on_disk) == "equal");
    }
    save_checkpoint(path, a);
    CHECK(entries(dir.path()) == std::vector<std::string>{"model.ckpt"});
    INFO(kills << " kills, " << mid_write << " during a write; " << of_a << " left a, " << of_b
               << " left b");
    CHECK(kills >= 10);
    CHECK(of_a + of_b == kills);
}

TEST_CASE("lstm_tool --out writes into a pipe or a device and never replaces it", "[io][write]") {
    // Issue 50: `lstm_tool lstm ... --out /tmp/mynull` (mknod c 1 3) and `--out /dev/full`
    // exited 0 and left regular files where the nodes were; `--out /dev/stdout` could not pipe.
    TempDir dir;
    const auto run = [&](const std::string& out, std::string* err = nullptr) {
        std::ostringstream out_text, err_text;
        const int rc = lstm::tool::run_tool(
            {"lstm", "--params", lstm::test::data_path("lstm_bi1_varlen.params.safetensors"),
             "--inputs", lstm::test::data_path("lstm_bi1_varlen.inputs.safetensors"), "--out", out},
            out_text, err_text);
        if (err) *err = err_text.str();
        return rc;
    };
    const std::string regular = dir / "out.safetensors";
    REQUIRE(run(regular) == 0);
    const std::vector<unsigned char> expected = file_bytes(regular);
    REQUIRE(expected.size() > 8);

    int ends[2];
    REQUIRE(::pipe2(ends, O_CLOEXEC) == 0);
    std::vector<unsigned char> piped;
    std::thread reader([&] { piped = read_all(ends[0]); });
    const int piped_rc = run("/dev/fd/" + std::to_string(ends[1]));
    ::close(ends[1]);
    reader.join();
    ::close(ends[0]);
    CHECK(piped_rc == 0);
    CHECK(compare_bytes(piped, expected) == "equal");

    // And the other end of such a pipeline: `lstm_tool info /dev/stdin` reads a pipe whole.
    REQUIRE(::pipe2(ends, O_CLOEXEC) == 0);
    std::thread writer([&] {
        write_safetensors("/dev/fd/" + std::to_string(ends[1]), read_safetensors(regular));
        ::close(ends[1]);
    });
    std::ostringstream info_out, info_err;
    const int info_rc =
        lstm::tool::run_tool({"info", "/dev/fd/" + std::to_string(ends[0])}, info_out, info_err);
    writer.join();
    ::close(ends[0]);
    INFO(info_err.str());
    CHECK(info_rc == 0);
    CHECK_THAT(info_out.str(), Contains("3 tensors, 768 bytes of data"));

    if (fs::exists("/dev/full")) {
        const NodeId before = node_of("/dev/full");
        std::string err;
        CHECK(run("/dev/full", &err) == 1);
        CHECK_THAT(err, Contains("error while writing '/dev/full': No space left on device"));
        CHECK(node_of("/dev/full") == before);
    }
    const std::string node = dir / "mynull";
    if (::mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)
        LSTM_SKIP("mknod of a character device failed (" << std::strerror(errno)
                                                         << "): the test needs CAP_MKNOD");
    const NodeId before = node_of(node);
    CHECK(run(node) == 0);
    CHECK(node_of(node) == before);
    CHECK(entries(dir.path()) == std::vector<std::string>{"mynull", "out.safetensors"});
}

TEST_CASE("a replaced file keeps its permissions and owner, and links lead to the file replaced",
          "[io][write]") {
    TempDir dir;
    const std::string path = dir / "private.safetensors";
    write_safetensors(path, filled(1.0f, 10));
    REQUIRE(::chmod(path.c_str(), 0640) == 0);
    const bool root = ::geteuid() == 0;
    if (root) REQUIRE(::chown(path.c_str(), 1234, 5678) == 0);
    write_safetensors(path, filled(2.0f, 10));
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0640);
    if (root) {
        CHECK(st.st_uid == 1234u);
        CHECK(st.st_gid == 5678u);
    }
    CHECK(read_safetensors(path) == filled(2.0f, 10));

    // A chain of relative links, the last one dangling: the file at its end is created, and
    // every link stays a link.
    fs::create_directories(dir / "sub");
    fs::create_symlink("sub/second", dir / "first");
    fs::create_symlink("../made.safetensors", dir / "sub/second");
    write_safetensors(dir / "first", filled(3.0f, 4));
    CHECK(fs::is_symlink(dir / "first"));
    CHECK(fs::is_symlink(dir / "sub/second"));
    CHECK(read_safetensors(dir / "made.safetensors") == filled(3.0f, 4));
    CHECK(entries(dir.path()) ==
          std::vector<std::string>{"first", "made.safetensors", "private.safetensors", "sub"});
}
