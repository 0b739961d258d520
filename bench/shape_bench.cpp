#include "shape_bench.hpp"

#include <array>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lstm/config.hpp"
#include "tools/parse_int.hpp"

namespace lstm::bench {

namespace {

// Beyond this many elements a tensor would outgrow any machine (Config's parameter bound, used
// for the sizes and for T * N * width alike); below it no product here wraps.
constexpr int64_t kMaxElements = Config::kMaxParameters;

constexpr const char* kFieldNames = "T, N, I, H, layers, dirs, proj, bias";

// Where a message points: the shape, and the whole argument when it lists several.
std::string where(std::string_view shape, std::string_view value) {
    const std::string arg = "'--lstm_shape=" + std::string(value) + "'";
    if (shape == value) return "in " + arg;
    return "in shape '" + std::string(shape) + "' of " + arg;
}

[[noreturn]] void refuse(const std::string& what, std::string_view shape, std::string_view value) {
    throw std::invalid_argument("--lstm_shape: " + what + " " + where(shape, value) +
                                " (expected " + kShapeSyntax + ")");
}

// a * b * c into *out; false when it would exceed kMaxElements.
bool elements(int64_t a, int64_t b, int64_t c, int64_t* out) {
    return !__builtin_mul_overflow(a, b, out) && !__builtin_mul_overflow(*out, c, out) &&
           *out <= kMaxElements;
}

// "T:100/N:64/I:123/H:320/layers:1/dirs:1", then "/proj:P" and "/bias:0" only when set, so that
// the common shapes keep short names.
std::string shape_name(const PassShape& s) {
    const Config& c = s.config;
    std::string name =
        "T:" + std::to_string(s.seq_len) + "/N:" + std::to_string(s.batch) +
        "/I:" + std::to_string(c.input_size) + "/H:" + std::to_string(c.hidden_size) +
        "/layers:" + std::to_string(c.num_layers) + "/dirs:" + std::to_string(c.num_directions());
    if (c.proj_size > 0) name += "/proj:" + std::to_string(c.proj_size);
    if (!c.bias) name += "/bias:0";
    return name;
}

PassShape parse_shape(std::string_view shape, std::string_view value) {
    if (shape.empty())
        throw std::invalid_argument(
            "--lstm_shape: empty shape (nothing before or after a ';') in "
            "'--lstm_shape=" +
            std::string(value) + "' (expected " + kShapeSyntax + ", shapes separated by ';')");
    int64_t seq_len = 0, batch = 0, input = 0, hidden = 0, layers = 1, dirs = 1, proj = 0, bias = 1;
    struct Field {
        std::string_view name;
        int64_t min, max;
        int64_t* value;
        bool required;
        bool given;
    };
    // proj's bound depends on H, so it is checked once every field is read.
    std::array<Field, 8> fields = {{{"T", 1, kMaxElements, &seq_len, true, false},
                                    {"N", 1, kMaxElements, &batch, true, false},
                                    {"I", 1, kMaxElements, &input, true, false},
                                    {"H", 1, kMaxElements, &hidden, true, false},
                                    {"layers", 1, kMaxElements, &layers, false, false},
                                    {"dirs", 1, 2, &dirs, false, false},
                                    {"proj", 0, kMaxElements, &proj, false, false},
                                    {"bias", 0, 1, &bias, false, false}}};
    for (size_t start = 0;;) {
        const size_t comma = shape.find(',', start);
        const std::string_view item = shape.substr(start, comma - start);
        const size_t eq = item.find('=');
        if (item.empty()) refuse("empty field", shape, value);
        if (eq == std::string_view::npos)
            refuse("field '" + std::string(item) + "' has no '=VALUE'", shape, value);
        const std::string_view name = item.substr(0, eq), text = item.substr(eq + 1);
        Field* field = nullptr;
        for (Field& f : fields)
            if (f.name == name) field = &f;
        if (field == nullptr)
            refuse("unknown field '" + std::string(name) + "' (fields: " + kFieldNames + ")", shape,
                   value);
        if (field->given) refuse("field " + std::string(name) + " is given twice", shape, value);
        field->given = true;
        const auto parsed = cli::parse_int<int64_t>(text, field->min, field->max);
        if (!parsed)
            throw std::invalid_argument(
                cli::int_range_message("--lstm_shape field " + std::string(name), field->min,
                                       field->max, text) +
                " " + where(shape, value));
        *field->value = *parsed;
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    for (const Field& f : fields)
        if (f.required && !f.given)
            refuse("field " + std::string(f.name) + " is missing (T, N, I and H are required)",
                   shape, value);
    // PyTorch refuses it too: a projection as wide as the cell would project nothing away.
    if (proj >= hidden)
        throw std::invalid_argument("--lstm_shape field proj must be an integer from 0 to " +
                                    std::to_string(hidden - 1) +
                                    " (below H = " + std::to_string(hidden) + "), got '" +
                                    std::to_string(proj) + "' " + where(shape, value));

    PassShape s;
    s.config.input_size = input;
    s.config.hidden_size = hidden;
    s.config.num_layers = layers;
    s.config.bidirectional = dirs == 2;
    s.config.proj_size = proj;
    s.config.bias = bias == 1;
    s.seq_len = seq_len;
    s.batch = batch;
    try {
        s.config.validate();  // the parameter count
    } catch (const std::exception& e) {
        throw std::invalid_argument("--lstm_shape: " + std::string(e.what()) + " " +
                                    where(shape, value));
    }
    int64_t x_elements = 0, y_elements = 0;
    if (!elements(seq_len, batch, input, &x_elements) ||
        !elements(seq_len, batch, s.config.output_size(), &y_elements))
        throw std::invalid_argument(
            "--lstm_shape: x (T, N, I) and y (T, N, dirs * (proj or H)) must each hold at most "
            "2^48 elements (more than any machine holds), got T = " +
            std::to_string(seq_len) + ", N = " + std::to_string(batch) +
            ", I = " + std::to_string(input) + ", output width " +
            std::to_string(s.config.output_size()) + " " + where(shape, value));
    s.name = shape_name(s);
    return s;
}

}  // namespace

std::vector<PassShape> parse_shapes(const std::vector<std::string>& values) {
    std::vector<PassShape> out;
    for (const std::string& value : values) {
        const std::string_view text = value;
        for (size_t start = 0;;) {
            const size_t semicolon = text.find(';', start);
            PassShape s = parse_shape(text.substr(start, semicolon - start), text);
            // Each shape registers its cases; a repeat would run and report every one twice.
            for (const PassShape& earlier : out)
                if (earlier.name == s.name)
                    throw std::invalid_argument("--lstm_shape: shape " + s.name +
                                                " is given twice (each would be timed twice)");
            out.push_back(std::move(s));
            if (semicolon == std::string_view::npos) break;
            start = semicolon + 1;
        }
    }
    return out;
}

void register_shape_cases(const std::vector<PassShape>& shapes, const BenchFlags& flags) {
    register_pass_cases("shape", shapes, {Pass::fwd, Pass::fwd_bwd}, flags);
}

}  // namespace lstm::bench
