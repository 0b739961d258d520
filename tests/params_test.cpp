#include "lstm/params.hpp"

#include <catch2/catch.hpp>

// Published parameter counts (Braun 2018, Bahrampour 2016; docs/benchmarks.md) and PyTorch's
// parameters() order.
TEST_CASE("param_count matches the Braun parameter counts", "[params]") {
    // LSTM part only: the dense heads (320*10, 640*10, 640*59 without bias) make up the rest.
    lstm::Config one{123, 320, 1, false};
    CHECK(lstm::param_count(one) + 320 * 10 == 572800);
    lstm::Config four{123, 320, 4, true};
    CHECK(lstm::param_count(four) + 640 * 10 == 8533760);
    CHECK(lstm::param_count(four) + 640 * 59 == 8565120);
}

TEST_CASE("param_entries follow PyTorch's parameters() order", "[params]") {
    lstm::Config c{3, 5, 2, true};
    const auto entries = lstm::param_entries(c);
    REQUIRE(entries.size() == 16);
    const char* expected[] = {
        "weight_ih_l0",         "weight_hh_l0",         "bias_ih_l0",         "bias_hh_l0",
        "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse",
        "weight_ih_l1",         "weight_hh_l1",         "bias_ih_l1",         "bias_hh_l1",
        "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"};
    int64_t offset = 0;
    for (size_t k = 0; k < entries.size(); ++k) {
        INFO("entry " << k);
        CHECK(entries[k].name == expected[k]);
        CHECK(entries[k].offset == offset);
        offset += entries[k].numel();
    }
    CHECK(offset == lstm::param_count(c));
    CHECK(entries[8].cols == 10);  // layer 1 reads D*H = 10
    CHECK(lstm::find_param(c, "bias_hh_l1_reverse").offset == entries[15].offset);
    CHECK_THROWS_WITH(lstm::find_param(c, "weight_ih_l2"), Catch::Contains("weight_ih_l2"));
}
