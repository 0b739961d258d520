#pragma once

// Which part of a global batch each rank trains on.

#include <cstdint>

#include "lstm/error.hpp"

namespace lstm::dist {

// A contiguous range [begin, end) of a global batch's sequences.
struct ShardRange {
    int64_t begin = 0, end = 0;
    int64_t size() const { return end - begin; }
};

// Rank `rank` of `size`'s share of `items` sequences: contiguous, sizes differing by at most one
// (the first items % size ranks take one more), in rank order, so the shards concatenate to the
// global batch. With fewer items than ranks the last ranks get empty shards.
inline ShardRange shard_range(int64_t items, int rank, int size) {
    check(items >= 0, "shard_range: items must be >= 0, got ", items);
    check(size >= 1, "shard_range: size (the number of ranks) must be >= 1, got ", size);
    check(rank >= 0 && rank < size, "shard_range: rank must be in [0, size = ", size, "), got ",
          rank);
    const int64_t base = items / size, extra = items % size;
    const int64_t begin = rank * base + (rank < extra ? rank : extra);
    return {begin, begin + base + (rank < extra ? 1 : 0)};
}

}  // namespace lstm::dist
