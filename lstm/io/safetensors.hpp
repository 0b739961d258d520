#pragma once

// Reader and writer of the safetensors format (the file format of Hugging Face's `safetensors`
// package, which `safetensors.torch.save_file` writes):
//
//   8 bytes    N, the header length, unsigned little-endian
//   N bytes    a UTF-8 JSON object: {"name": {"dtype": "F32", "shape": [2, 3],
//              "data_offsets": [begin, end]}, ..., "__metadata__": {"key": "value"}}
//   the rest   the byte buffer; offsets are relative to its start, tensors are row-major and
//              little-endian, and together they tile the buffer without gaps or overlaps.
//
// Only F32, F64, I32 and I64 tensors are supported. The reader validates everything it reads and
// throws lstm::Error naming the file, the tensor and the problem; it never trusts a length or an
// offset before checking it against the bytes that exist (it is fuzzed: tests/fuzz/).
//
// The reader and writer are compiled once, in lstm_variants (lstm/io/safetensors.cpp), which
// parses the JSON header with nlohmann-json (Debian's nlohmann-json3-dev); programs that include
// this header compile neither.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "lstm/error.hpp"
#include "lstm/memory.hpp"

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "lstm/io copies tensor bytes verbatim, and safetensors is little-endian");
#endif

namespace lstm::io {

// Element types a safetensors file may hold here; the format's names are "F32", "F64", "I32",
// "I64".
enum class ScalarType { f32, f64, i32, i64 };

inline const char* to_string(ScalarType type) {
    switch (type) {
        case ScalarType::f32:
            return "F32";
        case ScalarType::f64:
            return "F64";
        case ScalarType::i32:
            return "I32";
        case ScalarType::i64:
            return "I64";
    }
    return "unknown";
}

inline size_t element_size(ScalarType type) {
    return type == ScalarType::f32 || type == ScalarType::i32 ? 4 : 8;
}

inline std::optional<ScalarType> scalar_type_from_string(std::string_view name) {
    if (name == "F32") return ScalarType::f32;
    if (name == "F64") return ScalarType::f64;
    if (name == "I32") return ScalarType::i32;
    if (name == "I64") return ScalarType::i64;
    return std::nullopt;
}

template <typename T>
constexpr ScalarType scalar_type_of() {
    using U = std::remove_const_t<T>;
    static_assert(std::is_same_v<U, float> || std::is_same_v<U, double> ||
                      std::is_same_v<U, int32_t> || std::is_same_v<U, int64_t>,
                  "safetensors elements here are float, double, int32_t or int64_t");
    if constexpr (std::is_same_v<U, float>) return ScalarType::f32;
    if constexpr (std::is_same_v<U, double>) return ScalarType::f64;
    if constexpr (std::is_same_v<U, int32_t>) return ScalarType::i32;
    return ScalarType::i64;
}

// "(3, 4, 5)"; a scalar (rank 0) is "()".
inline std::string shape_string(const std::vector<int64_t>& shape) {
    std::string out = "(";
    for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
    return out + ")";
}

// One named tensor, owning its bytes: host memory, row-major, little-endian, exactly
// numel() * element_size(dtype) bytes. An empty shape is a scalar (one element).
struct Tensor {
    std::string name;
    ScalarType dtype = ScalarType::f32;
    std::vector<int64_t> shape;
    std::vector<unsigned char> bytes;
    // The file it was read from, null for a tensor made in memory; not part of its value (==
    // ignores it), only named in error messages, so that they say which file to fix. Shared by
    // every tensor of a file: a copy of the path in each was most of a large header's index.
    std::shared_ptr<const std::string> source;

    // "FILE: tensor 'NAME'" (or "tensor 'NAME'"), how error messages start.
    std::string label() const {
        return (source && !source->empty() ? *source + ": " : "") + "tensor '" + name + "'";
    }

    // The element count. A negative size, or a count past 2^63 - 1 (a shape set by hand; the
    // reader checks both), is refused rather than wrapped.
    int64_t numel() const {
        for (int64_t s : shape)
            if (s < 0) fail(label(), ": shape ", shape_string(), " has a negative size");
        // A zero anywhere first: (2^40, 2^40, 0) is empty, and its prefix product would overflow.
        for (int64_t s : shape)
            if (s == 0) return 0;
        int64_t n = 1;
        for (int64_t s : shape)
            if (__builtin_mul_overflow(n, s, &n))
                fail(label(), ": shape ", shape_string(), " has more than 2^63 - 1 elements");
        return n;
    }

    // numel() * element_size(dtype): the bytes the tensor must hold.
    uint64_t byte_count() const {
        uint64_t n = 0;
        if (__builtin_mul_overflow(static_cast<uint64_t>(numel()), element_size(dtype), &n))
            fail(label(), ": shape ", shape_string(), " of ", to_string(dtype),
                 " has more than 2^64 - 1 bytes");
        return n;
    }

    // Refuses bytes that are not exactly byte_count(): the fields are public, so a tensor built
    // by hand can disagree with itself, and every reader of `bytes` trusts its size.
    void check_bytes() const {
        const uint64_t want = byte_count();
        if (bytes.size() != want)
            fail(label(), ": shape ", shape_string(), " of ", to_string(dtype), " needs ", want,
                 " bytes, it holds ", bytes.size());
    }
    int rank() const { return static_cast<int>(shape.size()); }
    std::string shape_string() const { return io::shape_string(shape); }

    // A tensor of `shape` holding a copy of numel(shape) values read from `values` (host).
    template <typename T>
    static Tensor from(std::string name, std::vector<int64_t> shape, const T* values) {
        Tensor t;
        t.name = std::move(name);
        t.dtype = scalar_type_of<T>();
        t.shape = std::move(shape);
        const uint64_t n = t.byte_count();
        MemoryRequest().add("bytes", n).check([&] { return "Tensor::from(" + t.label() + ")"; });
        t.bytes.resize(static_cast<size_t>(n));
        if (!t.bytes.empty()) std::memcpy(t.bytes.data(), values, t.bytes.size());
        return t;
    }

    // The same from a vector, whose size must be numel(shape): checked before anything is read.
    template <typename T>
    static Tensor from(std::string name, std::vector<int64_t> shape, const std::vector<T>& values) {
        Tensor sized;
        sized.name = std::move(name);
        sized.shape = std::move(shape);
        check(static_cast<int64_t>(values.size()) == sized.numel(), "tensor '", sized.name,
              "': shape ", sized.shape_string(), " has ", sized.numel(), " elements but ",
              values.size(), " values were given");
        return from(std::move(sized.name), std::move(sized.shape), values.data());
    }

    // The elements as T; the dtype must be exactly T's (no silent conversion).
    template <typename T>
    std::vector<T> values() const {
        check(dtype == scalar_type_of<T>(), label(), " has dtype ", to_string(dtype), ", expected ",
              to_string(scalar_type_of<T>()));
        check_bytes();
        std::vector<T> out(static_cast<size_t>(numel()));
        if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
        return out;
    }

    // The elements of an I32 or I64 tensor as int64_t (widening is exact).
    std::vector<int64_t> integers() const {
        if (dtype == ScalarType::i64) return values<int64_t>();
        check(dtype == ScalarType::i32, label(), " has dtype ", to_string(dtype),
              ", expected an integer type (I32 or I64)");
        const std::vector<int32_t> narrow = values<int32_t>();
        return std::vector<int64_t>(narrow.begin(), narrow.end());
    }

    // The elements of an F32 or F64 tensor as double (widening is exact).
    std::vector<double> floats_as_double() const {
        if (dtype == ScalarType::f64) return values<double>();
        check(dtype == ScalarType::f32, label(), " has dtype ", to_string(dtype),
              ", expected a floating type (F32 or F64)");
        const std::vector<float> narrow = values<float>();
        return std::vector<double>(narrow.begin(), narrow.end());
    }
};

inline bool operator==(const Tensor& a, const Tensor& b) {
    return a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.bytes == b.bytes;
}
inline bool operator!=(const Tensor& a, const Tensor& b) { return !(a == b); }

namespace detail {

// Positions 0..n-1 of named items (tensors), ordered by name, for lookups by name and by prefix
// in O(log n). 4 bytes an item, where a std::map of the names took 80 and a copy of each long
// name: a header's index is built once (build), then items added one by one (insert) go to a
// short unsorted tail, merged into the sorted part once it outgrows sqrt(n), so that adding n
// items stays O(n sqrt n) in the worst case and a lookup scans at most sqrt(n) names.
// `name_of(k)` gives the name of item k (a std::string or std::string_view).
class NameIndex {
public:
    // Sorts positions 0..n-1 (exactly n entries, no spare capacity). Returns the first position,
    // in position order, whose name an earlier position already has, or -1 when all differ.
    template <typename NameOf>
    int64_t build(size_t n, const NameOf& name_of) {
        check(n <= std::numeric_limits<uint32_t>::max(), "more than 2^32 - 1 tensors");
        tail_.clear();
        sorted_.clear();
        sorted_.shrink_to_fit();
        sorted_.reserve(n);
        for (size_t k = 0; k < n; ++k) sorted_.push_back(static_cast<uint32_t>(k));
        std::sort(sorted_.begin(), sorted_.end(), [&](uint32_t a, uint32_t b) {
            const int c = std::string_view(name_of(a)).compare(name_of(b));
            return c != 0 ? c < 0 : a < b;
        });
        int64_t first = -1;
        for (size_t k = 1; k < sorted_.size(); ++k)
            if (std::string_view(name_of(sorted_[k])) ==
                    std::string_view(name_of(sorted_[k - 1])) &&
                (first < 0 || sorted_[k] < first))
                first = sorted_[k];
        return first;
    }

    // Adds position k, whose name no other item has (the caller checked with find).
    template <typename NameOf>
    void insert(uint32_t k, const NameOf& name_of) {
        tail_.push_back(k);
        if (tail_.size() <= 16 || tail_.size() * tail_.size() <= sorted_.size()) return;
        const auto less = [&](uint32_t a, uint32_t b) {
            return std::string_view(name_of(a)) < std::string_view(name_of(b));
        };
        std::sort(tail_.begin(), tail_.end(), less);
        const auto middle = static_cast<std::ptrdiff_t>(sorted_.size());
        sorted_.insert(sorted_.end(), tail_.begin(), tail_.end());
        std::inplace_merge(sorted_.begin(), sorted_.begin() + middle, sorted_.end(), less);
        tail_.clear();
    }

    // The position of the item called `name`, or -1.
    template <typename NameOf>
    int64_t find(std::string_view name, const NameOf& name_of) const {
        const auto it = std::lower_bound(
            sorted_.begin(), sorted_.end(), name,
            [&](uint32_t k, std::string_view n) { return std::string_view(name_of(k)) < n; });
        if (it != sorted_.end() && std::string_view(name_of(*it)) == name) return *it;
        for (uint32_t k : tail_)
            if (std::string_view(name_of(k)) == name) return k;
        return -1;
    }

    // The positions of the items whose names start with `prefix`, in position order.
    template <typename NameOf>
    std::vector<uint32_t> with_prefix(std::string_view prefix, const NameOf& name_of) const {
        const auto starts = [&](uint32_t k) {
            return std::string_view(name_of(k)).substr(0, prefix.size()) == prefix;
        };
        std::vector<uint32_t> hits;
        for (auto it = std::lower_bound(
                 sorted_.begin(), sorted_.end(), prefix,
                 [&](uint32_t k, std::string_view p) { return std::string_view(name_of(k)) < p; });
             it != sorted_.end() && starts(*it); ++it)
            hits.push_back(*it);
        for (uint32_t k : tail_)
            if (starts(k)) hits.push_back(k);
        std::sort(hits.begin(), hits.end());
        return hits;
    }

private:
    std::vector<uint32_t> sorted_, tail_;
};

// The name of item k of a vector of tensors, for NameIndex.
template <typename Item>
struct NamesOf {
    const std::vector<Item>* items;
    const std::string& operator()(uint32_t k) const { return (*items)[k].name; }
};

struct TensorFileAccess;  // lets the reader hand a parsed file its tensors and index at once

// What TensorFile (tensors in memory) and TensorFileReader (tensors left in the file) share: the
// source and metadata, and the lookups by name and prefix over their entries (each with a
// `name`) through one NameIndex.
template <typename Entry>
class NamedTensors {
public:
    // Where the tensors came from ("<memory>" or a path); error messages start with it.
    std::string source = "<memory>";
    std::map<std::string, std::string> metadata;

    const std::vector<Entry>& tensors() const { return tensors_; }
    size_t size() const { return tensors_.size(); }
    bool contains(const std::string& name) const { return index_.find(name, names()) >= 0; }

    // The tensor called `name`, or null.
    const Entry* find(const std::string& name) const {
        const int64_t k = index_.find(name, names());
        return k < 0 ? nullptr : &tensors_[static_cast<size_t>(k)];
    }

    // The tensor called `name`; the error lists the names the file has.
    const Entry& at(const std::string& name) const {
        if (const Entry* t = find(name)) return *t;
        fail(source, ": no tensor named '", name, "'; the file has ", name_list());
    }

    // The tensors whose names start with `prefix`, in header order; found through the sorted
    // name index, so asking for many prefixes costs O(matches log n) each, not a scan each.
    std::vector<const Entry*> with_prefix(const std::string& prefix) const {
        std::vector<const Entry*> out;
        for (uint32_t k : index_.with_prefix(prefix, names())) out.push_back(&tensors_[k]);
        return out;
    }

    // "'a', 'b', 'c'" (or "no tensors"), for messages; past 64 names, "and N more".
    std::string name_list() const {
        if (tensors_.empty()) return "no tensors";
        std::string out;
        for (size_t k = 0; k < tensors_.size() && k < 64; ++k)
            out += (k ? ", '" : "'") + tensors_[k].name + "'";
        if (tensors_.size() > 64) out += ", and " + std::to_string(tensors_.size() - 64) + " more";
        return out;
    }

protected:
    NamesOf<Entry> names() const { return {&tensors_}; }

    std::vector<Entry> tensors_;
    NameIndex index_;
};

}  // namespace detail

// The contents of one safetensors file: tensors in header order, names unique, plus the
// optional string-to-string metadata.
class TensorFile : public detail::NamedTensors<Tensor> {
public:
    // Appends `tensor`; a name that is already present, or bytes that disagree with the shape
    // and dtype, are errors. So every tensor of a file is consistent, and its readers trust it.
    void add(Tensor tensor) {
        tensor.check_bytes();
        check(tensor.name != kMetadataKey, source, ": '", kMetadataKey,
              "' is reserved for metadata and cannot name a tensor");
        check(!contains(tensor.name), source, ": duplicate tensor name '", tensor.name, "'");
        check(tensors_.size() < std::numeric_limits<uint32_t>::max(), source,
              ": a file holds at most 2^32 - 1 tensors");
        tensors_.push_back(std::move(tensor));
        index_.insert(static_cast<uint32_t>(tensors_.size() - 1), names());
    }

    // Calls fn(const unsigned char* bytes, size_t count) on the bytes of `t`, one of this file's
    // tensors (host memory), when it has any: the interface of TensorFileReader, whose tensors
    // stay in the file, so that loaders take either.
    template <typename Fn>
    void visit_bytes(const Tensor& t, Fn&& fn) const {
        if (!t.bytes.empty()) fn(t.bytes.data(), t.bytes.size());
    }

    static constexpr const char* kMetadataKey = "__metadata__";

private:
    friend struct detail::TensorFileAccess;
};

inline bool operator==(const TensorFile& a, const TensorFile& b) {
    return a.tensors() == b.tensors() && a.metadata == b.metadata;
}
inline bool operator!=(const TensorFile& a, const TensorFile& b) { return !(a == b); }

// The safetensors reference implementation refuses larger headers; so do we, which also bounds
// what a hostile length prefix can make us allocate.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

namespace detail {

// "a, b, c" with at most `limit` items, then "and N more".
inline std::string join_limited(const std::vector<std::string>& items, size_t limit = 16) {
    std::string out;
    for (size_t k = 0; k < items.size() && k < limit; ++k) out += (k ? ", " : "") + items[k];
    if (items.size() > limit) out += ", and " + std::to_string(items.size() - limit) + " more";
    return out;
}

}  // namespace detail

// Parses a whole safetensors file held in host memory (`size` bytes at `data`). `source` names it
// in error messages. Throws lstm::Error on any structural problem: a header length beyond the
// data, invalid JSON, an unsupported dtype, a shape that does not match its byte count, offsets
// out of range, overlapping, leaving gaps or not covering the buffer, duplicate names.
TensorFile parse_safetensors(const void* data, size_t size, const std::string& source = "<memory>");
TensorFile parse_safetensors(const std::vector<unsigned char>& bytes,
                             const std::string& source = "<memory>");

// Reads and parses the safetensors file at `path`; errors name the path. The tensors' bytes are
// read straight into their Tensors (no host copy of the whole file); files that cannot be read at
// an offset (a FIFO, /proc) are read whole first.
TensorFile read_safetensors(const std::string& path);

// Memory the header's parse may take, checked with lstm::MemoryRequest before it is allocated: the
// index of a header of tensor entries takes at most about 3 bytes per header byte (a Tensor or
// TensorInfo per entry, its shape, 12 bytes of index and offsets), asked for before the parse
// starts; what a header needs beyond that (a __metadata__ of many short strings takes about 14
// bytes per header byte, one std::map node each) is asked for in steps as the parse grows, so a
// header the machine cannot index is refused with lstm::OutOfMemory, never allocated blind.
constexpr uint64_t kHeaderIndexBytesPerByte = 3;

// Name, dtype and shape of one tensor of a file opened with TensorFileReader, and where its bytes
// lie: the accessors Tensor has for these, so that code reading either takes both.
struct TensorInfo {
    std::string name;
    ScalarType dtype = ScalarType::f32;
    std::vector<int64_t> shape;
    uint64_t offset = 0;  // of its first byte, from the start of the file
    uint64_t size = 0;    // bytes: numel() * element_size(dtype), checked by the reader

    int rank() const { return static_cast<int>(shape.size()); }
    std::string shape_string() const { return io::shape_string(shape); }
    // The reader checked that the count fits in 63 bits.
    int64_t numel() const { return static_cast<int64_t>(size / element_size(dtype)); }
};

// A safetensors file opened for reading: its header parsed and checked exactly as
// read_safetensors checks it (the same errors), the tensors' bytes left in the file and read on
// request, a piece at a time. Loading from it (io::load_checkpoint(path, model),
// io::import_lstm(path)) copies each tensor from the file to its destination, so the host memory
// a load adds is the header's index and a piece or two (kReadPieceBytes), not the file. Copies
// share the open file; it is closed with the last one. A file truncated or rewritten in place while
// it is read gives an error (a short read) or the bytes it then holds: this library's writers
// replace a file whole (a rename), never in place.
class TensorFileReader : public detail::NamedTensors<TensorInfo> {
public:
    // Opens and parses `path`; errors name it. Files that cannot be read at an offset (a FIFO,
    // /proc) are read whole into host memory first.
    explicit TensorFileReader(const std::string& path);

    // source: the path; metadata, tensors(), find(), at(), with_prefix(): as TensorFile's.

    // The largest piece visit_bytes hands over at once (a multiple of every element size).
    static constexpr size_t kReadPieceBytes = size_t{256} << 10;

    // Calls fn(const unsigned char* bytes, size_t count) on consecutive pieces of the bytes of
    // `t` (one of this file's tensors), in order, each at most kReadPieceBytes and valid during
    // the call (host memory, read from the file into one buffer reused for every piece). A read
    // error or a file shorter than its header said throws, naming the file.
    template <typename Fn>
    void visit_bytes(const TensorInfo& t, Fn&& fn) const {
        if (t.size == 0) return;
        if (whole_ != nullptr) {
            fn(whole_ + t.offset, static_cast<size_t>(t.size));
            return;
        }
        // Small and fixed, so not asked of MemoryRequest: a load checks everything first and then
        // must not be refused half way.
        const size_t piece = static_cast<size_t>(std::min<uint64_t>(t.size, kReadPieceBytes));
        std::vector<unsigned char> buffer(piece);
        for (uint64_t done = 0; done < t.size;) {
            const size_t n = static_cast<size_t>(std::min<uint64_t>(piece, t.size - done));
            read_bytes(t.offset + done, buffer.data(), n);
            fn(static_cast<const unsigned char*>(buffer.data()), n);
            done += n;
        }
    }

    // Reads bytes [offset, offset + count) of the file into `dst` (host memory); overwrites.
    void read_bytes(uint64_t offset, void* dst, size_t count) const;

    // "FILE: tensor 'NAME'", how error messages about `t` start.
    std::string label(const TensorInfo& t) const { return source + ": tensor '" + t.name + "'"; }

    // A Tensor holding a copy of `t`'s bytes (host memory).
    Tensor load(const TensorInfo& t) const;

    struct File;  // opaque: the open descriptor, or the contents of a file read whole

private:
    std::shared_ptr<const File> file_;
    const unsigned char* whole_ = nullptr;  // the contents, when the file was read whole
};

// ---- Writer (lstm/io/safetensors_write.cpp) ----

// The largest piece of a tensor the writer asks a TensorSource's `fill` for, and the size of the
// one staging buffer it allocates for them: with the header, all a streamed write adds to host
// memory, whatever the size of the file.
constexpr size_t kWriteChunkBytes = size_t{4} << 20;

// One tensor to write, described without its bytes, which the writer takes from where they live
// as it streams the file: straight from `host`, or chunk by chunk from `fill`.
struct TensorSource {
    std::string name;
    ScalarType dtype = ScalarType::f32;
    std::vector<int64_t> shape;
    // The tensor's bytes in host memory (byte_count() of them, row-major, little-endian), read
    // until the write returns; null: `fill` gives them.
    const void* host = nullptr;
    // Overwrites dst (host, `size` bytes) with bytes [offset, offset + size) of the tensor; asked
    // in increasing offset order, size <= kWriteChunkBytes. For memory the host cannot read
    // directly (a GPU buffer); an exception it throws ends the write like a failed write().
    std::function<void(uint64_t offset, size_t size, void* dst)> fill;

    // A source reading numel(shape) values of T at `values` (host).
    template <typename T>
    static TensorSource of(std::string name, std::vector<int64_t> shape, const T* values) {
        TensorSource s;
        s.name = std::move(name);
        s.dtype = scalar_type_of<T>();
        s.shape = std::move(shape);
        s.host = values;
        return s;
    }

    // A source reading the bytes `tensor` holds (host), which must outlive the write.
    static TensorSource of(const Tensor& tensor) {
        TensorSource s;
        s.name = tensor.name;
        s.dtype = tensor.dtype;
        s.shape = tensor.shape;
        s.host = tensor.bytes.data();
        return s;
    }

    // numel(shape) * element_size(dtype); a negative size or an overflow is refused by name.
    uint64_t byte_count() const {
        Tensor described;
        described.name = name;
        described.dtype = dtype;
        described.shape = shape;
        return described.byte_count();
    }
};

// The bytes of a safetensors file holding `file`. The header lists the tensors in file order
// and is padded with spaces to a multiple of 8 bytes; the data of 8-byte types comes first so
// that every tensor is aligned to its element size (as the reference writer does).
std::vector<unsigned char> serialize_safetensors(const TensorFile& file);

// The same bytes for tensors described by sources (in header order, names unique) and
// `metadata`: what write_safetensors(path, tensors, metadata) writes.
std::vector<unsigned char> serialize_safetensors(
    const std::vector<TensorSource>& tensors, const std::map<std::string, std::string>& metadata);

// Writes the safetensors file of `tensors` (in header order, names unique) and `metadata` to
// `path`, streaming: the header is computed from the descriptions, then each tensor's bytes are
// written from where they live, so the file is never held in memory. The bytes are exactly
// serialize_safetensors(tensors, metadata)'s. Everything is checked before `path` is touched.
//
// What `path` names decides how it is written:
// - a regular file, or nothing yet: replaced whole or not at all. The bytes go to a temporary
//   "<name>.tmp-XXXXXX" beside it (a name of its own per call), which is flushed to disk (fsync),
//   renamed over `path`, and the directory flushed: once the call returns, the new file survives
//   a crash of the process or of the machine; concurrent writers each leave a whole file (the
//   last rename wins) and readers only ever see a whole file. A failure removes the temporary
//   and its error names the path and says the previous file is unchanged. Temporaries a killed
//   writer left beside `path` are removed by the next write of `path`: a writer holds an flock
//   on its temporary until it is renamed or removed, so only unlocked ones are stale.
// - a symbolic link: the file it names, as above (the link stays).
// - a character device or a FIFO, or a path through /proc/<pid>/fd such as /dev/stdout: written
//   in place, as a shell's `>` does (a FIFO waits for its reader), never replaced; a failure
//   (ENOSPC from /dev/full, EPIPE from a reader that left: no SIGPIPE is raised) names the path
//   and how many bytes had been written.
// - a directory, a block device, a socket, or a file of a kernel interface (/proc, /sys): refused.
void write_safetensors(const std::string& path, const std::vector<TensorSource>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes `file` to `path` as above (its tensors' bytes streamed from `file`); errors name the path.
void write_safetensors(const std::string& path, const TensorFile& file);

namespace detail {

// The steps of write_safetensors that can fail with an errno.
enum class WriteStep { none, create, write, fsync_file, rename, fsync_directory };

// Test hook: the next write_safetensors on this thread fails at `step` as if its system call had
// returned `error` (errno), then the hook is cleared. WriteStep::none clears it.
void inject_write_failure(WriteStep step, int error);

}  // namespace detail

}  // namespace lstm::io
