// Spoken-digits example: the file that carries a run's data and outputs to another framework,
// so that pytorch_crosscheck.py can train on the same features or evaluate the same model and
// compare its outputs with this library's.
#pragma once

#include <string>
#include <vector>

#include "dataset.hpp"
#include "options.hpp"

namespace spoken_digits {

// What describes the model that produced heldout_logits, written as the file's metadata.
struct ExportInfo {
    Task task = Task::isolated;
    std::string variant;
    int64_t hidden = 0, layers = 0, classes = 0, blank = -1;  // blank: connected only
    int64_t seed = 0, epochs = 0;
    bool exact_lengths = false;
};

// Writes a safetensors file at `path` with, for each split s in {train, heldout}:
//   s.features       F32 (frames of the split, kMelBands): every utterance's frames, in order
//   s.lengths        I64 (utterances): frame counts
//   s.labels         I64 (labels of the split): every utterance's labels, in order
//   s.label_lengths  I64 (utterances)
// and heldout.logits F32: (utterances, classes) for the isolated task (the head's output per
// utterance), (held-out frames, classes) for the connected one (per frame, in the order of
// heldout.features). heldout_logits holds one host vector per held-out utterance.
void write_crosscheck(const std::string& path, const ExportInfo& info, const Splits& splits,
                      const std::vector<std::vector<float>>& heldout_logits);

}  // namespace spoken_digits
