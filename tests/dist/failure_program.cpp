// A 2-rank training run that goes wrong on rank 1 in the way argv[1] names, for the failure tests
// of tests/dist/CMakeLists.txt (run_failure.cmake checks that the job ends, nonzero, in bounded
// time, and with which message):
//   throw  rank 1 passes a length beyond T: the job ends with "rank 1: <the model's message>"
//   kill   rank 1 is killed (SIGKILL) while rank 0 waits in the gradient allreduce
//   exit   rank 1 exits (status 0) without finalising MPI while rank 0 waits
//   ok     nothing goes wrong: the job exits 0 (the scripts' control case)
// and one that is no training run: "lifecycle" uses MPI before MpiEnvironment initialises it and
// after it finalised it, prints each lstm::Error (once MPI's own abort) and exits 1.

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "lstm/dist/abort.hpp"
#include "lstm/dist/data_parallel.hpp"
#include "lstm/dist/mpi_backend.hpp"
#include "lstm/dist/mpi_environment.hpp"

using namespace lstm;

namespace {

// Runs fn() and prints its lstm::Error as "lifecycle: <message>".
template <typename Fn>
void print_error(Fn&& fn) {
    try {
        fn();
        std::printf("lifecycle: no error\n");
    } catch (const Error& e) {
        std::printf("lifecycle: %s\n", e.what());
    }
    std::fflush(stdout);
}

int lifecycle(int argc, char** argv) {
    print_error([] { dist::MpiBackend early; });
    auto* mpi = new dist::MpiEnvironment(&argc, &argv);
    dist::MpiBackend host;
    delete mpi;  // MPI_Finalize
    std::vector<float> v(4, 1.0f);
    print_error([&] { host.allreduce_sum(v.data(), 4, DType::f32); });
    print_error([&] { dist::MpiEnvironment again(&argc, &argv); });
    return 1;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1 && std::string(argv[1]) == "lifecycle") return lifecycle(argc, argv);
    dist::MpiEnvironment mpi(&argc, &argv);
    dist::MpiBackend host;
    dist::Communicator comm(host);
    const std::string mode = argc > 1 ? argv[1] : "ok";
    return dist::run_or_abort(comm, [&] {
        nn::ModelConfig mc;
        mc.lstm = Config{2, 4, 1, false};
        mc.classes = 3;
        nn::SequenceModel<float> model(mc, "basic", Device::cpu, 1);
        dist::DataParallel<float> dp(model, comm);
        const int64_t steps = 4, batch = 2;
        std::vector<float> x(static_cast<size_t>(steps * batch * 2), 0.5f);
        std::vector<int64_t> lengths{steps, steps}, targets{0, 2};
        const bool faulty = comm.rank() == 1;
        if (faulty && mode == "throw") lengths[1] = steps + 5;
        if (faulty && mode == "kill") std::raise(SIGKILL);
        if (faulty && mode == "exit") std::_Exit(0);
        for (int step = 0; step < 3; ++step)
            dp.train_step(TensorView<const float>(x.data(), {steps, batch, 2}), lengths, targets);
        return 0;
    });
}
