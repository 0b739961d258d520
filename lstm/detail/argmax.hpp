#pragma once

// The argmax of one row of scores, shared by classification (lstm/nn/predict.hpp) and greedy CTC
// decoding (lstm/loss/ctc_decode.hpp), so that both pick a class as torch.argmax does.

#include <cmath>
#include <cstdint>

namespace lstm::detail {

// Index of the largest of row[0, classes) (host, classes >= 1), the first on ties. torch.argmax
// takes NaN as the largest value: the first NaN wins, and nothing beats it.
template <typename T>
int64_t argmax_row(const T* row, int64_t classes) {
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
        if (row[c] > row[best] || (std::isnan(row[c]) && !std::isnan(row[best]))) best = c;
    return best;
}

}  // namespace lstm::detail
