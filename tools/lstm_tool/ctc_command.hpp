#pragma once

// `lstm_tool ctc`: CTC loss and its gradient (lstm/loss/ctc.hpp, PyTorch's ctc_loss semantics)
// on the tensors of a safetensors file.

#include <cctype>
#include <cstdint>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "lstm/io/safetensors.hpp"
#include "lstm/loss/ctc.hpp"
#include "lstm/loss/reduction.hpp"
#include "lstm/memory.hpp"
#include "tools/lstm_tool/cli.hpp"
#include "tools/lstm_tool/device_buffer.hpp"

namespace lstm::tool {

inline const char* ctc_help() {
    return R"(usage: lstm_tool ctc --inputs X.safetensors --out O.safetensors [--blank B]
                     [--reduction none|sum|mean] [--zero-infinity] [--device cpu|cuda]
                     [--backend own|cudnn|automatic]

Computes the CTC loss of the tensors in X with torch.nn.functional.ctc_loss's semantics and its
gradient, and writes both to O. T frames, N samples, C classes (blank included).

inputs (X):
  logits or log_probs  (T, N, C)  F32 or F64 (computes in that type); exactly one of the two.
                       logits get a softmax over C inside; log_probs are used as given
  targets              (N, S) padded, or 1-D concatenated (sum of target_lengths); I32 or I64
  input_lengths        (N) I32 or I64, each in 1..T
  target_lengths       (N) I32 or I64
outputs (O):
  loss   (N) per-sample losses for --reduction none, else a scalar (shape ())
  grad   (T, N, C) gradient w.r.t. the given input of the reduced loss (for none: of the sum of
         the per-sample losses). For logits it equals PyTorch's logits.grad after
         ctc_loss(logits.log_softmax(-1), ...).backward(). For log_probs it is the derivative
         w.r.t. log_probs itself (-posterior); PyTorch's log_probs.grad adds exp(log_probs) to it.
  An infeasible sample (too few frames for its labels) has loss +inf (0 with --zero-infinity)
  and zero gradient.

options:
  --inputs FILE        safetensors file with the inputs above
  --out FILE           where to write loss and grad: a file is replaced whole (or kept, when
                       the write fails); a pipe or device such as /dev/stdout is written to
  --blank B            index of the blank class (default 0)
  --reduction R        none, sum or mean (default mean: PyTorch's, each loss divided by its
                       target length, then averaged over the batch)
  --zero-infinity      infeasible samples contribute 0 instead of +inf
  --device DEV         cpu (default) or cuda
  --backend B          only with --device cuda: own (default: this library's kernel, double
                       alpha/beta like the cpu), cudnn (cuDNN's CTC, float; an error where it
                       does not apply) or automatic (what ctc_loss picks: own)
  --help               this text
)";
}

struct CtcRequest {
    std::string inputs_path, out_path;
    int64_t blank = 0;
    loss::Reduction reduction = loss::Reduction::mean;
    bool zero_infinity = false;
    Device device = Device::cpu;
    // The tool checks numbers, so by default it runs the kernel with the cpu's accuracy.
    loss::CtcBackend backend = loss::CtcBackend::own;
};

// Runs the request on tensors already read; `T` is the compute type (the input's dtype).
template <typename T>
io::TensorFile run_ctc(const CtcRequest& req, const io::TensorFile& inputs) {
    const std::set<std::string> known = {"logits", "log_probs", "targets", "input_lengths",
                                         "target_lengths"};
    std::vector<std::string> unknown;
    for (const io::Tensor& t : inputs.tensors())
        if (!known.count(t.name)) unknown.push_back("'" + t.name + "'");
    check(unknown.empty(), inputs.source,
          ": tensors the ctc command does not read: ", io::detail::join_limited(unknown),
          " (it reads logits or log_probs, targets, input_lengths, target_lengths)");

    const bool logits = inputs.contains("logits");
    const io::Tensor& input = inputs.at(logits ? "logits" : "log_probs");
    check(input.rank() == 3, inputs.source, ": tensor '", input.name,
          "' must have rank 3 (T, N, C), got shape ", input.shape_string());
    const std::vector<T> values = input.values<T>();
    const io::Tensor& targets_t = inputs.at("targets");
    check(targets_t.rank() == 1 || targets_t.rank() == 2, inputs.source,
          ": tensor 'targets' must be padded (N, S) or concatenated 1-D, got shape ",
          targets_t.shape_string());
    const std::vector<int64_t> targets = targets_t.integers();
    const io::Tensor& input_lengths_t = inputs.at("input_lengths");
    const io::Tensor& target_lengths_t = inputs.at("target_lengths");
    for (const io::Tensor* t : {&input_lengths_t, &target_lengths_t})
        check(t->rank() == 1, inputs.source, ": tensor '", t->name,
              "' must have rank 1 (N), got shape ", t->shape_string());
    const std::vector<int64_t> input_lengths = input_lengths_t.integers();
    const std::vector<int64_t> target_lengths = target_lengths_t.integers();

    const int64_t frames = input.shape[0], batch = input.shape[1], classes = input.shape[2];
    // Host copies of (T, N, C): the input read and (for cpu) uploaded, the gradient as written,
    // downloaded and put in the file; the loss's workspace is checked by ctc_loss itself.
    const int64_t copies = req.device == Device::cpu ? 5 : 3;
    MemoryRequest()
        .add("input and gradient",
             MemoryRequest::bytes({frames, batch, classes, copies}, sizeof(T)))
        .check("lstm_tool ctc (T " + std::to_string(frames) + ", N " + std::to_string(batch) +
               ", C " + std::to_string(classes) + ")");
    // The input and the outputs live on the requested device; targets and lengths stay host.
    const DeviceContext device_context = open_device_context(req.device);
    cuda::Context* ctx = device_context.get();
    const DeviceBuffer input_d = DeviceBuffer::upload(req.device, values, ctx);
    loss::CtcArgs<T> args;
    args.context = ctx;
    const TensorView<const T> input_view(input_d.as<const T>(), {frames, batch, classes},
                                         req.device);
    (logits ? args.logits : args.log_probs) = input_view;
    args.targets =
        targets_t.rank() == 2
            ? TensorView<const int64_t>(targets.data(), {targets_t.shape[0], targets_t.shape[1]})
            : TensorView<const int64_t>(targets.data(), {targets_t.shape[0]});
    args.input_lengths =
        Span<const int64_t>(input_lengths.data(), static_cast<int64_t>(input_lengths.size()));
    args.target_lengths =
        Span<const int64_t>(target_lengths.data(), static_cast<int64_t>(target_lengths.size()));
    args.blank = req.blank;
    args.reduction = req.reduction;
    args.zero_infinity = req.zero_infinity;
    args.backend = req.backend;

    DeviceBuffer grad_d(req.device, sizeof(T) * values.size(), ctx);
    DeviceBuffer losses_d(req.device, sizeof(T) * static_cast<size_t>(batch), ctx);
    loss::CtcOutputs<T> outputs;
    const TensorView<T> grad_view(grad_d.as<T>(), {frames, batch, classes}, req.device);
    (logits ? outputs.grad_logits : outputs.grad_log_probs) = grad_view;
    outputs.losses = TensorView<T>(losses_d.as<T>(), {batch}, req.device);
    T reduced{};
    try {
        reduced = loss::ctc_loss(args, outputs);
    } catch (const InvalidArgument& e) {
        // The loss checks the tensors it was given (lengths, targets, blank against C); name the
        // file they came from, as every other complaint about the inputs does.
        fail(inputs.source, ": ", e.what());
    }
    const std::vector<T> grad = grad_d.download<T>(), losses = losses_d.download<T>();

    io::TensorFile out;
    out.metadata = {{"lstm_tool", "ctc"},
                    {"input", logits ? "logits" : "log_probs"},
                    {"device", to_string(req.device)},
                    {"blank", std::to_string(req.blank)},
                    {"reduction", loss::to_string(req.reduction)},
                    {"zero_infinity", req.zero_infinity ? "true" : "false"}};
    if (req.reduction == loss::Reduction::none)
        out.add(io::Tensor::from("loss", {batch}, losses));
    else
        out.add(io::Tensor::from("loss", {}, &reduced));
    out.add(io::Tensor::from("grad", input.shape, grad));
    return out;
}

inline int ctc_command(const std::vector<std::string>& args, std::ostream& out) {
    const ParsedArgs parsed = parse_args(args, {{"inputs", true},
                                                {"out", true},
                                                {"blank", true},
                                                {"reduction", true},
                                                {"zero-infinity", false},
                                                {"device", true},
                                                {"backend", true}});
    if (parsed.help) {
        out << ctc_help();
        return kExitOk;
    }
    if (!parsed.positional.empty())
        throw UsageError("unexpected argument '" + parsed.positional.front() + "'");
    CtcRequest req;
    req.inputs_path = parsed.required("inputs");
    req.out_path = parsed.required("out");
    if (const auto blank = parsed.value("blank")) {
        size_t used = 0;
        try {
            // stoll skips leading blanks; the value must be the whole argument.
            if (!blank->empty() && !std::isspace(static_cast<unsigned char>(blank->front())))
                req.blank = std::stoll(*blank, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used == 0 || used != blank->size())
            throw UsageError("--blank must be an integer, got '" + *blank + "'");
        // Its upper bound, C - 1, comes with the inputs; a negative index never fits.
        if (req.blank < 0) throw UsageError("--blank must be >= 0, got " + *blank);
    }
    const std::string reduction = parsed.value("reduction").value_or("mean");
    if (reduction == "none")
        req.reduction = loss::Reduction::none;
    else if (reduction == "sum")
        req.reduction = loss::Reduction::sum;
    else if (reduction == "mean")
        req.reduction = loss::Reduction::mean;
    else
        throw UsageError("--reduction must be none, sum or mean, got '" + reduction + "'");
    req.zero_infinity = parsed.flags.count("zero-infinity") != 0;
    req.device = parse_device(parsed.value("device").value_or("cpu"));
    const std::string backend = parsed.value("backend").value_or("own");
    if (backend == "own")
        req.backend = loss::CtcBackend::own;
    else if (backend == "cudnn")
        req.backend = loss::CtcBackend::cudnn;
    else if (backend == "automatic")
        req.backend = loss::CtcBackend::automatic;
    else
        throw UsageError("--backend must be own, cudnn or automatic, got '" + backend + "'");
    // The cpu has one CTC kernel; a backend asked for there would be ignored without a word.
    if (parsed.has("backend") && req.device != Device::cuda)
        throw UsageError("--backend applies only with --device cuda, got --backend " + backend +
                         " with --device " + to_string(req.device));

    const io::TensorFile inputs = read_input_file("--inputs", req.inputs_path);
    const bool logits = inputs.contains("logits"), log_probs = inputs.contains("log_probs");
    check(logits != log_probs, inputs.source,
          logits ? ": give either 'logits' or 'log_probs', got both"
                 : ": needs a tensor 'logits' or 'log_probs' (T, N, C)");
    const io::Tensor& input = inputs.at(logits ? "logits" : "log_probs");
    io::TensorFile result;
    if (input.dtype == io::ScalarType::f32)
        result = run_ctc<float>(req, inputs);
    else if (input.dtype == io::ScalarType::f64)
        result = run_ctc<double>(req, inputs);
    else
        fail(inputs.source, ": tensor '", input.name, "' has dtype ", io::to_string(input.dtype),
             ", expected F32 or F64");
    io::write_safetensors(req.out_path, result);
    return kExitOk;
}

}  // namespace lstm::tool
