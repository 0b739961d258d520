// The safetensors reader and writer of lstm/io/safetensors.hpp, compiled once in lstm_variants
// so that programs including the header do not compile nlohmann-json's parser.

#include "lstm/io/safetensors.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace lstm::io {

namespace detail {
namespace {

// std::map-backed: nlohmann's ordered_json inserts in linear time, which made a header of N
// tensors parse in O(N^2) (29 s at 100k tensors). The header's order is kept separately.
using Json = nlohmann::json;

uint64_t read_u64_le(const unsigned char* p) {
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
Json parse_header_json(const char* begin, const char* end, const std::string& source,
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

uint64_t json_unsigned(const Json& value, const std::string& source, const std::string& name,
                       const char* field) {
    if (!value.is_number_unsigned())
        fail(source, ": tensor '", name, "': ", field, " must hold non-negative integers, got ",
             value.dump());
    return value.get<uint64_t>();
}

// Reads one header entry (not the metadata) into `tensor`, and its byte range into begin/end.
// Checks everything that can be checked on the entry alone.
void parse_entry(const std::string& name, const Json& entry, uint64_t buffer_size,
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

}  // namespace
}  // namespace detail

TensorFile parse_safetensors(const void* data, size_t size, const std::string& source) {
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

TensorFile parse_safetensors(const std::vector<unsigned char>& bytes, const std::string& source) {
    return parse_safetensors(bytes.data(), bytes.size(), source);
}

TensorFile read_safetensors(const std::string& path) {
    // A directory opens as a stream on Linux, and its "size" is not one.
    std::error_code ec;
    check(!std::filesystem::is_directory(path, ec), "'", path,
          "' is a directory, not a safetensors file");
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

std::vector<unsigned char> serialize_safetensors(const TensorFile& file) {
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
        // TensorFile::add checked that the bytes match the shape and dtype.
        begin[k] = offset;
        offset += t.bytes.size();
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

void write_safetensors(const std::string& path, const TensorFile& file) {
    const std::vector<unsigned char> bytes = serialize_safetensors(file);
    // Written beside the target, then renamed over it: a write that fails (a full disk) leaves
    // the previous file whole, and no reader sees half a file. Through a link, the file it names
    // is the one replaced.
    std::error_code ec;
    std::filesystem::path target(path);
    if (std::filesystem::is_symlink(std::filesystem::symlink_status(path, ec))) {
        target = std::filesystem::weakly_canonical(path, ec);
        check(!ec, "cannot resolve the link '", path, "': ", ec.message());
    }
    const std::string partial = target.string() + ".partial-" + std::to_string(::getpid());
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    check(out.is_open(), "cannot open '", path, "' for writing: ", std::strerror(errno));
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (out.fail()) {
        const int error = errno;
        std::remove(partial.c_str());
        fail("error while writing '", path, "': ", std::strerror(error),
             "; the previous file, if any, is unchanged");
    }
    std::filesystem::rename(partial, target, ec);
    if (ec) {
        std::remove(partial.c_str());
        fail("cannot replace '", path, "' with the file written: ", ec.message());
    }
}

}  // namespace lstm::io
