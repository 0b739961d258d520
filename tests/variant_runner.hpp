#pragma once

// Runs any registered variant on host data given in double and returns everything in double, so
// tests compare variants with lstm::reference element by element.

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "lstm/reference/variant_check.hpp"
#include "test_util.hpp"
#include "tolerance.hpp"

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

// The small shapes the CUDA variant tests (host emulation and GPU) run: one and more layers, uni-
// and bidirectional, with and without h0/c0, equal and mixed lengths, tiny sizes, nn.LSTM's
// bias=False and proj_size (a variant that refuses an option in supports() is skipped).
inline std::vector<Shape> small_shapes() {
    // Config's fields in order: input_size, hidden_size, num_layers, bidirectional, proj_size,
    // bias.
    return {
        {"uni 1 layer, equal lengths", {3, 5, 1, false}, 7, 3, {}, true},
        {"uni 1 layer, no h0/c0", {3, 5, 1, false}, 7, 3, {}, false},
        {"bi 1 layer, mixed lengths", {3, 5, 1, true}, 7, 3, {7, 1, 4}, true},
        {"uni 2 layers, mixed lengths", {3, 5, 2, false}, 6, 4, {2, 6, 1, 5}, true},
        {"bi 3 layers, mixed lengths, no state", {3, 5, 3, true}, 5, 3, {5, 3, 1}, false},
        {"bi 2 layers, every sequence shorter than T", {3, 5, 2, true}, 6, 3, {4, 2, 3}, true},
        {"batch 1", {4, 6, 2, true}, 9, 1, {}, true},
        {"H 17, I 11", {11, 17, 1, true}, 5, 5, {5, 4, 5, 2, 1}, true},
        {"I 1, H 1", {1, 1, 2, true}, 4, 2, {4, 3}, true},
        {"bi 2 layers, no biases, mixed lengths", {3, 5, 2, true, 0, false}, 5, 3, {5, 2, 4}, true},
        {"bi 2 layers, proj 3, mixed lengths", {4, 6, 2, true, 3}, 5, 3, {5, 1, 3}, true},
        {"uni 1 layer, proj 1, no biases, no state", {3, 5, 1, false, 1, false}, 4, 2, {}, false},
        {"H 17, proj 7, 3 layers", {11, 17, 3, false, 7}, 6, 4, {6, 2, 5, 1}, true},
    };
}

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
    const size_t h_state = config.num_cells() * batch * config.state_size();
    const size_t c_state = config.num_cells() * batch * config.hidden_size;
    c.in.x = random_vector(seq_len * batch * config.input_size, seed + 1, -scale, scale);
    c.in.params = random_vector(param_count(config), seed + 2, -scale, scale);
    if (with_state) {
        c.in.h0 = random_vector(h_state, seed + 3);
        c.in.c0 = random_vector(c_state, seed + 4);
    }
    c.out_grads.dy = random_vector(seq_len * batch * config.output_size(), seed + 5);
    c.out_grads.dhn = random_vector(h_state, seed + 6);
    c.out_grads.dcn = random_vector(c_state, seed + 7);
    return c;
}

// dparams after a backward that accumulates `grad` onto `before` handed over in precision T.
template <typename T>
std::vector<double> accumulated(const std::vector<double>& grad,
                                const std::vector<double>& before) {
    std::vector<double> out = grad;
    for (size_t k = 0; k < before.size(); ++k)
        out[k] += static_cast<double>(static_cast<T>(before[k]));
    return out;
}

// The tolerance rule's rtol for precision T on `c`.
struct Rtol {
    double forward, backward;
};

template <typename T>
Rtol rtol_for(const LstmCase& c) {
    const DType dt = dtype_of<T>();
    return {lstm_rtol(dt, c.in.config, c.in.seq_len, Pass::forward),
            lstm_rtol(dt, c.in.config, c.in.seq_len, Pass::backward)};
}

// CHECKs y, hn, cn of `got` against the reference under the forward rtol, and dx, dh0, dc0 and
// dparams (against `want_dparams`, see accumulated()) under the backward rtol.
inline void check_close_to_reference(const VariantResult& got, const reference::LstmOutputs& ref,
                                     const reference::LstmInputGrads& ref_grads,
                                     const std::vector<double>& want_dparams, const Rtol& rtol) {
    LSTM_CHECK_CLOSE(compare_scaled("y", got.y, ref.y, rtol.forward));
    LSTM_CHECK_CLOSE(compare_scaled("hn", got.hn, ref.hn, rtol.forward));
    LSTM_CHECK_CLOSE(compare_scaled("cn", got.cn, ref.cn, rtol.forward));
    LSTM_CHECK_CLOSE(compare_scaled("dx", got.dx, ref_grads.dx, rtol.backward));
    LSTM_CHECK_CLOSE(compare_scaled("dh0", got.dh0, ref_grads.dh0, rtol.backward));
    LSTM_CHECK_CLOSE(compare_scaled("dc0", got.dc0, ref_grads.dc0, rtol.backward));
    LSTM_CHECK_CLOSE(
        compare_scaled("dparams (accumulated)", got.dparams, want_dparams, rtol.backward));
}

// Runs `v` in precision T on `c`, with dparams starting from a random vector (backward
// accumulates, so the expectation is that vector plus the gradient), and CHECKs y, hn, cn, dx,
// dh0, dc0 and dparams against the reference under the tolerance rule. `label` names the run in
// the failure report.
template <typename T>
void check_against_reference(const Variant& v, const LstmCase& c, uint64_t seed,
                             const std::string& label, const std::string& path = {}) {
    const auto ref = reference::lstm_forward(c.in, v.cell());
    const auto ref_grads = reference::lstm_backward(c.in, c.out_grads, v.cell());
    const std::vector<double> before = random_vector(ref_grads.dparams.size(), seed + 99);
    const VariantResult got = run_variant<T>(v, c, before, path);
    INFO(label << ", " << to_string(dtype_of<T>()) << (path.empty() ? "" : ", path ") << path);
    check_close_to_reference(got, ref, ref_grads, accumulated<T>(ref_grads.dparams, before),
                             rtol_for<T>(c));
}

// c's problem (reference::load_case: outputs start as NaN) in precision T in `device` memory on
// `context` (required for cuda), without scratch: allocate_scratch() or use_scratch() next.
template <typename T>
LstmProblem<T> case_problem(const LstmCase& c, Device device = Device::cpu,
                            cuda::Context* context = nullptr) {
    LstmProblem<T> p(c.in.config, c.in.seq_len, c.in.batch, device, context);
    reference::load_case(p, c);
    return p;
}

// Training forward on `p` with its lengths and scratch, then backward whole or as data + weights
// (`split`), dparams overwritten first by `before` (host, P) or zeros; every output and gradient
// read back in double. The buffers stay put, so repeated calls repeat their pointers.
template <typename T>
VariantResult train_problem(const Variant& v, LstmProblem<T>& p, bool split,
                            const std::vector<double>& before = {}) {
    const std::vector<BackwardPart> parts =
        split ? std::vector<BackwardPart>{BackwardPart::data, BackwardPart::weights}
              : std::vector<BackwardPart>{BackwardPart::all};
    return reference::run_variant_on(v, p, parts, before, /*data_sees_dparams=*/true);
}

// Inference forward on `p` (no reserve); y, hn, cn read back in double.
template <typename T>
VariantResult infer_problem(const Variant& v, LstmProblem<T>& p) {
    return reference::run_variant_on(v, p, {});
}

// Bit equality of two runs: y, hn, cn, and with `training` dx, dh0, dc0, dparams as well.
inline void check_same_bits(const VariantResult& got, const VariantResult& want, bool training) {
    CHECK(got.y == want.y);
    CHECK(got.hn == want.hn);
    CHECK(got.cn == want.cn);
    if (!training) return;
    CHECK(got.dx == want.dx);
    CHECK(got.dh0 == want.dh0);
    CHECK(got.dc0 == want.dc0);
    CHECK(got.dparams == want.dparams);
}

}  // namespace lstm::test
