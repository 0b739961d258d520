// clip_grad_norm (lstm/nn/clip.hpp) against torch.nn.utils.clip_grad_norm_. Reference values
// printed by PyTorch 1.13.1 (float32): a.grad = [0.5, -1.5, 2.0], b.grad = [[0.25, -0.75],
// [1.0, 3.0]], clip_grad_norm_([a, b], max_norm) for max_norm 1 and 10.

#include "lstm/nn/clip.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "test_util.hpp"

using lstm::Span;
using lstm::nn::clip_grad_norm;

TEST_CASE("clip_grad_norm gives PyTorch's norm and clipped gradients", "[nn]") {
    std::vector<float> a = {0.5f, -1.5f, 2.0f}, b = {0.25f, -0.75f, 1.0f, 3.0f};
    const double norm = clip_grad_norm<float>({Span<float>(a), Span<float>(b)}, 1.0);
    // sqrt(17.125) = 4.13823634; PyTorch sums in float32 and prints 4.13823652, this sums in
    // double.
    CHECK(norm == Approx(4.13823652).epsilon(1e-7));
    LSTM_CHECK_CLOSE(lstm::test::compare(
        "a", a, std::vector<double>{0.120824389, -0.36247316, 0.483297557}, 1e-7, 1e-7));
    LSTM_CHECK_CLOSE(lstm::test::compare(
        "b", b, std::vector<double>{0.0604121946, -0.18123658, 0.241648778, 0.72494632}, 1e-7,
        1e-7));
    // Below max_norm nothing changes, and the norm is still returned.
    std::vector<float> c = {0.5f, -1.5f, 2.0f}, d = {0.25f, -0.75f, 1.0f, 3.0f};
    CHECK(clip_grad_norm<float>({Span<float>(c), Span<float>(d)}, 10.0) ==
          Approx(4.13823652).epsilon(1e-7));
    CHECK(c == std::vector<float>{0.5f, -1.5f, 2.0f});
}

TEST_CASE("clip_grad_norm refuses max_norm <= 0 and, when asked, non-finite gradients",
          "[nn][errors]") {
    std::vector<double> g = {1.0, std::numeric_limits<double>::quiet_NaN()};
    CHECK_THROWS_WITH(clip_grad_norm<double>({Span<double>(g)}, 0.0),
                      Catch::Contains("max_norm must be > 0, got 0"));
    CHECK_THROWS_WITH(clip_grad_norm<double>({Span<double>(g)}, 1.0, true),
                      Catch::Contains("the total norm is nan"));
    CHECK(std::isnan(clip_grad_norm<double>({Span<double>(g)}, 1.0)));
    // As in PyTorch, a NaN norm's coefficient (clamped, still NaN) makes every gradient NaN;
    // they were once left as they were.
    CHECK(std::isnan(g[0]));
    std::vector<double> h = {3.0, std::numeric_limits<double>::infinity(), 4.0};
    clip_grad_norm<double>({Span<double>(h)}, 1.0);  // coefficient 0: inf * 0 is NaN
    CHECK(h[0] == 0.0);
    CHECK(std::isnan(h[1]));
    CHECK(h[2] == 0.0);
    // Finite gradients whose squares overflow give an infinite norm too (PyTorch's as well); the
    // message once said they held NaN or inf.
    std::vector<double> huge = {1e200, 1e200};
    CHECK_THROWS_WITH(clip_grad_norm<double>({Span<double>(huge)}, 1.0, true),
                      Catch::Contains("or their squares overflow a double"));
    // A span without data was read (SIGSEGV), and a negative size counted as empty.
    CHECK_THROWS_WITH(clip_grad_norm<double>({Span<double>(huge), Span<double>(nullptr, 3)}, 1.0),
                      "clip_grad_norm: grads[1] has no data for 3 elements");
    CHECK_THROWS_WITH(clip_grad_norm<double>({Span<double>(huge.data(), -2)}, 1.0),
                      "clip_grad_norm: grads[0] has -2 elements; sizes must be >= 0");
    CHECK(huge[0] == 1e200);
}
