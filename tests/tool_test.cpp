// lstm_tool run in-process (tools/lstm_tool/tool.hpp): PyTorch fixtures through every CPU
// variant match PyTorch's outputs and gradients, the file contract (which outputs appear when),
// and exit codes with their messages. tests/tool_tests.cmake checks the built binary as well.

#include "tools/lstm_tool/tool.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/simd.hpp"
#include "lstm/host_info.hpp"
#include "lstm/io/safetensors.hpp"
#include "lstm/io/state_dict.hpp"
#include "lstm/registry.hpp"
#include "test_data.hpp"
#include "test_util.hpp"
#include "tolerance.hpp"

using namespace lstm;
using namespace lstm::io;

// The exit code of a failing run and a part of its message. A macro, not a function, so that a
// failure names the line of its case.
#define LSTM_CHECK_TOOL_ERROR(run_expr, code, message)       \
    do {                                                     \
        const ToolRun lstm_run_ = (run_expr);                \
        CHECK(lstm_run_.rc == (code));                       \
        CHECK_THAT(lstm_run_.err, Catch::Contains(message)); \
    } while (0)

namespace {

using lstm::test::data_path;

// A scratch folder of this process, removed at the end of the test case.
struct Scratch {
    std::filesystem::path dir;
    Scratch() {
        dir = std::filesystem::temp_directory_path() /
              ("lstm_tool_test_" + std::to_string(::getpid()));
        std::filesystem::create_directories(dir);
    }
    ~Scratch() {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
    }
    std::string operator()(const std::string& name) const { return (dir / name).string(); }
};

struct ToolRun {
    int rc;
    std::string out, err;
};

ToolRun invoke(const std::vector<std::string>& args) {
    std::ostringstream out, err;
    const int rc = lstm::tool::run_tool(args, out, err);
    return {rc, out.str(), err.str()};
}

// `good` without its tensor `drop` ("" for none) and with `add` (null for none), written to
// `path`: inputs that break one rule each.
std::string write_edited(const TensorFile& good, const std::string& drop, const Tensor* add,
                         const std::string& path) {
    TensorFile f;
    for (const Tensor& t : good.tensors())
        if (t.name != drop) f.add(t);
    if (add) f.add(*add);
    write_safetensors(path, f);
    return path;
}

// The fixture's inputs with every floating tensor widened to F64 (exact), for the double path.
TensorFile widened(const TensorFile& in) {
    TensorFile out;
    for (const Tensor& t : in.tensors()) {
        if (t.dtype == ScalarType::f32)
            out.add(Tensor::from(t.name, t.shape, t.floats_as_double()));
        else
            out.add(t);
    }
    return out;
}

struct Fixture {
    const char* name;
    bool with_state;
    bool variable_lengths;
};
const Fixture kFixtures[] = {{"lstm_uni1", true, false},
                             {"lstm_bi2_full", true, false},
                             {"lstm_bi1_varlen", false, true},
                             {"lstm_uni2_varlen", true, true},
                             {"lstm_bi2_varlen", true, true},
                             // nn.LSTM(proj_size=2) and nn.LSTM(bias=False); a variant without
                             // projections refuses them through the tool, by name.
                             {"lstm_proj_bi2_varlen", true, true},
                             {"lstm_nobias_uni2", true, false},
                             {"lstm_proj_nobias_uni1", false, true}};

// Compares every tensor of `expected` with the same-named tensor of `got`, forward outputs with
// the forward tolerance and gradients (dx, dh0, dc0, grad.*) with the backward one.
void compare_all(const TensorFile& got, const TensorFile& expected, double forward_rtol,
                 double backward_rtol) {
    for (const Tensor& want : expected.tensors()) {
        INFO("tensor " << want.name);
        const Tensor* have = got.find(want.name);
        REQUIRE(have != nullptr);
        CHECK(have->shape == want.shape);
        CHECK(have->dtype == want.dtype);
        const bool forward = want.name == "y" || want.name == "hn" || want.name == "cn";
        LSTM_CHECK_CLOSE(test::compare_scaled(want.name, have->floats_as_double(),
                                              want.floats_as_double(),
                                              forward ? forward_rtol : backward_rtol));
    }
}

}  // namespace

TEST_CASE("lstm_tool lstm matches PyTorch on every fixture for every CPU variant", "[tool]") {
    Scratch scratch;
    for (const Variant* v : variants_on(Device::cpu)) {
        for (const Fixture& fx : kFixtures) {
            INFO("variant " << v->name() << ", fixture " << fx.name);
            const std::string base = data_path(fx.name);
            const TensorFile inputs = read_safetensors(base + ".inputs.safetensors");
            const Config config = infer_lstm_config(read_safetensors(base + ".params.safetensors"));
            const int64_t seq_len = inputs.at("x").shape[0];
            if (fx.variable_lengths && v->supports_variable_lengths()) {
                // The variant says no through the tool, with its own reason.
                const ToolRun run =
                    invoke({"lstm", "--params", base + ".params.safetensors", "--inputs",
                            base + ".inputs.safetensors", "--out", scratch("refused.safetensors"),
                            "--variant", v->name()});
                CHECK(run.rc == 1);
                // The config's own refusal (a projection, say) comes before the lengths'.
                const auto why = v->supports(config, DType::f32);
                CHECK_THAT(run.err, Catch::Contains(why ? *why : *v->supports_variable_lengths()));
                continue;
            }

            // float32: PyTorch's float32 results within the project's fp32 tolerance rule
            // (about 1e-6 relative forward, a few 1e-6 backward for these sizes).
            if (!v->supports(config, DType::f32)) {
                const std::string out = scratch(std::string(fx.name) + ".f32.safetensors");
                const ToolRun run = invoke({"lstm", "--params", base + ".params.safetensors",
                                            "--inputs", base + ".inputs.safetensors", "--out", out,
                                            "--variant", v->name(), "--backward"});
                INFO(run.err);
                REQUIRE(run.rc == 0);
                const TensorFile got = read_safetensors(out);
                CHECK(got.metadata.at("variant") == v->name());
                // Both sides carry fp32 rounding, hence twice the one-sided rule.
                compare_all(got, read_safetensors(base + ".expected.safetensors"),
                            2 * test::lstm_rtol(DType::f32, config, seq_len, test::Pass::forward),
                            2 * test::lstm_rtol(DType::f32, config, seq_len, test::Pass::backward));
                CHECK(got.contains("dh0") == fx.with_state);
                CHECK(got.contains("dc0") == fx.with_state);
                CHECK(got.size() == read_safetensors(base + ".expected.safetensors").size());
            }

            // float64 inputs compute in double: PyTorch's float64 results to ~1e-12.
            const std::string in64 = scratch(std::string(fx.name) + ".inputs64.safetensors");
            write_safetensors(in64, widened(inputs));
            const std::string out64 = scratch(std::string(fx.name) + ".f64.safetensors");
            const ToolRun run =
                invoke({"lstm", "--params", base + ".params.safetensors", "--inputs", in64, "--out",
                        out64, "--variant", v->name(), "--backward"});
            if (auto why = v->supports(config, DType::f64)) {
                CHECK(run.rc == 1);
                CHECK_THAT(run.err, Catch::Contains("cannot run this config in float64"));
                continue;
            }
            INFO(run.err);
            REQUIRE(run.rc == 0);
            const TensorFile got64 = read_safetensors(out64);
            CHECK(got64.at("y").dtype == ScalarType::f64);
            compare_all(got64, read_safetensors(base + ".expected64.safetensors"), 1e-12, 1e-12);
        }
    }
}

TEST_CASE("lstm_tool lstm forward only writes y, hn, cn; gradients accumulate from zero",
          "[tool]") {
    Scratch scratch;
    const std::string base = data_path("lstm_uni2_varlen");
    const std::string out = scratch("forward.safetensors");
    const ToolRun run = invoke({"lstm", "--params", base + ".params.safetensors", "--inputs",
                                base + ".inputs.safetensors", "--out=" + out});
    INFO(run.err);
    REQUIRE(run.rc == 0);
    const TensorFile got = read_safetensors(out);
    std::vector<std::string> names;
    for (const Tensor& t : got.tensors()) names.push_back(t.name);
    CHECK(names == std::vector<std::string>{"y", "hn", "cn"});
    CHECK(got.metadata.at("num_layers") == "2");
    // The forward results equal the backward run's, and padded outputs are exactly zero.
    const TensorFile expected = read_safetensors(base + ".expected.safetensors");
    const std::vector<float> y = got.at("y").values<float>();
    const std::vector<int64_t> lengths =
        read_safetensors(base + ".inputs.safetensors").at("lengths").integers();
    const int64_t batch = 3, width = 3;
    for (int64_t t = 0; t < 5; ++t)
        for (int64_t n = 0; n < batch; ++n)
            for (int64_t k = 0; k < width; ++k)
                if (t >= lengths[n]) CHECK(y[(t * batch + n) * width + k] == 0.0f);
    const Config config{2, 3, 2, false};
    LSTM_CHECK_CLOSE(test::compare_scaled(
        "y", got.at("y").floats_as_double(), expected.at("y").floats_as_double(),
        2 * test::lstm_rtol(DType::f32, config, 5, test::Pass::forward)));

    // The exported gradients load back as a state_dict under the prefix "grad.".
    const std::string back = scratch("backward.safetensors");
    REQUIRE(invoke({"lstm", "--params", base + ".params.safetensors", "--inputs",
                    base + ".inputs.safetensors", "--out", back, "--backward"})
                .rc == 0);
    CHECK(infer_lstm_config(read_safetensors(back), "grad.") == config);
}

TEST_CASE("lstm_tool lstm takes a state_dict inside a bigger model with --prefix", "[tool]") {
    Scratch scratch;
    const std::string base = data_path("lstm_uni1");
    const TensorFile bare = read_safetensors(base + ".params.safetensors");
    TensorFile model;
    for (const Tensor& t : bare.tensors()) {
        Tensor copy = t;
        copy.name = "encoder.lstm." + t.name;
        model.add(copy);
    }
    model.add(Tensor::from("decoder.weight", {2, 4}, std::vector<float>(8, 0.5f)));
    const std::string params = scratch("model.safetensors");
    write_safetensors(params, model);
    const std::string out = scratch("out.safetensors");
    const ToolRun run = invoke({"lstm", "--params", params, "--prefix", "encoder.lstm.", "--inputs",
                                base + ".inputs.safetensors", "--out", out});
    INFO(run.err);
    REQUIRE(run.rc == 0);
    const ToolRun plain = invoke({"lstm", "--params", base + ".params.safetensors", "--inputs",
                                  base + ".inputs.safetensors", "--out", scratch("plain.st")});
    REQUIRE(plain.rc == 0);
    CHECK(read_safetensors(out).at("y") == read_safetensors(scratch("plain.st")).at("y"));

    const ToolRun info = invoke({"info", params});
    CHECK(info.rc == 0);
    CHECK_THAT(info.out, Catch::Contains("nn.LSTM state_dict under prefix 'encoder.lstm.': "
                                         "input_size 3, hidden_size 4, num_layers 1, "
                                         "unidirectional (144 parameters)"));
    // Each tensor's bytes, as info --help promises: 2 x 4 floats.
    CHECK_THAT(info.out, Catch::Contains("decoder.weight             F32  (2, 4)   32 bytes\n"));
}

TEST_CASE("lstm_tool reports usage errors with exit code 2 and failures with 1", "[tool]") {
    using Catch::Contains;
    Scratch scratch;
    const std::string base = data_path("lstm_uni1");
    const std::string params = base + ".params.safetensors", inputs = base + ".inputs.safetensors";
    const std::string out = scratch("o.safetensors");

    ToolRun r = invoke({});
    CHECK(r.rc == 2);
    r = invoke({"--help"});
    CHECK(r.rc == 0);
    CHECK_THAT(r.out, Contains("commands:"));
    for (const char* command : {"lstm", "ctc", "info"}) {
        r = invoke({command, "--help"});
        CHECK(r.rc == 0);
        CHECK_THAT(r.out, Contains(std::string("usage: lstm_tool ") + command));
    }
    LSTM_CHECK_TOOL_ERROR(invoke({"train"}), 2, "unknown command 'train'");
    r = invoke({"lstm", "--params", params, "--inputs", inputs, "--out", out, "--verbose"});
    CHECK(r.rc == 2);
    CHECK_THAT(r.err, Contains("unknown option '--verbose'"));
    CHECK_THAT(r.err, Contains("see lstm_tool lstm --help"));
    LSTM_CHECK_TOOL_ERROR(invoke({"lstm", "--params", params, "--inputs", inputs}), 2,
                          "missing required option --out");
    LSTM_CHECK_TOOL_ERROR(invoke({"lstm", "--params", params, "--inputs", inputs, "--out"}), 2,
                          "option --out needs a value");
    // The next option is not a value: it would have written a file named "--backward".
    LSTM_CHECK_TOOL_ERROR(
        invoke({"lstm", "--params", params, "--inputs", inputs, "--out", "--backward"}), 2,
        "option --out needs a value, got the option '--backward' (a value that starts with '--' "
        "goes as --out=VALUE)");
    LSTM_CHECK_TOOL_ERROR(invoke({"lstm", "--help=yes"}), 2,
                          "option --help takes no value, got '--help=yes'");
    LSTM_CHECK_TOOL_ERROR(invoke({"info", "--", params}), 2,
                          "unknown option '--' (there is no end-of-options marker");
    LSTM_CHECK_TOOL_ERROR(
        invoke({"lstm", "--params", params, "--params", params, "--inputs", inputs, "--out", out}),
        2, "--params is given more than once");
    LSTM_CHECK_TOOL_ERROR(invoke({"lstm", "--params", scratch("missing.safetensors"), "--inputs",
                                  inputs, "--out", out}),
                          2,
                          "--params: file '" + scratch("missing.safetensors") + "' does not exist");
    LSTM_CHECK_TOOL_ERROR(
        invoke({"lstm", "--params", params, "--inputs", scratch.dir.string(), "--out", out}), 2,
        "is not a regular file");
    r = invoke({"lstm", "--params", params, "--inputs", inputs, "--out", out, "--device", "gpu"});
    CHECK(r.rc == 2);
    LSTM_CHECK_TOOL_ERROR(
        invoke({"lstm", "--params", params, "--inputs", inputs, "--out", out, "--backward=yes"}), 2,
        "--backward takes no value");
    r = invoke({"info", params, inputs});
    CHECK(r.rc == 2);
    CHECK_THAT(r.err, Contains("info takes at most one FILE, got 2"));

    // Failures of the work itself: exit code 1 and a message naming the problem.
    LSTM_CHECK_TOOL_ERROR(
        invoke({"lstm", "--params", params, "--inputs", inputs, "--out", out, "--variant", "nope"}),
        1, "variant 'nope' on cpu is not built into this binary");
    LSTM_CHECK_TOOL_ERROR(invoke({"lstm", "--params", inputs, "--inputs", inputs, "--out", out}), 1,
                          "not an nn.LSTM state_dict");
    r = invoke({"lstm", "--params", params, "--inputs", inputs, "--out", out, "--device", "cuda"});
    if (variants_on(Device::cuda).empty()) {
        CHECK(r.rc == 1);
        CHECK_THAT(r.err, Contains("no variant runs on cuda in this binary; known: basic (cpu)"));
    } else if (!test::gpu_visible()) {
        CHECK(r.rc == 1);
        // Prefixed with the option that asked for the device, which the bare message did not name.
        CHECK_THAT(r.err, Contains("error: --device cuda: Context: device 0 does not exist; this "
                                   "process sees 0 CUDA"));
    }

    // Inputs that do not fit the model.
    const TensorFile good = read_safetensors(inputs);
    auto with = [&](const std::string& drop, const Tensor* add) {
        const std::string path = write_edited(good, drop, add, scratch("edited.safetensors"));
        return invoke({"lstm", "--params", params, "--inputs", path, "--out", out, "--backward"});
    };
    const Tensor wide_x = Tensor::from("x", {5, 2, 4}, std::vector<float>(40, 0.0f));
    LSTM_CHECK_TOOL_ERROR(with("x", &wide_x), 1,
                          "tensor 'x' has input size 4 (shape (5, 2, 4)) but the LSTM in");
    LSTM_CHECK_TOOL_ERROR(with("x", nullptr), 1, "no tensor named 'x'");
    const Tensor typo = Tensor::from("h_0", {1, 2, 4}, std::vector<float>(8, 0.0f));
    LSTM_CHECK_TOOL_ERROR(with("", &typo), 1, "tensors the lstm command does not read: 'h_0'");
    LSTM_CHECK_TOOL_ERROR(with("dy", nullptr), 1,
                          "--backward needs tensor 'dy' (T, N, D*S) = (5, 2, 4)");
    const Tensor bad_h0 = Tensor::from("h0", {2, 2, 4}, std::vector<float>(16, 0.0f));
    LSTM_CHECK_TOOL_ERROR(with("h0", &bad_h0), 1,
                          "tensor 'h0' must have shape (1, 2, 4) (L*D, N, S), got (2, 2, 4)");
    const Tensor f64_h0 = Tensor::from("h0", {1, 2, 4}, std::vector<double>(8, 0.0));
    LSTM_CHECK_TOOL_ERROR(with("h0", &f64_h0), 1, "tensor 'h0' has dtype F64, expected F32");
    const Tensor long_len = Tensor::from("lengths", {2}, std::vector<int64_t>{5, 6});
    LSTM_CHECK_TOOL_ERROR(with("", &long_len), 1, "lengths[1] = 6 exceeds T = 5");
    // The message names the file, as every other complaint about the inputs does.
    const Tensor negative_len = Tensor::from("lengths", {2}, std::vector<int64_t>{-1, 5});
    LSTM_CHECK_TOOL_ERROR(with("", &negative_len), 1,
                          ".safetensors: tensor 'lengths': lengths[0] = -1 must be >= 1");
    const Tensor float_len = Tensor::from("lengths", {2}, std::vector<float>{5, 5});
    LSTM_CHECK_TOOL_ERROR(with("", &float_len), 1, "expected an integer type");
    const Tensor int_x = Tensor::from("x", {5, 2, 3}, std::vector<int32_t>(30, 0));
    LSTM_CHECK_TOOL_ERROR(with("x", &int_x), 1, "tensor 'x' has dtype I32, expected F32 or F64");

    // An F64 state_dict with F32 inputs would round the parameters: refused, saying that F64
    // inputs run it in double (the message once advised only converting the file).
    const auto imported = import_lstm<double>(params);
    const std::string p64 = scratch("p64.safetensors");
    export_lstm(p64, imported.config,
                Span<const double>(imported.params.data(), imported.params.size()));
    LSTM_CHECK_TOOL_ERROR(invoke({"lstm", "--params", p64, "--inputs", inputs, "--out", out}), 1,
                          p64 +
                              ": weight_ih_l0 has dtype F64 and cannot be imported into F32 "
                              "parameters without rounding; tensor 'x' of " +
                              inputs +
                              " is F32, which runs in float: give x and the other inputs (h0, c0, "
                              "dy, dhn, dcn) as F64 to run in double, or convert the file to F32 "
                              "first");
    // And so it does: the same inputs as F64 run with those parameters.
    TensorFile inputs64;
    for (const Tensor& t : good.tensors()) {
        if (t.dtype == io::ScalarType::f32) {
            const std::vector<float> v = t.values<float>();
            inputs64.add(Tensor::from(t.name, t.shape, std::vector<double>(v.begin(), v.end())));
        } else {
            inputs64.add(t);
        }
    }
    const std::string i64 = scratch("inputs64.safetensors");
    write_safetensors(i64, inputs64);
    CHECK(invoke({"lstm", "--params", p64, "--inputs", i64, "--out", out, "--backward"}).rc == 0);

    // A malformed file names itself and its problem.
    const std::string junk = scratch("junk.safetensors");
    {
        std::ofstream f(junk, std::ios::binary);
        f << "not a safetensors file at all";
    }
    LSTM_CHECK_TOOL_ERROR(invoke({"info", junk}), 1, junk + ": header length");
}

namespace {

// Element-wise |got - want| <= rtol * (max|want| + |want|) over the finite expected values;
// infinite expected values must come out identical.
void check_ctc_close(const std::string& what, const std::vector<double>& got,
                     const std::vector<double>& want, double rtol) {
    INFO(what);
    REQUIRE(got.size() == want.size());
    std::vector<double> finite_got, finite_want;
    for (size_t k = 0; k < want.size(); ++k) {
        if (std::isfinite(want[k])) {
            finite_got.push_back(got[k]);
            finite_want.push_back(want[k]);
        } else {
            CHECK(got[k] == want[k]);
        }
    }
    LSTM_CHECK_CLOSE(test::compare_scaled(what, finite_got, finite_want, rtol));
}

}  // namespace

TEST_CASE("lstm_tool ctc matches PyTorch's ctc_loss for every reduction", "[tool]") {
    Scratch scratch;
    struct Case {
        const char* name;
        const char* blank;
    };
    for (const Case& c : {Case{"ctc_logits_padded", "0"}, Case{"ctc_logprobs_concat", "3"},
                          Case{"ctc_infeasible", "0"}}) {
        const std::string base = data_path(c.name);
        const TensorFile expected = read_safetensors(base + ".expected.safetensors");
        const std::string in64 = scratch("inputs64.safetensors");
        write_safetensors(in64, widened(read_safetensors(base + ".inputs.safetensors")));
        for (const std::string& inputs : {base + ".inputs.safetensors", in64}) {
            const bool f64 = inputs == in64;
            // float results are computed in double and rounded once; PyTorch's are float64.
            const double rtol = f64 ? 1e-11 : 1e-6;
            for (const char* reduction : {"none", "sum", "mean"}) {
                for (const bool zero_infinity : {false, true}) {
                    // The GPU's own kernel computes like the cpu (double alpha/beta): same rtol.
                    for (const char* device : {"cpu", "cuda"}) {
                        if (std::string(device) == "cuda" && !test::gpu_visible()) continue;
                        INFO(c.name << (f64 ? " F64" : " F32") << ", reduction " << reduction
                                    << (zero_infinity ? ", zero_infinity" : "") << ", " << device);
                        const std::string out = scratch("ctc.safetensors");
                        std::vector<std::string> args = {
                            "ctc",   "--inputs",    inputs,    "--out",    out,   "--blank",
                            c.blank, "--reduction", reduction, "--device", device};
                        if (zero_infinity) args.push_back("--zero-infinity");
                        const ToolRun run = invoke(args);
                        INFO(run.err);
                        REQUIRE(run.rc == 0);
                        const TensorFile got = read_safetensors(out);
                        const std::string key =
                            std::string(reduction) + (zero_infinity ? ".zero_infinity" : "");
                        const Tensor& loss = got.at("loss");
                        CHECK(loss.dtype == (f64 ? ScalarType::f64 : ScalarType::f32));
                        CHECK(loss.shape == expected.at("loss." + key).shape);
                        check_ctc_close("loss", loss.floats_as_double(),
                                        expected.at("loss." + key).floats_as_double(), rtol);
                        // No PyTorch gradient exists for an infinite loss; infeasible samples get
                        // zero gradient here either way, so it equals the zero_infinity one.
                        const Tensor* want = expected.find("grad." + key);
                        if (want == nullptr) want = &expected.at("grad." + key + ".zero_infinity");
                        CHECK(got.at("grad").shape == want->shape);
                        check_ctc_close("grad", got.at("grad").floats_as_double(),
                                        want->floats_as_double(), rtol);
                    }
                }
            }
        }
    }
}

TEST_CASE("lstm_tool ctc reports bad inputs and options", "[tool]") {
    using Catch::Contains;
    Scratch scratch;
    const std::string inputs = data_path("ctc_logits_padded.inputs.safetensors");
    const std::string out = scratch("o.safetensors");
    LSTM_CHECK_TOOL_ERROR(invoke({"ctc", "--inputs", inputs, "--out", out, "--reduction", "avg"}),
                          2, "--reduction must be none, sum or mean, got 'avg'");
    LSTM_CHECK_TOOL_ERROR(invoke({"ctc", "--inputs", inputs, "--out", out, "--blank", "1x"}), 2,
                          "--blank must be an integer, got '1x'");
    LSTM_CHECK_TOOL_ERROR(invoke({"ctc", "--inputs", inputs, "--out", out, "--blank", " 1"}), 2,
                          "--blank must be an integer, got ' 1'");
    LSTM_CHECK_TOOL_ERROR(invoke({"ctc", "--inputs", inputs, "--out", out, "--blank", "-1"}), 2,
                          "--blank must be >= 0, got -1");
    ToolRun r = invoke({"ctc", "--inputs", inputs});
    CHECK(r.rc == 2);
    LSTM_CHECK_TOOL_ERROR(invoke({"ctc", "--inputs", inputs, "--out", out, "--backend", "fast"}), 2,
                          "--backend must be own, cudnn or automatic, got 'fast'");
    // The cpu has one kernel; a backend asked for there was ignored without a word.
    LSTM_CHECK_TOOL_ERROR(invoke({"ctc", "--inputs", inputs, "--out", out, "--backend", "cudnn"}),
                          2,
                          "--backend applies only with --device cuda, got --backend cudnn "
                          "with --device cpu");
    LSTM_CHECK_TOOL_ERROR(
        invoke({"ctc", "--inputs", inputs, "--out", out, "--backend", "own", "--device", "cpu"}), 2,
        "--backend applies only with --device cuda");
    r = invoke({"ctc", "--inputs", inputs, "--out", out, "--device", "cuda"});
    if (!test::gpu_visible()) {
        CHECK(r.rc == 1);
#if LSTM_WITH_CUDA
        // Prefixed with the option that asked for the device, which the bare message did not name.
        CHECK_THAT(r.err, Contains("error: --device cuda: Context: device 0 does not exist; this "
                                   "process sees 0 CUDA"));
#else
        CHECK_THAT(r.err, Contains("has no CUDA back-end (LSTM_WITH_CUDA=0)"));
#endif
    }
    // Errors the loss itself raises come through with its message, after the file's name.
    LSTM_CHECK_TOOL_ERROR(invoke({"ctc", "--inputs", inputs, "--out", out, "--blank", "7"}), 1,
                          inputs + ": ctc_loss: blank = 7 is out of range for C = 5");

    const TensorFile good = read_safetensors(inputs);
    auto with = [&](const std::string& drop, const Tensor* add) {
        const std::string path = write_edited(good, drop, add, scratch("edited.safetensors"));
        return invoke({"ctc", "--inputs", path, "--out", out});
    };
    const Tensor log_probs =
        Tensor::from("log_probs", good.at("logits").shape, good.at("logits").values<float>());
    LSTM_CHECK_TOOL_ERROR(with("", &log_probs), 1, "give either 'logits' or 'log_probs', got both");
    LSTM_CHECK_TOOL_ERROR(with("logits", nullptr), 1, "needs a tensor 'logits' or 'log_probs'");
    LSTM_CHECK_TOOL_ERROR(with("target_lengths", nullptr), 1, "no tensor named 'target_lengths'");
    const Tensor float_targets = Tensor::from("targets", {3, 3}, std::vector<float>(9, 1.0f));
    LSTM_CHECK_TOOL_ERROR(with("targets", &float_targets), 1,
                          "tensor 'targets' has dtype F32, expected an integer type");
    const Tensor stray = Tensor::from("weights", {3}, std::vector<float>(3, 1.0f));
    LSTM_CHECK_TOOL_ERROR(with("", &stray), 1, "tensors the ctc command does not read: 'weights'");
    const Tensor long_input = Tensor::from("input_lengths", {3}, std::vector<int32_t>{8, 9, 1});
    LSTM_CHECK_TOOL_ERROR(with("input_lengths", &long_input), 1,
                          scratch("edited.safetensors") +
                              ": ctc_loss: input_lengths[1] = 9 "
                              "exceeds T = 8");
}

TEST_CASE("lstm_tool ctc takes empty batches and refuses empty classes or frames by name",
          "[tool]") {
    Scratch scratch;
    const std::string out = scratch("o.safetensors");
    auto file = [&](int64_t frames, int64_t batch, int64_t classes) {
        TensorFile f;
        f.add(
            Tensor::from("logits", {frames, batch, classes},
                         std::vector<float>(static_cast<size_t>(frames * batch * classes), 0.5f)));
        f.add(Tensor::from("targets", {batch, 2},
                           std::vector<int64_t>(static_cast<size_t>(batch * 2), 1)));
        f.add(Tensor::from("input_lengths", {batch},
                           std::vector<int64_t>(static_cast<size_t>(batch), 3)));
        f.add(Tensor::from("target_lengths", {batch},
                           std::vector<int64_t>(static_cast<size_t>(batch), 1)));
        const std::string path = scratch("empty.safetensors");
        write_safetensors(path, f);
        return path;
    };
    // An empty batch is a batch: PyTorch's mean over no samples is NaN, the sum 0, and the
    // gradient has the input's (empty) shape.
    for (const int64_t frames : {6, 0}) {
        for (const char* reduction : {"mean", "sum"}) {
            INFO("T " << frames << ", N 0, reduction " << reduction);
            const ToolRun run = invoke(
                {"ctc", "--inputs", file(frames, 0, 5), "--out", out, "--reduction", reduction});
            INFO(run.err);
            REQUIRE(run.rc == 0);
            const TensorFile got = read_safetensors(out);
            const std::vector<double> loss = got.at("loss").floats_as_double();
            REQUIRE(loss.size() == 1);
            if (std::string(reduction) == "mean")
                CHECK(std::isnan(loss[0]));
            else
                CHECK(loss[0] == 0.0);
            CHECK(got.at("grad").shape == std::vector<int64_t>{frames, 0, 5});
        }
    }
    // No classes: not even the blank. Frames missing for a sample: its input length is named.
    LSTM_CHECK_TOOL_ERROR(invoke({"ctc", "--inputs", file(6, 2, 0), "--out", out}), 1,
                          "logits must have C >= 1 classes, got shape (6, 2, 0)");
    LSTM_CHECK_TOOL_ERROR(invoke({"ctc", "--inputs", file(0, 2, 5), "--out", out}), 1,
                          "input_lengths[0] = 3 exceeds T = 0");
}

TEST_CASE("lstm_tool names the file and the tensor of a wrong dtype", "[tool]") {
    Scratch scratch;
    const std::string inputs = data_path("ctc_logits_padded.inputs.safetensors");
    const std::string out = scratch("o.safetensors");
    const TensorFile good = read_safetensors(inputs);
    for (const char* name : {"targets", "input_lengths", "target_lengths"}) {
        INFO(name);
        const std::vector<int64_t> shape = good.at(name).shape;
        const Tensor wrong = Tensor::from(
            name, shape, std::vector<double>(static_cast<size_t>(good.at(name).numel()), 1.0));
        const std::string path = write_edited(good, name, &wrong, scratch("dtype.safetensors"));
        LSTM_CHECK_TOOL_ERROR(invoke({"ctc", "--inputs", path, "--out", out}), 1,
                              path + ": tensor '" + name + "' has dtype F64, expected an integer");
    }
    const std::string params = data_path("lstm_uni1.params.safetensors");
    const TensorFile lstm_inputs = read_safetensors(data_path("lstm_uni1.inputs.safetensors"));
    const Tensor h0 =
        Tensor::from("h0", lstm_inputs.at("h0").shape,
                     std::vector<double>(static_cast<size_t>(lstm_inputs.at("h0").numel()), 0.0));
    const std::string path = write_edited(lstm_inputs, "h0", &h0, scratch("h0.safetensors"));
    LSTM_CHECK_TOOL_ERROR(invoke({"lstm", "--params", params, "--inputs", path, "--out", out}), 1,
                          path + ": tensor 'h0' has dtype F64, expected F32");
}

TEST_CASE("lstm_tool refuses by name, before allocating, work that does not fit in memory",
          "[tool]") {
    Scratch scratch;
    const std::string params = data_path("lstm_uni1.params.safetensors");  // I 3, H 4
    TensorFile inputs;
    inputs.add(Tensor::from("x", {2000, 64, 3}, std::vector<float>(2000 * 64 * 3, 0.25f)));
    const std::string path = scratch("long.safetensors");
    write_safetensors(path, inputs);
    const std::string out = scratch("o.safetensors");
    // 4 MiB holds the 1.5 MiB input file, not the outputs: y is 2000 x 64 x 4 floats, and the
    // tool holds it three times.
    lstm::set_host_memory_limit(uint64_t{4} << 20);
    const ToolRun run = invoke({"lstm", "--params", params, "--inputs", path, "--out", out});
    lstm::set_host_memory_limit(0);
    CHECK(run.rc == 1);
    CHECK_THAT(run.err, Catch::Contains("lstm_tool lstm (basic, T 2000, N 64, H 4): needs "));
    CHECK_THAT(run.err, Catch::Contains("y 5.86 MiB"));
    CHECK_THAT(run.err, Catch::Contains("the limit set with lstm::set_host_memory_limit"));
    CHECK(!std::filesystem::exists(out));
    // Within the machine's memory, the same run works.
    REQUIRE(invoke({"lstm", "--params", params, "--inputs", path, "--out", out}).rc == 0);
    CHECK(read_safetensors(out).at("y").shape == std::vector<int64_t>{2000, 64, 4});
}

TEST_CASE("lstm_tool info without a file describes the host and every variant's path", "[tool]") {
    using Catch::Contains;
    const ToolRun r = invoke({"info"});
    REQUIRE(r.rc == 0);
    CHECK(r.err.empty());
    CHECK_THAT(r.out, Contains("host:"));
    for (const HostFact& f : host_facts()) CHECK_THAT(r.out, Contains(f.key));
    CHECK_THAT(r.out, Contains(kernels::cpu::simd_target_name()));
    // Columns are padded with spaces; rows are compared with runs of spaces squeezed to one.
    std::string squeezed;
    for (char ch : r.out)
        if (ch != ' ' || squeezed.empty() || squeezed.back() != ' ') squeezed += ch;
    // One row per registered variant, from the registry: name, device, a path.
    for (const Variant* v : variants()) {
        const std::string path = variant_path(*v);
        INFO("variant " << v->name() << " (" << to_string(v->device()) << ")");
        CHECK_FALSE(path.empty());
        const std::string row = std::string(v->name()) + " " + to_string(v->device()) + " " + path;
        CHECK_THAT(squeezed, Contains("\n " + row + "\n"));
    }
    CHECK_THAT(r.out, Contains("ctc"));
}
