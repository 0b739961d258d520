// lstm::PlanCache (lstm/plan_cache.hpp): one plan per key, the least recently used dropped first
// beyond the count and byte bounds, a failed make_plan leaving the cache as it was, and the
// default cache forgetting a variant's plans when the variant goes.

#include "lstm/plan_cache.hpp"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "lstm/registry.hpp"
#include "test_util.hpp"

using namespace lstm;

namespace {

// A variant whose plans hold a stated number of bytes and count how many were made.
class CountingVariant final : public Variant {
public:
    explicit CountingVariant(size_t held) : held_(held) {}
    const char* name() const override { return "counting"; }
    Device device() const override { return Device::cpu; }
    std::optional<std::string> supports(const Config& config, DType) const override {
        if (config.hidden_size == 13) return std::string("H 13 is refused for the test");
        return std::nullopt;
    }
    std::vector<std::string> paths(DType) const override { return {"one", "two"}; }
    std::string default_path(DType) const override { return "one"; }
    int made() const { return made_; }

protected:
    class HeldPlan final : public Plan {
    public:
        HeldPlan(const Variant& v, const PlanRequest& r, size_t held)
            : Plan(v, r, 0, 0), held_(held) {}
        size_t held_bytes() const override { return held_; }

    private:
        size_t held_;
    };
    std::unique_ptr<Plan> build_plan(const PlanRequest& request) const override {
        ++made_;
        return std::make_unique<HeldPlan>(*this, request, held_);
    }

private:
    size_t held_;
    mutable int made_ = 0;
};

PlanRequest request(int64_t seq_len, const std::string& path = {}) {
    return PlanRequest{Config{3, 5, 1, false}, DType::f32, seq_len, 2, path};
}

}  // namespace

TEST_CASE("plan cache: one plan per key, the path resolved", "[plan_cache]") {
    CountingVariant v(0);
    PlanCache cache;
    const auto a = cache.get(v, request(4));
    CHECK(a->path() == "one");
    CHECK(cache.get(v, request(4)) == a);
    CHECK(cache.get(v, request(4, "one")) == a);  // the default path named is the same key
    CHECK(v.made() == 1);
    const auto b = cache.get(v, request(4, "two"));
    CHECK(b != a);
    CHECK(b->path() == "two");
    PlanRequest f64 = request(4);
    f64.dtype = DType::f64;
    PlanRequest wider = request(4);
    wider.config.hidden_size = 6;
    PlanRequest batch = request(4);
    batch.batch = 3;
    for (const PlanRequest& r : {request(5), f64, wider, batch}) CHECK(cache.get(v, r) != a);
    CHECK(v.made() == 6);
    CHECK(cache.size() == 6);
}

TEST_CASE("plan cache: the least recently used plan goes first, by count and by bytes",
          "[plan_cache]") {
    CountingVariant v(100);
    PlanCache by_count(PlanCacheLimits{3, size_t(1) << 30});
    const auto t1 = by_count.get(v, request(1));
    const auto t2 = by_count.get(v, request(2));
    by_count.get(v, request(3));
    CHECK(by_count.get(v, request(1)) == t1);  // T 1 is now the most recent; T 2 the oldest
    by_count.get(v, request(4));
    CHECK(by_count.size() == 3);
    CHECK(by_count.get(v, request(1)) == t1);
    CHECK(by_count.get(v, request(2)) != t2);  // dropped, made again
    CHECK(v.made() == 5);

    PlanCache by_bytes(PlanCacheLimits{16, 250});
    by_bytes.get(v, request(1));
    by_bytes.get(v, request(2));
    CHECK(by_bytes.held_bytes() == 200);
    by_bytes.get(v, request(3));
    CHECK(by_bytes.size() == 2);
    CHECK(by_bytes.held_bytes() == 200);
    // One plan over the bound alone stays: a cache never drops the plan it is returning.
    PlanCache tiny(PlanCacheLimits{16, 10});
    CHECK(tiny.get(v, request(1)) != nullptr);
    CHECK(tiny.size() == 1);
}

TEST_CASE("plan cache: a refused request leaves the cache as it was", "[plan_cache]") {
    CountingVariant v(0);
    PlanCache cache;
    cache.get(v, request(4));
    PlanRequest refused = request(4);
    refused.config.hidden_size = 13;
    CHECK_THROWS_AS(cache.get(v, refused), Unsupported);
    CHECK_THROWS_WITH(cache.get(v, request(4, "three")),
                      Catch::Contains("has no path 'three'") && Catch::Contains("one, two"));
    CHECK_THROWS_WITH(cache.get(v, request(0)), Catch::Contains("seq_len (T) must be >= 1"));
    CHECK(cache.size() == 1);
    CHECK(v.made() == 1);
}

TEST_CASE("plan cache: a variant's plans go with it", "[plan_cache]") {
    // Emptied first: the cases before this one in the process may have filled it to its bound,
    // and a full cache drops one plan for each it adds.
    default_plan_cache().clear();
    const size_t before = default_plan_cache().size();
    {
        CountingVariant v(0);
        CHECK(v.workspace_bytes(Config{3, 5, 1, false}, DType::f32, 4, 2) == 0);
        CHECK(default_plan_cache().size() == before + 1);
        PlanCache own;
        own.get(v, request(4));
        own.get(v, request(5));
        own.forget(v);
        CHECK(own.size() == 0);
    }
    CHECK(default_plan_cache().size() == before);
}

TEST_CASE("plan cache: fused's default path follows LSTM_FUSED_ISA at each request",
          "[plan_cache]") {
    const Variant& fused = find_variant("fused", Device::cpu);
    PlanCache cache;
    const test::EnvScope eigen("LSTM_FUSED_ISA", "eigen");
    CHECK(cache.get(fused, request(4))->path() == "eigen");
    const std::string widest = fused.paths(DType::f32).front();
    const test::EnvScope automatic("LSTM_FUSED_ISA", "auto");
    CHECK(cache.get(fused, request(4))->path() == widest);
    CHECK(cache.size() == (widest == "eigen" ? 1u : 2u));
}
