#pragma once

// Runs any registered variant on a problem given in double, in the variant's memory space
// (lstm::LstmProblem, lstm/problem.hpp), and returns everything in double, so the tests, the
// bench's pre-check and users compare a variant with the reference element by element
// (lstm/reference/tolerance.hpp has the rule).

#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "lstm/device_context.hpp"
#include "lstm/problem.hpp"
#include "lstm/reference/lstm_reference.hpp"
#include "lstm/reference/tolerance.hpp"
#include "lstm/variant.hpp"

namespace lstm::reference {

// One problem: the inputs plus the output gradients backward is fed with.
struct LstmCase {
    LstmInputs in;
    LstmOutputGrads out_grads;
};

// A variant's results in double. dparams is what backward added on top of `dparams_before`.
struct VariantResult {
    std::vector<double> y, hn, cn, dx, dh0, dc0, dparams;
};

// Where a run's scratch lives (lstm/problem.hpp).
using RunBuffers = ScratchBuffers;

// Copies c's inputs (x, lengths, params; h0 and c0 left out where c leaves them out) and output
// gradients (dy; dhn, dcn likewise) into `p`, rounded to T, and gives y, hn, cn, dx, dh0, dc0 and
// dparams, the outputs starting as NaN so that a call that should write an element and does not
// shows up in any comparison. Host or device alike.
template <typename T>
void load_case(LstmProblem<T>& p, const LstmCase& c) {
    using P = ProblemTensor;
    p.lengths = c.in.lengths;
    p.set(P::x, c.in.x);
    p.set(P::h0, c.in.h0);
    p.set(P::c0, c.in.c0);
    p.set(P::params, c.in.params);
    p.set(P::dy, c.out_grads.dy);
    p.set(P::dhn, c.out_grads.dhn);
    p.set(P::dcn, c.out_grads.dcn);
    for (P out : {P::y, P::hn, P::cn, P::dx, P::dh0, P::dc0})
        p.fill(out, std::numeric_limits<T>::quiet_NaN());
    p.allocate(P::dparams);
}

// Runs anything with the variant call signature on `p`, in its memory space: forward(ForwardArgs)
// (a training forward; inference when `parts` is empty, then only y, hn, cn come back), then
// backward(BackwardArgs) once per entry of `parts`, all with the same arguments and reserve.
// dparams is overwritten first by `dparams_before` (host, P) or zeros; a data call gets an empty
// dparams view unless `data_sees_dparams` (the interface allows both; the data part must not
// touch it either way). Returns what the calls wrote, read back in double.
template <typename T, typename Forward, typename Backward>
VariantResult run_problem(LstmProblem<T>& p, const std::vector<BackwardPart>& parts,
                          Forward&& forward, Backward&& backward,
                          const std::vector<double>& dparams_before = {},
                          bool data_sees_dparams = false) {
    using P = ProblemTensor;
    const bool training = !parts.empty();
    if (training) {
        if (dparams_before.empty())
            p.fill(P::dparams, T(0));
        else
            p.set(P::dparams, dparams_before);
    }
    forward(p.forward_args(training));
    VariantResult r;
    r.y = p.template get<double>(P::y);
    r.hn = p.template get<double>(P::hn);
    r.cn = p.template get<double>(P::cn);
    if (!training) return r;

    for (BackwardPart part : parts) {
        BackwardArgs<T> b = p.backward_args(part);
        if (part == BackwardPart::data && !data_sees_dparams) b.dparams = TensorView<T>();
        backward(b);
    }
    r.dx = p.template get<double>(P::dx);
    r.dh0 = p.template get<double>(P::dh0);
    r.dc0 = p.template get<double>(P::dc0);
    r.dparams = p.template get<double>(P::dparams);
    return r;
}

// run_problem() with `variant`'s forward and backward (its default path).
template <typename T>
VariantResult run_variant_on(const Variant& variant, LstmProblem<T>& p,
                             const std::vector<BackwardPart>& parts,
                             const std::vector<double>& dparams_before = {},
                             bool data_sees_dparams = false) {
    return run_problem<T>(
        p, parts, [&](const ForwardArgs<T>& f) { variant.forward(p.config(), f); },
        [&](const BackwardArgs<T>& b) { variant.backward(p.config(), b); }, dparams_before,
        data_sees_dparams);
}

// run_problem() with `plan`'s forward and backward.
template <typename T>
VariantResult run_plan_on(const Plan& plan, LstmProblem<T>& p,
                          const std::vector<BackwardPart>& parts,
                          const std::vector<double>& dparams_before = {},
                          bool data_sees_dparams = false) {
    return run_problem<T>(
        p, parts, [&](const ForwardArgs<T>& f) { plan.forward(f); },
        [&](const BackwardArgs<T>& b) { plan.backward(b); }, dparams_before, data_sees_dparams);
}

// run_problem() on c (load_case) in host memory with the caller's scratch: used for the CUDA loop
// run on a host backend in the CPU tests, and for scratch at chosen addresses.
template <typename T, typename Forward, typename Backward>
VariantResult run_case_parts(const LstmCase& c, const RunBuffers& buffers,
                             const std::vector<BackwardPart>& parts, Forward&& forward,
                             Backward&& backward, const std::vector<double>& dparams_before = {},
                             bool data_sees_dparams = false) {
    LstmProblem<T> p(c.in.config, c.in.seq_len, c.in.batch);
    load_case(p, c);
    p.use_scratch(buffers);
    return run_problem<T>(p, parts, std::forward<Forward>(forward),
                          std::forward<Backward>(backward), dparams_before, data_sees_dparams);
}

// Training forward of `variant` in precision T on `c`, then one backward call per entry of
// `parts` (see run_problem), in the variant's own memory space (a cuda variant runs on device
// buffers, on a context of its own) with a workspace and reserve of the sizes it asks for.
// `path` is one of variant.paths(); empty: the variant's default. `precision`: what the products
// compute in.
template <typename T>
VariantResult run_variant_parts(const Variant& variant, const LstmCase& c,
                                const std::vector<BackwardPart>& parts,
                                const std::vector<double>& dparams_before = {},
                                bool data_sees_dparams = false, const std::string& path = {},
                                Precision precision = Precision::full) {
    const DeviceContext context(variant.device());
    LstmProblem<T> p(c.in.config, c.in.seq_len, c.in.batch, variant.device(), context.get());
    // Made first, so that a malformed config, T or N is refused by the variant's own checks.
    const std::unique_ptr<Plan> plan = variant.make_plan(PlanRequest{
        c.in.config, dtype_of<T>(), c.in.seq_len, c.in.batch, path, context.get(), precision});
    p.allocate_scratch(*plan);
    load_case(p, c);
    return run_plan_on(*plan, p, parts, dparams_before, data_sees_dparams);
}

// Runs training forward then one whole backward (BackwardPart::all) of `variant` in precision T
// on `path` (empty: the default). dparams starts as `dparams_before` (to observe accumulation) or
// zeros.
template <typename T>
VariantResult run_variant(const Variant& variant, const LstmCase& c,
                          const std::vector<double>& dparams_before = {},
                          const std::string& path = {}) {
    return run_variant_parts<T>(variant, c, {BackwardPart::all}, dparams_before, false, path);
}

// Compares `got` with the reference under lstm_rtol(); `label` prefixes the verdict. Returns why
// it disagrees (the worst element) or std::nullopt.
template <typename T>
std::optional<std::string> check_result(const VariantResult& got, const LstmCase& c,
                                        const LstmOutputs& want, const LstmInputGrads& want_grads,
                                        const std::string& label) {
    const DType dt = dtype_of<T>();
    const double fwd = lstm_rtol(dt, c.in.config, c.in.seq_len, Pass::forward);
    const double bwd = lstm_rtol(dt, c.in.config, c.in.seq_len, Pass::backward);
    const std::optional<std::string> verdicts[] = {
        check_close("y", got.y, want.y, fwd),
        check_close("hn", got.hn, want.hn, fwd),
        check_close("cn", got.cn, want.cn, fwd),
        check_close("dx", got.dx, want_grads.dx, bwd),
        check_close("dh0", got.dh0, want_grads.dh0, bwd),
        check_close("dc0", got.dc0, want_grads.dc0, bwd),
        check_close("dparams", got.dparams, want_grads.dparams, bwd),
    };
    for (const auto& why : verdicts)
        if (why) return label + *why;
    return std::nullopt;
}

// What a Precision::bf16 run is judged by (docs/precision.md): the oracle that rounds where the
// library does, with the count of near ties it met, and the unrounded problem.
struct Bf16Oracles {
    LstmOutputs model, unrounded;
    LstmInputGrads model_grads, unrounded_grads;
    int64_t near_ties = 0;
};

inline Bf16Oracles bf16_oracles(const LstmCase& c, const CellFunctions& cell) {
    Bf16Oracles o;
    RoundingReport report;
    o.model = lstm_forward(c.in, cell, Precision::bf16);
    o.model_grads = lstm_backward(c.in, c.out_grads, cell, Precision::bf16, &report);
    o.unrounded = lstm_forward(c.in, cell);
    o.unrounded_grads = lstm_backward(c.in, c.out_grads, cell);
    o.near_ties = report.near_ties;
    return o;
}

// A bf16 run `got` of c: under the fp32 rule against the model where it met no near tie; against
// the unrounded problem within bf16_rtol (norm-wise beyond T = 1, element-wise at T = 1); and,
// where the model met near ties and `model_share` is positive, within that share of the distance
// the rounding moves the result (per tensor, norm-wise). At a near tie the library may round the
// other way and the difference travels on: in small problems (H up to about 128, one or two
// layers) a few tenths of the rounding's effect, so a path that skips a rounding point, which
// lies about halfway or beyond, still shows; in wide, deep stacks the differences add up to about
// half of it (Braun's 4x320 stack: 0.54 for dx), and only the other two checks apply. Returns why
// it disagrees (the first tensor that does), `label` first, or std::nullopt.
// A path that does not round at the library's points (Variant::rounds_at_library_points: a
// vendor's) is held to the bound alone: pass `follows_model` false.
inline std::optional<std::string> check_bf16_result(const VariantResult& got, const LstmCase& c,
                                                    const Bf16Oracles& o, const std::string& label,
                                                    double model_share = 0,
                                                    bool follows_model = true) {
    if (!follows_model) model_share = 0;
    if (o.near_ties == 0 && follows_model) {
        if (auto why = check_result<float>(got, c, o.model, o.model_grads, label + "model: "))
            return why;
    }
    const double rtol = bf16_rtol(c.in.config, c.in.seq_len);
    struct Tensor {
        const char* name;
        const std::vector<double>*got, *model, *unrounded;
    };
    const Tensor tensors[] = {
        {"y", &got.y, &o.model.y, &o.unrounded.y},
        {"hn", &got.hn, &o.model.hn, &o.unrounded.hn},
        {"cn", &got.cn, &o.model.cn, &o.unrounded.cn},
        {"dx", &got.dx, &o.model_grads.dx, &o.unrounded_grads.dx},
        {"dh0", &got.dh0, &o.model_grads.dh0, &o.unrounded_grads.dh0},
        {"dc0", &got.dc0, &o.model_grads.dc0, &o.unrounded_grads.dc0},
        {"dparams", &got.dparams, &o.model_grads.dparams, &o.unrounded_grads.dparams},
    };
    std::ostringstream why;
    why.precision(4);
    for (const Tensor& t : tensors) {
        if (o.near_ties != 0 && model_share > 0) {
            const double off = relative_norm_error(*t.got, *t.model);
            const double effect = relative_norm_error(*t.model, *t.unrounded);
            if (!(off <= model_share * effect)) {
                why << label << t.name << ": ||got - model|| = " << off << " of ||model||, beyond "
                    << model_share << " of the rounding's effect " << effect << " (" << o.near_ties
                    << " near ties)";
                return why.str();
            }
        }
        if (c.in.seq_len == 1) {
            if (auto bad = check_close(t.name, *t.got, *t.unrounded, rtol))
                return label + "against the unrounded problem, " + *bad;
            continue;
        }
        const double err = relative_norm_error(*t.got, *t.unrounded);
        if (!(err <= rtol)) {
            why << label << t.name << ": ||got - unrounded|| = " << err
                << " of ||unrounded||, beyond bf16_rtol " << rtol;
            return why.str();
        }
    }
    return std::nullopt;
}

// Runs `variant` in precision T on `c` (training forward, then backward) and compares y, hn, cn,
// dx, dh0, dc0 and dparams with the reference under lstm_rtol(). Returns why it disagrees (the
// worst element) or std::nullopt; at Precision::bf16 (T float), check_bf16_result's verdict.
template <typename T>
std::optional<std::string> check_variant(const Variant& variant, const LstmCase& c,
                                         const std::string& path = {},
                                         Precision precision = Precision::full) {
    const VariantResult got =
        run_variant_parts<T>(variant, c, {BackwardPart::all}, {}, false, path, precision);
    if (precision == Precision::bf16)
        return check_bf16_result(got, c, bf16_oracles(c, variant.cell()), "", 0,
                                 variant.rounds_at_library_points(precision));
    return check_result<T>(got, c, lstm_forward(c.in, variant.cell()),
                           lstm_backward(c.in, c.out_grads, variant.cell()), "");
}

}  // namespace lstm::reference
