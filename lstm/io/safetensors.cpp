// The safetensors reader of lstm/io/safetensors.hpp, compiled once in lstm_variants so that
// programs including the header do not compile nlohmann-json's parser; the writer is
// lstm/io/safetensors_write.cpp.
//
// The header is parsed in one SAX pass (nlohmann::json::sax_parse with HeaderHandler below) that
// builds the tensor entries as it goes. No JSON document is built: with one, and a set of keys
// to find duplicates, a header took about 54 bytes of memory per header byte. What the parse
// allocates is counted as it goes (HeaderMemory) and asked of lstm::MemoryRequest before it is
// allocated, and the tensors' bytes are read from the file straight into their destination.

#include "lstm/io/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

namespace lstm::io {

// An open file: its descriptor, or (a file that cannot be read at an offset) its whole contents.
struct TensorFileReader::File {
    int fd = -1;
    uint64_t size = 0;
    std::vector<unsigned char> whole;
    bool read_whole = false;

    File() = default;
    File(const File&) = delete;
    File& operator=(const File&) = delete;
    ~File() {
        if (fd >= 0) ::close(fd);
    }
};

namespace detail {

struct TensorFileAccess {
    static void adopt(TensorFile& file, std::vector<Tensor>&& tensors, NameIndex&& index) {
        file.tensors_ = std::move(tensors);
        file.index_ = std::move(index);
    }
};

namespace {

using Json = nlohmann::json;

uint64_t read_u64_le(const unsigned char* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

// The bytes malloc takes for a block of n bytes (glibc: an 8-byte header, 16-byte granules, at
// least 32), and for the characters of a std::string of n characters (libstdc++ keeps up to 15
// in the object itself).
uint64_t heap_block(uint64_t n) {
    return n == 0 ? 0 : std::max<uint64_t>(32, (n + 8 + 15) & ~uint64_t{15});
}
uint64_t string_heap(uint64_t n) { return n <= 15 ? 0 : heap_block(n + 1); }

// What the parse has allocated so far, by the estimates above, and what lstm::MemoryRequest has
// granted: the first grant is asked before the parse starts, and each time the parse outgrows
// it the request is asked again for everything so far plus room to grow.
class HeaderMemory {
public:
    HeaderMemory(const std::string& source, uint64_t header_size)
        : source_(source), header_size_(header_size) {}

    void grant(uint64_t total) {
        MemoryRequest().add("header index", total).check([&] {
            return source_ + ": indexing its header of " + format_bytes(header_size_);
        });
        granted_ = total;
    }
    void add(uint64_t bytes) {
        used_ += bytes;
        peak_ = std::max(peak_, used_);
        if (used_ > granted_) grant(used_ + std::max<uint64_t>(granted_ / 2, header_size_));
    }
    void release(uint64_t bytes) { used_ -= std::min(used_, bytes); }
    uint64_t peak() const { return peak_; }

private:
    const std::string& source_;
    uint64_t header_size_;
    uint64_t used_ = 0, peak_ = 0, granted_ = 0;
};

// The number of keys of the root object (tensors and __metadata__), counted without parsing so
// that the entries are allocated once at their exact size, not grown by doubling (which took up
// to three times their size while the vector moved). Exact for valid JSON; in JSON the parse
// refuses, it counts at least the entries before the error.
size_t count_root_keys(const char* p, const char* end) {
    size_t keys = 0;
    int64_t depth = 0;
    bool in_string = false;
    for (; p < end; ++p) {
        const char c = *p;
        if (in_string) {
            if (c == '\\')
                ++p;
            else if (c == '"')
                in_string = false;
            continue;
        }
        if (c == '"')
            in_string = true;
        else if (c == '{' || c == '[')
            ++depth;
        else if (c == '}' || c == ']')
            --depth;
        else if (c == ':' && depth == 1)
            ++keys;
    }
    return keys;
}

// The compact JSON text of one value (as nlohmann's dump() writes it), rebuilt from its SAX
// events for an error message; at most kMax characters, then "...", so that a hostile value
// cannot grow it.
class ValueText {
public:
    void start() {
        text_.clear();
        level_ = 0;
        after_key_ = false;
        first_.fill(true);
    }
    void atom(const std::string& s) {
        separate();
        put(s);
    }
    void open(char c) {
        separate();
        put(std::string(1, c));
        if (level_ + 1 < static_cast<int>(first_.size()))
            first_[static_cast<size_t>(++level_)] = true;
    }
    void close(char c) {
        if (level_ > 0) --level_;
        put(std::string(1, c));
    }
    void key(const std::string& k) {
        separate();
        put(Json(k).dump() + ":");
        after_key_ = true;
    }
    std::string text() const { return text_.size() > kMax ? text_.substr(0, kMax) + "..." : text_; }

private:
    static constexpr size_t kMax = 200;
    void separate() {
        if (after_key_) {
            after_key_ = false;
            return;
        }
        if (level_ > 0 && !first_[static_cast<size_t>(level_)]) put(",");
        first_[static_cast<size_t>(level_)] = false;
    }
    void put(const std::string& s) {
        if (text_.size() <= kMax) text_ += s;
    }
    std::string text_;
    int level_ = 0;
    bool after_key_ = false;
    std::array<bool, 8> first_{};
};

void set_source(Tensor& t, const std::shared_ptr<const std::string>& source) { t.source = source; }
void set_source(TensorInfo&, const std::shared_ptr<const std::string>&) {}

// A parsed header: the entries in header order (names, dtypes, shapes; no bytes), their
// data_offsets, the metadata, and the name index.
template <typename Entry>
struct Layout {
    std::vector<Entry> entries;
    std::vector<std::array<uint64_t, 2>> ranges;  // data_offsets of entries[k]
    std::map<std::string, std::string> metadata;
    NameIndex index;
    std::vector<uint32_t> order;  // entries by offset, the order their bytes lie in the file
};

// The SAX handler: checks the header's structure as it streams past and builds the entries.
// Errors of the JSON itself (syntax, nesting deeper than the format has, a key twice in one
// entry or in the metadata) throw at once; an entry's problems are kept (the first only) until
// the parse has seen the whole header, so that a broken file reports its JSON error first, then
// duplicate tensor names, then the first bad entry in header order, as the DOM-based parse did.
template <typename Entry>
class HeaderHandler {
public:
    HeaderHandler(const std::string& source, uint64_t buffer_size, HeaderMemory& memory,
                  Layout<Entry>& out, std::shared_ptr<const std::string> source_ptr)
        : source_(source),
          buffer_size_(buffer_size),
          memory_(memory),
          out_(out),
          source_ptr_(std::move(source_ptr)) {}

    const std::string& error() const { return error_; }

    bool null() {
        return value(Kind::null, false, 0, [] { return std::string("null"); });
    }
    bool boolean(bool v) {
        return value(Kind::boolean, false, 0, [v] { return std::string(v ? "true" : "false"); });
    }
    bool number_integer(Json::number_integer_t v) {
        return value(Kind::number, false, 0, [v] { return std::to_string(v); });
    }
    bool number_unsigned(Json::number_unsigned_t v) {
        return value(Kind::number, true, v, [v] { return std::to_string(v); });
    }
    bool number_float(Json::number_float_t, const Json::string_t& text) {
        return value(Kind::number, false, 0, [&text] { return text; });
    }
    bool string(Json::string_t& s) {
        note_token(s);
        string_ = &s;
        return value(Kind::string, false, 0, [&s] { return Json(s).dump(); });
    }
    bool binary(Json::binary_t&) {
        return value(Kind::binary, false, 0, [] { return std::string("<binary>"); });
    }
    bool start_object(std::size_t) { return open(true); }
    bool start_array(std::size_t) { return open(false); }
    bool end_object() { return close('}'); }
    bool end_array() { return close(']'); }
    bool key(Json::string_t& k) {
        note_token(k);
        if (capturing_) dump_.key(k);
        switch (ctx_[depth_]) {
            case Ctx::root:
                key_is_metadata_ = k == TensorFile::kMetadataKey;
                if (key_is_metadata_) {
                    if (seen_metadata_)
                        fail(source_, ": duplicate tensor name '", k, "' in the header");
                    seen_metadata_ = true;
                }
                pending_.assign(k);
                break;
            case Ctx::entry:
                field_ = field_of(k);
                if (field_ == Field::other) {
                    if (k == unknown_) duplicate_key(k);
                    if (unknown_.empty()) unknown_.assign(k);
                } else {
                    const unsigned bit = 1u << static_cast<unsigned>(field_);
                    if (fields_ & bit) duplicate_key(k);
                    fields_ |= bit;
                }
                break;
            case Ctx::metadata:
                pending_.assign(k);
                break;
            default:
                break;
        }
        return true;
    }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
        fail(source_, ": header is not valid JSON (", e.what(), ")");
    }

private:
    // root object (1) -> tensor entry or metadata (2) -> shape or data_offsets array (3).
    static constexpr size_t kMaxDepth = 3;
    enum class Kind { null, boolean, number, string, binary, array, object };
    enum class Ctx : uint8_t { root, entry, metadata, shape, offsets, ignored };
    enum class Field : uint8_t { dtype = 0, shape = 1, offsets = 2, other = 3 };
    // What the value about to come is, from where it stands.
    enum class Role {
        root,
        tensor,
        metadata,
        dtype,
        shape,
        offsets,
        other_field,
        metadata_value,
        dim,
        offset,
        ignored
    };

    static const char* type_name(Kind kind) {
        switch (kind) {
            case Kind::null:
                return "null";
            case Kind::boolean:
                return "boolean";
            case Kind::number:
                return "number";
            case Kind::string:
                return "string";
            case Kind::binary:
                return "binary";
            case Kind::array:
                return "array";
            case Kind::object:
                return "object";
        }
        return "unknown";
    }
    static Field field_of(const std::string& k) {
        if (k == "dtype") return Field::dtype;
        if (k == "shape") return Field::shape;
        if (k == "data_offsets") return Field::offsets;
        return Field::other;
    }

    Role role() const {
        if (depth_ == 0) return Role::root;
        switch (ctx_[depth_]) {
            case Ctx::root:
                return key_is_metadata_ ? Role::metadata : Role::tensor;
            case Ctx::entry:
                switch (field_) {
                    case Field::dtype:
                        return Role::dtype;
                    case Field::shape:
                        return Role::shape;
                    case Field::offsets:
                        return Role::offsets;
                    case Field::other:
                        return Role::other_field;
                }
                return Role::other_field;
            case Ctx::metadata:
                return Role::metadata_value;
            case Ctx::shape:
                return Role::dim;
            case Ctx::offsets:
                return Role::offset;
            case Ctx::ignored:
                return Role::ignored;
        }
        return Role::ignored;
    }

    template <typename... Parts>
    void defer(const Parts&... parts) {
        if (error_.empty()) error_ = lstm::detail::concat(parts...);
    }
    [[noreturn]] void duplicate_key(const std::string& k) {
        fail(source_, ": duplicate key '", k, "' inside a header entry");
    }
    // The lexer hands every string in one buffer, which grows to the longest: counted too.
    void note_token(const std::string& s) {
        if (s.capacity() > token_capacity_) {
            memory_.add(heap_block(s.capacity() + 1) - heap_block(token_capacity_ + 1));
            token_capacity_ = s.capacity();
        }
    }

    void begin_entry() {
        if (out_.entries.size() == out_.entries.capacity()) {
            // Only JSON the parse refuses has more keys than count_root_keys found.
            const uint64_t more = std::max<size_t>(1, out_.entries.capacity());
            memory_.add(more * (sizeof(Entry) + sizeof(out_.ranges[0])));
        }
        out_.entries.emplace_back();
        out_.ranges.push_back({0, 0});
        Entry& e = out_.entries.back();
        e.name = std::string(pending_.data(), pending_.size());  // exact capacity
        memory_.add(string_heap(e.name.size()));
        set_source(e, source_ptr_);
        fields_ = 0;
        unknown_.clear();
        dtype_ = Dtype::missing;
        dtype_text_.clear();
        shape_is_array_ = false;
        shape_error_.clear();
        dims_.clear();
        offsets_is_array_ = false;
        offsets_count_ = 0;
        offsets_text_.clear();
        offset_bad_[0] = offset_bad_[1] = false;
        offset_value_[0] = offset_value_[1] = 0;
    }

    void add_metadata(std::string value) {
        const bool added =
            out_.metadata.emplace(std::string(pending_.data(), pending_.size()), std::move(value))
                .second;
        if (!added) duplicate_key(pending_);
        // A std::map node (three pointers, a colour, two strings) and the strings' characters.
        memory_.add(heap_block(32 + 2 * sizeof(std::string)) + string_heap(pending_.size()));
    }

    template <typename Text>
    bool value(Kind kind, bool is_unsigned, uint64_t u, const Text& text) {
        // Inside a captured container every role is `ignored` but a data_offsets element's.
        if (capturing_) dump_.atom(text());
        switch (role()) {
            case Role::root:
                defer(source_, ": header must be a JSON object, got ", type_name(kind));
                break;
            case Role::metadata:
                defer(source_, ": __metadata__ must be an object, got ", type_name(kind));
                break;
            case Role::tensor:
                begin_entry();
                if (error_.empty())
                    defer(source_, ": tensor '", pending_,
                          "': header entry must be an object, got ", text());
                break;
            case Role::dtype:
                if (kind != Kind::string) {
                    dtype_ = Dtype::not_string;
                } else if (const auto type = scalar_type_from_string(*string_)) {
                    dtype_ = Dtype::ok;
                    out_.entries.back().dtype = *type;
                } else {
                    dtype_ = Dtype::unsupported;
                    if (error_.empty()) dtype_text_ = string_->substr(0, 200);
                }
                break;
            case Role::shape:
                shape_is_array_ = false;
                break;
            case Role::offsets:
                offsets_is_array_ = false;
                if (error_.empty()) offsets_text_ = text();
                break;
            case Role::metadata_value:
                if (kind == Kind::string) {
                    std::string copy(string_->data(), string_->size());  // exact capacity
                    memory_.add(string_heap(copy.size()));
                    add_metadata(std::move(copy));
                } else {
                    defer(source_, ": __metadata__ value of '", pending_,
                          "' must be a string, got ", text());
                    add_metadata(std::string());
                }
                break;
            case Role::dim:
                if (!shape_error_.empty() || !error_.empty()) break;
                if (!is_unsigned) {
                    shape_error_ = "shape must hold non-negative integers, got " + text();
                } else if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
                    shape_error_ = "shape entry " + std::to_string(u) + " is too large";
                } else {
                    const size_t before = dims_.capacity();
                    dims_.push_back(static_cast<int64_t>(u));
                    if (dims_.capacity() != before)
                        memory_.add(heap_block(8 * dims_.capacity()) - heap_block(8 * before));
                }
                break;
            case Role::offset:
                if (offsets_count_ < 2) {
                    offset_bad_[offsets_count_] = !is_unsigned;
                    offset_value_[offsets_count_] = u;
                    if (!is_unsigned && error_.empty()) offset_text_[offsets_count_] = text();
                }
                ++offsets_count_;
                break;
            case Role::other_field:
            case Role::ignored:
                break;
        }
        return true;
    }

    bool open(bool object) {
        const Role r = capturing_ ? Role::ignored : role();
        if (++depth_ > kMaxDepth)
            fail(source_, ": header JSON nests deeper than the safetensors format allows");
        if (capturing_) dump_.open(object ? '{' : '[');
        Ctx ctx = Ctx::ignored;
        switch (r) {
            case Role::root:
                if (object)
                    ctx = Ctx::root;
                else
                    defer(source_, ": header must be a JSON object, got array");
                break;
            case Role::metadata:
                if (object)
                    ctx = Ctx::metadata;
                else
                    defer(source_, ": __metadata__ must be an object, got array");
                break;
            case Role::tensor:
                begin_entry();
                if (object)
                    ctx = Ctx::entry;
                else
                    capture(Role::tensor, '[');
                break;
            case Role::dtype:
                dtype_ = Dtype::not_string;
                break;
            case Role::shape:
                shape_is_array_ = !object;
                if (!object) ctx = Ctx::shape;
                break;
            case Role::offsets:
                offsets_is_array_ = !object;
                if (!object) ctx = Ctx::offsets;
                capture(Role::offsets, object ? '{' : '[');
                break;
            case Role::metadata_value:
                capture(Role::metadata_value, object ? '{' : '[');
                break;
            default:
                break;
        }
        ctx_[depth_] = ctx;
        return true;
    }

    // Starts recording the text of the container just opened (at depth_), for a message.
    void capture(Role role, char opening) {
        if (!error_.empty() && role != Role::metadata_value) return;
        capturing_ = true;
        capture_depth_ = depth_ - 1;
        capture_role_ = role;
        dump_.start();
        dump_.open(opening);
    }

    bool close(char closing) {
        if (capturing_) dump_.close(closing);
        const Ctx closed = ctx_[depth_];
        --depth_;
        if (capturing_ && depth_ == capture_depth_) {
            capturing_ = false;
            switch (capture_role_) {
                case Role::tensor:
                    defer(source_, ": tensor '", out_.entries.back().name,
                          "': header entry must be an object, got ", dump_.text());
                    break;
                case Role::offsets:
                    offsets_text_ = dump_.text();
                    break;
                case Role::metadata_value:
                    defer(source_, ": __metadata__ value of '", pending_,
                          "' must be a string, got ", dump_.text());
                    add_metadata(std::string());
                    break;
                default:
                    break;
            }
        }
        if (closed == Ctx::entry) finish_entry();
        return true;
    }

    // Checks the entry just closed, in the order the DOM-based parse did, and stores its shape
    // and data_offsets.
    void finish_entry() {
        Entry& e = out_.entries.back();
        e.shape.assign(dims_.begin(), dims_.end());  // exact capacity
        memory_.add(heap_block(8 * e.shape.size()));
        if (!error_.empty()) return;
        const std::string problem = entry_problem(e);
        if (!problem.empty()) defer(source_, ": tensor '", e.name, "': ", problem);
    }

    std::string entry_problem(Entry& e) {
        using lstm::detail::concat;
        if (!unknown_.empty())
            return concat("unknown field '", unknown_, "' (expected dtype, shape, data_offsets)");
        const char* const names[] = {"dtype", "shape", "data_offsets"};
        for (unsigned f = 0; f < 3; ++f)
            if (!(fields_ & (1u << f))) return concat("missing field '", names[f], "'");
        if (dtype_ == Dtype::not_string) return "dtype must be a string";
        if (dtype_ == Dtype::unsupported)
            return concat("unsupported dtype '", dtype_text_, "' (supported: F32, F64, I32, I64)");
        if (!shape_is_array_) return "shape must be an array";
        if (!shape_error_.empty()) return shape_error_;
        // Byte count with overflow checks; any zero dimension makes it zero whatever the others.
        bool empty = false;
        for (int64_t s : e.shape) empty = empty || s == 0;
        uint64_t bytes = empty ? 0 : element_size(e.dtype);
        for (int64_t s : e.shape) {
            if (empty) break;
            if (bytes > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(s))
                return concat("shape ", shape_string(e.shape),
                              " has more bytes than any file can hold");
            bytes *= static_cast<uint64_t>(s);
        }
        if (!offsets_is_array_ || offsets_count_ != 2)
            return concat("data_offsets must be [begin, end], got ", offsets_text_);
        for (int i = 0; i < 2; ++i)
            if (offset_bad_[i])
                return concat("data_offsets must hold non-negative integers, got ",
                              offset_text_[i]);
        const uint64_t begin = offset_value_[0], end = offset_value_[1];
        if (begin > end)
            return concat("data_offsets [", begin, ", ", end, "] end before they begin");
        if (end > buffer_size_)
            return concat("data_offsets [", begin, ", ", end, "] reach beyond the ", buffer_size_,
                          "-byte data buffer");
        if (end - begin != bytes)
            return concat("dtype ", to_string(e.dtype), " with shape ", shape_string(e.shape),
                          " needs ", bytes, " bytes, but data_offsets [", begin, ", ", end,
                          "] span ", end - begin);
        out_.ranges.back() = {begin, end};
        return "";
    }

    const std::string& source_;
    const uint64_t buffer_size_;
    HeaderMemory& memory_;
    Layout<Entry>& out_;
    std::shared_ptr<const std::string> source_ptr_;
    std::string error_;  // the first problem of an entry or the metadata

    size_t depth_ = 0;
    std::array<Ctx, kMaxDepth + 2> ctx_{};
    bool key_is_metadata_ = false, seen_metadata_ = false;
    std::string pending_;  // the last key: a tensor's name, or a metadata key
    const std::string* string_ = nullptr;
    size_t token_capacity_ = 0;

    // Capturing the text of a value for a message.
    bool capturing_ = false;
    size_t capture_depth_ = 0;
    Role capture_role_ = Role::ignored;
    ValueText dump_;

    // The entry being read.
    enum class Dtype { missing, ok, not_string, unsupported };
    Field field_ = Field::other;
    unsigned fields_ = 0;  // bit f: field f seen
    std::string unknown_;  // the first unknown field's name
    Dtype dtype_ = Dtype::missing;
    std::string dtype_text_;
    bool shape_is_array_ = false;
    std::string shape_error_;
    std::vector<int64_t> dims_;
    bool offsets_is_array_ = false;
    size_t offsets_count_ = 0;
    std::string offsets_text_;
    std::array<bool, 2> offset_bad_{};
    std::array<uint64_t, 2> offset_value_{};
    std::array<std::string, 2> offset_text_;
};

// Checks the 8-byte length prefix (`prefix`) against the `size` bytes of the whole file; returns
// the header's length.
uint64_t header_length(const unsigned char* prefix, uint64_t size, const std::string& source) {
    check(size >= 8, source, ": ", size,
          " bytes is too short for a safetensors file (the 8-byte header length is missing)");
    const uint64_t header_size = read_u64_le(prefix);
    check(header_size <= size - 8, source, ": header length ", header_size, " exceeds the ",
          size - 8, " bytes that follow it");
    check(header_size <= kMaxHeaderBytes, source, ": header length ", header_size,
          " exceeds the format's limit of ", kMaxHeaderBytes, " bytes");
    return header_size;
}

// Parses and checks the header (`header_size` bytes at `header`, host memory) of a file whose
// data buffer has `buffer_size` bytes, into `out`. Returns the peak bytes the parse counted.
template <typename Entry>
uint64_t parse_header(const char* header, uint64_t header_size, uint64_t buffer_size,
                      const std::string& source,
                      const std::shared_ptr<const std::string>& source_ptr, Layout<Entry>& out) {
    // The header is exactly the JSON, padded with spaces at most. nlohmann's parser takes a NUL
    // byte for the end of its input, so JSON followed by NUL and anything would parse: refuse it.
    if (const void* nul = std::memchr(header, '\0', static_cast<size_t>(header_size)))
        fail(source, ": header holds a NUL byte at offset ",
             static_cast<const char*>(nul) - header + 8,
             " (the header is JSON padded with spaces; nothing else may follow it)");
    HeaderMemory memory(source, header_size);
    memory.grant(header_size * kHeaderIndexBytesPerByte);
    const size_t n = count_root_keys(header, header + header_size);
    out.entries.reserve(n);
    out.ranges.reserve(n);
    memory.add(heap_block(n * sizeof(Entry)) + heap_block(n * sizeof(out.ranges[0])));
    {
        HeaderHandler<Entry> handler(source, buffer_size, memory, out, source_ptr);
        try {
            Json::sax_parse(header, header + header_size, &handler);
        } catch (const nlohmann::json::exception& e) {
            fail(source, ": header is not valid JSON (", e.what(), ")");
        }
        memory.add(heap_block(4 * out.entries.size()));
        const int64_t dup =
            out.index.build(out.entries.size(),
                            [&](uint32_t k) -> const std::string& { return out.entries[k].name; });
        if (dup >= 0)
            fail(source, ": duplicate tensor name '", out.entries[static_cast<size_t>(dup)].name,
                 "' in the header");
        if (!handler.error().empty()) throw InvalidArgument(handler.error());
    }

    // The format has the tensors tile the buffer exactly: sorted by offset, each begins where the
    // previous ended, and the last ends at the end of the file.
    const auto& ranges = out.ranges;
    memory.add(heap_block(4 * ranges.size()));
    out.order.reserve(ranges.size());
    for (size_t k = 0; k < ranges.size(); ++k) out.order.push_back(static_cast<uint32_t>(k));
    std::sort(out.order.begin(), out.order.end(), [&](uint32_t a, uint32_t b) {
        return ranges[a] != ranges[b] ? ranges[a] < ranges[b] : a < b;
    });
    uint64_t covered = 0;
    for (size_t k = 0; k < out.order.size(); ++k) {
        const std::array<uint64_t, 2>& r = ranges[out.order[k]];
        const std::string& name = out.entries[out.order[k]].name;
        if (r[0] < covered) {
            const std::array<uint64_t, 2>& prev = ranges[out.order[k - 1]];
            fail(source, ": tensor '", name, "': data_offsets [", r[0], ", ", r[1],
                 "] overlap those of tensor '", out.entries[out.order[k - 1]].name, "' [", prev[0],
                 ", ", prev[1], "]");
        }
        if (r[0] > covered)
            fail(source, ": tensor '", name, "': data_offsets begin at ", r[0],
                 " but the previous tensor ends at ", covered,
                 " (the format allows no gaps between tensors)");
        covered = r[1];
    }
    check(covered == buffer_size, source, ": the data buffer has ", buffer_size,
          " bytes but the tensors cover ", covered,
          covered < buffer_size ? " (trailing bytes belong to no tensor)" : "");
    return memory.peak();
}

// Opens `path` for reading. A regular file of known size is read at offsets later; anything
// else (a FIFO, a /proc entry, whose size reads 0) is read whole now.
std::shared_ptr<TensorFileReader::File> open_for_reading(const std::string& path) {
    auto file = std::make_shared<TensorFileReader::File>();
    file->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    check(file->fd >= 0, "cannot open '", path, "' for reading: ", std::strerror(errno));
    struct stat st {};
    check(::fstat(file->fd, &st) == 0, "cannot stat '", path, "': ", std::strerror(errno));
    check(!S_ISDIR(st.st_mode), "'", path, "' is a directory, not a safetensors file");
    if (S_ISREG(st.st_mode) && st.st_size > 0) {
        file->size = static_cast<uint64_t>(st.st_size);
        return file;
    }
    file->read_whole = true;
    std::vector<unsigned char>& whole = file->whole;
    constexpr size_t kPiece = size_t{1} << 20;
    size_t used = 0;
    for (;;) {
        if (whole.size() - used < kPiece) {
            const size_t grown = std::max(2 * whole.size(), used + kPiece);
            MemoryRequest().add("file contents", grown).check([&] {
                return "reading '" + path + "' (a file read whole: it cannot be read at offsets)";
            });
            whole.resize(grown);
        }
        const ssize_t got = ::read(file->fd, whole.data() + used, whole.size() - used);
        if (got < 0 && errno == EINTR) continue;
        check(got >= 0, "error while reading '", path, "': ", std::strerror(errno));
        if (got == 0) break;
        used += static_cast<size_t>(got);
    }
    whole.resize(used);
    whole.shrink_to_fit();
    file->size = used;
    ::close(file->fd);
    file->fd = -1;
    return file;
}

// Reads bytes [offset, offset + count) of the open file into dst (host).
void read_at(const TensorFileReader::File& file, const std::string& path, uint64_t offset,
             void* dst, size_t count) {
    if (file.read_whole) {
        check(offset <= file.whole.size() && count <= file.whole.size() - offset, "'", path,
              "': bytes [", offset, ", ", offset + count, ") lie beyond its ", file.whole.size(),
              " bytes");
        if (count) std::memcpy(dst, file.whole.data() + offset, count);
        return;
    }
    auto* out = static_cast<unsigned char*>(dst);
    size_t done = 0;
    while (done < count) {
        const ssize_t got =
            ::pread(file.fd, out + done, count - done, static_cast<off_t>(offset + done));
        if (got < 0 && errno == EINTR) continue;
        check(got >= 0, "error while reading '", path, "': ", std::strerror(errno));
        check(got > 0, "error while reading '", path, "': it ends at byte ", offset + done,
              ", before the ", file.size,
              " bytes it had when opened (was it truncated while "
              "being read?)");
        done += static_cast<size_t>(got);
    }
}

// The header of an open file, read into host memory, and its length.
std::string read_header(const TensorFileReader::File& file, const std::string& path,
                        uint64_t& header_size) {
    unsigned char prefix[8] = {};
    if (file.size >= 8) read_at(file, path, 0, prefix, 8);
    header_size = header_length(prefix, file.size, path);
    MemoryRequest().add("header", header_size).check([&] { return "reading '" + path + "'"; });
    std::string header(static_cast<size_t>(header_size), '\0');
    read_at(file, path, 8, header.data(), header.size());
    return header;
}

}  // namespace
}  // namespace detail

TensorFile parse_safetensors(const void* data, size_t size, const std::string& source) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    const uint64_t header_size = detail::header_length(bytes, size, source);
    const uint64_t buffer_size = size - 8 - header_size;
    const unsigned char* buffer = bytes + 8 + header_size;
    detail::Layout<Tensor> layout;
    detail::parse_header(reinterpret_cast<const char*>(bytes + 8), header_size, buffer_size, source,
                         std::make_shared<const std::string>(source), layout);
    MemoryRequest().add("tensors", buffer_size).check([&] { return "parsing '" + source + "'"; });
    for (size_t k = 0; k < layout.entries.size(); ++k) {
        const std::array<uint64_t, 2>& r = layout.ranges[k];
        layout.entries[k].bytes.assign(buffer + r[0], buffer + r[1]);
    }
    TensorFile file;
    file.source = source;
    file.metadata = std::move(layout.metadata);
    detail::TensorFileAccess::adopt(file, std::move(layout.entries), std::move(layout.index));
    return file;
}

TensorFile parse_safetensors(const std::vector<unsigned char>& bytes, const std::string& source) {
    return parse_safetensors(bytes.data(), bytes.size(), source);
}

TensorFile read_safetensors(const std::string& path) {
    const std::shared_ptr<TensorFileReader::File> file = detail::open_for_reading(path);
    if (file->read_whole) return parse_safetensors(file->whole, path);
    uint64_t header_size = 0;
    detail::Layout<Tensor> layout;
    {
        const std::string header = detail::read_header(*file, path, header_size);
        detail::parse_header(header.data(), header_size, file->size - 8 - header_size, path,
                             std::make_shared<const std::string>(path), layout);
    }
    const uint64_t data_start = 8 + header_size;
    MemoryRequest().add("tensors", file->size - data_start).check([&] {
        return "reading '" + path + "'";
    });
    // In file order, so that the reads are sequential.
    for (uint32_t k : layout.order) {
        const std::array<uint64_t, 2>& r = layout.ranges[k];
        std::vector<unsigned char>& bytes = layout.entries[k].bytes;
        bytes.resize(static_cast<size_t>(r[1] - r[0]));
        detail::read_at(*file, path, data_start + r[0], bytes.data(), bytes.size());
    }
    TensorFile out;
    out.source = path;
    out.metadata = std::move(layout.metadata);
    detail::TensorFileAccess::adopt(out, std::move(layout.entries), std::move(layout.index));
    return out;
}

TensorFileReader::TensorFileReader(const std::string& path) {
    source = path;
    const std::shared_ptr<File> file = detail::open_for_reading(path);
    uint64_t header_size = 0;
    detail::Layout<TensorInfo> layout;
    if (file->read_whole) {
        header_size = detail::header_length(file->whole.data(), file->whole.size(), path);
        detail::parse_header(reinterpret_cast<const char*>(file->whole.data() + 8), header_size,
                             file->size - 8 - header_size, path, nullptr, layout);
        whole_ = file->whole.data();
    } else {
        const std::string header = detail::read_header(*file, path, header_size);
        detail::parse_header(header.data(), header_size, file->size - 8 - header_size, path,
                             nullptr, layout);
    }
    for (size_t k = 0; k < layout.entries.size(); ++k) {
        TensorInfo& t = layout.entries[k];
        t.offset = 8 + header_size + layout.ranges[k][0];
        t.size = layout.ranges[k][1] - layout.ranges[k][0];
    }
    metadata = std::move(layout.metadata);
    tensors_ = std::move(layout.entries);
    index_ = std::move(layout.index);
    file_ = file;
}

void TensorFileReader::read_bytes(uint64_t offset, void* dst, size_t count) const {
    detail::read_at(*file_, source, offset, dst, count);
}

Tensor TensorFileReader::load(const TensorInfo& t) const {
    Tensor out;
    out.name = t.name;
    out.dtype = t.dtype;
    out.shape = t.shape;
    out.source = std::make_shared<const std::string>(source);
    MemoryRequest().add("bytes", t.size).check([&] { return "reading " + label(t); });
    out.bytes.resize(static_cast<size_t>(t.size));
    if (t.size) read_bytes(t.offset, out.bytes.data(), out.bytes.size());
    return out;
}

}  // namespace lstm::io
