#include "crosscheck_export.hpp"

#include "features.hpp"
#include "lstm/error.hpp"
#include "lstm/io/safetensors.hpp"

namespace spoken_digits {

namespace {

void add_split(lstm::io::TensorFile& file, const std::string& name, const Dataset& d) {
    std::vector<float> features;
    features.reserve(static_cast<size_t>(d.frames() * kMelBands));
    std::vector<int64_t> labels, label_lengths;
    for (size_t i = 0; i < d.sequences.size(); ++i) {
        features.insert(features.end(), d.sequences[i].begin(), d.sequences[i].end());
        labels.insert(labels.end(), d.labels[i].begin(), d.labels[i].end());
        label_lengths.push_back(static_cast<int64_t>(d.labels[i].size()));
    }
    const auto count = static_cast<int64_t>(d.lengths.size());
    using lstm::io::Tensor;
    file.add(Tensor::from(name + ".features", {d.frames(), kMelBands}, features));
    file.add(Tensor::from(name + ".lengths", {count}, d.lengths));
    file.add(Tensor::from(name + ".labels", {static_cast<int64_t>(labels.size())}, labels));
    file.add(Tensor::from(name + ".label_lengths", {count}, label_lengths));
}

}  // namespace

void write_crosscheck(const std::string& path, const ExportInfo& info, const Splits& splits,
                      const std::vector<std::vector<float>>& heldout_logits) {
    lstm::check(heldout_logits.size() == splits.heldout.lengths.size(),
                "write_crosscheck: heldout_logits has ", heldout_logits.size(),
                " utterances, the held-out split ", splits.heldout.lengths.size());
    lstm::io::TensorFile file;
    add_split(file, "train", splits.train);
    add_split(file, "heldout", splits.heldout);
    std::vector<float> logits;
    for (const auto& rows : heldout_logits) logits.insert(logits.end(), rows.begin(), rows.end());
    const int64_t rows = info.task == Task::isolated ? static_cast<int64_t>(heldout_logits.size())
                                                     : splits.heldout.frames();
    lstm::check(static_cast<int64_t>(logits.size()) == rows * info.classes,
                "write_crosscheck: ", logits.size(), " logits, expected ", rows, " rows of ",
                info.classes);
    file.add(lstm::io::Tensor::from("heldout.logits", {rows, info.classes}, logits));
    file.metadata = {{"task", to_string(info.task)},
                     {"variant", info.variant},
                     {"hidden", std::to_string(info.hidden)},
                     {"layers", std::to_string(info.layers)},
                     {"classes", std::to_string(info.classes)},
                     {"blank", std::to_string(info.blank)},
                     {"seed", std::to_string(info.seed)},
                     {"epochs", std::to_string(info.epochs)},
                     {"exact_lengths", info.exact_lengths ? "1" : "0"}};
    lstm::io::write_safetensors(path, file);
}

}  // namespace spoken_digits
