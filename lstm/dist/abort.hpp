#pragma once

// Turning one rank's exception into the end of the whole job. A rank that throws and returns
// would leave the others waiting in their next collective forever; this prints the message once,
// prefixed by the rank, and aborts every rank (MPI_Abort: mpirun ends the job with status `code`).
// For the top level of a training program, which may print; the library itself never does.

#include <cstdio>
#include <exception>
#include <utility>

#include "lstm/dist/communicator.hpp"

namespace lstm::dist {

// Prints "rank r: <message>" to stderr and ends the job; does not return.
[[noreturn]] inline void abort_job(Communicator& comm, const char* message, int code = 1) {
    std::fprintf(stderr, "rank %d: %s\n", comm.rank(), message);
    std::fflush(stderr);
    comm.abort(code);
}

// Runs fn() and returns its result; an exception from it ends the job through abort_job with the
// exception's message (lstm::Error messages name the argument, as on a single process).
template <typename Fn>
decltype(auto) run_or_abort(Communicator& comm, Fn&& fn) {
    try {
        return std::forward<Fn>(fn)();
    } catch (const std::exception& e) {
        abort_job(comm, e.what());
    } catch (...) {
        abort_job(comm, "an exception that is not a std::exception");
    }
}

}  // namespace lstm::dist
