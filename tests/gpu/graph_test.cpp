// `fused` (cuda) runs a call eagerly the first time, captures it into a CUDA graph when the same
// call repeats and replays the graph after that (lstm/variants/cuda_common.hpp, GraphSchedule).
// Every one of those calls must give the bits of a context with graphs turned off: outputs and
// gradients, whole and split backward, inference, lengths that change between calls (eager
// again, then a capture that updates the graph in place), and calls after release_plans().

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "lstm/cuda/context.hpp"
#include "lstm/problem.hpp"
#include "lstm/registry.hpp"
#include "variant_runner.hpp"

using namespace lstm;
using namespace lstm::test;

namespace {

template <typename T>
void check_graphs(const LstmCase& c, const std::vector<int64_t>& other_lengths) {
    const Variant& fused = find_variant("fused", Device::cuda);
    cuda::Context eager_ctx, graph_ctx;
    eager_ctx.set_graphs_enabled(false);
    graph_ctx.set_graphs_enabled(true);
    // Each holds its scratch across the calls below, so that they repeat their pointers (what a
    // replay needs).
    LstmProblem<T> eager = case_problem<T>(c, Device::cuda, &eager_ctx);
    LstmProblem<T> graphed = case_problem<T>(c, Device::cuda, &graph_ctx);
    eager.allocate_scratch(fused);
    graphed.allocate_scratch(fused);
    auto train = [&](LstmProblem<T>& p, const std::vector<int64_t>& lengths, bool split) {
        p.lengths = lengths;
        return train_problem(fused, p, split);
    };
    auto infer = [&](LstmProblem<T>& p, const std::vector<int64_t>& lengths) {
        p.lengths = lengths;
        return infer_problem(fused, p);
    };
    const std::vector<int64_t>& lengths = c.in.lengths;

    for (bool split : {false, true}) {
        INFO((split ? "split backward" : "whole backward"));
        const reference::VariantResult want = train(eager, lengths, split);
        // Call 1 runs eagerly, call 2 is captured and launched, calls 3 and 4 replay.
        for (int call = 1; call <= 4; ++call) {
            INFO("training call " << call);
            check_same_bits(train(graphed, lengths, split), want, true);
        }
    }

    const reference::VariantResult want_inference = infer(eager, lengths);
    for (int call = 1; call <= 3; ++call) {
        INFO("inference call " << call);
        check_same_bits(infer(graphed, lengths), want_inference, false);
    }

    // Other lengths: eager, then captured into the same plan (graph updated in place or
    // re-instantiated), then the first lengths again (eager, then captured again).
    const reference::VariantResult want_other = train(eager, other_lengths, false);
    const reference::VariantResult want_first = train(eager, lengths, false);
    for (int call = 1; call <= 3; ++call) {
        INFO("other lengths, call " << call);
        check_same_bits(train(graphed, other_lengths, false), want_other, true);
    }
    for (int call = 1; call <= 3; ++call) {
        INFO("first lengths again, call " << call);
        check_same_bits(train(graphed, lengths, false), want_first, true);
    }

    // Plans released between calls are rebuilt: eager, captured and replayed again, same bits.
    const size_t plans = graph_ctx.plan_count();
    CHECK(plans > 0);
    CHECK(graph_ctx.release_plans() == plans);
    CHECK(graph_ctx.plan_count() == 0);
    for (int call = 1; call <= 3; ++call) {
        INFO("after release_plans, call " << call);
        check_same_bits(train(graphed, lengths, false), want_first, true);
    }
}

}  // namespace

TEST_CASE("gpu: fused graph replay gives the bits of eager calls", "[gpu][graphs]") {
    Config projected{4, 6, 2, true};
    projected.proj_size = 3;
    const std::vector<Shape> shapes = {
        {"bi 2 layers, mixed lengths", {3, 5, 2, true}, 6, 3, {4, 6, 3}, true},
        {"uni 1 layer, no state", {5, 7, 1, false}, 5, 4, {5, 5, 2, 5}, false},
        {"bi 2 layers, proj 3, mixed lengths", projected, 5, 3, {5, 1, 3}, true},
        {"braun 1x320 (T 100 -> 20)", {123, 320, 1, false}, 20, 64, {}, false},
    };
    uint64_t seed = 7300;
    for (const Shape& s : shapes) {
        const LstmCase c = make_case(s.config, s.seq_len, s.batch, s.lengths, s.with_state, seed);
        seed += 10;
        // Every sequence one step shorter than in the case (at least 1): other steps, so another
        // graph topology.
        std::vector<int64_t> other(size_t(s.batch), s.seq_len - 1);
        for (size_t n = 0; n < s.lengths.size(); ++n)
            other[n] = s.lengths[n] > 1 ? s.lengths[n] - 1 : 1;
        INFO("case: " << s.name);
        {
            INFO("f32");
            check_graphs<float>(c, other);
        }
        {
            INFO("f64");
            check_graphs<double>(c, other);
        }
    }
}

TEST_CASE("gpu: LSTM_CUDA_GRAPHS=0 turns graphs off for new contexts", "[gpu][graphs]") {
    const char* saved = std::getenv("LSTM_CUDA_GRAPHS");
    const std::string restore = saved ? saved : "";
    setenv("LSTM_CUDA_GRAPHS", "0", 1);
    {
        cuda::Context off;
        CHECK_FALSE(off.graphs_enabled());
        off.set_graphs_enabled(true);
        CHECK(off.graphs_enabled());
    }
    setenv("LSTM_CUDA_GRAPHS", "1", 1);
    {
        cuda::Context on;
        CHECK(on.graphs_enabled());
    }
    if (saved)
        setenv("LSTM_CUDA_GRAPHS", restore.c_str(), 1);
    else
        unsetenv("LSTM_CUDA_GRAPHS");
}
