// Catch2's main for the data-parallel tests: MPI is initialised before any test and finalised
// after all of them; each rank reports its own failures, and mpirun exits nonzero if any rank does.

#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "dist_env.hpp"
#include "lstm/dist/mpi_backend.hpp"
#include "lstm/dist/mpi_environment.hpp"

namespace {
lstm::dist::Communicator* g_world = nullptr;
}

lstm::dist::Communicator& lstm::test::world() { return *g_world; }

int main(int argc, char** argv) {
    lstm::dist::MpiEnvironment mpi(&argc, &argv);
    lstm::dist::MpiBackend host;
    lstm::dist::Communicator world(host);
    g_world = &world;
    return Catch::Session().run(argc, argv);
}
