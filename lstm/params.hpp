#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lstm/config.hpp"
#include "lstm/error.hpp"

namespace lstm {

// Element offsets of one (layer, direction) cell's tensors inside the flat parameter buffer.
// Closed form and allocation-free, so kernels may call it inside forward/backward.
struct CellOffsets {
    int64_t weight_ih;  // (4H, in_l) row-major, gate blocks i, f, g, o
    int64_t weight_hh;  // (4H, S) row-major, S = config.state_size()
    int64_t bias_ih;    // (4H); kNoTensor when config.bias is false
    int64_t bias_hh;    // (4H); kNoTensor when config.bias is false
    int64_t weight_hr;  // (P, H) row-major; kNoTensor when config.proj_size is 0

    // Marks a tensor the config does not have; an offset that is used by mistake reads far out of
    // bounds rather than aliasing another tensor.
    static constexpr int64_t kNoTensor = -1;
    bool has_bias() const { return bias_ih != kNoTensor; }
    bool has_projection() const { return weight_hr != kNoTensor; }
};

// Number of elements one (layer, direction) cell owns:
// 4H * (in_l + S) + (bias ? 8H : 0) + (proj ? P * H : 0).
inline int64_t cell_param_count(const Config& config, int64_t layer) {
    const int64_t gates = 4 * config.hidden_size;
    return gates * (config.layer_input_size(layer) + config.state_size()) +
           (config.bias ? 2 * gates : 0) + config.proj_size * config.hidden_size;
}

// Total number of parameters, equal to sum(p.numel() for p in torch.nn.LSTM(...).parameters()).
// Layers after the first are alike, so the count needs no walk over the layers.
inline int64_t param_count(const Config& config) {
    const int64_t later = config.num_layers > 1 ? cell_param_count(config, 1) : 0;
    return config.num_directions() *
           (cell_param_count(config, 0) + (config.num_layers - 1) * later);
}

// Offsets in PyTorch's parameters() order: for each layer, for each direction:
// weight_ih, weight_hh, bias_ih, bias_hh (if bias), weight_hr (if proj_size > 0).
inline CellOffsets cell_offsets(const Config& config, int64_t layer, int64_t direction) {
    int64_t offset = 0;
    for (int64_t l = 0; l < layer; ++l)
        offset += config.num_directions() * cell_param_count(config, l);
    offset += direction * cell_param_count(config, layer);
    const int64_t gates = 4 * config.hidden_size;
    CellOffsets out{};
    out.weight_ih = offset;
    out.weight_hh = out.weight_ih + gates * config.layer_input_size(layer);
    int64_t next = out.weight_hh + gates * config.state_size();
    out.bias_ih = out.bias_hh = CellOffsets::kNoTensor;
    if (config.bias) {
        out.bias_ih = next;
        out.bias_hh = next + gates;
        next += 2 * gates;
    }
    out.weight_hr = config.proj_size > 0 ? next : CellOffsets::kNoTensor;
    return out;
}

// Offset of layer `layer`'s first parameter: the cells of a layer are contiguous, in the layout
// of config.single_layer(layer), so one layer can run as a stack of its own on that slice.
inline int64_t layer_param_offset(const Config& config, int64_t layer) {
    return cell_offsets(config, layer, 0).weight_ih;
}

// One named tensor inside the flat buffer. Biases have rank 1 (cols == 0).
struct ParamEntry {
    std::string name;  // PyTorch's state_dict key, e.g. "bias_hh_l1_reverse"
    int64_t offset;
    int64_t rows;
    int64_t cols;
    int64_t numel() const { return cols == 0 ? rows : rows * cols; }
};

// The named pieces of the flat parameter buffer, in PyTorch's parameters() order. Building it
// allocates, so build it once (not inside a time loop).
inline std::vector<ParamEntry> param_entries(const Config& config) {
    std::vector<ParamEntry> out;
    const int64_t gates = 4 * config.hidden_size;
    for (int64_t l = 0; l < config.num_layers; ++l) {
        for (int64_t d = 0; d < config.num_directions(); ++d) {
            const std::string suffix = "_l" + std::to_string(l) + (d == 1 ? "_reverse" : "");
            const CellOffsets o = cell_offsets(config, l, d);
            out.push_back({"weight_ih" + suffix, o.weight_ih, gates, config.layer_input_size(l)});
            out.push_back({"weight_hh" + suffix, o.weight_hh, gates, config.state_size()});
            if (o.has_bias()) {
                out.push_back({"bias_ih" + suffix, o.bias_ih, gates, 0});
                out.push_back({"bias_hh" + suffix, o.bias_hh, gates, 0});
            }
            if (o.has_projection())
                out.push_back(
                    {"weight_hr" + suffix, o.weight_hr, config.proj_size, config.hidden_size});
        }
    }
    return out;
}

// Looks a parameter up by its PyTorch name; throws naming the unknown key.
inline ParamEntry find_param(const Config& config, const std::string& name) {
    for (const ParamEntry& e : param_entries(config))
        if (e.name == name) return e;
    fail("parameter name '", name, "' does not exist for this config (", config.num_layers,
         " layers, ", config.bidirectional ? "bidirectional" : "unidirectional", ")");
}

}  // namespace lstm
