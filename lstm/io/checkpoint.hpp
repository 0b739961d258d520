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
// dropout forwards so far, from which the next masks are drawn. Anything else a training program
// keeps (its data order, its own random state) can be added to the same TensorFile under other
// names before it is written.

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "lstm/buffer.hpp"
#include "lstm/error.hpp"
#include "lstm/io/safetensors.hpp"
#include "lstm/io/state_dict.hpp"
#include "lstm/nn/model.hpp"

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

// dst (any memory space, src.size() elements) <- src (host); overwrites.
template <typename T>
void from_host(nn::SequenceModel<T>& model, const std::vector<T>& src, TensorView<T> dst) {
    Buffer::copy(dst.data(), dst.device(), src.data(), Device::cpu, sizeof(T) * src.size(),
                 model.lstm().context());
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

// Copies tensor `name` of `file` into dst (n elements of T, host): shape and dtype must match.
template <typename T>
void copy_tensor(const TensorFile& file, const std::string& name, const std::vector<int64_t>& shape,
                 T* dst, Widening widening = Widening::none) {
    const Tensor& t = file.at(name);
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
    if (widen) {
        const std::vector<float> narrow = t.values<float>();
        std::copy(narrow.begin(), narrow.end(), dst);
    } else if (!t.bytes.empty()) {
        std::memcpy(dst, t.bytes.data(), t.bytes.size());
    }
}

}  // namespace detail

// Appends the model's checkpoint tensors to `file` and sets its "format" metadata.
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
}

// Writes the model's checkpoint to `path`.
template <typename T>
void save_checkpoint(const std::string& path, nn::SequenceModel<T>& model) {
    TensorFile file;
    add_checkpoint(file, model);
    write_safetensors(path, file);
}

namespace detail {

// The LSTM and dense parameters of `file` ("lstm.*", "fc.weight", "fc.bias"), checked against
// the model's configuration and read into host scratch, so that a bad tensor changes nothing.
template <typename T>
struct ModelParameters {
    std::vector<T> lstm, dense;
};

template <typename T>
ModelParameters<T> read_model_parameters(const TensorFile& file, nn::SequenceModel<T>& model) {
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
    ModelParameters<T> p;
    p.lstm = import_lstm_params<T>(file, config, "lstm.");
    p.dense.resize(static_cast<size_t>(dense_parameters(model).numel()));
    copy_tensor(file, "fc.weight", {out, in}, p.dense.data(), Widening::f32_to_f64);
    if (bias) copy_tensor(file, "fc.bias", {out}, p.dense.data() + out * in, Widening::f32_to_f64);
    return p;
}

template <typename T>
void write_model_parameters(const ModelParameters<T>& p, nn::SequenceModel<T>& model) {
    model.lstm().load_parameters(Span<const T>(p.lstm));
    from_host(model, p.dense, dense_parameters(model));
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
    detail::write_model_parameters(detail::read_model_parameters(file, model), model);
}

// Restores the model from checkpoint tensors. The model must have been built with the same
// ModelConfig (LSTM shape, classes, dense bias; the error names what differs); extra tensors in
// the file are left for the caller. Nothing is changed when anything is missing or mismatched.
template <typename T>
void load_checkpoint(const TensorFile& file, nn::SequenceModel<T>& model) {
    const auto format = file.metadata.find("format");
    check(format != file.metadata.end() && format->second == kCheckpointFormat, file.source,
          ": not a checkpoint of this library (metadata \"format\" should be '", kCheckpointFormat,
          "', got ", format == file.metadata.end() ? "none" : "'" + format->second + "'", ")");
    const Config& config = model.lstm().config();
    nn::Adam<T>& adam = model.optimizer();
    // Everything is read into scratch first, so a bad tensor leaves the model as it was.
    const detail::ModelParameters<T> params = detail::read_model_parameters(file, model);
    std::vector<std::vector<T>> moments;
    std::vector<int64_t> steps(static_cast<size_t>(adam.buffer_count()));
    for (int64_t k = 0; k < adam.buffer_count(); ++k) {
        const int64_t n = adam.exp_avg(k).numel();
        for (const char* what : {"exp_avg", "exp_avg_sq"}) {
            moments.emplace_back(static_cast<size_t>(n));
            detail::copy_tensor(file, detail::optimizer_name(k, what), {n}, moments.back().data());
        }
        // A second moment is a mean of squares; a negative one makes the next step's sqrt NaN in
        // every parameter it touches. (NaN is let through: a diverged run saves it honestly.)
        const std::vector<T>& v = moments.back();
        const auto negative = std::find_if(v.begin(), v.end(), [](T e) { return e < 0; });
        if (negative != v.end())
            fail(file.source, ": ", detail::optimizer_name(k, "exp_avg_sq"), "[",
                 negative - v.begin(), "] = ", *negative,
                 " is negative; a second moment must be >= 0");
        detail::copy_tensor(file, detail::optimizer_name(k, "step"), {1}, &steps[k]);
        check(steps[k] >= 0, file.source, ": ", detail::optimizer_name(k, "step"), " = ", steps[k],
              " must be >= 0");
    }
    // Older checkpoints have no dropout state; a model without dropout does not need one.
    int64_t rng[2] = {0, 0};
    const bool has_rng = file.contains(detail::kDropoutState);
    check(has_rng || config.dropout == 0.0, file.source, ": the checkpoint has no '",
          detail::kDropoutState, "', which a model with dropout (", config.dropout,
          ") needs to resume exactly");
    if (has_rng) detail::copy_tensor(file, detail::kDropoutState, {2}, rng);
    detail::write_model_parameters(params, model);
    for (int64_t k = 0; k < adam.buffer_count(); ++k) {
        detail::from_host(model, moments[2 * k], adam.exp_avg(k));
        detail::from_host(model, moments[2 * k + 1], adam.exp_avg_sq(k));
        adam.set_steps(k, steps[k]);
    }
    if (has_rng)
        model.lstm().set_dropout_state(static_cast<uint64_t>(rng[0]),
                                       static_cast<uint64_t>(rng[1]));
}

// Reads a checkpoint file into the model.
template <typename T>
void load_checkpoint(const std::string& path, nn::SequenceModel<T>& model) {
    load_checkpoint(read_safetensors(path), model);
}

}  // namespace lstm::io
