// Built against the installed package with lstm::dist (when the library was built with MPI) and
// run under mpirun with one rank: a DataParallel step must give the model's own gradients, bit
// for bit without the per-layer overlap (one rank sums nothing and scales by 1) and within the
// tolerance rule with it (the stack then runs one call per layer), then train in sync.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <lstm/dist/abort.hpp>
#include <lstm/dist/data_parallel.hpp>
#include <lstm/dist/mpi_backend.hpp>
#include <lstm/dist/mpi_environment.hpp>
#include <lstm/dist/shard.hpp>
#include <lstm/nn/model.hpp>
#include <lstm/reference/tolerance.hpp>
#include <vector>

namespace {

constexpr int64_t kSteps = 5, kBatch = 4, kInput = 3, kClasses = 4;

std::vector<double> all_gradients(lstm::nn::SequenceModel<float>& model) {
    const auto lstm_grads = model.lstm().gradients();
    const auto dense_grads = model.dense().gradients();
    std::vector<double> out(lstm_grads.begin(), lstm_grads.end());
    out.insert(out.end(), dense_grads.begin(), dense_grads.end());
    return out;
}

// One DataParallel step with `overlap` against the model's own compute_gradients on the same
// batch; 0 when they agree (exactly, or within the tolerance rule).
int check_step(lstm::dist::Communicator& comm, lstm::dist::Overlap overlap, bool exact) {
    lstm::nn::ModelConfig mc;
    mc.lstm = lstm::Config{kInput, 5, 2, true};
    mc.classes = kClasses;
    std::vector<float> x(kSteps * kBatch * kInput);
    for (size_t k = 0; k < x.size(); ++k) x[k] = 0.1f * static_cast<float>(k % 7) - 0.3f;
    const std::vector<int64_t> lengths = {5, 3, 4, 2}, targets = {0, 3, 1, 2};
    const lstm::TensorView<const float> xv(x.data(), {kSteps, kBatch, kInput});

    lstm::nn::SequenceModel<float> own(mc, "basic", lstm::Device::cpu, 7);
    const float want_loss = own.compute_gradients(xv, lengths, targets);
    lstm::nn::SequenceModel<float> model(mc, "basic", lstm::Device::cpu, 7);
    lstm::dist::DataParallel<float> dp(model, comm, overlap);
    const float loss = dp.compute_gradients(xv, lengths, targets);

    const std::vector<double> got = all_gradients(model), want = all_gradients(own);
    const char* name = lstm::dist::to_string(overlap);
    if (exact) {
        if (got != want || loss != want_loss) {
            std::printf("consumer_dist (%s): the gradients or the loss differ from the model's\n",
                        name);
            return 1;
        }
    } else {
        const double rtol = lstm::reference::lstm_rtol(lstm::DType::f32, mc.lstm, kSteps,
                                                       lstm::reference::Pass::backward);
        if (auto why = lstm::reference::check_close("gradients", got, want, rtol)) {
            std::printf("consumer_dist (%s): %s\n", name, why->c_str());
            return 1;
        }
    }
    for (int step = 0; step < 2; ++step) dp.train_step(xv, lengths, targets);
    if (!dp.parameters_in_sync()) {
        std::printf("consumer_dist (%s): parameters out of sync\n", name);
        return 1;
    }
    std::printf("consumer_dist (%s): %zu gradients match the model's own, loss %g\n", name,
                got.size(), static_cast<double>(loss));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    lstm::dist::MpiEnvironment mpi(&argc, &argv);
    lstm::dist::MpiBackend host;
    lstm::dist::Communicator comm(host);
    if (comm.size() != 1) {
        std::printf("consumer_dist runs on one rank, got %d\n", comm.size());
        return 1;
    }
    return lstm::dist::run_or_abort(comm, [&] {
        return check_step(comm, lstm::dist::Overlap::dense_head, true) +
               check_step(comm, lstm::dist::Overlap::per_layer, false);
    });
}
