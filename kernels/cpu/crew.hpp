#pragma once

// A crew: the threads of an OpenMP team that run one piece of work together, either the whole
// team or a part of it. The fused variant gives each direction of a bidirectional layer half of
// the team, so the two time loops run side by side and each meets only its own half at its
// per-step barriers (with 2 threads: no barrier at all inside a layer).
//
// An OpenMP barrier always binds to the whole team, so a crew smaller than the team waits at a
// CrewBarrier instead.

#include <omp.h>

#include <atomic>
#include <cstdint>
#include <thread>

#include "kernels/cpu/split.hpp"

namespace lstm::kernels::cpu {

// A reusable barrier for `count` threads (the same count at every use). Waiters spin for tens
// of microseconds, then yield the core on every further check: a crew member that the scheduler
// took off its core must get it back, as under the contention that kernels/cpu/team.hpp
// measures.
class CrewBarrier {
public:
    void arrive_and_wait(int count) {
        const uint32_t generation = generation_.load(std::memory_order_acquire);
        if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == count) {
            // The count is reset before the generation moves, so whoever leaves and comes back
            // first arrives at a barrier that counts from zero.
            arrived_.store(0, std::memory_order_relaxed);
            generation_.store(generation + 1, std::memory_order_release);
            return;
        }
        int spins = 0;
        while (generation_.load(std::memory_order_acquire) == generation) {
            if (spins < kSpinsBeforeYield) {
                pause();
                ++spins;
            } else {
                std::this_thread::yield();
            }
        }
    }

private:
    // About 10-40 us of pause instructions (30-140 cycles each on current x86 cores): a partner
    // a little behind (steps of the fused time loops take 50-500 us, and differ by a few
    // percent) is met while spinning, without a trip through the scheduler.
    static constexpr int kSpinsBeforeYield = 1 << 10;

    static void pause() {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }

    std::atomic<int> arrived_{0};
    std::atomic<uint32_t> generation_{0};
};

// One member's view of its crew: its rank among `size` members and how they meet.
struct Crew {
    int rank = 0;
    int size = 1;
    CrewBarrier* barrier = nullptr;  // null: the crew is the whole OpenMP team

    // The calling thread in its whole team (call inside the parallel region).
    static Crew whole_team() { return Crew{omp_get_thread_num(), omp_get_num_threads(), nullptr}; }

    // A crew of one member, outside any team: a serial engine's (lstm/stack_loop.hpp).
    static Crew alone() { return Crew{}; }

    // Every member waits for all the others. The whole team meets at an OpenMP barrier (all its
    // threads must call this, as for any barrier); a crew of one does not wait, so a crew of one
    // thread inside a caller's own parallel region never meets that region's barrier.
    void sync() const {
        if (size == 1) return;
        if (barrier == nullptr) {
#pragma omp barrier
        } else {
            barrier->arrive_and_wait(size);
        }
    }

    // This member's blocks of `blocks`, and its rows of `count` (split.hpp's fixed splits).
    BlockRange blocks(int64_t count) const { return block_range(count, rank, size); }
    BlockRange share(int64_t count) const { return row_range(count, rank, size); }
    bool leads() const { return rank == 0; }
};

}  // namespace lstm::kernels::cpu
