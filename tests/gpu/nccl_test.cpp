// The NCCL back-end of lstm/dist on the one GPU this machine has: one rank. That shows the NCCL
// calls, the pre-multiplied sum, the side stream's ordering against the model's stream and the
// cuda paths of DataParallel (device buffers, device dense layer); it cannot show a reduction
// over several GPUs or how much of it overlaps the backward (that needs 2+ GPUs, see
// docs/distributed.md). The host back-end's multi-rank behaviour is tested in tests/dist.

#if LSTM_WITH_NCCL

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "case_registry.hpp"
#include "lstm/cuda/context.hpp"
#include "lstm/cuda/runtime.hpp"
#include "lstm/dist/data_parallel.hpp"
#include "lstm/dist/mpi_backend.hpp"
#include "lstm/dist/mpi_environment.hpp"
#include "lstm/dist/nccl_backend.hpp"
#include "lstm/reference/tolerance.hpp"
#include "test_util.hpp"

using namespace lstm;

namespace {

// MPI for the whole executable (a singleton: this binary runs without mpirun), finalised at exit.
dist::MpiBackend& host_backend() {
    static dist::MpiEnvironment mpi;
    static dist::MpiBackend host;
    return host;
}

// device buffer (n elements) -> host vector, after the work queued on `context`.
template <typename T>
std::vector<T> to_host(const T* device, int64_t n, cuda::Context& context) {
    std::vector<T> out(static_cast<size_t>(n));
    cuda::copy_bytes(out.data(), Device::cpu, device, Device::cuda, out.size() * sizeof(T),
                     &context);
    return out;
}

}  // namespace

TEST_CASE("gpu: nccl back-end on one rank: scaled allreduce / non-blocking allreduce / broadcast",
          "[gpu][nccl]") {
    cuda::Context context;
    dist::NcclBackend nccl(host_backend(), context);
    dist::Communicator comm(host_backend(), &nccl);
    REQUIRE(comm.size() == 1);
    const std::vector<float> values = test::random_vector<float>(1000, 3);
    Buffer buffer = Buffer::upload(Device::cuda, values, &context);
    TensorView<float> view(buffer.as<float>(), {1000}, Device::cuda);
    comm.allreduce_sum(view, 0.5);  // one rank: the sum is this rank's scaled contribution
    std::vector<float> got = to_host(view.data(), view.numel(), context);
    for (size_t i = 0; i < values.size(); ++i) CHECK(got[i] == values[i] * 0.5f);
    dist::Request request = comm.start_allreduce_sum(view);
    comm.wait(request);
    CHECK_FALSE(request.pending());
    comm.broadcast(view, 0);
    got = to_host(view.data(), view.numel(), context);
    for (size_t i = 0; i < values.size(); ++i) CHECK(got[i] == values[i] * 0.5f);
}

namespace {

// Per-layer overlap: the stack runs one call per layer and each layer's allreduce is queued on the
// side stream after that layer's backward; within the tolerance rule of the whole-stack run.
// Without it one rank gives the model's own loss bit for bit.
void data_parallel_matches_alone(nn::Head head, dist::Overlap overlap) {
    nn::ModelConfig mc;
    mc.lstm = Config{3, 5, 2, true};
    mc.classes = 4;
    mc.dense_bias = true;
    mc.head = head;
    const int64_t steps = 6, batch = 3;
    const std::vector<float> x = test::random_vector<float>(steps * batch * 3, 11);
    const std::vector<int64_t> lengths{6, 5, 6};
    const std::vector<int64_t> targets =
        head == nn::Head::ctc ? std::vector<int64_t>{1, 2, 3, 1} : std::vector<int64_t>{0, 3, 2};
    const std::vector<int64_t> target_lengths =
        head == nn::Head::ctc ? std::vector<int64_t>{1, 2, 1} : std::vector<int64_t>{};
    const TensorView<const float> xv(x.data(), {steps, batch, 3});

    nn::SequenceModel<float> alone(mc, "basic", Device::cuda, 7);
    const float want_loss = alone.compute_gradients(xv, lengths, targets, target_lengths);

    nn::SequenceModel<float> model(mc, "basic", Device::cuda, 7);
    dist::NcclBackend nccl(host_backend(), *model.lstm().context());
    dist::Communicator comm(host_backend(), &nccl);
    dist::DataParallel<float> dp(model, comm, overlap);
    const float loss = dp.compute_gradients(xv, lengths, targets, target_lengths);
    const double rtol = reference::lstm_rtol(DType::f32, mc.lstm, steps, reference::Pass::backward);
    if (overlap == dist::Overlap::dense_head)
        CHECK(loss == want_loss);
    else
        CHECK(test::scalar_close("loss", loss, want_loss, 0.0, rtol));

    cuda::Context& ctx = *model.lstm().context();
    const auto g = model.lstm().gradients(), w = alone.lstm().gradients();
    const auto got = to_host(g.data, g.size, ctx);
    const auto want = to_host(w.data, w.size, *alone.lstm().context());
    LSTM_CHECK_CLOSE(test::compare("LSTM gradient", got, want, 1e-7, rtol));
    const auto dg = model.dense_cuda().gradients(), dw = alone.dense_cuda().gradients();
    LSTM_CHECK_CLOSE(test::compare("dense gradient", to_host(dg.data(), dg.numel(), ctx),
                                   to_host(dw.data(), dw.numel(), *alone.lstm().context()), 1e-7,
                                   rtol));
    dp.train_step(xv, lengths, targets, target_lengths);
    CHECK(dp.parameters_in_sync());
}

const test::CaseGenerator generate_nccl_cases{[] {
    for (nn::Head head : {nn::Head::ce_last_step, nn::Head::ctc})
        for (dist::Overlap overlap : {dist::Overlap::per_layer, dist::Overlap::dense_head})
            test::add_case(CATCH_INTERNAL_LINEINFO,
                           std::string("gpu: nccl DataParallel on cuda with one rank gives the "
                                       "model gradients: head ") +
                               nn::to_string(head) + " overlap " + dist::to_string(overlap),
                           "[gpu][nccl]",
                           [head, overlap] { data_parallel_matches_alone(head, overlap); });
}};

}  // namespace

#endif  // LSTM_WITH_NCCL
