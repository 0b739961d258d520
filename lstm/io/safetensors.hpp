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
#include <limits>
#include <map>
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
    // The file it was read from, empty for a tensor made in memory; not part of its value (==
    // ignores it), only named in error messages, so that they say which file to fix.
    std::string source;

    // "FILE: tensor 'NAME'" (or "tensor 'NAME'"), how error messages start.
    std::string label() const {
        return (source.empty() ? "" : source + ": ") + "tensor '" + name + "'";
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

// The contents of one safetensors file: tensors in header order, names unique, plus the
// optional string-to-string metadata.
class TensorFile {
public:
    // Where the tensors came from ("<memory>" or a path); error messages start with it.
    std::string source = "<memory>";
    std::map<std::string, std::string> metadata;

    // Appends `tensor`; a name that is already present, or bytes that disagree with the shape
    // and dtype, are errors. So every tensor of a file is consistent, and its readers trust it.
    void add(Tensor tensor) {
        tensor.check_bytes();
        check(tensor.name != kMetadataKey, source, ": '", kMetadataKey,
              "' is reserved for metadata and cannot name a tensor");
        check(index_.count(tensor.name) == 0, source, ": duplicate tensor name '", tensor.name,
              "'");
        index_.emplace(tensor.name, tensors_.size());
        tensors_.push_back(std::move(tensor));
    }

    const std::vector<Tensor>& tensors() const { return tensors_; }
    size_t size() const { return tensors_.size(); }
    bool contains(const std::string& name) const { return index_.count(name) != 0; }

    // The tensor called `name`, or null.
    const Tensor* find(const std::string& name) const {
        const auto it = index_.find(name);
        return it == index_.end() ? nullptr : &tensors_[it->second];
    }

    // The tensor called `name`; the error lists the names the file has.
    const Tensor& at(const std::string& name) const {
        if (const Tensor* t = find(name)) return *t;
        fail(source, ": no tensor named '", name, "'; the file has ", name_list());
    }

    // The tensors whose names start with `prefix`, in header order; found through the sorted
    // name index, so asking for many prefixes costs O(matches log n) each, not a scan each.
    std::vector<const Tensor*> with_prefix(const std::string& prefix) const {
        std::vector<size_t> hits;
        for (auto it = index_.lower_bound(prefix);
             it != index_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
            hits.push_back(it->second);
        std::sort(hits.begin(), hits.end());
        std::vector<const Tensor*> out;
        out.reserve(hits.size());
        for (size_t k : hits) out.push_back(&tensors_[k]);
        return out;
    }

    // "'a', 'b', 'c'" (or "no tensors"), for messages.
    std::string name_list() const {
        if (tensors_.empty()) return "no tensors";
        std::string out;
        for (const Tensor& t : tensors_) out += (out.empty() ? "'" : ", '") + t.name + "'";
        return out;
    }

    static constexpr const char* kMetadataKey = "__metadata__";

private:
    std::vector<Tensor> tensors_;
    std::map<std::string, size_t> index_;
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

// Reads and parses the safetensors file at `path`; errors name the path.
TensorFile read_safetensors(const std::string& path);

// The bytes of a safetensors file holding `file`. The header lists the tensors in file order
// and is padded with spaces to a multiple of 8 bytes; the data of 8-byte types comes first so
// that every tensor is aligned to its element size (as the reference writer does).
std::vector<unsigned char> serialize_safetensors(const TensorFile& file);

// Writes `file` to `path` (replacing it); errors name the path.
void write_safetensors(const std::string& path, const TensorFile& file);

}  // namespace lstm::io
