// The CUDA losses without a GPU: the per-thread bodies of kernels/cuda/ctc.cu and
// kernels/cuda/cross_entropy.cu (kernels/cuda/*_body.hpp) run here over the same grid as the
// kernels launch them, in plain loops (threads of a step one after another, a barrier being the
// end of a loop, warp shuffles emulated lane by lane), on the scratch layout and upload the host
// code builds (kernels/cuda/ctc_layout.hpp). The results are compared with the double oracle
// (lstm/reference/ctc_reference.hpp), the published CTC values of tests/ctc_cases.hpp and the CPU
// losses. Also the host-side logic of the CUDA path: layout, label order, cuDNN's restrictions, the
// backend choice and the device checks of the loss API.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ctc_cases.hpp"
#include "kernels/cuda/cross_entropy_body.hpp"
#include "kernels/cuda/ctc_body.hpp"
#include "kernels/cuda/ctc_layout.hpp"
#include "lstm/loss/cross_entropy.hpp"
#include "lstm/loss/ctc.hpp"
#include "lstm/loss/ctc_cuda.hpp"
#include "lstm/reference/ctc_reference.hpp"
#include "test_util.hpp"

#if LSTM_WITH_CUDA
#include "lstm/cuda/context.hpp"
#include "lstm/loss/cross_entropy_cuda.hpp"
#endif

namespace {

namespace kc = lstm::kernels::cuda;
using lstm::loss::CtcArgs;
using lstm::loss::CtcBackend;
using lstm::loss::CtcOutputs;
// The shared CTC cases, and with them Span, TensorView, Reduction and the reference's types.
using namespace lstm::test::ctc;

// ---------------------------------------------------------------------------------------------
// Emulating the CTC kernels
// ---------------------------------------------------------------------------------------------

// How the emulated recursion kernel is configured; the defaults are what the launcher does.
struct RecursionConfig {
    int64_t threads = 0;       // 0: kc::ctc_recursion_threads(max_states)
    bool global_ring = false;  // the rings in global scratch even where shared memory would do
};

// Warp butterfly as the kernels' __shfl_xor_sync loops compute it: lane l combines its value
// with lane l ^ offset's, for offset 16, 8, 4, 2, 1.
template <typename V, typename Op>
void butterfly(V (&lanes)[kc::kWarpLanes], Op op) {
    for (int offset = kc::kWarpLanes / 2; offset > 0; offset /= 2) {
        V next[kc::kWarpLanes];
        for (int l = 0; l < kc::kWarpLanes; ++l) next[l] = op(lanes[l], lanes[l ^ offset]);
        std::copy(next, next + kc::kWarpLanes, lanes);
    }
}

// ctc_log_norm_kernel: a warp per frame.
template <typename T>
void emulate_log_norm(const kc::CtcArgs<T>& a) {
    for (int64_t frame = 0; frame < a.max_time * a.batch; ++frame) {
        if (!kc::ctc_frame_valid(a, frame)) continue;
        double max[kc::kWarpLanes], sum[kc::kWarpLanes];
        for (int l = 0; l < kc::kWarpLanes; ++l) max[l] = kc::ctc_norm_lane_max(a, frame, l);
        butterfly(max, [](double x, double y) { return kc::loss_max(x, y); });
        for (int l = 0; l < kc::kWarpLanes; ++l)
            sum[l] = a.logits ? kc::ctc_norm_lane_sum(a, frame, l, max[l]) : 0.0;
        butterfly(sum, [](double x, double y) { return x + y; });
        for (int l = 0; l < kc::kWarpLanes; ++l) kc::ctc_norm_store(a, frame, l, max[l], sum[l]);
    }
}

// ctc_recursion_kernel: grid (batch, 2), each block's steps with a barrier after each.
template <typename T>
void emulate_recursions(const kc::CtcArgs<T>& a, const RecursionConfig& config) {
    const int64_t threads =
        config.threads > 0 ? config.threads : kc::ctc_recursion_threads(a.max_states);
    const bool in_shared = kc::ctc_ring_in_shared(a.max_states) && !config.global_ring;
    std::vector<double> shared(2 * a.max_states);
    for (int64_t n = 0; n < a.batch; ++n) {
        for (const bool backward : {false, true}) {
            double* ring = in_shared ? shared.data()
                                     : a.ring + (n * 2 + (backward ? 1 : 0)) * 2 * a.max_states;
            // Shared memory starts as garbage on a GPU: so here.
            std::fill(shared.begin(), shared.end(), std::numeric_limits<double>::quiet_NaN());
            const int64_t frames = a.samples[n].frames;
            std::vector<double> emission(threads);
            for (int64_t j = 0; j < threads; ++j)
                emission[j] = kc::ctc_first_emission(a, n, backward, 0, j);
            for (int64_t step = 0; step < frames; ++step) {
                for (int64_t j = 0; j < threads; ++j) {
                    kc::ctc_recursion_step(a, n, backward, step, j, threads, ring, emission[j]);
                    emission[j] = kc::ctc_first_emission(a, n, backward, step + 1, j);
                }
            }
            if (!backward) kc::ctc_alpha_finish(a, n);
        }
    }
}

// ctc_gradient_kernel: a block per frame; base, tree sum, label classes.
template <typename T>
void emulate_gradient(const kc::CtcArgs<T>& a) {
    if (a.grad == nullptr) return;
    constexpr int64_t threads = kc::kCtcGradThreads;
    double partial[threads];
    for (int64_t frame = 0; frame < a.max_time * a.batch; ++frame) {
        for (int64_t j = 0; j < threads; ++j) kc::ctc_grad_base(a, frame, j, threads, partial);
        for (int64_t stride = threads / 2; stride > 0; stride /= 2)
            for (int64_t j = 0; j < threads; ++j) kc::tree_sum_step(partial, j, stride);
        for (int64_t j = 0; j < threads; ++j) kc::ctc_grad_labels(a, frame, j, threads, partial);
    }
}

// A piece of the scratch at `offset` bytes from `base`, typed.
template <typename P>
P* piece(unsigned char* base, size_t offset) {
    return reinterpret_cast<P*>(base + offset);
}

template <typename T>
struct Emulated {
    T loss = 0;
    std::vector<T> grad;    // (T, N, C), NaN before the call
    std::vector<T> losses;  // (N)
    std::vector<double> alpha, beta;
};

// The host side of lstm/loss/ctc_cuda.cpp with host memory as "device" memory: validation and
// problem exactly as ctc_loss builds them, the same layout and upload, the three kernels
// emulated, and the same reduction.
template <typename T>
Emulated<T> emulate_ctc(const CtcReferenceCase& c, Targets layout = Targets::padded,
                        bool with_grad = true, const RecursionConfig& config = {}) {
    // Garbage past each padded target length that must never be read.
    lstm::test::ctc::CtcCall<T> call(c, layout, {1000000, -7}, with_grad);
    const auto dims = lstm::loss::ctc_detail::validate(call.args, call.outputs);
    const lstm::kernels::cpu::CtcProblem<T> p =
        lstm::loss::ctc_detail::problem(call.args, call.outputs, dims);

    // The device scratch, NaN-filled so that anything read before it is written shows.
    const kc::CtcSizes sizes = kc::ctc_sizes(p.batch, p.input_lengths, p.target_lengths);
    const kc::CtcLayout l = kc::ctc_layout(p.max_time, p.batch, sizes);
    std::vector<double> device(l.bytes / sizeof(double), std::numeric_limits<double>::quiet_NaN());
    std::vector<double> staging(l.upload_bytes / sizeof(double) + 1);
    kc::ctc_fill_upload({p.batch, p.targets, p.target_stride, p.input_lengths, p.target_lengths,
                         p.grad_scale, p.divide_by_target_length},
                        l, staging.data());
    auto* base = reinterpret_cast<unsigned char*>(device.data());
    std::memcpy(base, staging.data(), l.upload_bytes);

    // The problem's own fields, then the scratch pieces where the layout puts them.
    kc::CtcArgs<T> a{p.max_time, p.batch, p.classes, p.input, p.logits, p.blank, p.zero_infinity};
    a.samples = piece<const kc::CtcSample>(base, l.samples);
    a.labels = piece<const int32_t>(base, l.labels);
    a.order = piece<const int32_t>(base, l.order);
    a.log_norm = piece<double>(base, l.log_norm);
    a.alpha = piece<double>(base, l.alpha);
    a.beta = piece<double>(base, l.beta);
    a.ring = piece<double>(base, l.ring);
    a.max_states = sizes.max_states;
    a.loglik = piece<double>(base, l.loglik);
    a.losses = piece<double>(base, l.losses);
    a.losses_out = call.losses.data();
    a.grad = p.grad;
    emulate_log_norm(a);
    emulate_recursions(a, config);
    emulate_gradient(a);

    double total = 0;
    for (int64_t n = 0; n < p.batch; ++n)
        total +=
            c.reduction == Reduction::mean
                ? a.losses[n] / static_cast<double>(std::max<int64_t>(call.target_lengths[n], 1))
                : a.losses[n];
    if (c.reduction == Reduction::mean)
        total = p.batch == 0 ? std::numeric_limits<double>::quiet_NaN()
                             : total / static_cast<double>(p.batch);
    Emulated<T> out;
    out.loss = static_cast<T>(total);
    out.grad = std::move(call.grad);
    out.losses = std::move(call.losses);
    out.alpha.assign(a.alpha, a.alpha + sizes.total_states);
    out.beta.assign(a.beta, a.beta + sizes.total_states);
    return out;
}

template <typename T>
bool bit_identical(const std::vector<T>& x, const std::vector<T>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// CTC kernels on the CPU
// ---------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("cuda ctc kernels reproduce the published CTC values", "[cuda_loss_host]", float,
                   double) {
    using T = TestType;
    lstm::test::ctc::check_published_ctc<T>(
        [](const CtcReferenceCase& c) { return emulate_ctc<T>(c); },
        [](const lstm::test::ctc::PublishedCtc&, const CtcReferenceCase& c,
           const Emulated<T>& got) {
            check_against_reference(c, got, lstm::reference::ctc_reference(rounded<T>(c)));
        });
}

TEMPLATE_TEST_CASE("cuda ctc kernels match the reference on random batches", "[cuda_loss_host]",
                   float, double) {
    using T = TestType;
    std::vector<lstm::test::ctc::BatchShape> shapes = lstm::test::ctc::random_batch_shapes();
    shapes.push_back({9, {9, 9}, {4, 4}, 40, 0, 2.0});  // more classes than a warp has lanes
    lstm::test::ctc::check_random_batches<T>(
        shapes, 900,
        [](const CtcReferenceCase& c, Targets layout) { return emulate_ctc<T>(c, layout); });
}

TEST_CASE("cuda ctc kernels handle -inf log-probs and extreme logits without NaN",
          "[cuda_loss_host]") {
    // -inf entries (impossible classes) in log-probs, including a needed one (infeasible).
    CtcReferenceCase c = random_case(6, {6, 6, 5}, {2, 2, 1}, 4, 0, 17);
    c.logits = false;
    c.input = lstm::reference::log_softmax_rows(c.input, c.classes);
    c.input[(0 * 3 + 0) * 4 + 2] = -kInf;
    c.input[(2 * 3 + 1) * 4 + 0] = -kInf;
    c.targets[2] = {3};
    for (int64_t t = 0; t < 6; ++t) c.input[(t * 3 + 2) * 4 + 3] = -kInf;  // sample 2: no label 3
    for (const bool zero_infinity : {false, true}) {
        c.zero_infinity = zero_infinity;
        c.reduction = Reduction::sum;
        const Emulated<double> got = emulate_ctc<double>(c);
        check_against_reference(c, got, lstm::reference::ctc_reference(c));
        CHECK(static_cast<double>(got.losses[2]) == (zero_infinity ? 0.0 : kInf));
        for (double g : got.grad) CHECK(!std::isnan(g));
    }
    // Logits of +-100 and +-1e4.
    for (const double scale : {100.0, 1e4}) {
        INFO("scale " << scale);
        CtcReferenceCase d = random_case(12, {12, 9, 6}, {4, 3, 3}, 5, 0, 77, 1.0);
        for (double& v : d.input) v = v > 0 ? scale : (v < -0.5 ? -scale : 0.0);
        d.targets[1] = {2, 2, 2};
        d.reduction = Reduction::sum;
        const Emulated<float> got = emulate_ctc<float>(rounded<float>(d));
        check_against_reference(d, got, lstm::reference::ctc_reference(rounded<float>(d)));
        CHECK(lstm::test::all_finite(got.grad));
    }
}

TEST_CASE("cuda ctc kernels: log-probs far above 0 neither overflow into NaN nor move the gradient",
          "[cuda_loss_host]") {
    const double big = std::numeric_limits<double>::max();
    // Empty targets, blank 0: DBL_MAX twice then -inf is a zero probability (+inf); DBL_MAX twice
    // then 0 a likelihood beyond the double range (-inf). Both get a zero gradient.
    for (const auto& [last, want] :
         std::vector<std::pair<double, double>>{{-kInf, kInf}, {0.0, -kInf}}) {
        INFO("last blank log-prob " << last);
        const CtcReferenceCase c = single({big, -1.0, big, -1.0, last, -1.0}, 2, {}, false);
        const Emulated<double> got = emulate_ctc<double>(c);
        CHECK(static_cast<double>(got.losses[0]) == want);
        for (double g : got.grad) CHECK(g == 0.0);
    }
    // Log-probs up to 40: shifted and added back, they match the reference.
    CtcReferenceCase c = random_case(6, {6, 5, 6}, {2, 1, 0}, 4, 0, 29, 40.0);
    c.logits = false;
    c.reduction = Reduction::sum;
    const Emulated<double> got = emulate_ctc<double>(c);
    check_against_reference(c, got, lstm::reference::ctc_reference(c));
}

TEMPLATE_TEST_CASE("cuda ctc kernels: infeasible samples get +inf (or 0) and a zero gradient",
                   "[cuda_loss_host]", float, double) {
    using T = TestType;
    CtcReferenceCase c = random_case(6, {4, 3, 6}, {3, 4, 2}, 5, 0, 55);
    c.targets[0] = {2, 2, 2};  // needs 5 frames, has 4
    for (const Reduction reduction : kReductions) {
        for (const bool zero_infinity : {false, true}) {
            INFO(lstm::loss::to_string(reduction) << " zero_infinity " << zero_infinity);
            c.reduction = reduction;
            c.zero_infinity = zero_infinity;
            const Emulated<T> got = emulate_ctc<T>(c);
            for (int64_t n = 0; n < 2; ++n) {
                CHECK(static_cast<double>(got.losses[n]) == (zero_infinity ? 0.0 : kInf));
                for (int64_t t = 0; t < c.max_time; ++t)
                    for (int64_t k = 0; k < c.classes; ++k)
                        CHECK(got.grad[(t * c.batch + n) * c.classes + k] == T(0));
            }
            if (!zero_infinity) CHECK(static_cast<double>(got.loss) == kInf);
            check_against_reference(c, got, lstm::reference::ctc_reference(rounded<T>(c)));
        }
    }
}

TEMPLATE_TEST_CASE("cuda ctc kernels keep log(sum) next to logits of 1e30 and beyond",
                   "[cuda_loss_host]", float, double) {
    using T = TestType;
    lstm::test::ctc::check_huge_tied_logits<T>(
        [](const CtcReferenceCase& c) { return emulate_ctc<T>(c); });
}

TEST_CASE(
    "cuda ctc kernels at double inputs of 1e20 to 1e300: the loss exact, the gradient bounded",
    "[cuda_loss_host]") {
    lstm::test::ctc::check_huge_inputs(
        [](const CtcReferenceCase& c) { return emulate_ctc<double>(c); });
}

TEMPLATE_TEST_CASE(
    "cuda ctc kernels: input NaN or +inf on a valid frame gives NaN loss and gradient",
    "[cuda_loss_host]", float, double) {
    using T = TestType;
    lstm::test::ctc::check_poisoned_sample<T>(
        [](const CtcReferenceCase& c) { return emulate_ctc<T>(c); });
}

TEMPLATE_TEST_CASE(
    "cuda ctc cuDNN glue: poisoned samples NaN, infeasible +inf or 0, the rest scaled",
    "[cuda_loss_host]", float, double) {
    using T = TestType;
    // Two samples over T = 3, C = 2: sample 0 (2 frames) has NaN in its frame 1, sample 1 (3
    // frames) is clean. cuDNN's costs cannot tell them apart (+inf and NaN both come out of
    // cuDNN for bad input); only the normalizer check can.
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const kc::CtcSample samples[2] = {{0, 0, 2, 1, 0.5}, {0, 0, 3, 1, 0.25}};
    for (const bool zero_infinity : {false, true}) {
        for (const float sample1_cost : {3.5f, std::numeric_limits<float>::quiet_NaN()}) {
            INFO("zero_infinity " << zero_infinity << ", cost of the clean sample "
                                  << sample1_cost);
            double log_norm[12] = {0.1, 0, 0.2, 0, nan, 0, 0.3, 0, 0.0, 0, 0.4, 0};  // (t, n, 2)
            double loglik[2], losses[2];
            T losses_out[2];
            std::vector<T> grad(3 * 2 * 2, T(1));
            kc::CtcArgs<T> a;
            a.max_time = 3;
            a.batch = 2;
            a.classes = 2;
            a.zero_infinity = zero_infinity;
            a.samples = samples;
            a.log_norm = log_norm;
            a.loglik = loglik;
            a.losses = losses;
            a.losses_out = losses_out;
            a.grad = grad.data();
            const float costs[2] = {std::numeric_limits<float>::infinity(), sample1_cost};
            for (int64_t n = 0; n < 2; ++n) kc::ctc_cudnn_finish_sample(a, costs, n);
            for (int64_t i = 0; i < 12; ++i) kc::ctc_cudnn_scale_grad(a, i);
            CHECK(std::isnan(losses[0]));
            CHECK(std::isnan(static_cast<double>(losses_out[0])));
            const double want1 = std::isnan(sample1_cost) ? (zero_infinity ? 0.0 : kInf) : 3.5;
            CHECK(losses[1] == want1);
            CHECK(static_cast<double>(losses_out[1]) == want1);
            for (int64_t t = 0; t < 3; ++t) {
                for (int64_t k = 0; k < 2; ++k) {
                    INFO("t " << t << " class " << k);
                    const double g0 = static_cast<double>(grad[(t * 2 + 0) * 2 + k]);
                    const double g1 = static_cast<double>(grad[(t * 2 + 1) * 2 + k]);
                    if (t < 2)
                        CHECK(std::isnan(g0));
                    else
                        CHECK(g0 == 0.0);
                    CHECK(g1 == (std::isnan(sample1_cost) ? 0.0 : 0.25));
                }
            }
        }
    }
}

TEST_CASE("cuda ctc kernels: any label length, any thread count, either ring: bit-identical",
          "[cuda_loss_host]") {
    // 700 labels (1401 states: more than a 512-thread block, so threads take states in turns),
    // 300 and 0 labels; then the same with 32 threads (44 states each) and with the rings in
    // global memory. Every state is computed by the same expression whoever computes it, so the
    // results must not change in a single bit.
    CtcReferenceCase c = random_case(1600, {1600, 1100, 40}, {700, 300, 0}, 30, 0, 3, 2.0);
    c.reduction = Reduction::mean;
    const Emulated<double> base = emulate_ctc<double>(c);
    const CtcReferenceResult want = lstm::reference::ctc_reference(c);
    const double error = relative_error(base.grad, want.grad);
    UNSCOPED_INFO("gradient relative error " << error);
    CHECK(error <= 1e-9);
    CHECK(base.loss == Approx(want.loss).epsilon(1e-12));
    RecursionConfig narrow;
    narrow.threads = 32;
    RecursionConfig global;
    global.global_ring = true;
    for (const RecursionConfig& config : {narrow, global}) {
        INFO("threads " << config.threads << " global ring " << config.global_ring);
        const Emulated<double> other = emulate_ctc<double>(c, Targets::padded, true, config);
        CHECK(bit_identical(other.grad, base.grad));
        CHECK(bit_identical(other.losses, base.losses));
        CHECK(bit_identical(other.alpha, base.alpha));
        CHECK(bit_identical(other.beta, base.beta));
        CHECK(other.loss == base.loss);
    }
}

TEST_CASE("cuda ctc kernels at T = 1000+: float agrees with the double reference",
          "[cuda_loss_host]") {
    // Random and peaky (trained-model-like) logits at T = 1500, as the CPU test does at 5000:
    // the double recursion leaves only float's final rounding.
    const int64_t T = 1500, C = 30;
    const CtcReferenceCase random = random_case(T, {T, 1234}, {150, 90}, C, 0, 2025, 3.0);
    const CtcReferenceCase peaky = lstm::test::ctc::peaky_case(random, 7);
    lstm::test::ctc::for_each_long_case(random, peaky, [](const CtcReferenceCase& c) {
        const CtcReferenceResult want = lstm::reference::ctc_reference(c);
        lstm::test::ctc::check_float_accuracy(emulate_ctc<float>(c), want);
        const Emulated<double> exact = emulate_ctc<double>(c);
        CHECK(relative_error(exact.grad, want.grad) <= 1e-9);
        CHECK(exact.loss == Approx(want.loss).epsilon(1e-12));
    });
}

TEST_CASE("cuda ctc kernels on Braun's CTC shape match the CPU ctc_loss", "[cuda_loss_host]") {
    // T 1000, N 32, C 59, 100 labels, input lengths linspace(500, 1000, 32), logits U(-1, 1),
    // PyTorch's mean: the GPU test's case, here against the CPU kernel.
    const int64_t T = 1000, N = 32, C = 59, L = 100;
    std::vector<int64_t> input_lengths(N), target_lengths(N, L);
    for (int64_t n = 0; n < N; ++n) input_lengths[n] = 500 + (500 * n) / (N - 1);
    CtcReferenceCase c = random_case(T, input_lengths, target_lengths, C, 0, 42, 1.0);
    c.reduction = Reduction::mean;
    c = rounded<float>(c);
    const Emulated<float> got = emulate_ctc<float>(c, Targets::concatenated);

    const std::vector<float> input = lstm::test::cast_vector<float>(c.input);
    std::vector<int64_t> flat;
    for (const auto& t : c.targets) flat.insert(flat.end(), t.begin(), t.end());
    CtcArgs<float> args;
    args.logits = TensorView<const float>(input.data(), {T, N, C});
    args.targets = TensorView<const int64_t>(flat.data(), {static_cast<int64_t>(flat.size())});
    args.input_lengths = input_lengths;
    args.target_lengths = target_lengths;
    std::vector<float> grad(input.size()), losses(N);
    CtcOutputs<float> out;
    out.grad_logits = TensorView<float>(grad.data(), {T, N, C});
    out.losses = TensorView<float>(losses.data(), {N});
    const float want = lstm::loss::ctc_loss(args, out);
    CHECK(got.loss == Approx(want).epsilon(1e-6));
    LSTM_CHECK_CLOSE(lstm::test::compare("losses", got.losses, losses, 0.0, 1e-6));
    double max_grad = 0;
    for (float g : grad) max_grad = std::max(max_grad, std::abs(static_cast<double>(g)));
    LSTM_CHECK_CLOSE(lstm::test::compare("grad", got.grad, grad, 1e-6 * max_grad, 1e-5));
}

TEMPLATE_TEST_CASE("cuda ctc kernels: no gradient gives the same losses", "[cuda_loss_host]", float,
                   double) {
    using T = TestType;
    CtcReferenceCase c = random_case(30, {30, 21}, {10, 7}, 8, 0, 4);
    const Emulated<T> with = emulate_ctc<T>(c);
    const Emulated<T> without = emulate_ctc<T>(c, Targets::padded, false);
    CHECK(with.loss == without.loss);
    CHECK(bit_identical(with.losses, without.losses));
    for (T g : without.grad) CHECK(std::isnan(g));  // never written
}

// ---------------------------------------------------------------------------------------------
// Host side of the CUDA CTC: sizes, layout, upload
// ---------------------------------------------------------------------------------------------

TEST_CASE("cuda ctc layout: sizes, aligned disjoint pieces, upload first", "[cuda_loss_host]") {
    const std::vector<int64_t> input_lengths = {5, 3, 7}, target_lengths = {2, 0, 3};
    const kc::CtcSizes s = kc::ctc_sizes(3, input_lengths.data(), target_lengths.data());
    CHECK(s.total_labels == 5);
    CHECK(s.total_states == 5 * 5 + 3 * 1 + 7 * 7);
    CHECK(s.max_states == 7);
    const kc::CtcSizes empty = kc::ctc_sizes(0, nullptr, nullptr);
    CHECK(empty.max_states == 1);
    CHECK(empty.total_states == 0);

    const kc::CtcLayout l = kc::ctc_layout(9, 3, s);
    struct Piece {
        const char* name;
        size_t at, bytes;
    };
    const std::vector<Piece> pieces = {
        {"samples", l.samples, 3 * sizeof(kc::CtcSample)},
        {"labels", l.labels, 5 * sizeof(int32_t)},
        {"order", l.order, 5 * sizeof(int32_t)},
        {"lengths32", l.lengths32, 6 * sizeof(int32_t)},
        {"log_norm", l.log_norm, 2 * 27 * sizeof(double)},
        {"loglik", l.loglik, 3 * sizeof(double)},
        {"losses", l.losses, 3 * sizeof(double)},
        {"costs", l.costs, 3 * sizeof(float)},
        {"alpha", l.alpha, 77 * sizeof(double)},
        {"beta", l.beta, 77 * sizeof(double)},
        {"ring", l.ring, 3 * 4 * 7 * sizeof(double)},
    };
    for (size_t i = 0; i < pieces.size(); ++i) {
        INFO(pieces[i].name);
        CHECK(pieces[i].at % kc::kCtcAlign == 0);
        CHECK(pieces[i].at + pieces[i].bytes <= l.bytes);
        if (i + 1 < pieces.size()) CHECK(pieces[i].at + pieces[i].bytes <= pieces[i + 1].at);
    }
    CHECK(l.lengths32 + 6 * sizeof(int32_t) <= l.upload_bytes);
    CHECK(l.upload_bytes <= l.log_norm);
    CHECK(l.bytes % kc::kCtcAlign == 0);
}

TEST_CASE("cuda ctc upload: per-sample facts, labels, order sorted by class then index",
          "[cuda_loss_host]") {
    // Padded targets (stride 4) with garbage past each length, and PyTorch's mean.
    const std::vector<int64_t> targets = {3, 1, 3, 1, -9, -9, -9, -9, 2, 2, 7, -9};
    const std::vector<int64_t> input_lengths = {6, 2, 9}, target_lengths = {4, 0, 3};
    const kc::CtcSizes s = kc::ctc_sizes(3, input_lengths.data(), target_lengths.data());
    const kc::CtcLayout l = kc::ctc_layout(9, 3, s);
    std::vector<double> staging(l.upload_bytes / sizeof(double) + 1);
    kc::CtcHostInputs in;
    in.batch = 3;
    in.targets = targets.data();
    in.target_stride = 4;
    in.input_lengths = input_lengths.data();
    in.target_lengths = target_lengths.data();
    in.grad_scale = 1.0 / 3;
    in.divide_by_target_length = true;
    kc::ctc_fill_upload(in, l, staging.data());
    const auto* base = reinterpret_cast<const unsigned char*>(staging.data());
    const auto* samples = reinterpret_cast<const kc::CtcSample*>(base + l.samples);
    const auto* labels = reinterpret_cast<const int32_t*>(base + l.labels);
    const auto* order = reinterpret_cast<const int32_t*>(base + l.order);
    const auto* lengths32 = reinterpret_cast<const int32_t*>(base + l.lengths32);
    CHECK(samples[0].state_offset == 0);
    CHECK(samples[1].state_offset == 6 * 9);
    CHECK(samples[2].state_offset == 6 * 9 + 2 * 1);
    CHECK(samples[0].label_start == 0);
    CHECK(samples[1].label_start == 4);
    CHECK(samples[2].label_start == 4);
    CHECK(samples[2].frames == 9);
    CHECK(samples[2].labels == 3);
    CHECK(samples[0].scale == 1.0 / 3 / 4);
    CHECK(samples[1].scale == 1.0 / 3 / 1);  // empty target: divided by max(0, 1)
    CHECK(samples[2].scale == 1.0 / 3 / 3);
    CHECK(std::vector<int32_t>(labels, labels + 7) == std::vector<int32_t>{3, 1, 3, 1, 2, 2, 7});
    // Sample 0's labels 3 1 3 1: class 1 at indices 1, 3, then class 3 at 0, 2.
    CHECK(std::vector<int32_t>(order, order + 4) == std::vector<int32_t>{1, 3, 0, 2});
    CHECK(std::vector<int32_t>(order + 4, order + 7) == std::vector<int32_t>{0, 1, 2});
    CHECK(std::vector<int32_t>(lengths32, lengths32 + 6) == std::vector<int32_t>{4, 0, 3, 6, 2, 9});

    // Concatenated targets give the same labels.
    const std::vector<int64_t> flat = {3, 1, 3, 1, 2, 2, 7};
    std::vector<double> staging2(staging.size());
    in.targets = flat.data();
    in.target_stride = 0;
    kc::ctc_fill_upload(in, l, staging2.data());
    CHECK(std::memcmp(staging.data(), staging2.data(), l.upload_bytes) == 0);
}

TEST_CASE("cuda ctc launch shapes: recursion threads and where the rings live",
          "[cuda_loss_host]") {
    CHECK(kc::ctc_recursion_threads(1) == 32);
    CHECK(kc::ctc_recursion_threads(201) == 224);
    CHECK(kc::ctc_recursion_threads(512) == 512);
    CHECK(kc::ctc_recursion_threads(1401) == 512);
    CHECK(kc::ctc_ring_in_shared(201));
    CHECK(kc::ctc_ring_in_shared(3072));  // 2 rows of 3072 doubles = 48 KiB
    CHECK_FALSE(kc::ctc_ring_in_shared(3073));
    static_assert((kc::kCtcGradThreads & (kc::kCtcGradThreads - 1)) == 0,
                  "the gradient block's tree sum needs a power of two");
}

// ---------------------------------------------------------------------------------------------
// cuDNN's restrictions and the backend choice
// ---------------------------------------------------------------------------------------------

TEST_CASE("cuda ctc backend: cuDNN only where its restrictions hold", "[cuda_loss_host]") {
    using Catch::Contains;
    const int64_t T = 10, N = 2, C = 6;
    std::vector<float> x(T * N * C, 0.0f);
    std::vector<int64_t> targets = {1, 2, 3, 4, 5}, input_lengths = {T, T}, target_lengths = {3, 2};
    lstm::kernels::cpu::CtcProblem<float> p;
    p.max_time = T;
    p.batch = N;
    p.classes = C;
    p.input = x.data();
    p.logits = true;
    p.targets = targets.data();
    p.input_lengths = input_lengths.data();
    p.target_lengths = target_lengths.data();
    p.max_labels = 3;
    CHECK(lstm::loss::ctc_cudnn_unsupported(p, true).empty());
    // automatic is the own kernel, even where cuDNN applies (lstm/loss/ctc_cuda.hpp says why).
    CHECK(lstm::loss::ctc_resolve_backend(p, CtcBackend::automatic, true) == CtcBackend::own);
    CHECK(lstm::loss::ctc_resolve_backend(p, CtcBackend::own, true) == CtcBackend::own);
    CHECK(lstm::loss::ctc_resolve_backend(p, CtcBackend::cudnn, true) == CtcBackend::cudnn);
    CHECK_THAT(lstm::loss::ctc_cudnn_unsupported(p, false), Contains("LSTM_WITH_CUDNN=0"));
    CHECK(lstm::loss::ctc_resolve_backend(p, CtcBackend::automatic, false) == CtcBackend::own);
    CHECK_THROWS_WITH(lstm::loss::ctc_resolve_backend(p, CtcBackend::cudnn, false),
                      Contains("backend cudnn cannot compute this call: this build has no cuDNN"));

    auto reason = [&](auto edit) {
        auto q = p;
        std::vector<int64_t> saved_targets = targets, saved_in = input_lengths,
                             saved_tl = target_lengths;
        edit(q);
        const std::string why = lstm::loss::ctc_cudnn_unsupported(q, true);
        CHECK_THROWS_WITH(lstm::loss::ctc_resolve_backend(q, CtcBackend::cudnn, true),
                          Contains("backend cudnn cannot compute this call: " + why));
        CHECK(lstm::loss::ctc_resolve_backend(q, CtcBackend::automatic, true) == CtcBackend::own);
        targets = saved_targets;
        input_lengths = saved_in;
        target_lengths = saved_tl;
        return why;
    };
    using P = lstm::kernels::cpu::CtcProblem<float>;
    CHECK_THAT(reason([](P& q) { q.logits = false; }), Contains("the input is log_probs"));
    CHECK_THAT(reason([](P& q) { q.blank = 5; }), Contains("needs blank = 0, got blank = 5"));
    CHECK_THAT(reason([](P& q) { q.classes = 257; }), Contains("C = 257"));
    CHECK_THAT(reason([&](P&) { input_lengths[1] = 9; }),
               Contains("every input length equals T = 10, input_lengths[1] = 9"));
    CHECK_THAT(reason([&](P&) { target_lengths[1] = 0; }),
               Contains("target lengths 1..255, target_lengths[1] = 0"));
    CHECK_THAT(reason([](P& q) { q.batch = 0; }), Contains("empty"));
    // 3 labels with 2 adjacent repeats need 5 frames; at T = 4 sample 0 is infeasible.
    CHECK_THAT(reason([&](P& q) {
                   targets[1] = 1;
                   targets[2] = 1;
                   q.max_time = 4;
                   input_lengths = {4, 4};
               }),
               Contains("sample 0 is infeasible"));
    // The (T, N, C) descriptors take int strides and at most 2^31 - 1 elements: N * C past it
    // was cast to a negative stride. Refused before any sample is read, so the lengths of the
    // N = 2 arrays are never indexed past their end.
    CHECK_THAT(reason([](P& q) {
                   q.max_time = 1;
                   q.batch = (int64_t(1) << 24) + 1;
                   q.classes = 256;
               }),
               Contains("T * N * C = 1 * 16777217 * 256 exceeds 2147483647"));
    CHECK_THAT(reason([](P& q) {
                   q.batch = int64_t(1) << 20;
                   q.classes = 256;
               }),
               Contains("T * N * C = 10 * 1048576 * 256 exceeds 2147483647"));
    CHECK_THAT(reason([](P& q) { q.max_time = int64_t(1) << 62; }), Contains("exceeds 2147483647"));
    // Padded targets are read with their stride.
    std::vector<int64_t> padded = {1, 2, 3, 4, 5, 0};
    auto q = p;
    q.targets = padded.data();
    q.target_stride = 3;
    CHECK(lstm::loss::ctc_cudnn_unsupported(q, true).empty());
    // Double input: cuDNN computes in float.
    std::vector<double> xd(x.size());
    lstm::kernels::cpu::CtcProblem<double> pd;
    pd.max_time = T;
    pd.batch = N;
    pd.classes = C;
    pd.input = xd.data();
    pd.targets = targets.data();
    pd.input_lengths = input_lengths.data();
    pd.target_lengths = target_lengths.data();
    CHECK_THAT(lstm::loss::ctc_cudnn_unsupported(pd, true), Contains("float64"));
    CHECK(lstm::loss::ctc_resolve_backend(pd, CtcBackend::automatic, true) == CtcBackend::own);
}

// ---------------------------------------------------------------------------------------------
// The device checks of the loss API (they run before any device memory is touched)
// ---------------------------------------------------------------------------------------------

TEST_CASE("cuda losses: device arguments are checked and named", "[cuda_loss_host]") {
    using Catch::Contains;
    using lstm::Device;
    // Host memory tagged cuda: the checks must fail before anything reads it.
    std::vector<float> x(24, 0.0f), g(24), l(4);
    std::vector<int64_t> targets = {1, 2, 0, 1}, lengths = {2, 1};
    const TensorView<const float> logits_cuda(x.data(), {4, 6}, Device::cuda);
    const TensorView<float> grad_cpu(g.data(), {4, 6});
    const TensorView<float> grad_cuda(g.data(), {4, 6}, Device::cuda);
#if LSTM_WITH_CUDA
    CHECK_THROWS_WITH(lstm::loss::cross_entropy(logits_cuda, Span<const int64_t>(targets),
                                                Reduction::mean, grad_cuda),
                      Contains("cross_entropy: logits is on cuda, so the context argument"));
    CHECK_THROWS_WITH(lstm::loss::cross_entropy_frames(
                          TensorView<const float>(x.data(), {2, 2, 6}, Device::cuda),
                          Span<const int64_t>(lengths), Span<const int64_t>(targets)),
                      Contains("cross_entropy_frames: logits is on cuda, so the context argument"));
#else
    CHECK_THROWS_WITH(lstm::loss::cross_entropy(logits_cuda, Span<const int64_t>(targets)),
                      Contains("this build has no CUDA back-end"));
#endif
    CHECK_THROWS_WITH(lstm::loss::cross_entropy(logits_cuda, Span<const int64_t>(targets),
                                                Reduction::mean, grad_cpu),
                      Contains("cross_entropy: grad is on cpu, but logits is on cuda"));
    CHECK_THROWS_WITH(
        lstm::loss::cross_entropy(TensorView<const float>(x.data(), {4, 6}),
                                  Span<const int64_t>(targets), Reduction::sum, TensorView<float>(),
                                  TensorView<float>(l.data(), {4}, Device::cuda)),
        Contains("cross_entropy: losses is on cuda, but logits is on cpu"));

    std::vector<int64_t> input_lengths = {3, 2}, target_lengths = {1, 1}, ctc_targets = {1, 2};
    CtcArgs<float> args;
    args.logits = TensorView<const float>(x.data(), {3, 2, 4}, Device::cuda);
    args.targets = TensorView<const int64_t>(ctc_targets.data(), {2});
    args.input_lengths = input_lengths;
    args.target_lengths = target_lengths;
    CtcOutputs<float> out;
#if LSTM_WITH_CUDA
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(args, out),
                      Contains("ctc_loss: logits is on cuda, so args.context"));
#else
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(args, out), Contains("this build has no CUDA back-end"));
#endif
    out.grad_logits = TensorView<float>(g.data(), {3, 2, 4});
    // Without a context the context check comes first; the output checks follow it, so they are
    // reached through the cpu side: a cuda gradient for cpu logits.
    CtcArgs<float> host_args = args;
    host_args.logits = TensorView<const float>(x.data(), {3, 2, 4});
    out.grad_logits = TensorView<float>(g.data(), {3, 2, 4}, Device::cuda);
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(host_args, out),
                      Contains("ctc_loss: grad_logits is on cuda, but logits is on cpu"));
    out.grad_logits = TensorView<float>();
    out.losses = TensorView<float>(l.data(), {2}, Device::cuda);
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(host_args, out),
                      Contains("ctc_loss: losses is on cuda, but logits is on cpu"));
    out.losses = TensorView<float>();
    host_args.targets = TensorView<const int64_t>(ctc_targets.data(), {2}, Device::cuda);
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(host_args, out),
                      Contains("ctc_loss: targets is on cuda, but targets are read on the host"));
}

#if LSTM_WITH_CUDA
// The refusals below come before a call uses its context: zeroed storage of a Context's size
// stands in for one, so they run without a device. (Were one missed, the test would crash.)
lstm::cuda::Context& stand_in_context() {
    alignas(lstm::cuda::Context) static unsigned char storage[sizeof(lstm::cuda::Context)] = {};
    return *reinterpret_cast<lstm::cuda::Context*>(storage);
}

TEST_CASE("cuda ctc: losses overlapping the input or the gradient are refused",
          "[cuda_loss_host]") {
    using Catch::Contains;
    using lstm::Device;
    // Host memory tagged cuda: validation refuses before anything reads or writes it.
    std::vector<float> x(24, 0.0f), g(24, 0.0f);
    std::vector<int64_t> input_lengths = {3, 3}, target_lengths = {1, 1}, targets = {1, 2};
    CtcArgs<float> args;
    args.logits = TensorView<const float>(x.data(), {3, 2, 4}, Device::cuda);
    args.targets = TensorView<const int64_t>(targets.data(), {2});
    args.input_lengths = input_lengths;
    args.target_lengths = target_lengths;
    args.context = &stand_in_context();
    CtcOutputs<float> out;
    out.grad_logits = TensorView<float>(g.data(), {3, 2, 4}, Device::cuda);
    out.losses = TensorView<float>(x.data() + 4, {2}, Device::cuda);
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(args, out),
                      Contains("ctc_loss: losses must not overlap logits"));
    out.losses = TensorView<float>(g.data() + 4, {2}, Device::cuda);
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(args, out),
                      Contains("ctc_loss: losses must not overlap grad_logits"));
}

TEST_CASE("cuda losses: sizes past the kernels' int32 are refused before any device work",
          "[cuda_loss_host]") {
    using Catch::Contains;
    lstm::cuda::Context& context = stand_in_context();
    // cross_entropy_frames: a length of 2^31 + 5 was uploaded as int32 and wrapped. The host
    // entry is called directly: through cross_entropy_frames the T targets would take 16 GiB.
    const int64_t steps = (int64_t(1) << 31) + 5;
    const std::vector<int64_t> lengths = {steps};
    const float* logits = reinterpret_cast<const float*>(uintptr_t(1) << 40);
    const int64_t* targets = reinterpret_cast<const int64_t*>(uintptr_t(1) << 41);
    CHECK_THROWS_WITH(lstm::cuda::cross_entropy_rows(
                          context, steps, 1, 1, lengths.data(), logits, targets,
                          lstm::kernels::cpu::CeOptions<float>{}, 1.0f, nullptr, nullptr),
                      Contains("cross_entropy_frames: T = 2147483653 frames exceed") &&
                          Contains("(int32, at most 2147483647)"));

    // ctc: each sample's 2L + 1 states are counted in int32. An empty batch returns before the
    // context is used, which shows the bound itself passes.
    std::vector<float> x(1);
    lstm::kernels::cpu::CtcProblem<float> p;
    p.max_time = 1;
    p.batch = 0;
    p.classes = 2;
    p.input = x.data();
    const int64_t most = (int64_t(std::numeric_limits<int32_t>::max()) - 1) / 2;
    p.max_labels = most;
    CHECK(std::isnan(lstm::cuda::ctc_loss(context, p, Reduction::mean, CtcBackend::own, nullptr)));
    p.max_labels = most + 1;
    CHECK_THROWS_WITH(lstm::cuda::ctc_loss(context, p, Reduction::mean, CtcBackend::own, nullptr),
                      Contains("ctc_loss: the longest target has 1073741824 labels, more than the "
                               "cuda kernels count (1073741823"));
}
#endif

// ---------------------------------------------------------------------------------------------
// Cross-entropy kernels on the CPU
// ---------------------------------------------------------------------------------------------

namespace {

template <typename T>
struct CeEmulated {
    double total = 0;
    std::vector<T> losses, grad;
};

// kernels/cuda/cross_entropy.cu over the same grid: a warp per row, then one block's fixed-order
// sum. rows = steps * batch; lengths empty for "every row valid"; targets uploaded as
// lstm/loss/cross_entropy_cuda.cpp does.
template <typename T>
CeEmulated<T> emulate_ce(const std::vector<T>& logits, const std::vector<int64_t>& targets,
                         int64_t rows, int64_t classes, int64_t batch,
                         const std::vector<int64_t>& lengths, T scale,
                         const lstm::kernels::cpu::CeOptions<T>& options = {}) {
    std::vector<int32_t> targets32(rows, 0), lengths32(lengths.begin(), lengths.end());
    for (int64_t r = 0; r < rows; ++r)
        if (lengths.empty() || r / batch < lengths[r % batch])
            targets32[r] = targets[r] == options.ignore_index ? kc::kCeIgnored
                                                              : static_cast<int32_t>(targets[r]);
    CeEmulated<T> out;
    out.losses.assign(rows, std::numeric_limits<T>::quiet_NaN());
    out.grad.assign(rows * classes, std::numeric_limits<T>::quiet_NaN());
    std::vector<double> row_loss(rows, std::numeric_limits<double>::quiet_NaN());
    kc::CeArgs<T> a;
    a.rows = rows;
    a.classes = classes;
    a.batch = lengths.empty() ? rows : batch;
    a.lengths = lengths.empty() ? nullptr : lengths32.data();
    a.logits = logits.data();
    a.targets = targets32.data();
    a.weight = options.weight;
    a.weight_sum = options.weight_sum;
    a.smoothing = options.smoothing;
    a.scale = scale;
    a.losses = out.losses.data();
    a.grad = out.grad.data();
    a.row_loss = row_loss.data();
    a.total = &out.total;
    for (int64_t row = 0; row < rows; ++row) {
        T max[kc::kWarpLanes], sum[kc::kWarpLanes], shifted[kc::kWarpLanes];
        for (int l = 0; l < kc::kWarpLanes; ++l) {
            max[l] = T(0);
            sum[l] = T(1);
            shifted[l] = T(0);
        }
        if (kc::ce_row_counted(a, row)) {
            for (int l = 0; l < kc::kWarpLanes; ++l) max[l] = kc::ce_lane_max(a, row, l);
            butterfly(max, [](T x, T y) { return kc::loss_max(x, y); });
            for (int l = 0; l < kc::kWarpLanes; ++l) sum[l] = kc::ce_lane_sum(a, row, l, max[l]);
            butterfly(sum, [](T x, T y) { return x + y; });
            if (a.smoothing != T(0)) {
                for (int l = 0; l < kc::kWarpLanes; ++l)
                    shifted[l] = kc::ce_lane_shifted(a, row, l, max[l]);
                butterfly(shifted, [](T x, T y) { return x + y; });
            }
        }
        for (int l = 0; l < kc::kWarpLanes; ++l)
            kc::ce_lane_finish(a, row, l, max[l], sum[l], shifted[l]);
    }
    constexpr int64_t threads = 256;  // kCeTotalThreads (kernels/cuda/cross_entropy.hpp)
    double partial[threads];
    for (int64_t j = 0; j < threads; ++j) kc::ce_total_partial(a, j, threads, partial);
    for (int64_t stride = threads / 2; stride > 0; stride /= 2)
        for (int64_t j = 0; j < threads; ++j) kc::tree_sum_step(partial, j, stride);
    out.total = partial[0];
    return out;
}

template <typename T>
double ce_tol() {
    return std::is_same_v<T, float> ? 2e-6 : 1e-13;
}

}  // namespace

TEMPLATE_TEST_CASE("cuda cross-entropy kernels match the CPU cross_entropy", "[cuda_loss_host]",
                   float, double) {
    using T = TestType;
    for (const int64_t classes : {1, 5, 32, 33, 100}) {
        for (const double scale : {3.0, 1e4}) {  // ordinary and extreme logits
            INFO("C " << classes << " scale " << scale);
            const int64_t rows = 300;
            const std::vector<T> logits =
                lstm::test::random_vector<T>(rows * classes, 7 + classes, -scale, scale);
            std::vector<int64_t> targets(rows);
            for (int64_t r = 0; r < rows; ++r) targets[r] = (r * 7 + 3) % classes;
            for (const Reduction reduction : kReductions) {
                std::vector<T> grad(rows * classes), losses(rows);
                const T want =
                    lstm::loss::cross_entropy(TensorView<const T>(logits.data(), {rows, classes}),
                                              Span<const int64_t>(targets), reduction,
                                              TensorView<T>(grad.data(), {rows, classes}),
                                              TensorView<T>(losses.data(), {rows}));
                const T s = static_cast<T>(reduction == Reduction::mean ? 1.0 / rows : 1.0);
                const CeEmulated<T> got = emulate_ce(logits, targets, rows, classes, rows, {}, s);
                const double total = reduction == Reduction::mean ? got.total / rows : got.total;
                CHECK(total == Approx(static_cast<double>(want)).epsilon(ce_tol<T>()));
                LSTM_CHECK_CLOSE(lstm::test::compare("losses", got.losses, losses,
                                                     ce_tol<T>() * scale, ce_tol<T>()));
                LSTM_CHECK_CLOSE(lstm::test::compare(
                    "grad", got.grad, grad, ce_tol<T>() * static_cast<double>(s), ce_tol<T>()));
                CHECK(lstm::test::all_finite(got.grad));
            }
        }
    }
}

TEMPLATE_TEST_CASE("cuda cross-entropy kernels match cross_entropy_frames with padding",
                   "[cuda_loss_host]", float, double) {
    using T = TestType;
    const int64_t steps = 9, batch = 4, classes = 37;
    const std::vector<int64_t> lengths = {9, 1, 5, 8};
    const std::vector<T> logits =
        lstm::test::random_vector<T>(steps * batch * classes, 11, -4.0, 4.0);
    std::vector<int64_t> targets(steps * batch);
    for (int64_t r = 0; r < steps * batch; ++r)
        targets[r] = r / batch < lengths[r % batch] ? (r * 5) % classes : -3;  // garbage padding
    int64_t count = 0;
    for (int64_t len : lengths) count += len;
    std::vector<T> grad(steps * batch * classes), losses(steps * batch);
    const T want = lstm::loss::cross_entropy_frames(
        TensorView<const T>(logits.data(), {steps, batch, classes}), Span<const int64_t>(lengths),
        Span<const int64_t>(targets), Reduction::mean,
        TensorView<T>(grad.data(), {steps, batch, classes}),
        TensorView<T>(losses.data(), {steps, batch}));
    const T scale = static_cast<T>(1.0 / static_cast<double>(count));
    const CeEmulated<T> got =
        emulate_ce(logits, targets, steps * batch, classes, batch, lengths, scale);
    CHECK(got.total / static_cast<double>(count) ==
          Approx(static_cast<double>(want)).epsilon(ce_tol<T>()));
    LSTM_CHECK_CLOSE(lstm::test::compare("losses", got.losses, losses, ce_tol<T>(), ce_tol<T>()));
    LSTM_CHECK_CLOSE(lstm::test::compare("grad", got.grad, grad,
                                         ce_tol<T>() * static_cast<double>(scale), ce_tol<T>()));
    for (int64_t r = 0; r < steps * batch; ++r) {
        if (r / batch < lengths[r % batch]) continue;
        CHECK(got.losses[r] == T(0));
        for (int64_t k = 0; k < classes; ++k) CHECK(got.grad[r * classes + k] == T(0));
    }
}

TEMPLATE_TEST_CASE(
    "cuda cross-entropy kernels match the CPU with weight, ignore_index and "
    "label smoothing",
    "[cuda_loss_host]", float, double) {
    using T = TestType;
    const int64_t steps = 7, batch = 3, classes = 45;  // more classes than a warp has lanes
    const int64_t rows = steps * batch;
    const std::vector<int64_t> lengths = {7, 2, 5};
    const std::vector<T> logits = lstm::test::random_vector<T>(rows * classes, 13, -5.0, 5.0);
    const std::vector<T> weight = lstm::test::random_vector<T>(classes, 14, 0.1, 3.0);
    std::vector<int64_t> targets(rows);
    for (int64_t r = 0; r < rows; ++r) targets[r] = r % 4 == 1 ? 7 : (r * 11) % classes;
    for (const bool weighted : {false, true}) {
        for (const double smoothing : {0.0, 0.25, 1.0}) {
            INFO("weighted " << weighted << ", label_smoothing " << smoothing);
            lstm::loss::CrossEntropyOptions<T> options(Reduction::mean);
            options.ignore_index = 7;  // a class index: rows of class 7 count for nothing
            options.label_smoothing = smoothing;
            if (weighted) options.weight = Span<const T>(weight);
            std::vector<T> grad(rows * classes), losses(rows);
            const T want = lstm::loss::cross_entropy_frames(
                TensorView<const T>(logits.data(), {steps, batch, classes}),
                Span<const int64_t>(lengths), Span<const int64_t>(targets), options,
                TensorView<T>(grad.data(), {steps, batch, classes}),
                TensorView<T>(losses.data(), {steps, batch}));
            // mean's denominator: the counted frames' target weights.
            double denominator = 0;
            T weight_sum = 0;
            for (const T w : weight) weight_sum += w;
            for (int64_t r = 0; r < rows; ++r)
                if (r / batch < lengths[r % batch] && targets[r] != 7)
                    denominator += weighted ? static_cast<double>(weight[targets[r]]) : 1.0;
            lstm::kernels::cpu::CeOptions<T> k;
            k.weight = weighted ? weight.data() : nullptr;
            k.weight_sum = weighted ? weight_sum : static_cast<T>(classes);
            k.smoothing = static_cast<T>(smoothing);
            k.ignore_index = 7;
            const T scale = static_cast<T>(1.0 / denominator);
            const CeEmulated<T> got =
                emulate_ce(logits, targets, rows, classes, batch, lengths, scale, k);
            CHECK(got.total / denominator ==
                  Approx(static_cast<double>(want)).epsilon(ce_tol<T>()));
            LSTM_CHECK_CLOSE(
                lstm::test::compare("losses", got.losses, losses, ce_tol<T>() * 10, ce_tol<T>()));
            LSTM_CHECK_CLOSE(lstm::test::compare(
                "grad", got.grad, grad, ce_tol<T>() * static_cast<double>(scale), ce_tol<T>()));
            for (int64_t r = 0; r < rows; ++r) {
                if (r / batch < lengths[r % batch] && targets[r] != 7) continue;
                CHECK(got.losses[r] == T(0));
                for (int64_t c = 0; c < classes; ++c) CHECK(got.grad[r * classes + c] == T(0));
            }
        }
    }
}
