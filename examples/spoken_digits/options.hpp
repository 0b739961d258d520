// Spoken-digits example: the command line of spoken_digits_train (usage text in options.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "lstm/tensor.hpp"

namespace spoken_digits {

enum class Task {
    isolated,   // one digit per utterance: cross-entropy on the mean-pooled outputs, accuracy
    connected,  // strings of 3 to 7 digits: CTC per frame, greedy decoding, label error rate
};

const char* to_string(Task task);

struct Options {
    std::string data_dir;
    Task task = Task::isolated;
    std::string variant = "fused";
    lstm::Precision precision = lstm::Precision::full;  // the LSTM's compute precision
    int64_t epochs = 0;  // 0 with --import: evaluate only; the default is the task's (options.cpp)
    int64_t hidden = 128;
    int64_t batch = 16;
    int64_t threads = 0;  // 0: OpenMP's default
    int64_t seed = 1;
    double lr = 3e-3;
    double dropout = 0.3;
    // Every batch of one exact frame count: forced for variants without per-sequence lengths
    // (onednn), and for all variants in the consistency study so that they see the same batches.
    bool exact_lengths = false;
    std::string checkpoint;  // empty: DATA_DIR/spoken_digits_<task>_<variant>.safetensors
    // Whether the run writes `checkpoint`: every run that trains, and an --epochs 0 run when
    // --checkpoint is given (an evaluation alone must not overwrite the default path, which may
    // be the very checkpoint it imports, optimizer state and all).
    bool write_checkpoint = false;
    std::string import_path;    // a state dict (lstm.*, fc.*) to start from instead of the seed
    std::string export_path;    // where to write the data and held-out outputs for a cross-check
    std::string curve_path;     // where to write one TSV row per epoch
    double min_accuracy = 0.0;  // isolated: exit 1 below this held-out accuracy
    double max_ler = 1.0;       // connected: exit 1 above this held-out label error rate
};

// Exits with status 2 and the usage text on a bad command line.
Options parse_options(int argc, char** argv);

}  // namespace spoken_digits
