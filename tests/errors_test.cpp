// Bad input raises lstm::Error whose message names the argument, what was expected and what came.

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "lstm/detail/aligned_buffer.hpp"
#include "lstm/detail/fingerprint.hpp"
#include "lstm/layer.hpp"
#include "lstm/nn/model.hpp"
#include "lstm/registry.hpp"
#include "lstm/threads.hpp"
#include "test_util.hpp"

using namespace lstm;
using Catch::Contains;

namespace {

// A valid float problem on (T=4, N=3) whose fields each test corrupts one at a time.
struct Problem {
    Config config{3, 5, 2, true};
    int64_t seq_len = 4, batch = 3;
    std::vector<float> x = std::vector<float>(4 * 3 * 3, 0.5f);
    std::vector<int64_t> lengths = {4, 4, 4};  // equal: valid for every variant
    std::vector<float> params = std::vector<float>(param_count(config), 0.1f);
    std::vector<float> state = std::vector<float>(config.num_cells() * 3 * 5, 0.0f);
    std::vector<float> y = std::vector<float>(4 * 3 * 10);
    detail::AlignedBuffer workspace, reserve;

    ForwardArgs<float> args(const Variant& v) {
        ForwardArgs<float> a;
        a.x = TensorView<const float>(x.data(), {seq_len, batch, 3});
        a.lengths = Span<const int64_t>(lengths);
        a.params = TensorView<const float>(params.data(), {int64_t(params.size())});
        a.y = TensorView<float>(y.data(), {seq_len, batch, 10});
        a.workspace_size = v.workspace_bytes(config, DType::f32, seq_len, batch);
        a.workspace = workspace.reserve(a.workspace_size);
        a.reserve_size = v.reserve_bytes(config, DType::f32, seq_len, batch);
        a.reserve = reserve.reserve(a.reserve_size);
        return a;
    }
};

}  // namespace

TEST_CASE("forward rejects bad arguments with a message naming them", "[errors]") {
    for (const Variant* v : variants_on(Device::cpu)) {
        INFO("variant " << v->name());
        Problem p;
        {
            auto a = p.args(*v);
            REQUIRE_NOTHROW(v->forward(p.config, a));  // the baseline is valid
        }
        {
            auto a = p.args(*v);
            a.x = TensorView<const float>(p.x.data(), {p.seq_len, p.batch - 1, 3});
            CHECK_THROWS_WITH(v->forward(p.config, a),
                              Contains("lengths has 3 entries, expected N = 2"));
            a.lengths = {};
            CHECK_THROWS_WITH(v->forward(p.config, a),
                              Contains("y must have shape (4, 2, 10), got (4, 3, 10)"));
        }
        {
            auto a = p.args(*v);
            a.x = TensorView<const float>(p.x.data(), {p.seq_len, 9, 1});
            CHECK_THROWS_WITH(v->forward(p.config, a),
                              Contains("x.size(2) = 1 does not match config.input_size = 3"));
        }
        {
            p.lengths = {4, 0, 1};
            auto a = p.args(*v);
            CHECK_THROWS_WITH(v->forward(p.config, a), Contains("lengths[1] = 0 must be >= 1"));
        }
        {
            p.lengths = {4, 2, 120};
            auto a = p.args(*v);
            CHECK_THROWS_WITH(v->forward(p.config, a), Contains("lengths[2] = 120 exceeds T = 4"));
        }
        {
            p.lengths = {4, 2};
            auto a = p.args(*v);
            CHECK_THROWS_WITH(v->forward(p.config, a),
                              Contains("lengths has 2 entries, expected N = 3"));
            p.lengths = {4, 4, 4};
        }
        {
            auto a = p.args(*v);
            a.params = TensorView<const float>(p.params.data(), {int64_t(p.params.size()) - 1});
            CHECK_THROWS_WITH(
                v->forward(p.config, a),
                Contains("params has 1079 elements, expected param_count(config) = 1080"));
        }
        {
            auto a = p.args(*v);
            a.h0 = TensorView<const float>(p.state.data(), {2, 3, 5});
            CHECK_THROWS_WITH(v->forward(p.config, a),
                              Contains("h0 must have shape (4, 3, 5), got (2, 3, 5)"));
        }
        {
            auto a = p.args(*v);
            a.workspace_size = 8;
            CHECK_THROWS_WITH(v->forward(p.config, a), Contains("workspace needs"));
        }
        {
            Config bad = p.config;
            bad.hidden_size = 0;
            auto a = p.args(*v);
            CHECK_THROWS_WITH(v->forward(bad, a),
                              Contains("config.hidden_size must be >= 1, got 0"));
        }
    }
}

TEST_CASE("backward requires the reserve and checks gradient shapes", "[errors]") {
    for (const Variant* v : variants_on(Device::cpu)) {
        INFO("variant " << v->name());
        Problem p;
        auto f = p.args(*v);
        v->forward(p.config, f);
        std::vector<float> dy(p.y.size(), 1.0f), dparams(p.params.size() + 3);
        BackwardArgs<float> b;
        b.x = f.x;
        b.lengths = f.lengths;
        b.params = f.params;
        b.y = f.y;
        b.dy = TensorView<const float>(dy.data(), {p.seq_len, p.batch, 10});
        b.dparams = TensorView<float>(dparams.data(), {int64_t(dparams.size())});
        b.workspace = f.workspace;
        b.workspace_size = f.workspace_size;
        b.reserve = f.reserve;
        b.reserve_size = f.reserve_size;
        CHECK_THROWS_WITH(v->backward(p.config, b), Contains("dparams has 1083 elements"));
        b.dparams = TensorView<float>(dparams.data(), {int64_t(p.params.size())});
        b.reserve = nullptr;
        CHECK_THROWS_WITH(v->backward(p.config, b), Contains("reserve must be the buffer"));
        b.reserve = f.reserve;
        b.dy = TensorView<const float>(dy.data(), {p.seq_len, p.batch, 5});
        CHECK_THROWS_WITH(v->backward(p.config, b), Contains("dy must have shape (4, 3, 10)"));
    }
}

TEST_CASE("a malformed LSTM_TEAM or LSTM_FUSED_ISA is refused by every CPU variant", "[errors]") {
    // Each was read only by the fused paths that use it, so with basic, onednn or fused's Eigen
    // path a mistyped setting passed without a word. (LSTM_MAX_CPU_ISA, read once per process,
    // is checked by tool_cli_lstm_basic_bad_isa_cap.)
    const Config config{3, 4, 1, false};
    const std::vector<float> x(2 * 3, 0.5f);
    const TensorView<const float> xv(x.data(), {2, 1, 3});
    for (const Variant* v : variants_on(Device::cpu)) {
        INFO("variant " << v->name());
        Lstm layer(config, v->name());
        {
            const test::EnvScope team("LSTM_TEAM", "adaptve");
            CHECK_THROWS_WITH(layer.infer(xv),
                              "LSTM_TEAM = 'adaptve' is not one of adaptive, fixed");
        }
        {
            const test::EnvScope isa("LSTM_FUSED_ISA", "AVX2");
            CHECK_THROWS_WITH(
                layer.forward(xv),
                "LSTM_FUSED_ISA = 'AVX2' is not one of auto, avx512, avx2, neon, eigen");
        }
        CHECK(layer.infer(xv).numel() == 2 * 4);
    }
}

TEST_CASE("a child of fork() refuses calls on several threads instead of hanging", "[errors]") {
    // libgomp's thread pool does not survive fork(): a child whose parent had run a call on 2
    // threads waited forever in its first parallel region. On one thread it works.
    const int saved = num_threads();
    const Config config{4, 32, 1, true};
    const std::vector<float> x = test::random_vector<float>(8 * 4 * 4, 3);
    const TensorView<const float> xv(x.data(), {8, 4, 4});
    Lstm layer(config, "fused");
    // What the child's one-thread call must give (fused's Eigen path, which LSTM_MAX_CPU_ISA=sse4
    // leaves, sums in another order on two threads).
    set_num_threads(1);
    const TensorView<const float> y = layer.infer(xv);
    const std::vector<float> want(y.data(), y.data() + y.numel());
    set_num_threads(2);
    layer.infer(xv);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        alarm(60);  // a hang ends the child, and the check below fails
        int code = 0;
        try {
            layer.infer(xv);
            code = 3;  // ran (or would have hung) instead of refusing
        } catch (const Unsupported& e) {
            if (std::string(e.what()).find("child of fork()") == std::string::npos) code = 4;
        }
        set_num_threads(1);
        const TensorView<const float> again = layer.infer(xv);
        if (code == 0 && std::vector<float>(again.data(), again.data() + again.numel()) != want)
            code = 5;
        _exit(code);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    INFO("child status " << status
                         << " (exit 3: not refused, 4: other message, 5: wrong numbers "
                            "on one thread)");
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    set_num_threads(saved);
}

TEST_CASE("a batch of N = 0 gives outputs without elements and adds no gradient, as PyTorch",
          "[errors]") {
    // PyTorch 1.13: nn.LSTM(3, 8, 2, bidirectional=True) on x of shape (5, 0, 3) returns y (5, 0,
    // 16) and hn, cn (4, 0, 8); a backward through them leaves every gradient 0 and gives x.grad
    // (5, 0, 3). The layer once refused N = 0 (a data loader's empty last batch).
    Config config{3, 8, 2, true};
    for (const bool batch_first : {false, true}) {
        config.batch_first = batch_first;
        for (const Variant* v : variants_on(Device::cpu)) {
            INFO("variant " << v->name() << (batch_first ? ", batch_first" : ""));
            if (v->supports(config, DType::f32)) continue;  // onednn: no batch_first
            Lstm layer(config, v->name());
            const std::vector<int64_t> x_shape =
                batch_first ? std::vector<int64_t>{0, 5, 3} : std::vector<int64_t>{5, 0, 3};
            const TensorView<const float> x(nullptr, {x_shape[0], x_shape[1], x_shape[2]});
            const TensorView<const float> y = layer.forward(x);
            CHECK(y.shape_string() == (batch_first ? "(0, 5, 16)" : "(5, 0, 16)"));
            CHECK(layer.hn().shape_string() == "(4, 0, 8)");
            CHECK(layer.cn().shape_string() == "(4, 0, 8)");
            const TensorView<const float> dy(nullptr, {y.size(0), y.size(1), 16});
            const TensorView<const float> dx = layer.backward(dy);
            CHECK(dx.shape_string() == (batch_first ? "(0, 5, 3)" : "(5, 0, 3)"));
            CHECK(layer.dh0().shape_string() == "(4, 0, 8)");
            CHECK(std::all_of(layer.gradients().begin(), layer.gradients().end(),
                              [](float g) { return g == 0.0f; }));
            // Still one backward per forward, and lengths must have N = 0 elements.
            CHECK_THROWS_WITH(layer.backward(dy), Contains("needs a training forward()"));
            const std::vector<int64_t> lengths = {5};
            CHECK_THROWS_AS(layer.forward(x, lengths), InvalidArgument);
            CHECK(layer.infer(x).numel() == 0);
        }
    }
    // A model's batch-mean loss of no sequences would be NaN, and the step would still move
    // every weight by decay: refused there, by name.
    nn::ModelConfig mc;
    mc.lstm = Config{3, 4, 1, false};
    mc.classes = 3;
    nn::SequenceModel<float> model(mc, "basic", Device::cpu, 1);
    CHECK_THROWS_WITH(model.train_step(TensorView<const float>(nullptr, {5, 0, 3}), {}, {}),
                      "SequenceModel: x has N = 0 sequences (shape (5, 0, 3)); a loss needs at "
                      "least one");
}

TEST_CASE("SequenceModel refuses an unbatched x by name, with every head", "[errors]") {
    // Lstm takes one (T, I) sequence; the heads read y as (T, N, F), so such an x reached them
    // as H sequences without features: a crash (ce_final_state) or errors about internal tensors.
    const std::vector<float> x(6 * 3, 0.25f);
    const std::vector<int64_t> targets = {1};
    const std::vector<int64_t> target_lengths = {1};
    for (const nn::Head head :
         {nn::Head::ce_last_step, nn::Head::ce_mean_pool, nn::Head::ce_every_frame,
          nn::Head::ce_final_state, nn::Head::ctc}) {
        INFO("head " << nn::to_string(head));
        nn::ModelConfig mc;
        mc.lstm = Config{3, 4, 1, false};
        mc.classes = 3;
        mc.head = head;
        nn::SequenceModel<float> model(mc, "basic", Device::cpu, 1);
        const Span<const int64_t> tl =
            head == nn::Head::ctc ? Span<const int64_t>(target_lengths) : Span<const int64_t>();
        const std::string want =
            "SequenceModel: x must have rank 3 (T, N, I), got shape (6, 3) (one sequence is a "
            "batch of N = 1: (T, 1, I))";
        CHECK_THROWS_WITH(model.train_step(TensorView<const float>(x.data(), {6, 3}), {},
                                           Span<const int64_t>(targets), tl),
                          want);
        CHECK_THROWS_WITH(model.evaluate(TensorView<const float>(x.data(), {6, 3}), {},
                                         Span<const int64_t>(targets), tl),
                          want);
    }
}

TEST_CASE("sizes below 1 or beyond 64 bits are refused by name on every CPU variant", "[errors]") {
    // oneDNN divided by N = 0 inside its primitive descriptors (SIGFPE), a negative T came back
    // as an out-of-memory error, and the sizing queries wrapped to huge or tiny byte counts.
    const Config config{3, 5, 1, false};
    const std::vector<float> x(12, 0.5f);
    for (const Variant* v : variants_on(Device::cpu)) {
        INFO("variant " << v->name());
        Lstm layer(config, v->name());
        CHECK_THROWS_WITH(layer.infer(TensorView<const float>(x.data(), {0, 2, 3})),
                          Contains("x: T (x.size(0)) must be >= 1, got 0"));
        CHECK_THROWS_WITH(v->workspace_bytes(config, DType::f32, 4, 0),
                          Contains("workspace_bytes: batch (N) must be >= 1, got 0"));
        CHECK_THROWS_WITH(v->reserve_bytes(config, DType::f32, -1, 2),
                          Contains("reserve_bytes: seq_len (T) must be >= 1, got -1"));
        CHECK_THROWS_AS(v->reserve_bytes(config, DType::f32, int64_t(1) << 40, int64_t(1) << 30),
                        OutOfMemory);
        Config empty = config;
        empty.input_size = 0;
        CHECK_THROWS_WITH(v->workspace_bytes(empty, DType::f32, 4, 2),
                          Contains("config.input_size must be >= 1, got 0"));
    }
    CHECK_THROWS_WITH(TensorView<const float>(x.data(), {-1, 2, 3}),
                      Contains("TensorView: sizes must be >= 0, got shape (-1, 2, 3)"));
    CHECK_THROWS_WITH(TensorView<const float>(x.data(), {int64_t(1) << 32, int64_t(1) << 32, 2}),
                      Contains("has more than 2^63 elements"));
    // A parameter count past int64 once wrapped to a layer of 0 parameters.
    Config huge{int64_t(3) << 30, int64_t(1) << 30};
    huge.bias = false;
    CHECK_THROWS_WITH(Lstm(huge, "basic"), Contains("has more than 2^48 parameters"));
    huge = Config{3, 5, int64_t(1) << 62, false};
    CHECK_THROWS_WITH(Lstm(huge, "basic"), Contains("has more than 2^48 parameters"));
    // Within 2^48 parameters but far beyond memory: refused before anything is allocated.
    CHECK_THROWS_AS(Lstm(Config{1, 1, int64_t(1) << 40, false}, "basic"), OutOfMemory);
}

TEST_CASE("the registry and the layer report unknown names and misuse", "[errors]") {
    CHECK_THROWS_WITH(find_variant("nope", Device::cpu),
                      Contains("variant 'nope' on cpu is not built into this binary"));
    Lstm layer(Config{3, 5, 1, false}, "basic");
    std::vector<float> dy(2 * 1 * 5, 1.0f);
    CHECK_THROWS_WITH(layer.backward(TensorView<const float>(dy.data(), {2, 1, 5})),
                      Contains("needs a training forward() since the last backward()"));
    // One backward per training forward (PyTorch refuses a second backward through a graph):
    // basic and fused overwrite the forward's activations with gate gradients, and a second
    // backward once returned wrong gradients without an error.
    for (const Variant* v : variants_on(Device::cpu)) {
        INFO("variant " << v->name());
        Lstm twice(Config{3, 5, 1, true}, v->name());
        const std::vector<float> x(4 * 2 * 3, 0.5f), dy2(4 * 2 * 10, 1.0f);
        const TensorView<const float> xv(x.data(), {4, 2, 3}), dyv(dy2.data(), {4, 2, 10});
        twice.forward(xv);
        twice.backward(dyv);
        CHECK_THROWS_WITH(twice.backward(dyv), Contains("a backward() that already used this"));
        twice.forward(xv);
        CHECK_NOTHROW(twice.backward(dyv));
        // New weights between forward and backward (a checkpoint loaded) would mix the old
        // activations with the new weights, as PyTorch refuses after an in-place change.
        std::vector<float> weights(static_cast<size_t>(param_count(twice.config())), 0.25f);
        twice.forward(xv);
        twice.load_parameters(Span<const float>(weights));
        CHECK_THROWS_WITH(twice.backward(dyv), Contains("followed by load_parameters()"));
        twice.forward(xv);
        twice.reset_parameters(7);
        CHECK_THROWS_WITH(twice.backward(dyv), Contains("or reset_parameters()"));
    }
    // nn.LSTM's own limits on its options, and a variant that lacks one says so by kind.
    Config projected{3, 5, 1, false};
    projected.proj_size = 5;
    CHECK_THROWS_WITH(Lstm(projected, "basic"),
                      Contains("config.proj_size must be smaller than hidden_size = 5, got 5"));
    projected.proj_size = 2;
    CHECK_NOTHROW(Lstm(projected, "basic"));
#if LSTM_WITH_ONEDNN
    CHECK_THROWS_AS(LstmT<double>(projected, "onednn"), Unsupported);
    CHECK_THROWS_WITH(LstmT<double>(projected, "onednn"),
                      Contains("variant 'onednn' (cpu) cannot run this config in float64"));
#endif
    Config dropped{3, 5, 2, false};
    dropped.dropout = 1.5;
    CHECK_THROWS_WITH(Lstm(dropped, "basic"),
                      Contains("config.dropout must be a probability in [0, 1], got 1.5"));
    // A raw variant call is time-major and dropout-free: the layer-level options are refused.
    dropped.dropout = 0.5;
    CHECK_THROWS_WITH(find_variant("basic", Device::cpu).require(dropped, DType::f32, false),
                      Contains("lstm::Lstm applies it between layers"));
    Config batch_major{3, 5, 1, false};
    batch_major.batch_first = true;
    CHECK_THROWS_WITH(find_variant("basic", Device::cpu).require(batch_major, DType::f32, false),
                      Contains("config.batch_first: a Variant call is time-major"));
    // The layer keeps views of x, h0, c0 until backward: a changed (or freed and reused) buffer
    // is caught there instead of silently giving gradients of other data.
    {
        Lstm kept(Config{3, 5, 1, false}, "basic");
        std::vector<float> xs(2 * 4 * 3, 0.25f), dys(2 * 4 * 5, 1.0f);
        kept.forward(TensorView<const float>(xs.data(), {2, 4, 3}));
        xs[7] = 0.5f;
        CHECK_THROWS_WITH(kept.backward(TensorView<const float>(dys.data(), {2, 4, 5})),
                          Contains("x, h0 or c0 changed since forward()"));
        xs[7] = 0.25f;  // restored: backward runs
        CHECK_NOTHROW(kept.backward(TensorView<const float>(dys.data(), {2, 4, 5})));
    }
    // batch_first names the caller's layout in a shape error.
    Lstm bf(batch_major, "basic");
    std::vector<float> x(2 * 4 * 3, 0.5f);
    CHECK_THROWS_WITH(bf.forward(TensorView<const float>(x.data(), {2, 4, 2})),
                      Contains("x must have shape (2, 4, 3), got (2, 4, 2)"));
}

// The check above rests on the fingerprint: it must change when any one byte does, whichever of
// its interleaved chains (or the tail after them) reads that byte, and when two words trade places
// between chains.
TEST_CASE("the inputs' fingerprint changes with any byte and with swapped words", "[errors]") {
    // 75 bytes: two rounds of the four 8-byte chains, one word more, and a 3-byte tail.
    std::vector<unsigned char> bytes(75);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 37 + 11);
    const uint64_t base = detail::fingerprint(bytes.data(), bytes.size());
    std::vector<size_t> unnoticed;
    for (size_t i = 0; i < bytes.size(); ++i)
        for (int bit = 0; bit < 8; ++bit) {
            bytes[i] ^= static_cast<unsigned char>(1 << bit);
            if (detail::fingerprint(bytes.data(), bytes.size()) == base) unnoticed.push_back(i);
            bytes[i] ^= static_cast<unsigned char>(1 << bit);
        }
    std::string where;
    for (size_t k = 0; k < unnoticed.size() && k < 8; ++k)
        where += " " + std::to_string(unnoticed[k]);
    INFO(unnoticed.size() << " one-bit changes went unnoticed, at byte offsets" << where);
    CHECK(unnoticed.empty());
    std::swap_ranges(bytes.begin(), bytes.begin() + 8, bytes.begin() + 8);
    CHECK(detail::fingerprint(bytes.data(), bytes.size()) != base);
    // Length is part of it: a prefix is not the whole.
    std::swap_ranges(bytes.begin(), bytes.begin() + 8, bytes.begin() + 8);
    CHECK(detail::fingerprint(bytes.data(), bytes.size() - 1) != base);
}

TEST_CASE("each error says its kind, and each kind is caught by its own class", "[errors]") {
    // Invalid argument: a malformed call.
    Problem p;
    const Variant& basic = find_variant("basic", Device::cpu);
    auto a = p.args(basic);
    a.lengths = {};
    a.x = TensorView<const float>(p.x.data(), {p.seq_len, p.batch - 1, 3});
    CHECK_THROWS_AS(basic.forward(p.config, a), InvalidArgument);
    try {
        basic.forward(p.config, a);
    } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::invalid_argument);
        CHECK(std::string(to_string(e.kind())) == "invalid argument");
    }
    // Unsupported: a valid call the variant refuses (per-sequence lengths, where a variant cannot
    // take them), or a device this build lacks.
    bool saw_unsupported = false;
    for (const Variant* v : variants_on(Device::cpu)) {
        if (!v->supports_variable_lengths()) continue;
        INFO("variant " << v->name());
        Problem q;
        q.lengths = {4, 2, 3};
        auto b = q.args(*v);
        CHECK_THROWS_AS(v->forward(q.config, b), Unsupported);
        saw_unsupported = true;
    }
#if !LSTM_WITH_CUDA
    CHECK_THROWS_AS(Lstm(Config{3, 5, 1, false}, "basic", Device::cuda), Unsupported);
    saw_unsupported = true;
#endif
    if (!saw_unsupported) WARN("no refusal to provoke in this build (CUDA without oneDNN)");
    // Out of memory: a host buffer no machine can give, with its size in the message.
    detail::AlignedBuffer huge;
    const size_t bytes = size_t{1} << 62;
    CHECK_THROWS_AS(huge.reserve(bytes), OutOfMemory);
    CHECK_THROWS_WITH(huge.reserve(bytes),
                      Contains("host buffer: needs 4.00 EiB (4611686018427387904 bytes)"));
    try {
        huge.reserve(bytes);
    } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::out_of_memory);
    }
}
