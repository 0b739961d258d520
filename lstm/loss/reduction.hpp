#pragma once

namespace lstm::loss {

// How per-element losses become the returned loss, with PyTorch's meaning: none keeps them
// apart (see each loss for what it returns then), sum adds them, mean divides the sum by the
// number of counted elements.
enum class Reduction { none, sum, mean };

inline const char* to_string(Reduction reduction) {
    switch (reduction) {
        case Reduction::none:
            return "none";
        case Reduction::sum:
            return "sum";
        case Reduction::mean:
            return "mean";
    }
    return "unknown";
}

}  // namespace lstm::loss
