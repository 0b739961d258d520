#pragma once

#include <cstdint>

#include "lstm/tensor.hpp"

namespace lstm::detail {

// Per-call batch bookkeeping for variable lengths. Sequences are ordered by length, longest
// first (stable, so ties keep their index order), which makes the sequences still running at any
// step a prefix of that order: step t touches only rows [0, active[t]), and the work of a call is
// proportional to the sum of lengths.
struct BatchOrder {
    int64_t* order;   // (N) order[r] = original index of sorted row r
    int64_t* active;  // (T) number of sequences with length > t
};

// Fills `out` from lengths (host, N entries, empty: all T). Insertion sort: allocation-free,
// stable, and N is a batch size, so the quadratic worst case stays small.
inline void make_batch_order(Span<const int64_t> lengths, int64_t seq_len, int64_t batch,
                             BatchOrder out) {
    auto len = [&](int64_t n) { return lengths.empty() ? seq_len : lengths[n]; };
    for (int64_t r = 0; r < batch; ++r) {
        const int64_t n = r;
        int64_t k = r;
        while (k > 0 && len(out.order[k - 1]) < len(n)) {
            out.order[k] = out.order[k - 1];
            --k;
        }
        out.order[k] = n;
    }
    int64_t count = batch;
    for (int64_t t = 0; t < seq_len; ++t) {
        while (count > 0 && len(out.order[count - 1]) <= t) --count;
        out.active[t] = count;
    }
}

}  // namespace lstm::detail
