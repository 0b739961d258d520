#include "reference_check.hpp"

#include <algorithm>
#include <exception>
#include <random>
#include <vector>

#include "lstm/detail/random.hpp"
#include "lstm/reference/split_check.hpp"
#include "lstm/reference/variant_check.hpp"

namespace lstm::bench {

namespace {

// Any fixed value; fixed so that a failure reproduces.
constexpr uint64_t kCheckDySeed = 7;

// The picked sequences (the first and the last of the batch: for Braun's CTC batch, the shortest
// and the longest) over min(T, kCheckSteps) steps, their lengths scaled by the same factor so a
// variable-length batch stays variable. Values are the fp32 data widened to double, so the
// variant (which gets them back in fp32) and the reference see the very same numbers.
reference::LstmCase make_slice(const Config& config, TensorView<const float> x,
                               Span<const int64_t> lengths, Span<const float> params) {
    const int64_t full_len = x.size(0), full_batch = x.size(1), width = config.input_size;
    std::vector<int64_t> picks = {0};
    if (full_batch > 1) picks.push_back(full_batch - 1);
    reference::LstmCase c;
    c.in.config = config;
    c.in.seq_len = std::min(full_len, kCheckSteps);
    c.in.batch = static_cast<int64_t>(picks.size());
    for (int64_t t = 0; t < c.in.seq_len; ++t)
        for (int64_t n : picks) {
            const float* row = x.data() + (t * full_batch + n) * width;
            c.in.x.insert(c.in.x.end(), row, row + width);
        }
    for (int64_t n : picks) {
        const int64_t len = lengths.empty() ? full_len : lengths[n];
        c.in.lengths.push_back(std::max<int64_t>(1, len * c.in.seq_len / full_len));
    }
    c.in.params.assign(params.begin(), params.end());
    std::mt19937_64 rng(kCheckDySeed);
    c.out_grads.dy.resize(static_cast<size_t>(c.in.seq_len * c.in.batch * config.output_size()));
    for (double& v : c.out_grads.dy) v = static_cast<float>(detail::uniform(rng, -1.0, 1.0));
    return c;
}

}  // namespace

std::optional<std::string> check_against_reference(const Variant& variant, const Config& config,
                                                   TensorView<const float> x,
                                                   Span<const int64_t> lengths,
                                                   Span<const float> params, bool with_split,
                                                   const std::string& path, Precision precision) {
    const reference::LstmCase slice = make_slice(config, x, lengths, params);
    const std::string where = "reference check on " + std::to_string(slice.in.batch) +
                              " sequences x " + std::to_string(slice.in.seq_len) + " steps: ";
    try {
        const auto why =
            with_split ? reference::check_variant_with_split<float>(variant, slice, path, precision)
                       : reference::check_variant<float>(variant, slice, path, precision);
        if (why) return where + *why;
    } catch (const std::exception& e) {
        return where + "threw: " + e.what();
    }
    return std::nullopt;
}

}  // namespace lstm::bench
