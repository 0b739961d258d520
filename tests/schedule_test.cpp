// Learning-rate schedules (lstm/nn/schedule.hpp) against the values PyTorch 1.13's schedulers
// give, and their refusals. The reference values were printed by (Debian python3-torch 1.13.1):
//   q = torch.zeros(1, requires_grad=True); o = torch.optim.SGD([q], lr=0.5); s = <scheduler>(o)
//   for _ in range(steps): print(o.param_groups[0]['lr']); o.step(); s.step()

#include "lstm/nn/schedule.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "test_util.hpp"

using namespace lstm::nn;

namespace {

// lr(0..) of `schedule` against PyTorch's values; PyTorch's recursive forms differ from the
// closed forms by rounding only.
template <typename S>
void check_schedule(const S& schedule, const std::vector<double>& torch_lrs) {
    std::vector<double> got;
    for (int64_t s = 0; s < static_cast<int64_t>(torch_lrs.size()); ++s)
        got.push_back(schedule.lr(s));
    LSTM_CHECK_CLOSE(lstm::test::compare("lr", got, torch_lrs, 1e-14, 1e-14));
}

}  // namespace

TEST_CASE("learning-rate schedules give PyTorch's rates", "[nn]") {
    SECTION("StepLR(step_size=3, gamma=0.5)") {
        check_schedule(StepLr{0.5, 3, 0.5}, {0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125, 0.125});
    }
    SECTION("CosineAnnealingLR(T_max=6, eta_min=0.01), past T_max too") {
        check_schedule(CosineLr{0.5, 6, 0.01},
                       {0.5, 0.4671762239271875, 0.3775, 0.255, 0.13250000000000006,
                        0.042823776072812521, 0.01, 0.042823776072812521});
    }
    SECTION("LinearLR(start_factor=0.1, end_factor=1.0, total_iters=4)") {
        check_schedule(
            LinearLr{0.5, 0.1, 1.0, 4},
            {0.050000000000000003, 0.16250000000000001, 0.27500000000000002, 0.38750000000000007,
             0.50000000000000011, 0.50000000000000011, 0.50000000000000011});
    }
    SECTION("SequentialLR(LinearLR(0.1, 1.0, 3), CosineAnnealingLR(5, 0.01), milestones=[3])") {
        check_schedule(WarmupCosineLr{0.5, 3, 5, 0.1, 0.01},
                       {0.050000000000000003, 0.19999999999999998, 0.34999999999999998, 0.5,
                        0.45320916362186214, 0.33070916362186215, 0.17929083637813789,
                        0.0567908363781379, 0.01, 0.056790836378137872});
    }
}

TEST_CASE("learning-rate schedules refuse bad settings, naming them", "[nn][errors]") {
    using Catch::Contains;
    CHECK_THROWS_WITH((StepLr{0.1, 0}.lr(0)), Contains("StepLr: step_size must be >= 1, got 0"));
    CHECK_THROWS_WITH((CosineLr{0.1, 10}.lr(-1)), Contains("CosineLr::lr: step must be >= 0"));
    CHECK_THROWS_WITH((CosineLr{0.1, 0}.lr(0)), Contains("t_max must be >= 1, got 0"));
    CHECK_THROWS_WITH((LinearLr{0.1, 0.0}.lr(0)), Contains("start_factor must be in (0, 1]"));
    CHECK_THROWS_AS((WarmupCosineLr{0.1, -1, 5}.lr(0)), lstm::InvalidArgument);
    // A negative or NaN rate was once returned as it came.
    const double nan = std::nan("");
    CHECK_THROWS_WITH((StepLr{nan, 3}.lr(0)), Contains("StepLr: base_lr must be finite and >= 0"));
    CHECK_THROWS_WITH((StepLr{-0.1, 3}.lr(0)), Contains("got -0.1"));
    CHECK_THROWS_WITH((StepLr{0.1, 3, -0.5}.lr(3)), Contains("StepLr: gamma must be finite"));
    CHECK_THROWS_WITH((CosineLr{0.1, 10, -1.0}.lr(10)), Contains("CosineLr: eta_min must be"));
    CHECK_THROWS_WITH((CosineLr{0.1, 10, nan}.lr(0)), Contains("eta_min must be finite"));
    CHECK_THROWS_WITH((LinearLr{-1.0}.lr(0)), Contains("LinearLr: base_lr must be"));
    // WarmupCosineLr names its own settings, at once, not when a part first uses one.
    CHECK_THROWS_WITH((WarmupCosineLr{0.1, 5, 0}.lr(0)),
                      Contains("WarmupCosineLr: t_max must be >= 1, got 0"));
    CHECK_THROWS_WITH((WarmupCosineLr{0.1, 0, 5, 0.0}.lr(0)),
                      Contains("WarmupCosineLr: start_factor must be in (0, 1], got 0"));
}

TEST_CASE("the cosine keeps its phase at any step", "[nn]") {
    // Whole periods of 2 * t_max steps return to base_lr and odd half-periods reach eta_min,
    // exactly; pi * s in a double had drifted to 0.0567 instead of 0 at s = 2^63 - 1.
    const CosineLr one{0.1, 1};
    CHECK(one.lr(INT64_MAX) == 0.0);
    CHECK(one.lr(INT64_MAX - 1) == 0.1);
    const CosineLr six{0.5, 6, 0.01};
    const int64_t periods = int64_t{1} << 58;
    for (int64_t s = 0; s < 12; ++s) CHECK(six.lr(periods * 12 + s) == six.lr(s));
}
