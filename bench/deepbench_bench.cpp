#include "deepbench_bench.hpp"

#include <string>
#include <vector>

#include "lstm/config.hpp"
#include "pass_bench.hpp"

namespace lstm::bench {

const std::vector<DeepBenchShape>& deepbench_shapes() {
    static const std::vector<DeepBenchShape> all = {
        {512, 16, 25},   {512, 64, 25},  {1024, 64, 25},
        {1024, 128, 25}, {2048, 32, 25}, {256, 16, 150},
    };
    return all;
}

std::string deepbench_shape_name(const DeepBenchShape& s) {
    return "H:" + std::to_string(s.hidden) + "/N:" + std::to_string(s.batch) +
           "/T:" + std::to_string(s.seq_len);
}

void register_deepbench_cases(const BenchFlags& flags) {
    // DeepBench's LSTM: one layer, unidirectional, input size = H.
    std::vector<PassShape> shapes;
    for (const DeepBenchShape& s : deepbench_shapes())
        shapes.push_back(
            {deepbench_shape_name(s), Config{s.hidden, s.hidden, 1, false}, s.seq_len, s.batch});
    register_pass_cases("deepbench", shapes,
                        {Pass::fwd, Pass::bwd_data, Pass::bwd_weights, Pass::bwd}, flags);
}

}  // namespace lstm::bench
