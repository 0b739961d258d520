#pragma once

#include <cmath>
#include <cstdint>

#include "lstm/error.hpp"

namespace lstm {

// Shape and options of an LSTM stack, with PyTorch nn.LSTM's meaning for every field.
//
// What a Variant computes is described by input_size, hidden_size, num_layers, bidirectional,
// proj_size and bias. batch_first and dropout are options of the owning layer (lstm::Lstm),
// which applies them around the variant's time-major, dropout-free calls, so every variant gets
// them; a raw Variant call refuses a config that sets them (see core()).
struct Config {
    int64_t input_size = 0;
    int64_t hidden_size = 0;
    int64_t num_layers = 1;
    bool bidirectional = false;
    // LSTMP: when > 0, h_t = W_hr (o_t * tanh(c_t)) has proj_size features instead of
    // hidden_size (the cell state keeps hidden_size), and each cell owns weight_hr (P, H).
    int64_t proj_size = 0;
    // false: no bias_ih / bias_hh tensors (in the flat buffer or the state_dict).
    bool bias = true;
    // true: x and y are (N, T, features) instead of (T, N, features); h0/c0/hn/cn keep
    // (L*D, N, features), as in PyTorch.
    bool batch_first = false;
    // Probability of zeroing each element of every layer's output except the last's, in training
    // forwards only, with the kept ones scaled by 1 / (1 - dropout) (PyTorch's inverted dropout).
    double dropout = 0.0;

    int64_t num_directions() const { return bidirectional ? 2 : 1; }
    // Features of h (and of h0/hn, and of each direction's part of y): proj_size if set, else H.
    int64_t state_size() const { return proj_size > 0 ? proj_size : hidden_size; }
    // Width of y and of every layer above the first: D * state_size().
    int64_t output_size() const { return num_directions() * state_size(); }
    int64_t layer_input_size(int64_t layer) const {
        return layer == 0 ? input_size : output_size();
    }
    // Number of (layer, direction) cells; the leading size of h0/c0/hn/cn.
    int64_t num_cells() const { return num_layers * num_directions(); }

    // What a Variant runs: this config without the layer-level options (time-major, no dropout).
    Config core() const {
        Config c = *this;
        c.batch_first = false;
        c.dropout = 0.0;
        return c;
    }
    // Layer `layer` alone, as a one-layer stack (its input is layer_input_size(layer) wide).
    Config single_layer(int64_t layer) const {
        Config c = core();
        c.input_size = layer_input_size(layer);
        c.num_layers = 1;
        return c;
    }

    void validate() const {
        check(input_size >= 1, "config.input_size must be >= 1, got ", input_size);
        check(hidden_size >= 1, "config.hidden_size must be >= 1, got ", hidden_size);
        check(num_layers >= 1, "config.num_layers must be >= 1, got ", num_layers);
        check(proj_size >= 0, "config.proj_size must be >= 0 (0: no projection), got ", proj_size);
        // PyTorch refuses it too: a projection as wide as the cell would project nothing away.
        check(proj_size < hidden_size,
              "config.proj_size must be smaller than hidden_size = ", hidden_size, ", got ",
              proj_size);
        check(std::isfinite(dropout) && dropout >= 0.0 && dropout <= 1.0,
              "config.dropout must be a probability in [0, 1], got ", dropout);
        check_parameter_count();
    }

    // At most 2^48 parameters (a petabyte in fp32, beyond any machine). Below it every size a
    // variant derives from the weights fits in 64 bits with room to spare: the few fp64 copies
    // of them it keeps (packed weights, gradients), and scratch of a few thousand rows of 4H.
    static constexpr int64_t kMaxParameters = int64_t(1) << 48;

private:
    // The sum param_count() computes, checked for overflow without walking the layers (layers
    // after the first are all alike), so that a huge config is refused by name rather than
    // wrapping to a small parameter count.
    void check_parameter_count() const {
        // Each size alone is a lower bound of the count; below 2^48, 4H and D * S cannot wrap.
        const bool too_wide = input_size > kMaxParameters || hidden_size > kMaxParameters ||
                              num_layers > kMaxParameters;
        const int64_t gates = too_wide ? 0 : 4 * hidden_size, state = state_size();
        int64_t first = 0, later = 0, total = 0;
        const bool overflow = too_wide || cell_parameters(gates, input_size, state, first) ||
                              cell_parameters(gates, num_directions() * state, state, later) ||
                              __builtin_mul_overflow(later, num_layers - 1, &total) ||
                              __builtin_add_overflow(total, first, &total) ||
                              __builtin_mul_overflow(total, num_directions(), &total) ||
                              total > kMaxParameters;
        check(!overflow, "config: nn.LSTM(input_size=", input_size, ", hidden_size=", hidden_size,
              ", num_layers=", num_layers, ", proj_size=", proj_size,
              ") has more than 2^48 parameters, more than any machine can hold");
    }
    // 4H * (in + S) + (bias ? 8H : 0) + P * H into `out`; true on overflow.
    bool cell_parameters(int64_t gates, int64_t in, int64_t state, int64_t& out) const {
        int64_t weights = 0, projection = 0;
        return __builtin_add_overflow(in, state, &weights) ||
               __builtin_mul_overflow(weights, gates, &weights) ||
               __builtin_mul_overflow(proj_size, hidden_size, &projection) ||
               __builtin_add_overflow(weights, projection, &out) ||
               __builtin_add_overflow(out, bias ? 2 * gates : 0, &out);
    }
};

inline bool operator==(const Config& a, const Config& b) {
    return a.input_size == b.input_size && a.hidden_size == b.hidden_size &&
           a.num_layers == b.num_layers && a.bidirectional == b.bidirectional &&
           a.proj_size == b.proj_size && a.bias == b.bias && a.batch_first == b.batch_first &&
           a.dropout == b.dropout;
}
inline bool operator!=(const Config& a, const Config& b) { return !(a == b); }

}  // namespace lstm
