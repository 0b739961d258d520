#pragma once

// Exact checkpoints of a SequenceModel, on the host or a GPU, in one safetensors file: the LSTM and
// dense parameters, Adam's moments and step count per buffer, and the LSTM's dropout random state.
// Loading them into a model built with the same ModelConfig and variant resumes training bit for
// bit (tests/checkpoint_test.cpp). Learning-rate schedules (lstm/nn/schedule.hpp) are functions of
// the step, so the step count saved here is their position too.
//
// Names: the LSTM under "lstm." with nn.LSTM's state_dict names, the head as "fc.weight" (classes,
// D*H) and "fc.bias", so a PyTorch module with members `lstm` and `fc` loads them with
// load_state_dict(strict=False); "optimizer.<k>.exp_avg", "optimizer.<k>.exp_avg_sq" (float, as
// the parameters) and "optimizer.<k>.step" (int64, shape (1)) for the optimizer's buffers (0: the
// LSTM, 1: the dense layer); "rng.lstm_dropout" (int64, shape (2)): the seed and the number of
// dropout forwards so far, from which the next masks are drawn. With a BatchSampler
// (lstm/nn/sampler.hpp), its place in the data too: "sampler.position" (int64, shape (2)): the
// epoch and the batches of it already taken; "sampler.batch_sizes" (int64, (B)) and
// "sampler.indices" (int64, the sum of batch_sizes): that epoch's batches, concatenated. Anything
// else a training program keeps (its own random state) can be added under other names.

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lstm/buffer.hpp"
#include "lstm/error.hpp"
#include "lstm/io/safetensors.hpp"
#include "lstm/io/state_dict.hpp"
#include "lstm/nn/model.hpp"
#include "lstm/nn/sampler.hpp"

namespace lstm::io {

// Written as the file's "format" metadata and required when reading.
inline constexpr const char* kCheckpointFormat = "lstm-checkpoint-1";

namespace detail {

// The dense head's flat parameters (nn::Dense's layout: weight (out, in) row-major, then the
// bias) as a view in the model's memory space.
template <typename T>
TensorView<T> dense_parameters(nn::SequenceModel<T>& model) {
#if LSTM_WITH_CUDA
    if (model.device() == Device::cuda) return model.dense_cuda().parameters();
#endif
    const Span<T> p = model.dense().parameters();
    return TensorView<T>(p.data, {p.size});
}

// A copy on the host of `v` (any memory space), after the model's queued work.
template <typename T>
std::vector<T> to_host(nn::SequenceModel<T>& model, TensorView<const T> v) {
    std::vector<T> out(static_cast<size_t>(v.numel()));
    Buffer::copy(out.data(), Device::cpu, v.data(), v.device(), sizeof(T) * out.size(),
                 model.lstm().context());
    return out;
}

inline std::string describe(const Config& c) {
    return "input " + std::to_string(c.input_size) + ", hidden " + std::to_string(c.hidden_size) +
           ", " + std::to_string(c.num_layers) + " layer(s), " +
           (c.bidirectional ? "bidirectional" : "unidirectional") +
           (c.proj_size > 0 ? ", proj_size " + std::to_string(c.proj_size) : "") +
           (c.bias ? "" : ", no biases");
}

inline constexpr const char* kDropoutState = "rng.lstm_dropout";

inline std::string optimizer_name(int64_t k, const char* what) {
    return "optimizer." + std::to_string(k) + "." + what;
}

// Whether an F32 tensor may fill double parameters (exact), as import_lstm_params allows; a
// checkpoint's optimizer state is restored in its own dtype only.
enum class Widening { none, f32_to_f64 };

// Tensor `name` of `file` (a TensorFile or a TensorFileReader), checked to have `shape` and T's
// dtype (or F32 for a double model, with f32_to_f64). Only the header is read.
template <typename T, typename File>
const auto& checked_tensor(const File& file, const std::string& name,
                           const std::vector<int64_t>& shape, Widening widening = Widening::none) {
    const auto& t = file.at(name);
    const bool widen =
        widening == Widening::f32_to_f64 && std::is_same_v<T, double> && t.dtype == ScalarType::f32;
    // Unwidened F32 for a double model is an optimizer moment of an F32 checkpoint (its parameters
    // widened before it): the message alone would not say how such a model can still be loaded.
    const bool unwidened = std::is_same_v<T, double> && t.dtype == ScalarType::f32;
    check(t.dtype == scalar_type_of<T>() || widen, file.source, ": tensor '", name, "' has dtype ",
          to_string(t.dtype), ", the model needs ", to_string(scalar_type_of<T>()),
          unwidened ? "; load_checkpoint restores a checkpoint in its own dtype only, while "
                      "io::load_model_parameters widens its F32 parameters (lstm.*, fc.*) into "
                      "a double model exactly and leaves the optimizer state as it is"
                    : "");
    check(t.shape == shape, file.source, ": tensor '", name, "' has shape ", t.shape_string(),
          ", the model needs ", shape_string(shape));
    return t;
}

// Copies the elements of `t` (checked with checked_tensor) into dst (t.numel() elements of T in
// `device`'s memory; overwrites), a staged piece at a time.
template <typename T, typename File, typename Entry>
void copy_to_model(nn::SequenceModel<T>& model, const File& file, const Entry& t, T* dst,
                   Device device) {
    visit_values<T>(file, t, [&](const T* v, size_t n) {
        Buffer::copy(dst, device, v, Device::cpu, n * sizeof(T), model.lstm().context());
        dst += n;
    });
}

}  // namespace detail

// Appends the model's checkpoint tensors to `file` and sets its "format" metadata, and its
// "precision" (the layer's compute precision, lstm/tensor.hpp: what the run computed in; the
// parameters are the fp32 masters whatever it is, and loading leaves the model's own choice).
// On a GPU everything is copied to the host first (waiting for the queued work).
template <typename T>
void add_checkpoint(TensorFile& file, nn::SequenceModel<T>& model) {
    const Config& config = model.lstm().config();
    std::vector<T> lstm_params(static_cast<size_t>(param_count(config)));
    model.lstm().store_parameters(Span<T>(lstm_params));
    export_lstm(file, config, Span<const T>(lstm_params), "lstm.");
    const int64_t out = model.config().classes, in = config.output_size();
    const std::vector<T> head = detail::to_host<T>(model, detail::dense_parameters(model));
    file.add(Tensor::from("fc.weight", {out, in}, head.data()));
    if (model.config().dense_bias) file.add(Tensor::from("fc.bias", {out}, head.data() + out * in));
    nn::Adam<T>& adam = model.optimizer();
    for (int64_t k = 0; k < adam.buffer_count(); ++k) {
        const std::vector<T> m = detail::to_host<T>(model, adam.exp_avg(k));
        const std::vector<T> v = detail::to_host<T>(model, adam.exp_avg_sq(k));
        file.add(Tensor::from(detail::optimizer_name(k, "exp_avg"), {int64_t(m.size())}, m.data()));
        file.add(
            Tensor::from(detail::optimizer_name(k, "exp_avg_sq"), {int64_t(v.size())}, v.data()));
        const int64_t steps = adam.steps(k);
        file.add(Tensor::from(detail::optimizer_name(k, "step"), {1}, &steps));
    }
    // uint64 state kept bit for bit in safetensors' I64.
    const int64_t rng[2] = {static_cast<int64_t>(model.lstm().dropout_seed()),
                            static_cast<int64_t>(model.lstm().dropout_count())};
    file.add(Tensor::from(detail::kDropoutState, {2}, rng));
    file.metadata["format"] = kCheckpointFormat;
    file.metadata["precision"] = to_string(model.lstm().precision());
}

// The model's checkpoint as sources that read the model's own buffers where they live, for
// write_safetensors to stream: the tensors and metadata add_checkpoint gives, in its order (the
// bytes written are serialize_safetensors of add_checkpoint's file: tests/io_write_test.cpp).
// Valid while the model is neither changed nor destroyed; move-only, because the sources point
// into its `counters`.
struct CheckpointSources {
    std::vector<TensorSource> tensors;
    std::map<std::string, std::string> metadata;
    std::vector<int64_t> counters;  // Adam's step counts and the dropout state, by value
    // Values of tensors added after the model's (a sampler's state); the sources point into the
    // inner vectors, whose storage stays where it is when the outer one grows.
    std::vector<std::vector<int64_t>> held;

    CheckpointSources() = default;
    CheckpointSources(CheckpointSources&&) = default;
    CheckpointSources& operator=(CheckpointSources&&) = default;
    CheckpointSources(const CheckpointSources&) = delete;
    CheckpointSources& operator=(const CheckpointSources&) = delete;
};

namespace detail {

// A source for `shape` elements of T at `data` in `device`'s memory: host memory is written
// straight from there, device memory through the writer's staging chunk (a copy that waits for
// the model's queued work).
template <typename T>
TensorSource model_source(nn::SequenceModel<T>& model, std::string name, std::vector<int64_t> shape,
                          const T* data, Device device) {
    TensorSource s = TensorSource::of(std::move(name), std::move(shape), data);
    if (device != Device::cpu) {
        s.host = nullptr;
        cuda::Context* context = model.lstm().context();
        s.fill = [data, device, context](uint64_t offset, size_t size, void* dst) {
            Buffer::copy(dst, Device::cpu, reinterpret_cast<const unsigned char*>(data) + offset,
                         device, size, context);
        };
    }
    return s;
}

}  // namespace detail

// The model's checkpoint as CheckpointSources (above), reading its buffers in their memory space.
template <typename T>
CheckpointSources checkpoint_sources(nn::SequenceModel<T>& model) {
    CheckpointSources out;
    const Config& config = model.lstm().config();
    const FlatSpan<const T> lstm_params = std::as_const(model.lstm()).parameters();
    for (const ParamEntry& e : param_entries(config)) {
        std::vector<int64_t> shape =
            e.cols == 0 ? std::vector<int64_t>{e.rows} : std::vector<int64_t>{e.rows, e.cols};
        out.tensors.push_back(detail::model_source<T>(model, "lstm." + e.name, std::move(shape),
                                                      lstm_params.data + e.offset,
                                                      lstm_params.device));
    }
    const int64_t classes = model.config().classes, in = config.output_size();
    const TensorView<T> head = detail::dense_parameters(model);
    out.tensors.push_back(
        detail::model_source<T>(model, "fc.weight", {classes, in}, head.data(), head.device()));
    if (model.config().dense_bias)
        out.tensors.push_back(detail::model_source<T>(model, "fc.bias", {classes},
                                                      head.data() + classes * in, head.device()));
    nn::Adam<T>& adam = model.optimizer();
    // Reserved whole first: the sources keep pointers into it.
    out.counters.reserve(static_cast<size_t>(adam.buffer_count()) + 2);
    for (int64_t k = 0; k < adam.buffer_count(); ++k) {
        const TensorView<T> m = adam.exp_avg(k), v = adam.exp_avg_sq(k);
        out.tensors.push_back(detail::model_source<T>(model, detail::optimizer_name(k, "exp_avg"),
                                                      {m.numel()}, m.data(), m.device()));
        out.tensors.push_back(detail::model_source<T>(
            model, detail::optimizer_name(k, "exp_avg_sq"), {v.numel()}, v.data(), v.device()));
        out.counters.push_back(adam.steps(k));
        out.tensors.push_back(
            TensorSource::of(detail::optimizer_name(k, "step"), {1}, &out.counters.back()));
    }
    // uint64 state kept bit for bit in safetensors' I64.
    out.counters.push_back(static_cast<int64_t>(model.lstm().dropout_seed()));
    out.counters.push_back(static_cast<int64_t>(model.lstm().dropout_count()));
    out.tensors.push_back(
        TensorSource::of(detail::kDropoutState, {2}, &out.counters[out.counters.size() - 2]));
    out.metadata["format"] = kCheckpointFormat;
    out.metadata["precision"] = to_string(model.lstm().precision());
    return out;
}

// Writes the model's checkpoint to `path`, streaming it from the model's buffers: beyond the
// header it adds at most one kWriteChunkBytes staging chunk to host memory (for a GPU model),
// never a copy of the file. As write_safetensors: once it returns the checkpoint survives a
// crash of the process or the machine, and a failure leaves the previous checkpoint whole.
template <typename T>
void save_checkpoint(const std::string& path, nn::SequenceModel<T>& model) {
    const CheckpointSources sources = checkpoint_sources(model);
    write_safetensors(path, sources.tensors, sources.metadata);
}

namespace detail {

inline constexpr const char* kSamplerPosition = "sampler.position";
inline constexpr const char* kSamplerBatchSizes = "sampler.batch_sizes";
inline constexpr const char* kSamplerIndices = "sampler.indices";

// The sampler's state as three int64 vectors: (epoch, position), the batch sizes, the indices.
inline std::vector<std::vector<int64_t>> sampler_values(const nn::BatchSampler& sampler) {
    const nn::BatchSampler::State& state = sampler.state();
    std::vector<std::vector<int64_t>> out(3);
    out[0] = {state.epoch, state.position};
    for (const std::vector<int64_t>& batch : state.batches) {
        out[1].push_back(static_cast<int64_t>(batch.size()));
        out[2].insert(out[2].end(), batch.begin(), batch.end());
    }
    return out;
}

}  // namespace detail

// Appends the sampler's state ("sampler.*", see the top of this file) to `file`.
inline void add_sampler_state(TensorFile& file, const nn::BatchSampler& sampler) {
    const std::vector<std::vector<int64_t>> v = detail::sampler_values(sampler);
    file.add(Tensor::from(detail::kSamplerPosition, {2}, v[0]));
    file.add(Tensor::from(detail::kSamplerBatchSizes, {static_cast<int64_t>(v[1].size())}, v[1]));
    file.add(Tensor::from(detail::kSamplerIndices, {static_cast<int64_t>(v[2].size())}, v[2]));
}

// save_checkpoint with the sampler's place in the data, so that load_checkpoint(path, model,
// sampler) resumes mid-epoch with the batch after the last one trained.
template <typename T>
void save_checkpoint(const std::string& path, nn::SequenceModel<T>& model,
                     const nn::BatchSampler& sampler) {
    CheckpointSources sources = checkpoint_sources(model);
    for (std::vector<int64_t>& v : detail::sampler_values(sampler))
        sources.held.push_back(std::move(v));
    const char* names[] = {detail::kSamplerPosition, detail::kSamplerBatchSizes,
                           detail::kSamplerIndices};
    for (size_t k = 0; k < 3; ++k) {
        const std::vector<int64_t>& v = sources.held[sources.held.size() - 3 + k];
        sources.tensors.push_back(
            TensorSource::of(names[k], {static_cast<int64_t>(v.size())}, v.data()));
    }
    write_safetensors(path, sources.tensors, sources.metadata);
}

namespace detail {

// Checks the LSTM and dense parameters of `file` ("lstm.*", "fc.weight", "fc.bias") against the
// model's configuration, reading only the header: load_model_parameters and load_checkpoint check
// everything before they copy anything, so that a bad file changes nothing.
template <typename T, typename File>
void check_model_parameters(const File& file, nn::SequenceModel<T>& model) {
    const Config& config = model.lstm().config();
    const Config saved = infer_lstm_config(file, "lstm.");
    check(
        saved.input_size == config.input_size && saved.hidden_size == config.hidden_size &&
            saved.num_layers == config.num_layers && saved.bidirectional == config.bidirectional &&
            saved.proj_size == config.proj_size && saved.bias == config.bias,
        file.source, ": the file's LSTM is ", describe(saved), ", the model's ", describe(config));
    const bool bias = model.config().dense_bias;
    const int64_t out = model.config().classes, in = config.output_size();
    check(file.contains("fc.bias") == bias, file.source, ": the file ", bias ? "lacks" : "has",
          " fc.bias, the model's dense layer ", bias ? "has a bias" : "has none");
    // What import_lstm_params refuses (infer_lstm_config checked the shapes): F64 into float.
    for (const ParamEntry& e : param_entries(config)) {
        const auto& t = file.at("lstm." + e.name);
        check(t.dtype == scalar_type_of<T>() ||
                  (t.dtype == ScalarType::f32 && std::is_same_v<T, double>),
              file.source, ": ", t.name, " has dtype ", to_string(t.dtype),
              " and cannot be imported into ", to_string(scalar_type_of<T>()),
              " parameters without rounding; convert the file first");
    }
    checked_tensor<T>(file, "fc.weight", {out, in}, Widening::f32_to_f64);
    if (bias) checked_tensor<T>(file, "fc.bias", {out}, Widening::f32_to_f64);
}

// Copies the parameters check_model_parameters accepted into the model, tensor by tensor.
template <typename T, typename File>
void write_model_parameters(const File& file, nn::SequenceModel<T>& model) {
    const Config& config = model.lstm().config();
    for (const ParamEntry& e : param_entries(config)) {
        int64_t at = e.offset;
        visit_values<T>(file, file.at("lstm." + e.name), [&](const T* v, size_t n) {
            model.lstm().load_parameters(Span<const T>(v, static_cast<int64_t>(n)), at);
            at += static_cast<int64_t>(n);
        });
    }
    const TensorView<T> dense = dense_parameters(model);
    const int64_t out = model.config().classes, in = config.output_size();
    copy_to_model(model, file, file.at("fc.weight"), dense.data(), dense.device());
    if (model.config().dense_bias)
        copy_to_model(model, file, file.at("fc.bias"), dense.data() + out * in, dense.device());
}

template <typename T, typename File>
void load_checkpoint_from(const File& file, nn::SequenceModel<T>& model) {
    const auto format = file.metadata.find("format");
    check(format != file.metadata.end() && format->second == kCheckpointFormat, file.source,
          ": not a checkpoint of this library (metadata \"format\" should be '", kCheckpointFormat,
          "', got ", format == file.metadata.end() ? "none" : "'" + format->second + "'", ")");
    const Config& config = model.lstm().config();
    nn::Adam<T>& adam = model.optimizer();
    // Everything is checked first (shapes and dtypes from the header, the values that have a
    // valid range from the file), so a bad file leaves the model as it was; then copied.
    check_model_parameters(file, model);
    std::vector<int64_t> steps(static_cast<size_t>(adam.buffer_count()));
    for (int64_t k = 0; k < adam.buffer_count(); ++k) {
        const int64_t n = adam.exp_avg(k).numel();
        checked_tensor<T>(file, optimizer_name(k, "exp_avg"), {n});
        const std::string sq = optimizer_name(k, "exp_avg_sq");
        // A second moment is a mean of squares; a negative one makes the next step's sqrt NaN in
        // every parameter it touches. (NaN is let through: a diverged run saves it honestly.)
        int64_t index = 0;
        visit_values<T>(file, checked_tensor<T>(file, sq, {n}), [&](const T* v, size_t count) {
            for (size_t i = 0; i < count; ++i)
                if (v[i] < 0)
                    fail(file.source, ": ", sq, "[", index + static_cast<int64_t>(i), "] = ", v[i],
                         " is negative; a second moment must be >= 0");
            index += static_cast<int64_t>(count);
        });
        const std::string step = optimizer_name(k, "step");
        visit_values<int64_t>(
            file, checked_tensor<int64_t>(file, step, {1}),
            [&](const int64_t* v, size_t) { steps[static_cast<size_t>(k)] = v[0]; });
        check(steps[static_cast<size_t>(k)] >= 0, file.source, ": ", step, " = ",
              steps[static_cast<size_t>(k)], " must be >= 0");
    }
    // Older checkpoints have no dropout state; a model without dropout does not need one.
    int64_t rng[2] = {0, 0};
    const bool has_rng = file.contains(kDropoutState);
    check(has_rng || config.dropout == 0.0, file.source, ": the checkpoint has no '", kDropoutState,
          "', which a model with dropout (", config.dropout, ") needs to resume exactly");
    if (has_rng)
        visit_values<int64_t>(file, checked_tensor<int64_t>(file, kDropoutState, {2}),
                              [&](const int64_t* v, size_t) { std::memcpy(rng, v, sizeof(rng)); });

    try {
        write_model_parameters(file, model);
        for (int64_t k = 0; k < adam.buffer_count(); ++k) {
            const TensorView<T> m = adam.exp_avg(k), v = adam.exp_avg_sq(k);
            copy_to_model(model, file, file.at(optimizer_name(k, "exp_avg")), m.data(), m.device());
            copy_to_model(model, file, file.at(optimizer_name(k, "exp_avg_sq")), v.data(),
                          v.device());
        }
    } catch (const Error& e) {
        // Only a file read a piece at a time gets here: its bytes changed or became unreadable
        // after they were checked.
        const std::string message = std::string(e.what()) + "; the model is partly loaded from '" +
                                    file.source +
                                    "' (its parameters or optimizer state are a mix): load a "
                                    "whole checkpoint again before training on";
        if (e.kind() == ErrorKind::out_of_memory) throw OutOfMemory(message);
        if (e.kind() == ErrorKind::backend) throw BackendError(message);
        throw InvalidArgument(message);
    }
    for (int64_t k = 0; k < adam.buffer_count(); ++k)
        adam.set_steps(k, steps[static_cast<size_t>(k)]);
    if (has_rng)
        model.lstm().set_dropout_state(static_cast<uint64_t>(rng[0]),
                                       static_cast<uint64_t>(rng[1]));
}

}  // namespace detail

// Loads only the model's parameters from a state dict: "lstm." with nn.LSTM's names, "fc.weight"
// (classes, D*H) and "fc.bias" when the dense layer has one; exactly what PyTorch's
// module.state_dict() holds for a module with members `lstm` (nn.LSTM) and `fc` (nn.Linear),
// and a subset of a checkpoint. For evaluating or fine-tuning a model trained elsewhere: the
// optimizer's moments and step and the dropout state are left as they are. The model must have
// been built with the same LSTM shape, classes and dense bias (the error names what differs);
// nothing is changed when anything is missing or mismatched.
template <typename T>
void load_model_parameters(const TensorFile& file, nn::SequenceModel<T>& model) {
    detail::check_model_parameters(file, model);
    detail::write_model_parameters(file, model);
}

// The same from a file opened with TensorFileReader: each tensor is copied from the file to the
// model's memory a piece at a time, with no host copy of the file.
template <typename T>
void load_model_parameters(const TensorFileReader& file, nn::SequenceModel<T>& model) {
    detail::check_model_parameters(file, model);
    detail::write_model_parameters(file, model);
}

// The same from the safetensors file at `path` (through TensorFileReader).
template <typename T>
void load_model_parameters(const std::string& path, nn::SequenceModel<T>& model) {
    load_model_parameters(TensorFileReader(path), model);
}

// Restores the model from checkpoint tensors. The model must have been built with the same
// ModelConfig (LSTM shape, classes, dense bias; the error names what differs); extra tensors in
// the file are left for the caller. Nothing is changed when anything is missing or mismatched:
// every tensor is checked (its shape and dtype, and the values that have a valid range: second
// moments >= 0, step counts >= 0) before the first is copied.
template <typename T>
void load_checkpoint(const TensorFile& file, nn::SequenceModel<T>& model) {
    detail::load_checkpoint_from(file, model);
}

// The same from a file opened with TensorFileReader, copied from the file to the model's memory
// a piece at a time: the host memory a load adds is the header's index and two pieces of 256 KiB,
// whatever the size of the checkpoint. A read error after the checks (the
// file truncated or damaged while it loads) can leave the model partly loaded; the error says so.
template <typename T>
void load_checkpoint(const TensorFileReader& file, nn::SequenceModel<T>& model) {
    detail::load_checkpoint_from(file, model);
}

// Reads a checkpoint file into the model, streamed as above.
template <typename T>
void load_checkpoint(const std::string& path, nn::SequenceModel<T>& model) {
    load_checkpoint(TensorFileReader(path), model);
}

namespace detail {

// The sampler state "sampler.*" of `file`, checked against `sampler` (its dataset size) without
// changing it.
template <typename File>
nn::BatchSampler::State read_sampler_state(const File& file, const nn::BatchSampler& sampler) {
    for (const char* name : {kSamplerPosition, kSamplerBatchSizes, kSamplerIndices})
        check(file.contains(name), file.source, ": the checkpoint has no '", name,
              "' (it was saved without a sampler)");
    auto values = [&](const char* name) {
        const auto& t = file.at(name);
        check(t.dtype == ScalarType::i64 && t.rank() == 1, file.source, ": tensor '", name,
              "' must be I64 of rank 1, got ", to_string(t.dtype), " ", t.shape_string());
        std::vector<int64_t> out;
        out.reserve(static_cast<size_t>(t.numel()));
        visit_values<int64_t>(
            file, t, [&](const int64_t* v, size_t count) { out.insert(out.end(), v, v + count); });
        return out;
    };
    const std::vector<int64_t> position = values(kSamplerPosition);
    const std::vector<int64_t> sizes = values(kSamplerBatchSizes);
    const std::vector<int64_t> indices = values(kSamplerIndices);
    check(position.size() == 2, file.source, ": tensor '", kSamplerPosition,
          "' must hold (epoch, position), got ", position.size(), " values");
    nn::BatchSampler::State state;
    state.epoch = position[0];
    state.position = position[1];
    size_t next = 0;
    for (size_t b = 0; b < sizes.size(); ++b) {
        check(sizes[b] >= 1 && static_cast<uint64_t>(sizes[b]) <= indices.size() - next,
              file.source, ": ", kSamplerBatchSizes, "[", b, "] = ", sizes[b], " with ",
              indices.size() - next, " of the ", indices.size(), " indices left");
        state.batches.emplace_back(indices.begin() + static_cast<int64_t>(next),
                                   indices.begin() + static_cast<int64_t>(next + sizes[b]));
        next += static_cast<size_t>(sizes[b]);
    }
    check(next == indices.size(), file.source, ": ", kSamplerBatchSizes, " sum to ", next,
          ", but '", kSamplerIndices, "' holds ", indices.size(), " indices");
    try {
        sampler.check_state(state);
    } catch (const Error& e) {
        fail(file.source, ": ", e.what());
    }
    return state;
}

}  // namespace detail

// load_checkpoint that also restores the sampler's place in the data (saved by
// save_checkpoint(path, model, sampler)); the sampler must be built over the same data set.
// Nothing changes, model or sampler, when anything is missing or mismatched.
template <typename T>
void load_checkpoint(const std::string& path, nn::SequenceModel<T>& model,
                     nn::BatchSampler& sampler) {
    const TensorFileReader file(path);
    nn::BatchSampler::State state = detail::read_sampler_state(file, sampler);
    detail::load_checkpoint_from(file, model);
    sampler.set_state(std::move(state));
}

template <typename T>
void load_checkpoint(const TensorFile& file, nn::SequenceModel<T>& model,
                     nn::BatchSampler& sampler) {
    nn::BatchSampler::State state = detail::read_sampler_state(file, sampler);
    detail::load_checkpoint_from(file, model);
    sampler.set_state(std::move(state));
}

}  // namespace lstm::io
