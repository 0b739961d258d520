// The GPU losses against the CPU losses computed in the same binary: cross-entropy (rows and
// padded frames, every reduction, float and double, extreme logits), this library's CTC kernel
// (Braun's CTC shape, log-probs, blank != 0, padded and concatenated targets, infeasible samples,
// zero_infinity, a label sequence longer than a block, double), cuDNN's CTC against the own
// kernel, and determinism (two runs bit-identical). Failures print the worst mismatches.
// Generated cases (tests/gpu/case_registry.hpp): cross-entropy per dtype and shape, the CTC
// semantic variants per group and dtype.

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "case_registry.hpp"
#include "ctc_cases.hpp"
#include "lstm/buffer.hpp"
#include "lstm/cuda/context.hpp"
#include "lstm/loss/cross_entropy.hpp"
#include "lstm/loss/ctc.hpp"
#include "test_util.hpp"

namespace {

using lstm::Buffer;
using lstm::Device;
using lstm::Span;
using lstm::TensorView;
using lstm::loss::CtcArgs;
using lstm::loss::CtcBackend;
using lstm::loss::CtcOutputs;
using lstm::loss::Reduction;

constexpr Reduction kReductions[] = {Reduction::none, Reduction::sum, Reduction::mean};

template <typename T>
bool bit_identical(const std::vector<T>& x, const std::vector<T>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0;
}

// Scalars compared like elements (recorded as `what`), infinities exactly.
bool close_scalar(const std::string& what, double got, double want, double rtol) {
    if (std::isinf(want) || std::isnan(want))
        return got == want || (std::isnan(got) && std::isnan(want));
    return lstm::test::scalar_close(what, got, want, rtol * 1e-30, rtol);
}

// ---------------------------------------------------------------------------------------------
// Cross-entropy
// ---------------------------------------------------------------------------------------------

template <typename T>
struct CeResult {
    T loss = 0;
    std::vector<T> grad, losses;
};

// cross_entropy_frames (lengths given) or cross_entropy (rank 2: steps = rows, batch = 0) on
// `device`.
template <typename T>
CeResult<T> run_ce(lstm::cuda::Context* ctx, Device device, const std::vector<T>& logits,
                   int64_t steps, int64_t batch, int64_t classes,
                   const std::vector<int64_t>& lengths, const std::vector<int64_t>& targets,
                   const lstm::loss::CrossEntropyOptions<T>& options) {
    const int64_t rows = batch > 0 ? steps * batch : steps;
    Buffer x = Buffer::upload(device, logits, ctx);
    Buffer g(device, sizeof(T) * rows * classes), l(device, sizeof(T) * rows);
    CeResult<T> out;
    if (batch > 0) {
        out.loss = lstm::loss::cross_entropy_frames(
            TensorView<const T>(x.as<const T>(), {steps, batch, classes}, device),
            Span<const int64_t>(lengths), Span<const int64_t>(targets), options,
            TensorView<T>(g.as<T>(), {steps, batch, classes}, device),
            TensorView<T>(l.as<T>(), {steps, batch}, device), ctx);
    } else {
        out.loss =
            lstm::loss::cross_entropy(TensorView<const T>(x.as<const T>(), {rows, classes}, device),
                                      Span<const int64_t>(targets), options,
                                      TensorView<T>(g.as<T>(), {rows, classes}, device),
                                      TensorView<T>(l.as<T>(), {rows}, device), ctx);
    }
    out.grad = g.download<T>(rows * classes, ctx);
    out.losses = l.download<T>(rows, ctx);
    return out;
}

}  // namespace

namespace {

struct CeShape {
    int64_t steps, batch, classes;
    std::vector<int64_t> lengths;  // frames form when batch > 0
    double scale;
};

const std::vector<CeShape>& ce_shapes() {
    static const std::vector<CeShape> shapes = {
        {257, 0, 5, {}, 3.0},   {64, 0, 100, {}, 1e4},        {9, 4, 37, {9, 1, 5, 8}, 4.0},
        {100, 32, 59, {}, 2.0}, {50, 3, 1, {50, 20, 1}, 1.0}, {7, 5, 2000, {7, 7, 3, 1, 6}, 5.0},
    };
    return shapes;
}

std::string ce_shape_name(const CeShape& s) {
    std::ostringstream name;
    if (s.batch > 0)
        name << "frames T " << s.steps << " N " << s.batch;
    else
        name << "rows " << s.steps;
    name << " C " << s.classes << " scale " << s.scale;
    return name.str();
}

// cross_entropy (rows) or cross_entropy_frames on the GPU against the CPU, every reduction, plain
// and with every option (class weights, ignored targets, label smoothing).
template <typename T>
void ce_matches_cpu(const CeShape& s, uint64_t seed) {
    lstm::cuda::Context ctx;
    const double rtol = std::is_same_v<T, float> ? 4e-6 : 1e-12;
    const int64_t rows = s.batch > 0 ? s.steps * s.batch : s.steps;
    const std::vector<T> logits =
        lstm::test::random_vector<T>(rows * s.classes, seed, -s.scale, s.scale);
    const std::vector<T> weight = lstm::test::random_vector<T>(s.classes, seed + 1, 0.1, 3.0);
    for (const bool with_options : {false, true}) {
        std::vector<int64_t> targets(rows);
        for (int64_t r = 0; r < rows; ++r)
            targets[r] = with_options && r % 5 == 2 ? -100 : (r * 7 + 3) % s.classes;
        for (const Reduction reduction : kReductions) {
            INFO("steps " << s.steps << " batch " << s.batch << " C " << s.classes << " scale "
                          << s.scale << " " << lstm::loss::to_string(reduction)
                          << (with_options ? ", weight, ignore_index, label_smoothing 0.2" : ""));
            lstm::loss::CrossEntropyOptions<T> options(reduction);
            if (with_options) {
                options.weight = Span<const T>(weight);
                options.label_smoothing = 0.2;
            }
            const CeResult<T> cpu = run_ce<T>(nullptr, Device::cpu, logits, s.steps, s.batch,
                                              s.classes, s.lengths, targets, options);
            const CeResult<T> gpu = run_ce<T>(&ctx, Device::cuda, logits, s.steps, s.batch,
                                              s.classes, s.lengths, targets, options);
            INFO("loss gpu " << gpu.loss << " cpu " << cpu.loss);
            CHECK(close_scalar("loss", gpu.loss, cpu.loss, rtol));
            LSTM_CHECK_CLOSE(lstm::test::compare("losses", gpu.losses, cpu.losses, rtol, rtol));
            double max_grad = 0;
            for (T v : cpu.grad) max_grad = std::max(max_grad, std::abs(static_cast<double>(v)));
            // With options an element is a difference of up to three rounded terms of size
            // scale * weight, which cancel exactly in theory for C = 1 (the gradient is 0); nvcc
            // contracts them into FMAs where the host compiler may not, so the absolute
            // tolerance follows the terms, not the (then pure rounding) result.
            double term = 0;
            if (with_options) {
                double counted_weight = 0, largest_weight = 0;
                for (int64_t r = 0; r < rows; ++r) {
                    const bool valid =
                        s.lengths.empty() || s.batch == 0 || r / s.batch < s.lengths[r % s.batch];
                    if (valid && targets[r] != -100) counted_weight += weight[targets[r]];
                }
                for (T w : weight) largest_weight = std::max(largest_weight, double(w));
                term = largest_weight * (reduction == Reduction::mean ? 1.0 / counted_weight : 1.0);
            }
            LSTM_CHECK_CLOSE(lstm::test::compare("grad", gpu.grad, cpu.grad,
                                                 rtol * std::max(max_grad, term), rtol));
            CHECK(lstm::test::all_finite(gpu.grad));
            // Deterministic: the same call again gives the same bits.
            const CeResult<T> again = run_ce<T>(&ctx, Device::cuda, logits, s.steps, s.batch,
                                                s.classes, s.lengths, targets, options);
            CHECK(std::memcmp(&again.loss, &gpu.loss, sizeof(T)) == 0);
            CHECK(bit_identical(again.grad, gpu.grad));
            CHECK(bit_identical(again.losses, gpu.losses));
        }
    }
}

// "gpu: cross-entropy <dtype> matches the CPU: <shape>"; the small frames shape in f32 is the
// [memcheck] case.
const lstm::test::CaseGenerator generate_ce_cases{[] {
    const std::vector<CeShape>& shapes = ce_shapes();
    for (size_t k = 0; k < shapes.size(); ++k) {
        const uint64_t seed = 2 + k;
        for (const lstm::DType dt : {lstm::DType::f32, lstm::DType::f64}) {
            const CeShape& s = shapes[k];
            const bool memcheck =
                dt == lstm::DType::f32 && s.batch > 0 && s.classes < 100 && s.steps * s.batch < 100;
            lstm::test::add_case(
                CATCH_INTERNAL_LINEINFO,
                std::string("gpu: cross-entropy ") + lstm::test::dtype_name(dt) +
                    " matches the CPU: " + lstm::test::case_name_part(ce_shape_name(s)),
                memcheck ? "[gpu][loss][memcheck]" : "[gpu][loss]", [k, seed, dt] {
                    if (dt == lstm::DType::f32)
                        ce_matches_cpu<float>(ce_shapes()[k], seed);
                    else
                        ce_matches_cpu<double>(ce_shapes()[k], seed);
                });
        }
    }
}};

}  // namespace

TEST_CASE("gpu: cross_entropy checks its device arguments", "[gpu][loss]") {
    using Catch::Contains;
    lstm::cuda::Context ctx;
    std::vector<float> host(12, 0.5f);
    Buffer x = Buffer::upload(Device::cuda, host, &ctx);
    std::vector<int64_t> targets = {0, 1, 2};
    std::vector<float> g(12);
    const TensorView<const float> logits(x.as<const float>(), {3, 4}, Device::cuda);
    CHECK_THROWS_WITH(
        lstm::loss::cross_entropy(logits, Span<const int64_t>(targets), Reduction::mean,
                                  TensorView<float>(g.data(), {3, 4}), TensorView<float>(), &ctx),
        Contains("grad is on cpu, but logits is on cuda"));
    CHECK_THROWS_WITH(lstm::loss::cross_entropy(logits, Span<const int64_t>(targets)),
                      Contains("context argument"));
    targets[1] = 4;
    CHECK_THROWS_WITH(
        lstm::loss::cross_entropy(logits, Span<const int64_t>(targets), Reduction::mean,
                                  TensorView<float>(), TensorView<float>(), &ctx),
        Contains("targets[1] = 4 is out of range for 4 classes"));
}

// ---------------------------------------------------------------------------------------------
// CTC
// ---------------------------------------------------------------------------------------------

namespace {

// A reference case plus how run_ctc passes the targets.
struct CtcCase : lstm::reference::CtcReferenceCase {
    bool padded = false;
};

CtcCase random_ctc(int64_t max_time, std::vector<int64_t> input_lengths,
                   std::vector<int64_t> target_lengths, int64_t classes, int64_t blank,
                   uint64_t seed, double scale) {
    CtcCase c;
    static_cast<lstm::reference::CtcReferenceCase&>(c) = lstm::test::ctc::random_case(
        max_time, std::move(input_lengths), std::move(target_lengths), classes, blank, seed, scale);
    return c;
}

// log_softmax of the case's logits, for log-probs cases.
void to_log_probs(CtcCase& c) {
    for (size_t r = 0; r * c.classes < c.input.size(); ++r) {
        double* row = c.input.data() + r * c.classes;
        const double max = *std::max_element(row, row + c.classes);
        double sum = 0;
        for (int64_t k = 0; k < c.classes; ++k) sum += std::exp(row[k] - max);
        for (int64_t k = 0; k < c.classes; ++k) row[k] -= max + std::log(sum);
    }
    c.logits = false;
}

template <typename T>
struct CtcResult {
    T loss = 0;
    std::vector<T> grad, losses;
    double seconds = 0;  // of the ctc_loss call alone (GPU: queued work included, it waits)
};

template <typename T>
CtcResult<T> run_ctc(lstm::cuda::Context* ctx, Device device, const CtcCase& c,
                     CtcBackend backend = CtcBackend::automatic, bool with_grad = true) {
    const std::vector<T> host = lstm::test::cast_vector<T>(c.input);
    std::vector<int64_t> flat, target_lengths;
    size_t longest = 0;
    for (const auto& t : c.targets) longest = std::max(longest, t.size());
    for (const auto& t : c.targets) {
        target_lengths.push_back(static_cast<int64_t>(t.size()));
        flat.insert(flat.end(), t.begin(), t.end());
        if (c.padded) flat.resize(flat.size() + (longest - t.size()), -1);  // never read
    }
    Buffer x = Buffer::upload(device, host, ctx);
    Buffer g(device, sizeof(T) * host.size()), l(device, sizeof(T) * c.batch);
    CtcArgs<T> args;
    const TensorView<const T> input(x.as<const T>(), {c.max_time, c.batch, c.classes}, device);
    (c.logits ? args.logits : args.log_probs) = input;
    args.targets =
        c.padded ? TensorView<const int64_t>(flat.data(), {c.batch, static_cast<int64_t>(longest)})
                 : TensorView<const int64_t>(flat.data(), {static_cast<int64_t>(flat.size())});
    args.input_lengths = c.input_lengths;
    args.target_lengths = target_lengths;
    args.blank = c.blank;
    args.reduction = c.reduction;
    args.zero_infinity = c.zero_infinity;
    args.context = ctx;
    args.backend = backend;
    CtcOutputs<T> out;
    if (with_grad)
        (c.logits ? out.grad_logits : out.grad_log_probs) =
            TensorView<T>(g.as<T>(), {c.max_time, c.batch, c.classes}, device);
    out.losses = TensorView<T>(l.as<T>(), {c.batch}, device);
    CtcResult<T> r;
    const auto start = std::chrono::steady_clock::now();
    r.loss = lstm::loss::ctc_loss(args, out);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (with_grad) r.grad = g.download<T>(host.size(), ctx);
    r.losses = l.download<T>(c.batch, ctx);
    return r;
}

// GPU against CPU: the reduced loss and per-sample losses to `rtol`, the gradient element-wise
// to rtol * (|cpu| + max |cpu|); infinities identical; the GPU gradient finite.
template <typename T>
void check_ctc_close(const CtcResult<T>& gpu, const CtcResult<T>& cpu, double rtol) {
    INFO("loss gpu " << gpu.loss << " cpu " << cpu.loss);
    CHECK(close_scalar("loss", gpu.loss, cpu.loss, rtol));
    for (size_t n = 0; n < cpu.losses.size(); ++n) {
        INFO("sample " << n << ": gpu " << gpu.losses[n] << " cpu " << cpu.losses[n]);
        CHECK(close_scalar("sample loss", gpu.losses[n], cpu.losses[n], rtol));
    }
    double max_grad = 0;
    for (T v : cpu.grad) max_grad = std::max(max_grad, std::abs(static_cast<double>(v)));
    LSTM_CHECK_CLOSE(lstm::test::compare("grad", gpu.grad, cpu.grad, rtol * max_grad, rtol));
    CHECK(lstm::test::all_finite(gpu.grad));
}

// Braun's CTC shape (lstm::test::ctc::braun_case).
CtcCase braun_ctc(bool equal_lengths = false) {
    CtcCase c;
    static_cast<lstm::reference::CtcReferenceCase&>(c) = lstm::test::ctc::braun_case(equal_lengths);
    return c;
}

}  // namespace

TEST_CASE("gpu: ctc own kernel on the Braun CTC shape matches the CPU deterministically",
          "[gpu][loss][ctc]") {
    lstm::cuda::Context ctx;
    const CtcCase c = braun_ctc();
    const CtcResult<float> cpu = run_ctc<float>(nullptr, Device::cpu, c);
    const CtcResult<float> gpu = run_ctc<float>(&ctx, Device::cuda, c, CtcBackend::own);
    check_ctc_close(gpu, cpu, 2e-6);
    const CtcResult<float> again = run_ctc<float>(&ctx, Device::cuda, c, CtcBackend::own);
    CHECK(std::memcmp(&again.loss, &gpu.loss, sizeof(float)) == 0);
    CHECK(bit_identical(again.grad, gpu.grad));
    CHECK(bit_identical(again.losses, gpu.losses));
    // Informational only (host clock around the call, which waits; includes the upload of the
    // labels and the download of the losses). The target is 2 ms forward + gradient.
    double best = 1e9;
    for (int i = 0; i < 5; ++i)
        best = std::min(best, run_ctc<float>(&ctx, Device::cuda, c, CtcBackend::own).seconds);
    std::printf(
        "gpu ctc (own kernel), Braun's CTC shape, forward + gradient: %.3f ms per call "
        "(best of 5, host clock)\n",
        best * 1e3);
}

namespace {

struct CtcSemantic {
    std::string group, name;
    CtcCase c;
};

// The semantic variants of CTC, in groups (one generated case per group and dtype).
std::vector<CtcSemantic> ctc_semantic_cases() {
    std::vector<CtcSemantic> out;
    {
        CtcCase c = random_ctc(50, {50, 33, 17, 49, 8}, {20, 15, 5, 1, 3}, 6, 5, 7, 3.0);
        for (const Reduction r : kReductions)
            for (const bool zi : {false, true})
                for (const bool padded : {false, true}) {
                    CtcCase v = c;
                    v.reduction = r;
                    v.zero_infinity = zi;
                    v.padded = padded;
                    out.push_back({"blank 5 repeats", "blank 5, repeats", v});
                    to_log_probs(v);
                    out.push_back({"blank 5 repeats log_probs", "blank 5, repeats, log_probs", v});
                }
    }
    {
        // Infeasible samples (sample 0: 3 labels and 2 repeats in 4 frames; sample 1: more
        // labels than frames), an empty target, saturated logits.
        CtcCase c = random_ctc(40, {4, 3, 40, 25}, {3, 4, 0, 12}, 9, 0, 8, 20.0);
        c.targets[0] = {2, 2, 2};
        for (const bool zi : {false, true}) {
            c.zero_infinity = zi;
            out.push_back({"infeasible and empty", "infeasible and empty", c});
        }
    }
    {
        // 1400 labels: 2801 states, a recursion block takes them in turns; rings still in shared
        // memory. And 1600 labels: 3201 states, rings in global memory.
        out.push_back({"1400 labels", "1400 labels",
                       random_ctc(3300, {3300, 2000}, {1400, 600}, 30, 0, 9, 2.0)});
        out.push_back(
            {"1600 labels", "1600 labels", random_ctc(3300, {3300}, {1600}, 30, 0, 10, 2.0)});
    }
    return out;
}

template <typename T>
void ctc_group_matches_cpu(const std::string& group, double rtol) {
    lstm::cuda::Context ctx;
    for (const CtcSemantic& v : ctc_semantic_cases()) {
        if (v.group != group) continue;
        INFO(v.name << ", " << lstm::loss::to_string(v.c.reduction)
                    << (v.c.zero_infinity ? ", zero_infinity" : "")
                    << (v.c.padded ? ", padded" : ", concatenated"));
        check_ctc_close(run_ctc<T>(&ctx, Device::cuda, v.c, CtcBackend::own),
                        run_ctc<T>(nullptr, Device::cpu, v.c), rtol);
    }
}

// "gpu: ctc own kernel <dtype> matches the CPU: <group>"; the first group in f32 is the
// [memcheck] case of the own kernel.
const lstm::test::CaseGenerator generate_ctc_cases{[] {
    std::vector<std::string> groups;
    for (const CtcSemantic& v : ctc_semantic_cases())
        if (std::find(groups.begin(), groups.end(), v.group) == groups.end())
            groups.push_back(v.group);
    for (const std::string& group : groups)
        for (const lstm::DType dt : {lstm::DType::f32, lstm::DType::f64}) {
            const bool memcheck = dt == lstm::DType::f32 && group == groups.front();
            lstm::test::add_case(CATCH_INTERNAL_LINEINFO,
                                 std::string("gpu: ctc own kernel ") + lstm::test::dtype_name(dt) +
                                     " matches the CPU: " + lstm::test::case_name_part(group),
                                 memcheck ? "[gpu][loss][ctc][memcheck]" : "[gpu][loss][ctc]",
                                 [group, dt] {
                                     if (dt == lstm::DType::f32)
                                         ctc_group_matches_cpu<float>(group, 2e-6);
                                     else
                                         ctc_group_matches_cpu<double>(group, 1e-9);
                                 });
        }
}};

}  // namespace

TEST_CASE("gpu: ctc own kernel losses without a gradient match the CPU", "[gpu][loss][ctc]") {
    lstm::cuda::Context ctx;
    const CtcCase c = braun_ctc();
    const CtcResult<float> no_grad = run_ctc<float>(&ctx, Device::cuda, c, CtcBackend::own, false);
    const CtcResult<float> cpu = run_ctc<float>(nullptr, Device::cpu, c, CtcBackend::own, false);
    CHECK(close_scalar("loss", no_grad.loss, cpu.loss, 2e-6));
    LSTM_CHECK_CLOSE(lstm::test::compare("losses", no_grad.losses, cpu.losses, 0.0, 2e-6));
}

TEST_CASE("gpu: ctc cudnn agrees with the own kernel on the Braun CTC shape with equal lengths",
          "[gpu][loss][ctc][cudnn]") {
#if LSTM_WITH_CUDNN
    lstm::cuda::Context ctx;
    // Every input length = T, blank 0, logits, float: what cuDNN takes.
    const CtcCase c = braun_ctc(true);
    const CtcResult<float> own = run_ctc<float>(&ctx, Device::cuda, c, CtcBackend::own);
    const CtcResult<float> cudnn = run_ctc<float>(&ctx, Device::cuda, c, CtcBackend::cudnn);
    const CtcResult<float> automatic = run_ctc<float>(&ctx, Device::cuda, c);
    const CtcResult<float> cpu = run_ctc<float>(nullptr, Device::cpu, c);
    check_ctc_close(own, cpu, 2e-6);
    // cuDNN computes alpha/beta in float. On an H200 with cuDNN 9.19 its gradient was up to
    // 2.0e-3 of the largest element away (one sample's blank column in its first 50 frames, all
    // about 0.4% small); the bound leaves room for other cuDNN versions, and a wrong argument
    // would still miss it by orders of magnitude. The printed worst elements show the distance.
    check_ctc_close(cudnn, own, 5e-3);
    // automatic is the own kernel (lstm/loss/ctc_cuda.hpp says why).
    CHECK(bit_identical(automatic.grad, own.grad));
    // Deterministic algorithm: bit-identical again.
    const CtcResult<float> again = run_ctc<float>(&ctx, Device::cuda, c, CtcBackend::cudnn);
    CHECK(bit_identical(again.grad, cudnn.grad));
    CHECK(bit_identical(again.losses, cudnn.losses));
    // Informational only: best of 5 warm calls each (host clock around the call, which waits;
    // includes the upload of the labels and the download of the losses).
    double best_own = 1e9, best_cudnn = 1e9;
    for (int i = 0; i < 5; ++i) {
        best_own =
            std::min(best_own, run_ctc<float>(&ctx, Device::cuda, c, CtcBackend::own).seconds);
        best_cudnn =
            std::min(best_cudnn, run_ctc<float>(&ctx, Device::cuda, c, CtcBackend::cudnn).seconds);
    }
    std::printf(
        "gpu ctc, Braun's shape with equal lengths, forward + gradient, best of 5 warm calls "
        "(host clock): own kernel %.3f ms, cuDNN %.3f ms\n",
        best_own * 1e3, best_cudnn * 1e3);
    // Where cuDNN does not apply, forcing it names the reason.
    CtcCase varied = braun_ctc(false);
    CHECK_THROWS_WITH(run_ctc<float>(&ctx, Device::cuda, varied, CtcBackend::cudnn),
                      Catch::Contains("every input length equals T"));
#else
    SUCCEED("built without cuDNN");
#endif
}

#if LSTM_WITH_CUDNN
TEST_CASE("gpu: ctc cudnn agrees with the own kernel on a small case",
          "[gpu][loss][ctc][cudnn][memcheck]") {
    // What cuDNN takes: every input length = T, blank 0, logits, float; at most 8 labels plus
    // their repeats fit in 30 frames, so every sample is feasible.
    lstm::cuda::Context ctx;
    const CtcCase c = random_ctc(30, {30, 30, 30, 30}, {5, 1, 8, 3}, 7, 0, 12, 2.0);
    const CtcResult<float> own = run_ctc<float>(&ctx, Device::cuda, c, CtcBackend::own);
    const CtcResult<float> cudnn = run_ctc<float>(&ctx, Device::cuda, c, CtcBackend::cudnn);
    const CtcResult<float> automatic = run_ctc<float>(&ctx, Device::cuda, c);
    check_ctc_close(own, run_ctc<float>(nullptr, Device::cpu, c), 2e-6);
    check_ctc_close(cudnn, own, 1e-3);
    CHECK(bit_identical(automatic.grad, own.grad));
}
#endif

TEST_CASE("gpu: ctc checks its device arguments", "[gpu][loss][ctc]") {
    using Catch::Contains;
    lstm::cuda::Context ctx;
    std::vector<float> host(3 * 2 * 4, 0.1f), g(host.size());
    Buffer x = Buffer::upload(Device::cuda, host, &ctx);
    std::vector<int64_t> input_lengths = {3, 2}, target_lengths = {1, 1}, targets = {1, 2};
    CtcArgs<float> args;
    args.logits = TensorView<const float>(x.as<const float>(), {3, 2, 4}, Device::cuda);
    args.targets = TensorView<const int64_t>(targets.data(), {2});
    args.input_lengths = input_lengths;
    args.target_lengths = target_lengths;
    args.context = &ctx;
    CtcOutputs<float> out;
    out.grad_logits = TensorView<float>(g.data(), {3, 2, 4});
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(args, out),
                      Contains("grad_logits is on cpu, but logits is on cuda"));
    out.grad_logits = TensorView<float>();
    std::vector<unsigned char> ws(1 << 20);
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(args, out, ws.data(), ws.size()),
                      Contains("overload with a host workspace is for cpu tensors"));
    targets[1] = 0;
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(args, out), Contains("equals the blank index"));
}
