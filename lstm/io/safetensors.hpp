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
// The JSON header is parsed with nlohmann-json, which this header includes: targets that include
// it link nlohmann_json::nlohmann_json (header-only; Debian's nlohmann-json3-dev).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
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

    int64_t numel() const {
        // A zero anywhere first: (2^40, 2^40, 0) is empty, and its prefix product would overflow.
        for (int64_t s : shape)
            if (s == 0) return 0;
        int64_t n = 1;
        for (int64_t s : shape) n *= s;
        return n;
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
        for (int64_t s : t.shape)
            check(s >= 0, "tensor '", t.name, "': shape ", t.shape_string(),
                  " has a negative size");
        t.bytes.resize(static_cast<size_t>(t.numel()) * sizeof(T));
        if (!t.bytes.empty()) std::memcpy(t.bytes.data(), values, t.bytes.size());
        return t;
    }

    // The same from a vector, whose size must be numel(shape): checked before anything is read.
    template <typename T>
    static Tensor from(std::string name, std::vector<int64_t> shape, const std::vector<T>& values) {
        Tensor sized;
        sized.name = std::move(name);
        sized.shape = std::move(shape);
        for (int64_t s : sized.shape)
            check(s >= 0, "tensor '", sized.name, "': shape ", sized.shape_string(),
                  " has a negative size");
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

    // Appends `tensor`; a name that is already present is an error.
    void add(Tensor tensor) {
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

// std::map-backed: nlohmann's ordered_json inserts in linear time, which made a header of N
// tensors parse in O(N^2) (29 s at 100k tensors). The header's order is kept separately.
using Json = nlohmann::json;

// "a, b, c" with at most `limit` items, then "and N more".
inline std::string join_limited(const std::vector<std::string>& items, size_t limit = 16) {
    std::string out;
    for (size_t k = 0; k < items.size() && k < limit; ++k) out += (k ? ", " : "") + items[k];
    if (items.size() > limit) out += ", and " + std::to_string(items.size() - limit) + " more";
    return out;
}

inline uint64_t read_u64_le(const unsigned char* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

// A first pass over the header as SAX events: rejects duplicate keys (nlohmann's DOM keeps the
// last one silently) and nesting deeper than the format has (so hostile input cannot build deep
// trees), and records the root object's keys in header order. Linear in the header: nlohmann's
// callback parser, used before, scans the whole parent object after every entry it keeps, which
// made a header of N tensors parse in O(N^2) (29 s for 100k tensors).
class HeaderScan {
public:
    HeaderScan(const std::string& source, std::vector<std::string>& order)
        : source_(source), order_(order) {}

    bool null() { return true; }
    bool boolean(bool) { return true; }
    bool number_integer(Json::number_integer_t) { return true; }
    bool number_unsigned(Json::number_unsigned_t) { return true; }
    bool number_float(Json::number_float_t, const Json::string_t&) { return true; }
    bool string(Json::string_t&) { return true; }
    bool binary(Json::binary_t&) { return true; }
    bool start_object(std::size_t) {
        open();
        keys_[depth_].clear();
        return true;
    }
    bool key(Json::string_t& key) {
        if (!keys_[depth_].insert(key).second) {
            if (depth_ == 1) fail(source_, ": duplicate tensor name '", key, "' in the header");
            fail(source_, ": duplicate key '", key, "' inside a header entry");
        }
        if (depth_ == 1) order_.push_back(key);
        return true;
    }
    bool end_object() { return close(); }
    bool start_array(std::size_t) {
        open();
        return true;
    }
    bool end_array() { return close(); }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
        fail(source_, ": header is not valid JSON (", e.what(), ")");
    }

private:
    // root object (1) -> tensor entry (2) -> shape or data_offsets array (3), nothing deeper.
    static constexpr size_t kMaxDepth = 3;
    void open() {
        if (++depth_ > kMaxDepth)
            fail(source_, ": header JSON nests deeper than the safetensors format allows");
    }
    bool close() {
        --depth_;
        return true;
    }

    const std::string& source_;
    std::vector<std::string>& order_;
    size_t depth_ = 0;
    std::set<std::string> keys_[kMaxDepth + 1];  // keys of the object open at each depth
};

// Parses the header; `order` receives the root object's keys in header order.
inline Json parse_header_json(const char* begin, const char* end, const std::string& source,
                              std::vector<std::string>& order) {
    // The header is exactly the JSON, padded with spaces at most. nlohmann's parser takes a NUL
    // byte for the end of its input, so JSON followed by NUL and anything would parse: refuse it.
    if (const void* nul = std::memchr(begin, '\0', static_cast<size_t>(end - begin)))
        fail(source, ": header holds a NUL byte at offset ",
             static_cast<const char*>(nul) - begin + 8,
             " (the header is JSON padded with spaces; nothing else may follow it)");
    HeaderScan scan(source, order);
    try {
        Json::sax_parse(begin, end, &scan);
        return Json::parse(begin, end);
    } catch (const nlohmann::json::exception& e) {
        fail(source, ": header is not valid JSON (", e.what(), ")");
    }
}

inline uint64_t json_unsigned(const Json& value, const std::string& source, const std::string& name,
                              const char* field) {
    if (!value.is_number_unsigned())
        fail(source, ": tensor '", name, "': ", field, " must hold non-negative integers, got ",
             value.dump());
    return value.get<uint64_t>();
}

// Reads one header entry (not the metadata) into `tensor`, and its byte range into begin/end.
// Checks everything that can be checked on the entry alone.
inline void parse_entry(const std::string& name, const Json& entry, uint64_t buffer_size,
                        const std::string& source, Tensor& tensor, uint64_t& begin, uint64_t& end) {
    if (!entry.is_object())
        fail(source, ": tensor '", name, "': header entry must be an object, got ", entry.dump());
    for (const auto& field : entry.items())
        if (field.key() != "dtype" && field.key() != "shape" && field.key() != "data_offsets")
            fail(source, ": tensor '", name, "': unknown field '", field.key(),
                 "' (expected dtype, shape, data_offsets)");
    for (const char* field : {"dtype", "shape", "data_offsets"})
        if (!entry.contains(field))
            fail(source, ": tensor '", name, "': missing field '", field, "'");

    const Json& dtype = entry["dtype"];
    if (!dtype.is_string()) fail(source, ": tensor '", name, "': dtype must be a string");
    const auto type = scalar_type_from_string(dtype.get_ref<const std::string&>());
    if (!type)
        fail(source, ": tensor '", name, "': unsupported dtype '",
             dtype.get_ref<const std::string&>(), "' (supported: F32, F64, I32, I64)");

    const Json& shape = entry["shape"];
    if (!shape.is_array()) fail(source, ": tensor '", name, "': shape must be an array");
    tensor.name = name;
    tensor.dtype = *type;
    tensor.shape.clear();
    bool empty = false;
    for (const Json& dim : shape) {
        const uint64_t s = json_unsigned(dim, source, name, "shape");
        if (s > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            fail(source, ": tensor '", name, "': shape entry ", s, " is too large");
        empty = empty || s == 0;
        tensor.shape.push_back(static_cast<int64_t>(s));
    }
    // Byte count with overflow checks; any zero dimension makes it zero whatever the others are.
    uint64_t bytes = empty ? 0 : element_size(*type);
    for (int64_t s : tensor.shape) {
        if (empty) break;
        if (bytes > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(s))
            fail(source, ": tensor '", name, "': shape ", tensor.shape_string(),
                 " has more bytes than any file can hold");
        bytes *= static_cast<uint64_t>(s);
    }

    const Json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2)
        fail(source, ": tensor '", name, "': data_offsets must be [begin, end], got ",
             offsets.dump());
    begin = json_unsigned(offsets[0], source, name, "data_offsets");
    end = json_unsigned(offsets[1], source, name, "data_offsets");
    if (begin > end)
        fail(source, ": tensor '", name, "': data_offsets [", begin, ", ", end,
             "] end before they begin");
    if (end > buffer_size)
        fail(source, ": tensor '", name, "': data_offsets [", begin, ", ", end,
             "] reach beyond the ", buffer_size, "-byte data buffer");
    if (end - begin != bytes)
        fail(source, ": tensor '", name, "': dtype ", to_string(*type), " with shape ",
             tensor.shape_string(), " needs ", bytes, " bytes, but data_offsets [", begin, ", ",
             end, "] span ", end - begin);
}

}  // namespace detail

// Parses a whole safetensors file held in host memory (`size` bytes at `data`). `source` names it
// in error messages. Throws lstm::Error on any structural problem: a header length beyond the
// data, invalid JSON, an unsupported dtype, a shape that does not match its byte count, offsets
// out of range, overlapping, leaving gaps or not covering the buffer, duplicate names.
inline TensorFile parse_safetensors(const void* data, size_t size,
                                    const std::string& source = "<memory>") {
    const auto* bytes = static_cast<const unsigned char*>(data);
    check(size >= 8, source, ": ", size,
          " bytes is too short for a safetensors file (the 8-byte header length is missing)");
    const uint64_t header_size = detail::read_u64_le(bytes);
    check(header_size <= size - 8, source, ": header length ", header_size, " exceeds the ",
          size - 8, " bytes that follow it");
    check(header_size <= kMaxHeaderBytes, source, ": header length ", header_size,
          " exceeds the format's limit of ", kMaxHeaderBytes, " bytes");
    const char* header = reinterpret_cast<const char*>(bytes + 8);
    const unsigned char* buffer = bytes + 8 + header_size;
    const uint64_t buffer_size = size - 8 - header_size;

    std::vector<std::string> order;
    const detail::Json root =
        detail::parse_header_json(header, header + header_size, source, order);
    check(root.is_object(), source, ": header must be a JSON object, got ", root.type_name());

    TensorFile file;
    file.source = source;
    struct Range {
        uint64_t begin, end;
        size_t index;
    };
    std::vector<Range> ranges;
    std::vector<Tensor> tensors;
    for (const std::string& name : order) {
        const detail::Json& value = root.at(name);
        if (name == TensorFile::kMetadataKey) {
            check(value.is_object(), source, ": __metadata__ must be an object, got ",
                  value.type_name());
            for (const auto& kv : value.items()) {
                check(kv.value().is_string(), source, ": __metadata__ value of '", kv.key(),
                      "' must be a string, got ", kv.value().dump());
                file.metadata[kv.key()] = kv.value().get<std::string>();
            }
            continue;
        }
        Tensor t;
        t.source = source;
        uint64_t begin = 0, end = 0;
        detail::parse_entry(name, value, buffer_size, source, t, begin, end);
        ranges.push_back({begin, end, tensors.size()});
        tensors.push_back(std::move(t));
    }

    // The format has the tensors tile the buffer exactly: sorted by offset, each begins where the
    // previous ended, and the last ends at the end of the file.
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t covered = 0;
    for (size_t k = 0; k < ranges.size(); ++k) {
        const Range& r = ranges[k];
        const std::string& name = tensors[r.index].name;
        if (r.begin < covered) {
            const Range& prev = ranges[k - 1];
            fail(source, ": tensor '", name, "': data_offsets [", r.begin, ", ", r.end,
                 "] overlap those of tensor '", tensors[prev.index].name, "' [", prev.begin, ", ",
                 prev.end, "]");
        }
        if (r.begin > covered)
            fail(source, ": tensor '", name, "': data_offsets begin at ", r.begin,
                 " but the previous tensor ends at ", covered,
                 " (the format allows no gaps between tensors)");
        covered = r.end;
    }
    check(covered == buffer_size, source, ": the data buffer has ", buffer_size,
          " bytes but the tensors cover ", covered,
          covered < buffer_size ? " (trailing bytes belong to no tensor)" : "");

    for (const Range& r : ranges) tensors[r.index].bytes.assign(buffer + r.begin, buffer + r.end);
    for (Tensor& t : tensors) file.add(std::move(t));
    return file;
}

inline TensorFile parse_safetensors(const std::vector<unsigned char>& bytes,
                                    const std::string& source = "<memory>") {
    return parse_safetensors(bytes.data(), bytes.size(), source);
}

// Reads and parses the safetensors file at `path`; errors name the path.
inline TensorFile read_safetensors(const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    check(in.is_open(), "cannot open '", path, "' for reading");
    const std::streamoff size = in.tellg();
    check(size >= 0, "cannot tell the size of '", path, "'");
    // The file's bytes, then the tensors' copies of them.
    const auto file_bytes = static_cast<uint64_t>(size);
    MemoryRequest()
        .add("file contents", file_bytes)
        .add("tensors", file_bytes)
        .check("reading '" + path + "'");
    std::vector<unsigned char> bytes(static_cast<size_t>(file_bytes));
    in.seekg(0);
    if (!bytes.empty()) in.read(reinterpret_cast<char*>(bytes.data()), size);
    check(in.good() && in.gcount() == size, "error while reading '", path, "': expected ",
          file_bytes, " bytes");
    return parse_safetensors(bytes, path);
}

// The bytes of a safetensors file holding `file`. The header lists the tensors in file order
// and is padded with spaces to a multiple of 8 bytes; the data of 8-byte types comes first so
// that every tensor is aligned to its element size (as the reference writer does).
inline std::vector<unsigned char> serialize_safetensors(const TensorFile& file) {
    const std::vector<Tensor>& tensors = file.tensors();
    std::vector<size_t> data_order(tensors.size());
    for (size_t k = 0; k < tensors.size(); ++k) data_order[k] = k;
    std::stable_sort(data_order.begin(), data_order.end(), [&](size_t a, size_t b) {
        return element_size(tensors[a].dtype) > element_size(tensors[b].dtype);
    });
    std::vector<uint64_t> begin(tensors.size());
    uint64_t offset = 0;
    for (size_t k : data_order) {
        const Tensor& t = tensors[k];
        const uint64_t want = static_cast<uint64_t>(t.numel()) * element_size(t.dtype);
        check(t.bytes.size() == want, "tensor '", t.name, "': ", to_string(t.dtype), " shape ",
              t.shape_string(), " needs ", want, " bytes, holds ", t.bytes.size());
        begin[k] = offset;
        offset += want;
    }

    // Written entry by entry in the tensors' order (names escaped by the JSON library): linear
    // in the number of tensors, where building one JSON object that keeps insertion order is not.
    std::string text = "{";
    if (!file.metadata.empty())
        text += detail::Json(TensorFile::kMetadataKey).dump() + ":" +
                detail::Json(file.metadata).dump();
    for (size_t k = 0; k < tensors.size(); ++k) {
        const Tensor& t = tensors[k];
        const detail::Json entry = {{"dtype", to_string(t.dtype)},
                                    {"shape", t.shape},
                                    {"data_offsets", {begin[k], begin[k] + t.bytes.size()}}};
        if (text.size() > 1) text += ",";
        text += detail::Json(t.name).dump() + ":" + entry.dump();
    }
    text += "}";
    text.append((8 - text.size() % 8) % 8, ' ');

    std::vector<unsigned char> out(8 + text.size() + offset);
    const uint64_t n = text.size();
    for (int i = 0; i < 8; ++i)
        out[static_cast<size_t>(i)] = static_cast<unsigned char>(n >> (8 * i));
    std::memcpy(out.data() + 8, text.data(), text.size());
    for (size_t k = 0; k < tensors.size(); ++k)
        if (!tensors[k].bytes.empty())
            std::memcpy(out.data() + 8 + text.size() + begin[k], tensors[k].bytes.data(),
                        tensors[k].bytes.size());
    return out;
}

// Writes `file` to `path` (replacing it); errors name the path.
inline void write_safetensors(const std::string& path, const TensorFile& file) {
    const std::vector<unsigned char> bytes = serialize_safetensors(file);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    check(out.is_open(), "cannot open '", path, "' for writing");
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    out.close();
    check(!out.fail(), "error while writing '", path, "'");
}

}  // namespace lstm::io
