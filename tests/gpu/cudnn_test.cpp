// What is particular to the `cudnn` (cuda) variant, on a GPU: the weight mapping read back out
// of cuDNN's weight space through the addresses cuDNN reports, the gradient round trip through
// its dweight space, padded outputs, split backward, accumulation into dparams, inference, and a
// plan reused across calls whose lengths change. The comparison of every CUDA variant with the
// reference on the registry's shapes is tests/gpu/variants_test.cpp. Generated cases
// (tests/gpu/case_registry.hpp): one per config (and dtype).

#if LSTM_WITH_CUDNN

#include "lstm/variants/cudnn.hpp"

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "case_registry.hpp"
#include "lstm/buffer.hpp"
#include "lstm/cuda/context.hpp"
#include "lstm/params.hpp"
#include "lstm/reference/lstm_reference.hpp"
#include "lstm/registry.hpp"
#include "test_util.hpp"
#include "tolerance.hpp"

using namespace lstm;

namespace {

const Config kMappingConfigs[] = {
    {3, 5, 1, false},
    {3, 5, 2, true},       // layer 1 reads 2H
    {4, 4, 3, false},      // I == H
    {123, 320, 1, false},  // Braun's shape: whatever padding cuDNN adds at this size
};

// Also the tail of case names, so no commas (see case_registry.hpp).
std::string config_name(const Config& c) {
    return "I " + std::to_string(c.input_size) + " H " + std::to_string(c.hidden_size) + " L " +
           std::to_string(c.num_layers) + (c.bidirectional ? " bi" : " uni");
}

// Where a region must read from in our buffer, stated through PyTorch's parameter names (not
// through cudnn_weights.hpp): linLayerID k < 4 is gate k of weight_ih / bias_ih, k >= 4 gate
// k - 4 of weight_hh / bias_hh; gates i, f, g, o in both libraries.
int64_t canonical_offset(const Config& config, const cuda::CudnnPiece& p, int64_t* rows,
                         int64_t* cols) {
    const int64_t dirs = config.num_directions(), hidden = config.hidden_size;
    const std::string suffix = "_l" + std::to_string(p.pseudo_layer / dirs) +
                               (p.pseudo_layer % dirs == 1 ? "_reverse" : "");
    const bool recurrent = p.lin_layer_id >= 4, matrix = p.kind == cuda::CudnnPieceKind::matrix;
    const int64_t gate = p.lin_layer_id % 4;
    const ParamEntry e = find_param(
        config, std::string(matrix ? "weight" : "bias") + (recurrent ? "_hh" : "_ih") + suffix);
    *rows = hidden;
    *cols = matrix ? e.cols : 1;
    return e.offset + gate * hidden * *cols;
}

template <typename T>
void check_mapping(cuda::Context& ctx, const Config& config) {
    const DType dtype = dtype_of<T>();
    INFO(config_name(config) << ", " << to_string(dtype));
    const cuda::CudnnWeightLayout layout = cuda::cudnn_weight_layout(ctx, config, dtype);
    std::printf("cudnn weight space %s %s: %zu bytes for %lld parameters, %zu copies each way%s\n",
                config_name(config).c_str(), to_string(dtype), layout.weight_space_bytes,
                static_cast<long long>(param_count(config)), layout.copies.size(),
                layout.copies_cover_space ? "" : " (plus a zeroing of the space)");
    REQUIRE(layout.regions.size() == size_t(config.num_cells() * 16));

    // Distinct values, exact in fp32 (below 2^24), so a misplaced element cannot hide.
    std::vector<T> params(static_cast<size_t>(param_count(config)));
    for (size_t k = 0; k < params.size(); ++k) params[k] = T(1) + T(k);
    const Buffer dev_params = Buffer::upload(Device::cuda, params, &ctx);
    Buffer space(Device::cuda, layout.weight_space_bytes);
    space.zero(layout.weight_space_bytes, &ctx);
    cuda::cudnn_pack_weights(ctx, config, dtype, dev_params.data(), space.data());
    const std::vector<T> got = space.download<T>(layout.weight_space_bytes / sizeof(T), &ctx);

    // Every region, element by element, at the address cuDNN reported.
    std::ostringstream misses;
    size_t wrong = 0;
    for (const cuda::CudnnWeightRegion& r : layout.regions) {
        int64_t rows = 0, cols = 0;
        const int64_t from = canonical_offset(config, r.piece, &rows, &cols);
        CHECK(r.piece.rows == rows);
        CHECK(r.piece.cols == cols);
        for (int64_t e = 0; e < rows * cols; ++e) {
            const T want = params[size_t(from + e)], have = got[size_t(r.space_offset + e)];
            if (have != want && ++wrong <= 8)
                misses << "  " << cuda::cudnn_piece_name(config, r.piece) << " element " << e
                       << " (space offset " << r.space_offset + e << "): got " << have
                       << ", expected " << want << "\n";
        }
    }
    INFO("elements of cuDNN's weight space that differ from our layout: " << wrong << "\n"
                                                                          << misses.str());
    CHECK(wrong == 0);

    // Back the other way: every parameter restored.
    Buffer restored(Device::cuda, params.size() * sizeof(T));
    restored.zero(restored.size(), &ctx);
    cuda::cudnn_unpack_weights(ctx, config, dtype, space.data(), restored.data());
    CHECK(restored.download<T>(params.size(), &ctx) == params);
}

// Host data of one run and the device buffers that carry it.
template <typename T>
struct DeviceRun {
    const Variant& v;
    cuda::Context& ctx;
    const reference::LstmInputs& in;
    const reference::LstmOutputGrads& grads;
    Buffer x, params, h0, c0, y, hn, cn, dy, dhn, dcn, dx, dh0, dc0, dparams, workspace, reserve;
    size_t ws_bytes = 0, rs_bytes = 0;

    DeviceRun(const Variant& variant, cuda::Context& context, const reference::LstmInputs& i,
              const reference::LstmOutputGrads& g)
        : v(variant), ctx(context), in(i), grads(g) {
        auto up = [&](const std::vector<double>& host) {
            return Buffer::upload(Device::cuda, test::cast_vector<T>(host), &ctx);
        };
        const Config& c = in.config;
        const size_t state = size_t(c.num_cells() * in.batch * c.hidden_size);
        x = up(in.x);
        params = up(in.params);
        h0 = up(in.h0);
        c0 = up(in.c0);
        dy = up(grads.dy);
        dhn = up(grads.dhn);
        dcn = up(grads.dcn);
        y = Buffer(Device::cuda, size_t(in.seq_len * in.batch * c.output_size()) * sizeof(T));
        hn = Buffer(Device::cuda, state * sizeof(T));
        cn = Buffer(Device::cuda, state * sizeof(T));
        dx = Buffer(Device::cuda, in.x.size() * sizeof(T));
        dh0 = Buffer(Device::cuda, state * sizeof(T));
        dc0 = Buffer(Device::cuda, state * sizeof(T));
        ws_bytes = v.workspace_bytes(c, dtype_of<T>(), in.seq_len, in.batch);
        rs_bytes = v.reserve_bytes(c, dtype_of<T>(), in.seq_len, in.batch);
        workspace = Buffer(Device::cuda, ws_bytes);
        reserve = Buffer(Device::cuda, rs_bytes);
    }

    TensorView<const T> cview(const Buffer& b, std::initializer_list<int64_t> shape) const {
        return b.size() == 0 ? TensorView<const T>()
                             : TensorView<const T>(b.as<const T>(), shape, Device::cuda);
    }
    TensorView<T> view(const Buffer& b, std::initializer_list<int64_t> shape) const {
        return b.size() == 0 ? TensorView<T>() : TensorView<T>(b.as<T>(), shape, Device::cuda);
    }
    int64_t cells() const { return in.config.num_cells(); }

    void forward(bool training) {
        const Config& c = in.config;
        ForwardArgs<T> f;
        f.x = cview(x, {in.seq_len, in.batch, c.input_size});
        f.lengths = Span<const int64_t>(in.lengths.data(), int64_t(in.lengths.size()));
        f.h0 = cview(h0, {cells(), in.batch, c.hidden_size});
        f.c0 = cview(c0, {cells(), in.batch, c.hidden_size});
        f.params = cview(params, {param_count(c)});
        f.y = view(y, {in.seq_len, in.batch, c.output_size()});
        f.hn = view(hn, {cells(), in.batch, c.hidden_size});
        f.cn = view(cn, {cells(), in.batch, c.hidden_size});
        f.workspace = workspace.data();
        f.workspace_size = ws_bytes;
        f.reserve = training ? reserve.data() : nullptr;
        f.reserve_size = training ? rs_bytes : 0;
        f.context = &ctx;
        v.forward(c, f);
    }

    void backward(BackwardPart part) {
        const Config& c = in.config;
        BackwardArgs<T> b;
        b.x = cview(x, {in.seq_len, in.batch, c.input_size});
        b.lengths = Span<const int64_t>(in.lengths.data(), int64_t(in.lengths.size()));
        b.h0 = cview(h0, {cells(), in.batch, c.hidden_size});
        b.c0 = cview(c0, {cells(), in.batch, c.hidden_size});
        b.params = cview(params, {param_count(c)});
        b.y = cview(y, {in.seq_len, in.batch, c.output_size()});
        b.dy = cview(dy, {in.seq_len, in.batch, c.output_size()});
        b.dhn = cview(dhn, {cells(), in.batch, c.hidden_size});
        b.dcn = cview(dcn, {cells(), in.batch, c.hidden_size});
        b.dx = view(dx, {in.seq_len, in.batch, c.input_size});
        b.dh0 = view(dh0, {cells(), in.batch, c.hidden_size});
        b.dc0 = view(dc0, {cells(), in.batch, c.hidden_size});
        b.dparams = view(dparams, {param_count(c)});
        b.workspace = workspace.data();
        b.workspace_size = ws_bytes;
        b.reserve = reserve.data();
        b.reserve_size = rs_bytes;
        b.context = &ctx;
        b.part = part;
        v.backward(c, b);
    }

    std::vector<double> get(const Buffer& b, size_t n) const {
        return test::cast_vector<double>(b.download<T>(n, &ctx));
    }
};

// A problem with mixed lengths (1 and T among them), states given.
reference::LstmInputs make_inputs(const Config& config, int64_t seq_len,
                                  std::vector<int64_t> lengths, uint64_t seed) {
    reference::LstmInputs in;
    in.config = config;
    in.seq_len = seq_len;
    in.batch = int64_t(lengths.size());
    in.lengths = std::move(lengths);
    const size_t state = size_t(config.num_cells() * in.batch * config.hidden_size);
    in.x = test::random_vector(size_t(seq_len * in.batch * config.input_size), seed + 1);
    in.params = test::random_vector(size_t(param_count(config)), seed + 2);
    in.h0 = test::random_vector(state, seed + 3);
    in.c0 = test::random_vector(state, seed + 4);
    return in;
}

reference::LstmOutputGrads make_grads(const reference::LstmInputs& in, uint64_t seed) {
    reference::LstmOutputGrads g;
    const size_t state = size_t(in.config.num_cells() * in.batch * in.config.hidden_size);
    g.dy = test::random_vector(size_t(in.seq_len * in.batch * in.config.output_size()), seed + 5);
    g.dhn = test::random_vector(state, seed + 6);
    g.dcn = test::random_vector(state, seed + 7);
    return g;
}

// Values at padded positions (t >= lengths[n]) of a (T, N, width) tensor that are not zero.
std::string nonzero_padding(const std::vector<double>& v, const reference::LstmInputs& in,
                            int64_t width) {
    std::ostringstream out;
    for (int64_t t = 0; t < in.seq_len; ++t)
        for (int64_t n = 0; n < in.batch; ++n)
            if (t >= in.lengths[size_t(n)])
                for (int64_t k = 0; k < width; ++k) {
                    const double value = v[size_t((t * in.batch + n) * width + k)];
                    if (value != 0.0)
                        out << "  (t " << t << ", n " << n << ", " << k << ") = " << value << "\n";
                }
    return out.str();
}

template <typename T>
void check_training(cuda::Context& ctx, const Config& config) {
    const Variant& v = find_variant("cudnn", Device::cuda);
    const DType dtype = dtype_of<T>();
    const int64_t seq_len = 9;
    const reference::LstmInputs in = make_inputs(config, seq_len, {9, 1, 5, 9, 3}, 40);
    const reference::LstmOutputGrads grads = make_grads(in, 40);
    const reference::LstmOutputs want = reference::lstm_forward(in);
    const reference::LstmInputGrads want_grads = reference::lstm_backward(in, grads);
    const double fwd = test::lstm_rtol(dtype, config, seq_len, test::Pass::forward);
    const double bwd = test::lstm_rtol(dtype, config, seq_len, test::Pass::backward);
    INFO(config_name(config) << ", " << to_string(dtype));

    DeviceRun<T> run(v, ctx, in, grads);
    const std::vector<double> before = test::random_vector(size_t(param_count(config)), 41);
    run.dparams = Buffer::upload(Device::cuda, test::cast_vector<T>(before), &ctx);
    // Garbage where the outputs go: padded positions must come back exactly zero.
    const std::vector<T> garbage_y(
        in.x.size() / size_t(config.input_size) * size_t(config.output_size()), T(7));
    run.y.copy_from(garbage_y.data(), Device::cpu, garbage_y.size() * sizeof(T), &ctx);
    const std::vector<T> garbage_x(in.x.size(), T(-3));
    run.dx.copy_from(garbage_x.data(), Device::cpu, garbage_x.size() * sizeof(T), &ctx);

    run.forward(true);
    run.backward(BackwardPart::all);
    const size_t state = want.hn.size();
    const std::vector<double> y = run.get(run.y, want.y.size());
    const std::vector<double> dx = run.get(run.dx, in.x.size());
    LSTM_CHECK_CLOSE(test::compare_scaled("y", y, want.y, fwd));
    LSTM_CHECK_CLOSE(test::compare_scaled("hn", run.get(run.hn, state), want.hn, fwd));
    LSTM_CHECK_CLOSE(test::compare_scaled("cn", run.get(run.cn, state), want.cn, fwd));
    LSTM_CHECK_CLOSE(test::compare_scaled("dx", dx, want_grads.dx, bwd));
    LSTM_CHECK_CLOSE(test::compare_scaled("dh0", run.get(run.dh0, state), want_grads.dh0, bwd));
    LSTM_CHECK_CLOSE(test::compare_scaled("dc0", run.get(run.dc0, state), want_grads.dc0, bwd));
    std::vector<double> want_dparams = want_grads.dparams;
    for (size_t k = 0; k < before.size(); ++k) want_dparams[k] += double(T(before[k]));
    const std::vector<double> dparams = run.get(run.dparams, before.size());
    LSTM_CHECK_CLOSE(test::compare_scaled("dparams (accumulated)", dparams, want_dparams, bwd));
    {
        const std::string bad = nonzero_padding(y, in, config.output_size());
        INFO("y at padded positions:\n" << bad);
        CHECK(bad.empty());
    }
    {
        const std::string bad = nonzero_padding(dx, in, config.input_size);
        INFO("dx at padded positions:\n" << bad);
        CHECK(bad.empty());
    }

    // Inference gives the training forward's outputs.
    run.y.zero(run.y.size(), &ctx);
    run.forward(false);
    LSTM_CHECK_CLOSE(
        test::compare("y (inference vs training)", run.get(run.y, y.size()), y, 0.0, fwd));

    // Split backward: data, then weights, gives what one call gave; dparams starts over.
    run.forward(true);
    run.dparams = Buffer::upload(Device::cuda, test::cast_vector<T>(before), &ctx);
    run.dx.zero(run.dx.size(), &ctx);
    run.backward(BackwardPart::data);
    const std::vector<double> dx_split = run.get(run.dx, in.x.size());
    CHECK(run.get(run.dparams, before.size()) ==
          test::cast_vector<double>(test::cast_vector<T>(before)));  // untouched
    run.backward(BackwardPart::weights);
    LSTM_CHECK_CLOSE(test::compare("dx (split vs all)", dx_split, dx, 0.0, bwd));
    LSTM_CHECK_CLOSE(test::compare("dparams (split vs all)", run.get(run.dparams, before.size()),
                                   dparams, 0.0, bwd));

    // Another training step on the same dparams adds the gradient once more (backward may
    // clobber the reserve, so the step starts with its own forward).
    run.forward(true);
    run.backward(BackwardPart::all);
    std::vector<double> twice = want_dparams;
    for (size_t k = 0; k < twice.size(); ++k) twice[k] += want_grads.dparams[k];
    LSTM_CHECK_CLOSE(test::compare_scaled("dparams after two training steps",
                                          run.get(run.dparams, before.size()), twice, bwd));
}

void sizes_agree(const Config& config) {
    cuda::Context ctx;
    const cuda::CudnnSizes s = cuda::cudnn_sizes(&ctx, config, DType::f32, 50, 8);
    CHECK(s.weight_space == cuda::cudnn_weight_layout(ctx, config, DType::f32).weight_space_bytes);
    CHECK(s.reserve_training > 0);
    std::printf(
        "cudnn sizes %s, T 50, N 8: weights %zu, work %zu (inference %zu), "
        "reserve %zu bytes\n",
        config_name(config).c_str(), s.weight_space, s.work_training, s.work_inference,
        s.reserve_training);
}

// Runs check(ctx, T()) on a context of its own, T the float type of `dt`: a case's body names its
// precision at run time, the checks take it as a template argument.
template <typename Check>
void on_own_context(DType dt, const Check& check) {
    cuda::Context ctx;
    if (dt == DType::f32)
        check(ctx, float());
    else
        check(ctx, double());
}

const test::CaseGenerator generate_cudnn_cases{[] {
    for (const Config& config : kMappingConfigs) {
        for (const DType dt : {DType::f32, DType::f64})
            test::add_case(
                CATCH_INTERNAL_LINEINFO,
                std::string("gpu: cudnn weight mapping ") + test::dtype_name(dt) +
                    " read back through the addresses cuDNN reports: " + config_name(config),
                "[gpu][cudnn]", [config, dt] {
                    on_own_context(dt, [&](cuda::Context& ctx, auto zero) {
                        check_mapping<decltype(zero)>(ctx, config);
                    });
                });
        test::add_case(
            CATCH_INTERNAL_LINEINFO,
            "gpu: cudnn sizes of the variant handle agree with a context: " + config_name(config),
            "[gpu][cudnn]", [config] { sizes_agree(config); });
    }
    // Padding, split backward, accumulation and inference against the reference.
    for (const Config& config : {Config{3, 5, 1, false}, Config{3, 5, 2, true}})
        for (const DType dt : {DType::f32, DType::f64})
            test::add_case(CATCH_INTERNAL_LINEINFO,
                           std::string("gpu: cudnn ") + test::dtype_name(dt) +
                               " training step against the reference: " + config_name(config),
                           "[gpu][cudnn]", [config, dt] {
                               on_own_context(dt, [&](cuda::Context& ctx, auto zero) {
                                   check_training<decltype(zero)>(ctx, config);
                               });
                           });
}};

}  // namespace

TEST_CASE("gpu: cudnn plan reused while the lengths change from call to call", "[gpu][cudnn]") {
    // One (config, T, N), so one plan; each batch has other lengths. All forwards run first and
    // the backwards in reverse order, so every backward finds the plan describing other lengths.
    cuda::Context ctx;
    const Variant& v = find_variant("cudnn", Device::cuda);
    const Config config{4, 6, 2, true};
    const int64_t seq_len = 7;
    const std::vector<std::vector<int64_t>> batches = {
        {7, 2, 5}, {1, 7, 7}, {7, 7, 7}, {7, 2, 5}, {3, 3, 1}};
    std::vector<reference::LstmInputs> ins;
    std::vector<reference::LstmOutputGrads> grads;
    for (size_t k = 0; k < batches.size(); ++k) {
        ins.push_back(make_inputs(config, seq_len, batches[k], 60 + k));
        grads.push_back(make_grads(ins.back(), 60 + k));
    }
    std::vector<std::unique_ptr<DeviceRun<float>>> runs;
    for (size_t k = 0; k < batches.size(); ++k) {
        runs.push_back(std::make_unique<DeviceRun<float>>(v, ctx, ins[k], grads[k]));
        DeviceRun<float>& run = *runs.back();
        run.dparams = Buffer(Device::cuda, size_t(param_count(config)) * sizeof(float));
        run.dparams.zero(run.dparams.size(), &ctx);
        run.forward(true);
    }
    for (size_t k = batches.size(); k-- > 0;) runs[k]->backward(BackwardPart::all);
    const double fwd = test::lstm_rtol(DType::f32, config, seq_len, test::Pass::forward);
    const double bwd = test::lstm_rtol(DType::f32, config, seq_len, test::Pass::backward);
    for (size_t k = 0; k < batches.size(); ++k) {
        const reference::LstmOutputs want = reference::lstm_forward(ins[k]);
        const reference::LstmInputGrads want_grads = reference::lstm_backward(ins[k], grads[k]);
        const DeviceRun<float>& run = *runs[k];
        INFO("batch " << k);
        LSTM_CHECK_CLOSE(test::compare_scaled("y", run.get(run.y, want.y.size()), want.y, fwd));
        LSTM_CHECK_CLOSE(test::compare_scaled("hn", run.get(run.hn, want.hn.size()), want.hn, fwd));
        LSTM_CHECK_CLOSE(
            test::compare_scaled("dx", run.get(run.dx, ins[k].x.size()), want_grads.dx, bwd));
        LSTM_CHECK_CLOSE(test::compare_scaled(
            "dparams", run.get(run.dparams, want_grads.dparams.size()), want_grads.dparams, bwd));
    }
}

#endif  // LSTM_WITH_CUDNN
