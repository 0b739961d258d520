#pragma once

// Registers kernels/activations/<target>: the fused variant's vector sigmoid and tanh (the gate
// math of its epilogues) over an L1-resident array, once per Highway target this CPU runs, in ns
// per element. A kernel-research case: the training step spends a few percent in this math, too
// little to see a change to it through the step's own noise.

namespace lstm::bench {

void register_activation_cases();

}  // namespace lstm::bench
