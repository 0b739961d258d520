// Backward split into BackwardPart::data and BackwardPart::weights (DeepBench times them apart):
// every CPU variant that supports the split must give the same bits as one BackwardPart::all
// call and agree with the reference; one that does not must refuse with its reason.

#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "lstm/reference/split_check.hpp"
#include "lstm/registry.hpp"
#include "lstm/variants/fused.hpp"
#include "tolerance.hpp"
#include "variant_runner.hpp"

using namespace lstm;
using namespace lstm::test;
using Catch::Contains;
using reference::run_variant_parts;

namespace {

// Odd sizes, variable lengths, bidirectional stacks; H 70 with N 14 fills the AVX-512 path's full
// row tiles and unit panels and leaves remainders of both.
std::vector<Shape> split_shapes() {
    return {
        {"uni 1 layer, equal lengths", {3, 5, 1, false}, 7, 3, {}, true},
        {"bi 1 layer, mixed lengths", {3, 5, 1, true}, 7, 3, {7, 1, 4}, true},
        {"uni 2 layers, mixed lengths", {3, 5, 2, false}, 6, 4, {2, 6, 1, 5}, true},
        {"bi 3 layers, mixed lengths, no state", {3, 5, 3, true}, 5, 3, {5, 3, 1}, false},
        {"H 17, I 11, bi, mixed lengths", {11, 17, 1, true}, 5, 5, {5, 4, 5, 2, 1}, true},
        {"H 70, I 37, bi, 2 layers, mixed lengths",
         {37, 70, 2, true},
         6,
         14,
         {6, 2, 5, 6, 1, 3, 6, 4, 6, 5, 2, 6, 1, 6},
         true},
    };
}

// Exact equality of two results, reporting the worst differing elements of each output.
void check_identical(const VariantResult& got, const VariantResult& want) {
    LSTM_CHECK_CLOSE(compare("y", got.y, want.y, 0.0, 0.0));
    LSTM_CHECK_CLOSE(compare("dx", got.dx, want.dx, 0.0, 0.0));
    LSTM_CHECK_CLOSE(compare("dh0", got.dh0, want.dh0, 0.0, 0.0));
    LSTM_CHECK_CLOSE(compare("dc0", got.dc0, want.dc0, 0.0, 0.0));
    LSTM_CHECK_CLOSE(compare("dparams", got.dparams, want.dparams, 0.0, 0.0));
}

// The backward outputs of `got` against the reference under the tolerance rule; dparams started
// from `before` (rounded to T) and must be before + gradient.
template <typename T>
void check_backward_against_reference(const VariantResult& got, const LstmCase& c,
                                      const std::vector<double>& before) {
    const auto ref = reference::lstm_backward(c.in, c.out_grads);
    std::vector<double> want_dparams = ref.dparams;
    for (size_t k = 0; k < before.size(); ++k)
        want_dparams[k] += static_cast<double>(static_cast<T>(before[k]));
    const double bwd = lstm_rtol(dtype_of<T>(), c.in.config, c.in.seq_len, Pass::backward);
    LSTM_CHECK_CLOSE(compare_scaled("dx", got.dx, ref.dx, bwd));
    LSTM_CHECK_CLOSE(compare_scaled("dh0", got.dh0, ref.dh0, bwd));
    LSTM_CHECK_CLOSE(compare_scaled("dc0", got.dc0, ref.dc0, bwd));
    LSTM_CHECK_CLOSE(compare_scaled("dparams (accumulated)", got.dparams, want_dparams, bwd));
}

// Runs data + weights and one `all` call in precision T from the same nonzero dparams.
// `path`: one of v.paths() (fused's kernel sets have their own weight-gradient GEMMs).
template <typename T>
void check_split(const Variant& v, const LstmCase& c, uint64_t seed, const std::string& path) {
    const std::vector<double> before = random_vector(param_count(c.in.config), seed + 99);
    const VariantResult whole =
        run_variant_parts<T>(v, c, {BackwardPart::all}, before, false, path);
    const VariantResult split = run_variant_parts<T>(
        v, c, {BackwardPart::data, BackwardPart::weights}, before, false, path);
    {
        INFO("data + weights against all");
        check_identical(split, whole);
    }
    {
        INFO("data + weights against the reference");
        check_backward_against_reference<T>(split, c, before);
    }
}

// The case as `v` can take it: equal lengths when it refuses per-sequence lengths.
LstmCase usable_case(const Variant& v, LstmCase c) {
    if (v.supports_variable_lengths()) c.in.lengths.clear();
    return c;
}

// A CPU variant that keeps Variant's default answer to supports_split_backward(). Only the
// validation in Variant::backward runs, which refuses before reaching run_backward.
class NoSplitVariant final : public Variant {
public:
    const char* name() const override { return "no-split (test)"; }
    Device device() const override { return Device::cpu; }
    std::optional<std::string> supports(const Config&, DType) const override {
        return std::nullopt;
    }
    size_t run_workspace_bytes(const Config&, DType, int64_t, int64_t) const override { return 0; }
    size_t run_reserve_bytes(const Config&, DType, int64_t, int64_t) const override { return 0; }
};

// Throws unless `part` is refused by `v` with its supports_split_backward() reason.
void check_refuses(const Variant& v, BackwardPart part) {
    const std::string reason = v.supports_split_backward().value();
    const Config config{3, 5, 1, false};
    const int64_t seq_len = 4, batch = 2;
    std::vector<float> x(seq_len * batch * 3, 0.5f), params(param_count(config), 0.1f);
    std::vector<float> y(seq_len * batch * 5), dy(y.size(), 1.0f), dparams(params.size());
    const size_t ws_bytes = v.workspace_bytes(config, DType::f32, seq_len, batch);
    const size_t rs_bytes = v.reserve_bytes(config, DType::f32, seq_len, batch);
    lstm::detail::AlignedBuffer workspace, reserve;
    BackwardArgs<float> b;
    b.x = TensorView<const float>(x.data(), {seq_len, batch, 3});
    b.params = TensorView<const float>(params.data(), {int64_t(params.size())});
    b.y = TensorView<const float>(y.data(), {seq_len, batch, 5});
    b.dy = TensorView<const float>(dy.data(), {seq_len, batch, 5});
    b.dparams = TensorView<float>(dparams.data(), {int64_t(dparams.size())});
    b.workspace = workspace.reserve(ws_bytes);
    b.workspace_size = ws_bytes;
    // A zero-byte reserve still has to be "given": any non-null pointer.
    b.reserve = rs_bytes > 0 ? reserve.reserve(rs_bytes) : static_cast<void*>(x.data());
    b.reserve_size = rs_bytes;
    b.part = part;
    INFO("variant " << v.name() << ", part " << to_string(part));
    CHECK_THROWS_AS(v.backward(config, b), Unsupported);
    CHECK_THROWS_WITH(
        v.backward(config, b),
        Contains(std::string("cannot run backward part ") + to_string(part)) && Contains(reason));
}

}  // namespace

TEST_CASE("split backward: data + weights equals one call, bit for bit", "[split]") {
    int checked = 0;
    uint64_t seed = 7000;
    for (const Shape& s : split_shapes()) {
        const LstmCase c = make_case(s.config, s.seq_len, s.batch, s.lengths, s.with_state, seed);
        for (const Variant* v : variants_on(Device::cpu)) {
            if (v->supports_split_backward()) continue;
            const LstmCase used = usable_case(*v, c);
            for (DType dt : {DType::f32, DType::f64}) {
                if (v->supports(s.config, dt)) continue;
                for (const std::string& path : v->paths(dt)) {
                    INFO("variant " << v->name() << " (" << path << "), " << to_string(dt)
                                    << ", case: " << s.name);
                    if (dt == DType::f32)
                        check_split<float>(*v, used, seed, path);
                    else
                        check_split<double>(*v, used, seed, path);
                    ++checked;
                }
            }
        }
        seed += 10;
    }
    // basic and fused split; a build where nothing does would test nothing here.
    CHECK(checked > 0);
}

TEST_CASE("split backward: the data part writes dx, dh0, dc0 and leaves dparams alone", "[split]") {
    const Config config{3, 5, 2, true};
    const LstmCase c = make_case(config, 6, 4, {6, 2, 5, 1}, true, 7100);
    const std::vector<double> before = random_vector(param_count(config), 7199);
    for (const Variant* v : variants_on(Device::cpu)) {
        if (v->supports_split_backward()) continue;
        const LstmCase used = usable_case(*v, c);
        INFO("variant " << v->name());
        const VariantResult whole = run_variant_parts<float>(*v, used, {BackwardPart::all});
        // dparams given to the data call: it must come back exactly as it went in.
        const VariantResult data = run_variant_parts<float>(*v, used, {BackwardPart::data}, before,
                                                            /*data_sees_dparams=*/true);
        LSTM_CHECK_CLOSE(compare("dparams after data", data.dparams,
                                 cast_vector<double>(cast_vector<float>(before)), 0.0, 0.0));
        LSTM_CHECK_CLOSE(compare("dx", data.dx, whole.dx, 0.0, 0.0));
        LSTM_CHECK_CLOSE(compare("dh0", data.dh0, whole.dh0, 0.0, 0.0));
        LSTM_CHECK_CLOSE(compare("dc0", data.dc0, whole.dc0, 0.0, 0.0));
        // And with dparams omitted, as the interface allows for the data part.
        const VariantResult data_only = run_variant_parts<float>(*v, used, {BackwardPart::data});
        LSTM_CHECK_CLOSE(compare("dx (dparams omitted)", data_only.dx, whole.dx, 0.0, 0.0));
    }
}

TEST_CASE("split backward: a variant that cannot split refuses with its reason", "[split]") {
    // The interface's default answer, on a variant that keeps it.
    const NoSplitVariant no_split;
    REQUIRE(no_split.supports_split_backward().has_value());
    check_refuses(no_split, BackwardPart::data);
    check_refuses(no_split, BackwardPart::weights);
    // And every registered CPU variant that says it cannot (onednn, when built).
    for (const Variant* v : variants_on(Device::cpu)) {
        if (!v->supports_split_backward()) continue;
        check_refuses(*v, BackwardPart::data);
        check_refuses(*v, BackwardPart::weights);
    }
}
