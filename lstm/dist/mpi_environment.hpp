#pragma once

// RAII for MPI's process-wide state: initialises MPI unless the program already did, and
// finalises it on destruction only if it initialised it. One per process, in main().

#include <mpi.h>

#include "lstm/error.hpp"

namespace lstm::dist {

class MpiEnvironment {
public:
    // argc/argv may be null (MPI-2 allows it). Only the main thread makes MPI calls in lstm::dist,
    // so MPI_THREAD_FUNNELED suffices while OpenMP teams compute.
    MpiEnvironment(int* argc = nullptr, char*** argv = nullptr) {
        // MPI cannot be initialised a second time once finalised (MPI_Init would abort).
        int finalized = 0;
        MPI_Finalized(&finalized);
        check(!finalized,
              "MpiEnvironment: MPI has already been finalised in this process (an earlier "
              "MpiEnvironment ended); MPI can be initialised only once per process, so keep one "
              "MpiEnvironment for the whole program");
        int initialized = 0;
        MPI_Initialized(&initialized);
        if (initialized) return;
        int provided = 0;
        const int status = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        if (status != MPI_SUCCESS)
            fail_as<BackendError>("MPI_Init_thread failed with status ", status);
        owns_ = true;
    }
    ~MpiEnvironment() {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (owns_ && !finalized) MPI_Finalize();
    }
    MpiEnvironment(const MpiEnvironment&) = delete;
    MpiEnvironment& operator=(const MpiEnvironment&) = delete;

private:
    bool owns_ = false;
};

}  // namespace lstm::dist
