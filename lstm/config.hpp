#pragma once

#include <cstdint>

#include "lstm/error.hpp"

namespace lstm {

// Shape of an LSTM stack, with PyTorch nn.LSTM's meaning for every field.
struct Config {
    int64_t input_size = 0;
    int64_t hidden_size = 0;
    int64_t num_layers = 1;
    bool bidirectional = false;
    // Reserved for LSTMP (PyTorch's proj_size); every variant rejects a non-zero value today.
    int64_t proj_size = 0;

    int64_t num_directions() const { return bidirectional ? 2 : 1; }
    // Width of y and of every layer above the first: D * H.
    int64_t output_size() const { return num_directions() * hidden_size; }
    int64_t layer_input_size(int64_t layer) const {
        return layer == 0 ? input_size : output_size();
    }
    // Number of (layer, direction) cells; the leading size of h0/c0/hn/cn.
    int64_t num_cells() const { return num_layers * num_directions(); }

    void validate() const {
        check(input_size >= 1, "config.input_size must be >= 1, got ", input_size);
        check(hidden_size >= 1, "config.hidden_size must be >= 1, got ", hidden_size);
        check(num_layers >= 1, "config.num_layers must be >= 1, got ", num_layers);
        check(proj_size == 0,
              "config.proj_size must be 0 (projections are not implemented yet), got ", proj_size);
    }
};

inline bool operator==(const Config& a, const Config& b) {
    return a.input_size == b.input_size && a.hidden_size == b.hidden_size &&
           a.num_layers == b.num_layers && a.bidirectional == b.bidirectional &&
           a.proj_size == b.proj_size;
}
inline bool operator!=(const Config& a, const Config& b) { return !(a == b); }

}  // namespace lstm
