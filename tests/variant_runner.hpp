#pragma once

// Runs any registered variant on host data given in double and returns everything in double, so
// tests compare variants with lstm::reference element by element.

#include <cstdint>
#include <vector>

#include "lstm/reference/variant_check.hpp"
#include "test_util.hpp"

namespace lstm::test {

using reference::LstmCase;
using reference::run_variant;
using reference::VariantResult;

// A named problem of a test's shape table: make_case() turns it into data.
struct Shape {
    const char* name;
    Config config;
    int64_t seq_len, batch;
    std::vector<int64_t> lengths;
    bool with_state;
};

// Random inputs, parameters and output gradients for `config` on (T, N); `with_state` decides
// whether h0/c0 are given. Values uniform in [-scale, scale].
inline LstmCase make_case(const Config& config, int64_t seq_len, int64_t batch,
                          std::vector<int64_t> lengths, bool with_state, uint64_t seed,
                          double scale = 1.0) {
    LstmCase c;
    c.in.config = config;
    c.in.seq_len = seq_len;
    c.in.batch = batch;
    c.in.lengths = std::move(lengths);
    const size_t state = config.num_cells() * batch * config.hidden_size;
    c.in.x = random_vector(seq_len * batch * config.input_size, seed + 1, -scale, scale);
    c.in.params = random_vector(param_count(config), seed + 2, -scale, scale);
    if (with_state) {
        c.in.h0 = random_vector(state, seed + 3);
        c.in.c0 = random_vector(state, seed + 4);
    }
    c.out_grads.dy = random_vector(seq_len * batch * config.output_size(), seed + 5);
    c.out_grads.dhn = random_vector(state, seed + 6);
    c.out_grads.dcn = random_vector(state, seed + 7);
    return c;
}

}  // namespace lstm::test
