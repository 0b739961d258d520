#pragma once

// PyTorch nn.LSTM state_dict import and export through safetensors files.
//
// A state_dict holds, for each layer k and direction (suffix "_reverse" for the second),
// weight_ih_l{k} (4H, in_k), weight_hh_l{k} (4H, S), then bias_ih_l{k} (4H) and bias_hh_l{k} (4H)
// unless the module has bias=False, then weight_hr_l{k} (P, H) when it has proj_size = P > 0
// (S is P with a projection, else H; in_k is D * S above the first layer), gate blocks i, f, g,
// o: exactly the pieces of the library's flat parameter buffer (param_entries()), so import and
// export are copies, never transposes. In Python:
//
//   safetensors.torch.save_file(lstm.state_dict(), "model.safetensors")          # export there
//   lstm.load_state_dict(safetensors.torch.load_file("model.safetensors"))        # import there
//
// A module that holds an LSTM names its tensors with a prefix ("encoder.lstm.weight_ih_l0");
// every function here takes that prefix.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "lstm/config.hpp"
#include "lstm/error.hpp"
#include "lstm/io/safetensors.hpp"
#include "lstm/params.hpp"
#include "lstm/tensor.hpp"

namespace lstm::io {

// Layer indices at or beyond this are rejected: no real model is that deep, and the bound keeps a
// hostile name ("weight_ih_l999999") from making inference enumerate millions of tensors.
constexpr int64_t kMaxLayers = 1000;

namespace detail {

// Splits "<kind>_l<k>[_reverse]" into its parts; false for any other name.
inline bool parse_lstm_name(const std::string& name, std::string& kind, int64_t& layer,
                            bool& reverse) {
    static const char* const kinds[] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh",
                                        "weight_hr"};
    for (const char* k : kinds) {
        const std::string head = std::string(k) + "_l";
        if (name.compare(0, head.size(), head) != 0) continue;
        size_t pos = head.size();
        int64_t value = 0;
        const size_t digits_begin = pos;
        // Layer numbers beyond 10^6 are no real model; the bound also keeps value from overflowing.
        while (pos < name.size() && name[pos] >= '0' && name[pos] <= '9' && pos - digits_begin < 7)
            value = value * 10 + (name[pos++] - '0');
        if (pos == digits_begin) return false;
        // PyTorch writes "l0", "l10", never "l01".
        if (name[digits_begin] == '0' && pos - digits_begin > 1) return false;
        const std::string rest = name.substr(pos);
        if (rest != "" && rest != "_reverse") return false;
        kind = k;
        layer = value;
        reverse = !rest.empty();
        return true;
    }
    return false;
}

inline std::string shape_of_entry(const ParamEntry& e) {
    return e.cols == 0 ? "(" + std::to_string(e.rows) + ")"
                       : "(" + std::to_string(e.rows) + ", " + std::to_string(e.cols) + ")";
}

// `t` is a Tensor or a TensorInfo.
template <typename Entry>
bool entry_matches(const ParamEntry& e, const Entry& t) {
    if (e.cols == 0) return t.shape == std::vector<int64_t>{e.rows};
    return t.shape == std::vector<int64_t>{e.rows, e.cols};
}

// Whether File is one of the two kinds of file of tensors the loaders take: a TensorFile (in
// memory) or a TensorFileReader (the tensors' bytes still in the file).
template <typename File>
constexpr bool is_tensor_file_v =
    std::is_same_v<File, TensorFile> || std::is_same_v<File, TensorFileReader>;

// Calls fn(const T* values, size_t count) on consecutive pieces of the elements of tensor `t` of
// `file` (host memory, aligned, valid during the call; at most kStagedBytes of them at once):
// copied as they are when t's dtype is T's, widened exactly when t is F32 and T double (the
// caller checked the dtype and the shape). The pieces go through one small staging buffer,
// so a tensor read from a file never needs a host copy of its own size.
inline constexpr size_t kStagedBytes = size_t{256} << 10;

template <typename T, typename File, typename Entry, typename Fn>
void visit_values(const File& file, const Entry& t, Fn&& fn) {
    const bool widen = t.dtype != scalar_type_of<T>();
    check(!widen || (t.dtype == ScalarType::f32 && std::is_same_v<T, double>), file.source,
          ": tensor '", t.name, "' has dtype ", to_string(t.dtype), ", expected ",
          to_string(scalar_type_of<T>()));
    const size_t in_size = widen ? sizeof(float) : sizeof(T);
    std::vector<T> staged;
    file.visit_bytes(t, [&](const unsigned char* bytes, size_t n) {
        for (size_t at = 0; at < n;) {
            const size_t count = std::min(n - at, kStagedBytes / sizeof(T) * in_size) / in_size;
            staged.resize(count);
            if (widen) {
                for (size_t i = 0; i < count; ++i) {
                    float f;
                    std::memcpy(&f, bytes + at + i * sizeof(float), sizeof(float));
                    staged[i] = static_cast<T>(f);
                }
            } else {
                std::memcpy(staged.data(), bytes + at, count * sizeof(T));
            }
            fn(static_cast<const T*>(staged.data()), count);
            at += count * in_size;
        }
    });
}

}  // namespace detail

// Infers the nn.LSTM configuration from the names and shapes of the tensors under `prefix`
// (tensors outside the prefix are ignored): layers from the largest l{k}, bidirectional from any
// "_reverse" name, hidden size from weight_ih_l0's rows / 4, input size from its columns, bias
// from whether layer 0 has a bias tensor, proj_size from weight_hr_l0's rows (0 without it). Then
// checks that exactly the expected tensors are present with the expected shapes and a floating
// dtype; the error lists every missing, extra and mis-shaped tensor at once. `file` is a
// TensorFile or a TensorFileReader (only the header is read).
template <typename File, typename = std::enable_if_t<detail::is_tensor_file_v<File>>>
Config infer_lstm_config(const File& file, const std::string& prefix = "") {
    // Through the name index: lstm_tool info infers a config for every candidate prefix, and a
    // scan of the whole file per prefix made that quadratic in the number of tensors.
    const auto ours = file.with_prefix(prefix);
    const std::string where = file.source + (prefix.empty() ? "" : " (prefix '" + prefix + "')");

    const auto* w0 = file.find(prefix + "weight_ih_l0");
    if (w0 == nullptr)
        fail(where, ": not an nn.LSTM state_dict: no tensor '", prefix,
             "weight_ih_l0'; the file has ", file.name_list());
    check(w0->rank() == 2 && w0->shape[0] % 4 == 0 && w0->shape[0] > 0 && w0->shape[1] > 0, where,
          ": ", w0->name, " has shape ", w0->shape_string(),
          ", expected (4 * hidden_size, input_size) with both sizes >= 1");

    Config config;
    config.input_size = w0->shape[1];
    config.hidden_size = w0->shape[0] / 4;
    // Either bias of layer 0 means bias=True: a file with only one of them is then reported as
    // missing the other, rather than passing as bias=False with an unexpected tensor.
    config.bias =
        file.find(prefix + "bias_ih_l0") != nullptr || file.find(prefix + "bias_hh_l0") != nullptr;
    if (const auto* hr0 = file.find(prefix + "weight_hr_l0")) {
        // Only the rows decide proj_size: columns other than hidden_size are then listed below
        // as a wrong shape, with every other problem. Rows of hidden_size or more are refused
        // here, as nn.LSTM refuses them: no valid config has such a projection to check against.
        check(hr0->rank() == 2 && hr0->shape[0] >= 1 && hr0->shape[0] < config.hidden_size, where,
              ": ", hr0->name, " has shape ", hr0->shape_string(),
              ", expected (proj_size, hidden_size) with 1 <= proj_size < hidden_size = ",
              config.hidden_size);
        config.proj_size = hr0->shape[0];
    }
    int64_t max_layer = 0;
    for (const auto* t : ours) {
        std::string kind;
        int64_t layer = 0;
        bool reverse = false;
        if (!detail::parse_lstm_name(t->name.substr(prefix.size()), kind, layer, reverse)) continue;
        check(layer < kMaxLayers, where, ": ", t->name, " names layer ", layer, ", beyond the ",
              kMaxLayers, " layers a state_dict may have here");
        max_layer = std::max(max_layer, layer);
        config.bidirectional = config.bidirectional || reverse;
    }
    config.num_layers = max_layer + 1;
    // Counted in double first: hostile shapes must not overflow the int64 sizes below.
    const double h = static_cast<double>(config.hidden_size);
    const double s = static_cast<double>(config.state_size());
    const double widest =
        std::max(static_cast<double>(config.input_size), static_cast<double>(config.output_size()));
    const double per_cell = 4 * h * (widest + s + 2) + static_cast<double>(config.proj_size) * h;
    check(static_cast<double>(config.num_cells()) * per_cell < 1e15, where,
          ": the inferred config (input_size ", config.input_size, ", hidden_size ",
          config.hidden_size, ", proj_size ", config.proj_size, ", ", config.num_layers,
          " layers) has more parameters than can exist");

    const std::vector<ParamEntry> expected = param_entries(config);
    std::vector<std::string> missing, misshaped, extra, wrong_dtype;
    std::set<std::string> expected_names;
    for (const ParamEntry& e : expected) {
        expected_names.insert(prefix + e.name);
        const auto* t = file.find(prefix + e.name);
        if (t == nullptr) {
            missing.push_back(prefix + e.name + " " + detail::shape_of_entry(e));
            continue;
        }
        if (!detail::entry_matches(e, *t))
            misshaped.push_back(t->name + " is " + t->shape_string() + ", expected " +
                                detail::shape_of_entry(e));
        if (t->dtype != ScalarType::f32 && t->dtype != ScalarType::f64)
            wrong_dtype.push_back(t->name + " is " + to_string(t->dtype));
    }
    for (const auto* t : ours)
        if (!expected_names.count(t->name)) extra.push_back(t->name);
    if (missing.empty() && misshaped.empty() && extra.empty() && wrong_dtype.empty()) return config;

    std::string msg =
        where + ": not a valid nn.LSTM state_dict for the inferred config (input_size " +
        std::to_string(config.input_size) + ", hidden_size " + std::to_string(config.hidden_size) +
        (config.proj_size > 0 ? ", proj_size " + std::to_string(config.proj_size) : "") +
        ", num_layers " + std::to_string(config.num_layers) +
        (config.bidirectional ? ", bidirectional" : ", unidirectional") +
        (config.bias ? "" : ", bias=False") + ")";
    if (!missing.empty()) msg += "; missing: " + detail::join_limited(missing);
    if (!extra.empty()) msg += "; unexpected: " + detail::join_limited(extra);
    if (!misshaped.empty()) msg += "; wrong shape: " + detail::join_limited(misshaped);
    if (!wrong_dtype.empty())
        msg += "; wrong dtype (F32 or F64 expected): " + detail::join_limited(wrong_dtype);
    fail(msg);
}

// Copies the parameters under `prefix` into a flat buffer of param_count(config) elements in
// PyTorch parameters() order (host memory). `config` must be what infer_lstm_config() returns for
// the file (call it first, or use import_lstm()). F32 tensors widen exactly into double; F64
// tensors into float would round, which is refused rather than done silently. `file` is a
// TensorFile or a TensorFileReader (whose tensors are read from the file a piece at a time).
template <typename T, typename File, typename = std::enable_if_t<detail::is_tensor_file_v<File>>>
std::vector<T> import_lstm_params(const File& file, const Config& config,
                                  const std::string& prefix = "") {
    // Every tensor is checked before the buffer is allocated and anything is read.
    for (const ParamEntry& e : param_entries(config)) {
        const auto& t = file.at(prefix + e.name);
        check(detail::entry_matches(e, t), file.source, ": ", t.name, " has shape ",
              t.shape_string(), ", expected ", detail::shape_of_entry(e));
        check(t.dtype == scalar_type_of<T>() ||
                  (t.dtype == ScalarType::f32 && std::is_same_v<T, double>),
              file.source, ": ", t.name, " has dtype ", to_string(t.dtype),
              " and cannot be imported into ", to_string(scalar_type_of<T>()),
              " parameters without rounding; convert the file first");
    }
    MemoryRequest()
        .add("parameters", MemoryRequest::bytes({param_count(config)}, sizeof(T)))
        .check([&] { return "import_lstm_params (" + file.source + ")"; });
    std::vector<T> params(static_cast<size_t>(param_count(config)));
    for (const ParamEntry& e : param_entries(config)) {
        T* dst = params.data() + e.offset;
        detail::visit_values<T>(file, file.at(prefix + e.name), [&](const T* v, size_t n) {
            std::memcpy(dst, v, n * sizeof(T));
            dst += n;
        });
    }
    return params;
}

// An imported nn.LSTM: its configuration and flat parameters (host, parameters() order).
template <typename T>
struct ImportedLstm {
    Config config;
    std::vector<T> params;
};

// infer_lstm_config() followed by import_lstm_params().
template <typename T, typename File, typename = std::enable_if_t<detail::is_tensor_file_v<File>>>
ImportedLstm<T> import_lstm(const File& file, const std::string& prefix = "") {
    ImportedLstm<T> out;
    out.config = infer_lstm_config(file, prefix);
    out.params = import_lstm_params<T>(file, out.config, prefix);
    return out;
}

// Reads a safetensors file and imports the nn.LSTM under `prefix`: the parameters are read from
// the file straight into the result (TensorFileReader), so the host memory this adds beyond the
// result is the header's index and a staging piece, not the file.
template <typename T>
ImportedLstm<T> import_lstm(const std::string& path, const std::string& prefix = "") {
    return import_lstm<T>(TensorFileReader(path), prefix);
}

// Appends the tensors of a flat parameter (or gradient) buffer to `file` under PyTorch's names
// with `prefix` in front: `params` is host memory of param_count(config) elements in
// parameters() order. The result loads with torch.nn.LSTM(...).load_state_dict().
template <typename T>
void export_lstm(TensorFile& file, const Config& config, Span<const T> params,
                 const std::string& prefix = "") {
    config.validate();
    check(params.size == param_count(config), "export_lstm: params has ", params.size,
          " elements, expected param_count(config) = ", param_count(config));
    for (const ParamEntry& e : param_entries(config)) {
        std::vector<int64_t> shape =
            e.cols == 0 ? std::vector<int64_t>{e.rows} : std::vector<int64_t>{e.rows, e.cols};
        file.add(Tensor::from(prefix + e.name, std::move(shape), params.data + e.offset));
    }
}

// Writes the parameters as a safetensors state_dict at `path` (as write_safetensors: a file is
// replaced whole, durably), streamed from `params` (host, param_count(config) elements) without
// a copy: the same bytes as export_lstm into a TensorFile, then write_safetensors.
template <typename T>
void export_lstm(const std::string& path, const Config& config, Span<const T> params,
                 const std::string& prefix = "") {
    config.validate();
    check(params.size == param_count(config), "export_lstm: params has ", params.size,
          " elements, expected param_count(config) = ", param_count(config));
    std::vector<TensorSource> sources;
    for (const ParamEntry& e : param_entries(config)) {
        std::vector<int64_t> shape =
            e.cols == 0 ? std::vector<int64_t>{e.rows} : std::vector<int64_t>{e.rows, e.cols};
        sources.push_back(
            TensorSource::of(prefix + e.name, std::move(shape), params.data + e.offset));
    }
    write_safetensors(path, sources);
}

}  // namespace lstm::io
