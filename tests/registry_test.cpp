// The registry (lstm/registry.hpp): its order, its lookups, the optional parts a program links,
// and variants a program registers itself. Built into programs of their own
// (tests/CMakeLists.txt), since the variants registered here would otherwise show in every
// registry-driven test of lstm_tests: lstm_registry_tests links lstm::cuda (in a build with
// CUDA; EXPECT_CUDA=1) and lstm_registry_tests_cpu links lstm::lstm alone (EXPECT_CUDA=0). Both
// are static links, so each also proves that the registrations the linker could drop (the CUDA
// variants, and this file's own static one) are there.

#include "lstm/registry.hpp"

#include <catch2/catch.hpp>
#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "lstm/layer.hpp"
#include "lstm/reference/lstm_reference.hpp"
#include "lstm/reference/tolerance.hpp"

#if LSTM_WITH_CUDA
#include "lstm/cuda/context.hpp"
#include "lstm/cuda/runtime.hpp"
#endif

#ifndef EXPECT_CUDA
#error "tests/CMakeLists.txt defines EXPECT_CUDA for the registry tests"
#endif

namespace {

using Catch::Contains;
using lstm::Device;

// A variant of the test program's own: cpu `basic` under another name, delegating every call.
class Wrapped final : public lstm::Variant {
public:
    explicit Wrapped(std::string name) : name_(std::move(name)) {}

    const char* name() const override { return name_.c_str(); }
    Device device() const override { return Device::cpu; }
    std::optional<std::string> supports(const lstm::Config& config,
                                        lstm::DType dtype) const override {
        return inner().supports(config, dtype);
    }
    std::optional<std::string> supports_variable_lengths() const override {
        return inner().supports_variable_lengths();
    }
    std::optional<std::string> supports_split_backward() const override {
        return inner().supports_split_backward();
    }

protected:
    size_t run_workspace_bytes(const lstm::Config& config, lstm::DType dtype, int64_t seq_len,
                               int64_t batch) const override {
        return inner().workspace_bytes(config, dtype, seq_len, batch);
    }
    size_t run_reserve_bytes(const lstm::Config& config, lstm::DType dtype, int64_t seq_len,
                             int64_t batch) const override {
        return inner().reserve_bytes(config, dtype, seq_len, batch);
    }
    void run_forward(const lstm::Config& c, const lstm::ForwardArgs<float>& a) const override {
        inner().forward(c, a);
    }
    void run_forward(const lstm::Config& c, const lstm::ForwardArgs<double>& a) const override {
        inner().forward(c, a);
    }
    void run_backward(const lstm::Config& c, const lstm::BackwardArgs<float>& a) const override {
        inner().backward(c, a);
    }
    void run_backward(const lstm::Config& c, const lstm::BackwardArgs<double>& a) const override {
        inner().backward(c, a);
    }

private:
    static const lstm::Variant& inner() { return lstm::find_variant("basic", Device::cpu); }
    std::string name_;
};

// Registered at static initialization, as a user's program would.
const Wrapped wrapped_basic("wrapped_basic");
const lstm::VariantRegistration register_wrapped_basic(wrapped_basic);

std::vector<std::string> names_of(const std::vector<const lstm::Variant*>& list) {
    std::vector<std::string> out;
    for (const lstm::Variant* v : list)
        out.push_back(std::string(v->name()) + " (" + lstm::to_string(v->device()) + ")");
    return out;
}

}  // namespace

TEST_CASE("registry: built-in CPU variants, then CUDA ones where linked, then the program's own",
          "[registry]") {
    const std::vector<const lstm::Variant*> all = lstm::variants();
    INFO("registry: " << Catch::Detail::stringify(names_of(all)));
    REQUIRE(all.size() >= 3);
    CHECK(std::string(all[0]->name()) == "basic");
    CHECK(all[0]->device() == Device::cpu);
    CHECK(std::string(all[1]->name()) == "fused");
    CHECK(all[1]->device() == Device::cpu);
    // The program's own come last; none registered at run time has been yet, unless another
    // case ran first, so look for the static one rather than at the very end.
    size_t own = all.size();
    for (size_t k = 0; k < all.size(); ++k)
        if (all[k] == &wrapped_basic) own = k;
    REQUIRE(own < all.size());
    // Built-in ones: every cpu one before every cuda one, all before the program's own.
    size_t first_cuda = own, cuda_count = 0;
    for (size_t k = 0; k < own; ++k) {
        if (all[k]->device() == Device::cuda) {
            first_cuda = std::min(first_cuda, k);
            ++cuda_count;
        } else {
            CHECK(k < first_cuda);
        }
    }
    const std::vector<std::string> cuda_names = names_of(lstm::variants_on(Device::cuda));
    if (EXPECT_CUDA) {
        std::vector<std::string> want = {"basic (cuda)", "fused (cuda)"};
        if (LSTM_WITH_CUDNN) want.push_back("cudnn (cuda)");
        CHECK(cuda_names == want);
        CHECK(cuda_count == want.size());
    } else {
        CHECK(cuda_names.empty());
    }
}

TEST_CASE("registry: a variant registered by the program is found and runs as the one it wraps",
          "[registry]") {
    CHECK(&lstm::find_variant("wrapped_basic", Device::cpu) == &wrapped_basic);
    // Checked against the oracle and against `basic` itself (the same computation, so the same
    // bits) on a small bidirectional two-layer case with per-sequence lengths.
    const lstm::Config config{3, 5, 2, true};
    const int64_t seq_len = 4, batch = 2;
    std::vector<float> x(seq_len * batch * 3);
    for (size_t k = 0; k < x.size(); ++k) x[k] = 0.1f * static_cast<float>(k % 7) - 0.3f;
    const std::vector<int64_t> lengths = {4, 3};
    lstm::Lstm wrapped(config, "wrapped_basic");
    lstm::Lstm basic(config, "basic");
    REQUIRE(wrapped.parameters().size == basic.parameters().size);
    std::copy(basic.parameters().begin(), basic.parameters().end(), wrapped.parameters().begin());
    const lstm::TensorView<const float> xv(x.data(), {seq_len, batch, 3});
    const auto got = wrapped.forward(xv, lengths);
    const auto want_basic = basic.forward(xv, lengths);
    REQUIRE(got.numel() == want_basic.numel());
    int64_t differing = 0;
    for (int64_t k = 0; k < got.numel(); ++k)
        if (got.data()[k] != want_basic.data()[k]) {
            if (differing < 5)
                UNSCOPED_INFO("y[" << k << "] = " << got.data()[k] << ", basic gives "
                                   << want_basic.data()[k]);
            ++differing;
        }
    CHECK(differing == 0);

    lstm::reference::LstmInputs in;
    in.config = config;
    in.seq_len = seq_len;
    in.batch = batch;
    in.x.assign(x.begin(), x.end());
    in.lengths = lengths;
    in.params.assign(basic.parameters().begin(), basic.parameters().end());
    const auto oracle = lstm::reference::lstm_forward(in).y;
    const std::vector<double> got_d(got.data(), got.data() + got.numel());
    const double rtol = lstm::reference::lstm_rtol(lstm::DType::f32, config, seq_len,
                                                   lstm::reference::Pass::forward);
    const auto why = lstm::reference::check_close("y", got_d, oracle, rtol);
    INFO((why ? *why : std::string("matches the oracle")));
    CHECK(!why);
}

TEST_CASE("registry: registering a name and device it has is an error naming both", "[registry]") {
    static const Wrapped second_basic("basic");  // clashes with the built-in cpu `basic`
    CHECK_THROWS_WITH(lstm::register_variant(second_basic),
                      Contains("already has a variant 'basic' on cpu"));
    CHECK_THROWS_AS(lstm::register_variant(second_basic), lstm::Error);
    CHECK_THROWS_WITH(lstm::register_variant(wrapped_basic),
                      Contains("already has a variant 'wrapped_basic' on cpu"));
    // A new name registers, after everything before it, and only once.
    static const Wrapped runtime("wrapped_at_run_time");
    const size_t before = lstm::variants().size();
    lstm::register_variant(runtime);
    const std::vector<const lstm::Variant*> after = lstm::variants();
    REQUIRE(after.size() == before + 1);
    CHECK(after.back() == &runtime);
    CHECK(&lstm::find_variant("wrapped_at_run_time", Device::cpu) == &runtime);
    CHECK_THROWS_WITH(lstm::register_variant(runtime),
                      Contains("already has a variant 'wrapped_at_run_time' on cpu"));
    CHECK(lstm::variants().size() == before + 1);
}

TEST_CASE("registry: a snapshot stays whole while another thread registers", "[registry]") {
    static std::deque<Wrapped> added;  // outlive the registry's use of them
    constexpr int kAdded = 64;
    for (int k = 0; k < kAdded; ++k) added.emplace_back("wrapped_thread_" + std::to_string(k));
    const std::vector<const lstm::Variant*> start = lstm::variants();
    std::thread writer([] {
        for (const Wrapped& w : added) lstm::register_variant(w);
    });
    // Every snapshot is the starting list followed by the first few of `added`, in order.
    size_t last_size = start.size();
    int64_t bad = 0;
    for (int round = 0; round < 2000 && last_size < start.size() + kAdded; ++round) {
        const std::vector<const lstm::Variant*> now = lstm::variants();
        if (now.size() < last_size) ++bad;
        last_size = now.size();
        for (size_t k = 0; k < now.size(); ++k) {
            const lstm::Variant* want = k < start.size() ? start[k] : &added[k - start.size()];
            if (now[k] != want) ++bad;
        }
    }
    writer.join();
    CHECK(bad == 0);
    CHECK(lstm::variants().size() == start.size() + kAdded);
}

TEST_CASE("registry: without lstm::cuda, CUDA is refused with where it lives", "[registry]") {
    if (EXPECT_CUDA) {
        // Linked: the lookups find them (running them needs a GPU: tests/gpu).
        CHECK(lstm::find_variant("fused", Device::cuda).device() == Device::cuda);
        return;
    }
    const std::string want = LSTM_WITH_CUDA ? "lives in the lstm::cuda target (library lstm_cuda), "
                                              "which this program does not link"
                                            : "this build has no CUDA back-end";
    for (const char* name : {"basic", "fused"}) {
        INFO("variant " << name);
        CHECK_THROWS_AS(lstm::find_variant(name, Device::cuda), lstm::Unsupported);
        CHECK_THROWS_WITH(lstm::find_variant(name, Device::cuda), Contains(want));
    }
#if LSTM_WITH_CUDA
    // The services a program reaches without a variant say the same; there is no device to use.
    CHECK(lstm::cuda::device_count() == 0);
    CHECK_THROWS_AS(lstm::cuda::Context(0), lstm::Unsupported);
    CHECK_THROWS_WITH(lstm::cuda::Context(0), Contains("lstm::cuda target"));
    CHECK_THROWS_WITH(lstm::cuda::malloc_device(64), Contains("lstm::cuda target"));
    CHECK_THROWS_WITH(lstm::Lstm(lstm::Config{3, 5, 1, false}, "fused", Device::cuda),
                      Contains("lstm::cuda target"));
#endif
}
