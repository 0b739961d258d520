// Every registered CPU variant against the double reference, in every precision it supports.
// These tests iterate the registry: registering a variant is all it takes to have it checked.

#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "lstm/registry.hpp"
#include "tolerance.hpp"
#include "variant_runner.hpp"

using namespace lstm;
using namespace lstm::test;

namespace {

// Odd sizes so that remainder paths run; H = 17 is not a multiple of any SIMD width.
std::vector<Shape> shape_list() {
    return {
        {"uni 1 layer, equal lengths", {3, 5, 1, false}, 7, 3, {}, true},
        {"uni 1 layer, no h0/c0", {3, 5, 1, false}, 7, 3, {}, false},
        {"bi 1 layer, mixed lengths", {3, 5, 1, true}, 7, 3, {7, 1, 4}, true},
        {"uni 2 layers, mixed lengths", {3, 5, 2, false}, 6, 4, {2, 6, 1, 5}, true},
        {"bi 3 layers, mixed lengths, no state", {3, 5, 3, true}, 5, 3, {5, 3, 1}, false},
        {"batch 1", {4, 6, 2, true}, 9, 1, {}, true},
        {"H 17, I 11", {11, 17, 1, true}, 5, 5, {5, 4, 5, 2, 1}, true},
        {"I 1, H 1", {1, 1, 2, true}, 4, 2, {4, 3}, true},
        // One step, H not a multiple of 4, and the hidden sizes and batches real models use:
        // shapes for which a vendor library picks other weight layouts (oneDNN 2.6 on AVX2 CPUs
        // takes its packed-GEMM format for them, which a strided weight view cannot reorder into).
        {"T 1, H 3", {4, 3, 1, false}, 1, 2, {}, true},
        {"T 1, H 7, bi", {5, 7, 1, true}, 1, 3, {}, true},
        {"T 1, H 33, 2 layers", {6, 33, 2, false}, 1, 4, {}, true},
        {"nn.LSTM(40, 128), N 16", {40, 128, 1, false}, 3, 16, {}, true},
        {"nn.LSTM(40, 256), N 32", {40, 256, 1, false}, 2, 32, {}, true},
        {"nn.LSTM(40, 256, bidirectional), N 64", {40, 256, 1, true}, 2, 64, {}, false},
        // nn.LSTM(bias=False) and nn.LSTM(proj_size=P) (Config's fields after bidirectional:
        // proj_size, bias); a variant without projections says so in supports() and is skipped
        // (the test below pins who supports what).
        {"bi 2 layers, no biases, mixed lengths",
         Config{3, 5, 2, true, 0, false},
         5,
         3,
         {5, 2, 4},
         true},
        {"bi 2 layers, proj 3, mixed lengths", Config{4, 6, 2, true, 3}, 5, 3, {5, 1, 3}, true},
        {"uni 1 layer, proj 1, no biases, no state",
         Config{3, 5, 1, false, 1, false},
         4,
         2,
         {},
         false},
        {"H 17, proj 7, 3 layers", Config{11, 17, 3, false, 7}, 6, 4, {6, 2, 5, 1}, true},
    };
}

// Calls fn(variant, dtype, case, path) for every CPU variant, precision that accepts the problem
// and path the variant takes on this host (Variant::paths). A variant that cannot take
// per-sequence lengths (supports_variable_lengths() says why) gets the same case with every
// sequence at full length, unless the lengths are the point of the test.
enum class Lengths { may_equalize, required };

template <typename Fn>
void for_each_cpu_variant_and_dtype(const LstmCase& c, Lengths policy, Fn&& fn) {
    const bool variable =
        detail::has_variable_lengths(Span<const int64_t>(c.in.lengths), c.in.seq_len);
    LstmCase equalized = c;
    equalized.in.lengths.clear();
    for (const Variant* v : variants_on(Device::cpu)) {
        const bool refuses = variable && v->supports_variable_lengths().has_value();
        if (refuses && policy == Lengths::required) continue;
        for (DType dt : {DType::f32, DType::f64}) {
            if (v->supports(c.in.config, dt)) continue;
            for (const std::string& path : v->paths(dt)) fn(*v, dt, refuses ? equalized : c, path);
        }
    }
}

}  // namespace

TEST_CASE("every CPU variant matches the reference", "[variants]") {
    REQUIRE_FALSE(variants_on(Device::cpu).empty());
    uint64_t seed = 1000;
    for (const Shape& s : shape_list()) {
        const LstmCase c = make_case(s.config, s.seq_len, s.batch, s.lengths, s.with_state, seed);
        for_each_cpu_variant_and_dtype(
            c, Lengths::may_equalize,
            [&](const Variant& v, DType dt, const LstmCase& used, const std::string& path) {
                if (dt == DType::f32)
                    check_against_reference<float>(
                        v, used, seed, std::string("variant ") + v.name() + ", case: " + s.name,
                        path);
                else
                    check_against_reference<double>(
                        v, used, seed, std::string("variant ") + v.name() + ", case: " + s.name,
                        path);
            });
        seed += 10;
    }
}

TEST_CASE("which nn.LSTM options each variant runs", "[variants]") {
    // Pinned, so that a variant losing an option fails here instead of being skipped silently by
    // the reference comparison above (which runs every variant on what it supports): every
    // variant runs bias=False and projections.
    const Config biasless = Config{3, 5, 2, true, 0, false}, proj = Config{3, 5, 2, true, 2};
    for (const Variant* v : variants()) {
        INFO("variant " << v->name() << " on " << to_string(v->device()));
        CHECK_FALSE(v->supports(biasless, DType::f32).has_value());
        CHECK_FALSE(v->supports(proj, DType::f32).has_value());
    }
}

TEST_CASE("a variable-length batch equals per-sequence runs", "[variants]") {
    const Config config{3, 5, 2, true};
    const std::vector<int64_t> lengths = {4, 7, 1, 6};
    const int64_t seq_len = 7, batch = 4;
    const LstmCase whole = make_case(config, seq_len, batch, lengths, true, 77);
    for_each_cpu_variant_and_dtype(
        whole, Lengths::required,
        [&](const Variant& v, DType dt, const LstmCase&, const std::string& path) {
            if (dt != DType::f64) return;  // exact in fp64 up to rounding: compare at 1e-12
            const VariantResult all = run_variant<double>(v, whole, {}, path);
            std::vector<double> dparams_sum(all.dparams.size(), 0.0);
            const int64_t I = config.input_size, H = config.hidden_size, F = config.output_size();
            for (int64_t n = 0; n < batch; ++n) {
                // Sequence n alone, cut to its own length.
                LstmCase one;
                one.in.config = config;
                one.in.seq_len = lengths[n];
                one.in.batch = 1;
                auto rows = [&](const std::vector<double>& src, int64_t steps, int64_t width,
                                int64_t stride_batch) {
                    std::vector<double> out;
                    for (int64_t t = 0; t < steps; ++t)
                        for (int64_t k = 0; k < width; ++k)
                            out.push_back(src[(t * stride_batch + n) * width + k]);
                    return out;
                };
                one.in.x = rows(whole.in.x, lengths[n], I, batch);
                one.in.params = whole.in.params;
                one.in.h0 = rows(whole.in.h0, config.num_cells(), H, batch);
                one.in.c0 = rows(whole.in.c0, config.num_cells(), H, batch);
                one.out_grads.dy = rows(whole.out_grads.dy, lengths[n], F, batch);
                one.out_grads.dhn = rows(whole.out_grads.dhn, config.num_cells(), H, batch);
                one.out_grads.dcn = rows(whole.out_grads.dcn, config.num_cells(), H, batch);
                const VariantResult single = run_variant<double>(v, one, {}, path);
                INFO("variant " << v.name() << " (" << path << "), sequence " << n);
                LSTM_CHECK_CLOSE(
                    compare("y", single.y, rows(all.y, lengths[n], F, batch), 1e-13, 1e-12));
                LSTM_CHECK_CLOSE(compare("hn", single.hn,
                                         rows(all.hn, config.num_cells(), H, batch), 1e-13, 1e-12));
                LSTM_CHECK_CLOSE(compare("cn", single.cn,
                                         rows(all.cn, config.num_cells(), H, batch), 1e-13, 1e-12));
                LSTM_CHECK_CLOSE(
                    compare("dx", single.dx, rows(all.dx, lengths[n], I, batch), 1e-13, 1e-12));
                LSTM_CHECK_CLOSE(compare(
                    "dh0", single.dh0, rows(all.dh0, config.num_cells(), H, batch), 1e-13, 1e-12));
                LSTM_CHECK_CLOSE(compare(
                    "dc0", single.dc0, rows(all.dc0, config.num_cells(), H, batch), 1e-13, 1e-12));
                for (size_t k = 0; k < dparams_sum.size(); ++k) dparams_sum[k] += single.dparams[k];
            }
            INFO("variant " << v.name() << " (" << path << ")");
            LSTM_CHECK_CLOSE(compare("dparams", all.dparams, dparams_sum, 1e-12, 1e-11));
            // Padded positions: y and dx exactly zero.
            for (int64_t n = 0; n < batch; ++n)
                for (int64_t t = lengths[n]; t < seq_len; ++t) {
                    for (int64_t k = 0; k < F; ++k) CHECK(all.y[(t * batch + n) * F + k] == 0.0);
                    for (int64_t k = 0; k < I; ++k) CHECK(all.dx[(t * batch + n) * I + k] == 0.0);
                }
        });
}

TEST_CASE("saturated pre-activations give no NaN or Inf", "[variants]") {
    const Config config{3, 5, 2, true};
    for (double scale : {20.0, 100.0, 1e4}) {
        // Inputs and weights of magnitude ~scale push every gate into saturation.
        const LstmCase c = make_case(config, 6, 3, {6, 2, 5}, true, 500, scale);
        for_each_cpu_variant_and_dtype(
            c, Lengths::may_equalize,
            [&](const Variant& v, DType dt, const LstmCase& used, const std::string& path) {
                const auto ref = reference::lstm_forward(used.in, v.cell());
                const VariantResult r = dt == DType::f32 ? run_variant<float>(v, used, {}, path)
                                                         : run_variant<double>(v, used, {}, path);
                INFO("variant " << v.name() << " (" << path << "), " << to_string(dt) << ", scale "
                                << scale);
                for (const auto* out : {&r.y, &r.hn, &r.cn, &r.dx, &r.dh0, &r.dc0, &r.dparams})
                    CHECK(all_finite(*out));
                // Saturated gates are exactly 0 or 1, so h stays within [-1, 1] and matches.
                LSTM_CHECK_CLOSE(compare("y", r.y, ref.y, 1e-5, 1e-5));
            });
    }
}

// got equals want's NaN and infinities where want has them, and matches want's finite elements
// within the scaled tolerance.
void check_with_non_finite(const std::string& what, std::vector<double> got,
                           std::vector<double> want, double rtol) {
    REQUIRE(got.size() == want.size());
    std::string misses;
    int missed = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        if (std::isfinite(want[i])) continue;
        const bool same = std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i];
        if (!same && ++missed <= 8)
            misses += " [" + std::to_string(i) + "] got " + std::to_string(got[i]) + ", expected " +
                      std::to_string(want[i]) + ";";
        got[i] = want[i] = 0;
    }
    INFO(what << ": " << missed << " non-finite elements differ:" << misses);
    CHECK(missed == 0);
    LSTM_CHECK_CLOSE(compare_scaled(what, got, want, rtol));
}

TEST_CASE("an infinity in x or h0 gives the reference's NaN and infinities, no others",
          "[variants]") {
    // As in PyTorch: the gates it reaches saturate, so y, dx, dh0 and dc0 stay finite, and only
    // the weight-gradient column that multiplies it is NaN (0 * inf). With H not a multiple of 16
    // fused's padded units turned it into NaN gradients for the whole layer and sequence.
    for (const int64_t hidden : {5, 16, 19}) {
        const Config config{3, hidden, 2, true};
        for (const bool in_h0 : {false, true})
            for (const std::vector<int64_t>& lengths :
                 {std::vector<int64_t>{4, 3, 2}, std::vector<int64_t>{}}) {
                LstmCase c = make_case(config, 4, 3, lengths, true, 700 + hidden);
                if (in_h0)
                    c.in.h0[(0 * 3 + 2) * hidden + 1] = -std::numeric_limits<double>::infinity();
                else
                    c.in.x[(1 * 3 + 1) * 3 + 0] = std::numeric_limits<double>::infinity();
                // The column it multiplies: 4H NaN per direction reached (PyTorch's cell).
                const auto pytorch_grads = reference::lstm_backward(c.in, c.out_grads);
                REQUIRE(std::count_if(pytorch_grads.dparams.begin(), pytorch_grads.dparams.end(),
                                      [](double g) { return std::isnan(g); }) >= 4 * hidden);
                for_each_cpu_variant_and_dtype(
                    c, Lengths::may_equalize,
                    [&](const Variant& v, DType dt, const LstmCase& used, const std::string& path) {
                        if (&used != &c) return;  // run without lengths in the next round
                        const auto ref = reference::lstm_forward(c.in, v.cell());
                        const auto ref_grads =
                            reference::lstm_backward(c.in, c.out_grads, v.cell());
                        const VariantResult r = dt == DType::f32
                                                    ? run_variant<float>(v, used, {}, path)
                                                    : run_variant<double>(v, used, {}, path);
                        INFO("variant " << v.name() << " (" << path << "), " << to_string(dt)
                                        << ", H " << hidden << ", infinity in "
                                        << (in_h0 ? "h0" : "x")
                                        << (lengths.empty() ? "" : ", with lengths"));
                        const double fwd = lstm_rtol(dt, config, 4, Pass::forward);
                        const double bwd = lstm_rtol(dt, config, 4, Pass::backward);
                        check_with_non_finite("y", r.y, ref.y, fwd);
                        check_with_non_finite("hn", r.hn, ref.hn, fwd);
                        check_with_non_finite("dx", r.dx, ref_grads.dx, bwd);
                        check_with_non_finite("dh0", r.dh0, ref_grads.dh0, bwd);
                        check_with_non_finite("dc0", r.dc0, ref_grads.dc0, bwd);
                        check_with_non_finite("dparams", r.dparams, ref_grads.dparams, bwd);
                    });
            }
    }
}

TEST_CASE("T = 1000 stays finite and dc0 stays O(1) with a large forget bias", "[variants]") {
    const Config config{3, 5, 1, false};
    const int64_t seq_len = 1000, batch = 2;
    LstmCase c = make_case(config, seq_len, batch, {}, true, 900, 0.5);
    // Forget gate bias +5 on both biases: f ~ 0.99995, so the gradient into c0 neither explodes
    // nor vanishes over 1000 steps; a wrong recurrence would blow it up.
    const CellOffsets o = cell_offsets(config, 0, 0);
    for (int64_t k = 0; k < config.hidden_size; ++k) {
        c.in.params[o.bias_ih + config.hidden_size + k] = 5.0;
        c.in.params[o.bias_hh + config.hidden_size + k] = 5.0;
    }
    for_each_cpu_variant_and_dtype(
        c, Lengths::may_equalize,
        [&](const Variant& v, DType dt, const LstmCase&, const std::string& path) {
            const auto ref_grads = reference::lstm_backward(c.in, c.out_grads, v.cell());
            const VariantResult r = dt == DType::f32 ? run_variant<float>(v, c, {}, path)
                                                     : run_variant<double>(v, c, {}, path);
            INFO("variant " << v.name() << " (" << path << "), " << to_string(dt));
            for (const auto* out : {&r.y, &r.hn, &r.cn, &r.dx, &r.dh0, &r.dc0, &r.dparams})
                CHECK(all_finite(*out));
            CHECK(max_abs(r.dc0) < 100.0);
            CHECK(max_abs(r.dc0) > 1e-3);
            LSTM_CHECK_CLOSE(compare_scaled("dc0", r.dc0, ref_grads.dc0,
                                            lstm_rtol(dt, config, seq_len, Pass::backward)));
        });
}

TEST_CASE("both biases receive identical gradients", "[variants]") {
    const Config config{3, 5, 2, true};
    const LstmCase c = make_case(config, 5, 3, {5, 2, 4}, true, 321);
    for_each_cpu_variant_and_dtype(
        c, Lengths::may_equalize,
        [&](const Variant& v, DType dt, const LstmCase& used, const std::string& path) {
            const VariantResult r = dt == DType::f32 ? run_variant<float>(v, used, {}, path)
                                                     : run_variant<double>(v, used, {}, path);
            INFO("variant " << v.name() << " (" << path << "), " << to_string(dt));
            for (int64_t l = 0; l < config.num_layers; ++l)
                for (int64_t d = 0; d < config.num_directions(); ++d) {
                    const CellOffsets o = cell_offsets(config, l, d);
                    for (int64_t k = 0; k < 4 * config.hidden_size; ++k)
                        CHECK(r.dparams[o.bias_ih + k] == r.dparams[o.bias_hh + k]);
                }
        });
}

TEST_CASE("CPU variants are bit-identical run to run", "[variants]") {
    const Config config{7, 9, 2, true};
    const LstmCase c = make_case(config, 12, 5, {12, 3, 9, 12, 1}, true, 4242);
    for_each_cpu_variant_and_dtype(
        c, Lengths::may_equalize,
        [&](const Variant& v, DType dt, const LstmCase& used, const std::string& path) {
            if (dt != DType::f32) return;
            const VariantResult a = run_variant<float>(v, used, {}, path);
            const VariantResult b = run_variant<float>(v, used, {}, path);
            INFO("variant " << v.name() << " (" << path << ")");
            CHECK(a.y == b.y);
            CHECK(a.hn == b.hn);
            CHECK(a.dx == b.dx);
            CHECK(a.dparams == b.dparams);
        });
}
