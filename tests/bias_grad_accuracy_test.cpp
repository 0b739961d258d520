// The bias gradient is a sum over every valid (step, row) of a cell: on long sequences and large
// batches that is hundreds of thousands of terms, where the order of summation decides the float
// error. PyTorch's fp32 LSTM (cascade summation over T * N) stays near 5e-7 of max|db| on
// T 500, N 1024, H 32; a sequential sum reached 2.2e-5 there.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "lstm/params.hpp"
#include "lstm/registry.hpp"
#include "variant_runner.hpp"

using namespace lstm;
using namespace lstm::test;

namespace {

// Largest |got - want| over both bias gradients of every cell, relative to their largest |want|.
double bias_grad_error(const Config& config, const std::vector<double>& got,
                       const std::vector<double>& want) {
    double err = 0.0, scale = 0.0;
    for (int64_t l = 0; l < config.num_layers; ++l)
        for (int64_t d = 0; d < config.num_directions(); ++d) {
            const CellOffsets p = cell_offsets(config, l, d);
            for (int64_t start : {p.bias_ih, p.bias_hh})
                for (int64_t j = start; j < start + 4 * config.hidden_size; ++j) {
                    const auto k = static_cast<size_t>(j);
                    err = std::max(err, std::abs(got[k] - want[k]));
                    scale = std::max(scale, std::abs(want[k]));
                }
        }
    return err / scale;
}

}  // namespace

TEST_CASE("basic: fp32 bias gradients over T 500 x N 256 rows stay within 2e-6 of max|db|",
          "[variants][accuracy]") {
    const Config config{4, 16, 1, false};
    const int64_t seq_len = 500, batch = 256;
    const LstmCase c = make_case(config, seq_len, batch, {}, false, 4100);
    const VariantResult got = run_variant<float>(find_variant("basic", Device::cpu), c);
    const std::vector<double> want = reference::lstm_backward(c.in, c.out_grads).dparams;
    const double err = bias_grad_error(config, got.dparams, want);
    INFO("bias gradient error " << err << " of max|db|");
    CHECK(err <= 2e-6);
}
