#pragma once

// `lstm_tool lstm`: runs an nn.LSTM state_dict on the tensors of a safetensors file with any
// registered variant, forward and optionally backward, and writes every result to a file.

#include <cstdint>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "lstm/io/safetensors.hpp"
#include "lstm/io/state_dict.hpp"
#include "lstm/memory.hpp"
#include "lstm/problem.hpp"
#include "lstm/registry.hpp"
#include "lstm/variant.hpp"
#include "tools/lstm_tool/cli.hpp"
#include "tools/lstm_tool/device_buffer.hpp"

namespace lstm::tool {

inline const char* lstm_help() {
    return R"(usage: lstm_tool lstm --params P.safetensors --inputs X.safetensors
                      --out O.safetensors [--variant NAME] [--device cpu|cuda]
                      [--prefix PREFIX] [--backward]

Runs the nn.LSTM whose state_dict is in P on the tensors of X and writes the results to O.
The configuration (input size, hidden size, layers, bidirectional, bias, proj_size) is inferred
from P's names and shapes (weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k},
weight_hr_l{k}, "_reverse" suffix). Shapes are PyTorch's, time-major: T steps, N sequences,
I inputs, H hidden units, S = proj_size if P has weight_hr_l{k}, else H, L layers,
D directions.

inputs (X):
  x         (T, N, I)      F32 or F64; F32 computes in float, F64 in double (P may be F32)
  lengths   (N)            optional, I32 or I64, each in 1..T; default: all T
  h0        (L*D, N, S)    optional initial hidden state; default: zeros
  c0        (L*D, N, H)    optional initial cell state; default: zeros
  dy        (T, N, D*S)    with --backward: gradient of the loss w.r.t. y
  dhn, dcn  (L*D, N, S), (L*D, N, H)
                           with --backward, optional: gradients w.r.t. hn, cn
outputs (O):
  y (T, N, D*S), hn (L*D, N, S), cn (L*D, N, H): states at each sequence's last valid step
  with --backward also: dx (T, N, I); dh0, dc0 when h0, c0 were given; and grad.<name> for
  every parameter of P (e.g. grad.weight_ih_l0), the gradient of sum(dy*y) + sum(dhn*hn) +
  sum(dcn*cn), which is what PyTorch's autograd gives for those output gradients.

options:
  --params FILE     safetensors state_dict of a torch.nn.LSTM
  --inputs FILE     safetensors file with the inputs above
  --out FILE        where to write the outputs: a file is replaced whole (or kept, when the
                    write fails); a pipe or device such as /dev/stdout is written to
  --variant NAME    variant to run (default: the first registered on the device, see below)
  --device DEV      cpu (default) or cuda
  --prefix PREFIX   names in P start with PREFIX, e.g. "encoder.lstm." (default: none)
  --backward        also run backward
  --help            this text
)";
}

struct LstmRequest {
    std::string params_path, inputs_path, out_path, variant, prefix;
    Device device = Device::cpu;
    bool backward = false;
};

namespace detail {

// "inputs file X: tensor 'h0' must have shape (2, 3, 4) (L*D, N, H), got (3, 4)".
inline void require_shape(const io::TensorFile& file, const io::Tensor& t,
                          const std::vector<int64_t>& shape, const char* meaning) {
    if (t.shape == shape) return;
    fail(file.source, ": tensor '", t.name, "' must have shape ", io::shape_string(shape), " ",
         meaning, ", got ", t.shape_string());
}

inline const Variant& pick_variant(const std::string& name, Device device) {
    if (!name.empty()) return find_variant(name, device);
    const std::vector<const Variant*> on = variants_on(device);
    if (!on.empty()) return *on.front();
    std::string known;
    for (const Variant* v : variants())
        known += (known.empty() ? "" : ", ") + std::string(v->name()) + " (" +
                 to_string(v->device()) + ")";
    fail("no variant runs on ", to_string(device), " in this binary; known: ", known);
}

}  // namespace detail

// Refuses, by name and before anything is allocated, a run whose host buffers cannot fit: the
// outputs exist three times on the host for cpu variants (the variant's buffer, the download,
// the file's tensor), twice for cuda ones; x and the parameters twice (read, uploaded).
template <typename T>
void check_host_memory(const Variant& variant, const Config& config, int64_t seq_len, int64_t batch,
                       bool backward, uint64_t workspace, uint64_t reserve) {
    const bool host = variant.device() == Device::cpu;
    const int64_t copies = host ? 3 : 2;
    const int64_t states = backward ? 4 : 2;  // hn, cn (and dh0, dc0); S <= H bounds both
    MemoryRequest request;
    request.add("x", MemoryRequest::bytes({seq_len, batch, config.input_size, 2}, sizeof(T)))
        .add("parameters", MemoryRequest::bytes({param_count(config), 2}, sizeof(T)))
        .add("y", MemoryRequest::bytes({seq_len, batch, config.output_size(), copies}, sizeof(T)))
        .add("states",
             MemoryRequest::bytes({config.num_cells(), batch, config.hidden_size, states, copies},
                                  sizeof(T)));
    if (host) request.add("workspace", workspace).add("reserve", reserve);
    if (backward)
        request
            .add("dy", MemoryRequest::bytes({seq_len, batch, config.output_size(), 2}, sizeof(T)))
            .add("dx", MemoryRequest::bytes({seq_len, batch, config.input_size, copies}, sizeof(T)))
            .add("parameter gradients",
                 MemoryRequest::bytes({param_count(config), copies + 1}, sizeof(T)));
    request.check("lstm_tool lstm (" + std::string(variant.name()) + ", T " +
                  std::to_string(seq_len) + ", N " + std::to_string(batch) + ", H " +
                  std::to_string(config.hidden_size) + ")");
}

// Runs the request on tensors already read; `T` is the compute type (x's dtype). Returns the
// output file's contents.
template <typename T>
io::TensorFile run_lstm(const LstmRequest& req, const io::TensorFile& params_file,
                        const io::TensorFile& inputs) {
    using detail::require_shape;
    const std::set<std::string> known = {"x", "lengths", "h0", "c0", "dy", "dhn", "dcn"};
    std::vector<std::string> unknown;
    for (const io::Tensor& t : inputs.tensors())
        if (!known.count(t.name)) unknown.push_back("'" + t.name + "'");
    check(unknown.empty(), inputs.source,
          ": tensors the lstm command does not read: ", io::detail::join_limited(unknown),
          " (it reads x, lengths, h0, c0, dy, dhn, dcn)");

    const Config config = io::infer_lstm_config(params_file, req.prefix);
    // x's dtype picks the compute type, so here (unlike in the library) the way out of an F64
    // state_dict with F32 inputs is usually to give the inputs as F64, not to convert the file.
    if constexpr (std::is_same_v<T, float>) {
        for (const ParamEntry& e : param_entries(config)) {
            const io::Tensor& t = params_file.at(req.prefix + e.name);
            if (t.dtype == io::ScalarType::f64)
                fail(params_file.source, ": ", t.name,
                     " has dtype F64 and cannot be imported into F32 parameters without rounding; "
                     "tensor 'x' of ",
                     inputs.source,
                     " is F32, which runs in float: give x and the other inputs (h0, c0, dy, dhn, "
                     "dcn) as F64 to run in double, or convert the file to F32 first");
        }
    }
    const std::vector<T> params = io::import_lstm_params<T>(params_file, config, req.prefix);
    const DType dtype = dtype_of<T>();

    const io::Tensor& x_t = inputs.at("x");
    check(x_t.rank() == 3, inputs.source, ": tensor 'x' must have rank 3 (T, N, I), got shape ",
          x_t.shape_string());
    const int64_t seq_len = x_t.shape[0], batch = x_t.shape[1];
    check(seq_len >= 1 && batch >= 1, inputs.source, ": tensor 'x' has shape ", x_t.shape_string(),
          "; T and N must be >= 1");
    check(x_t.shape[2] == config.input_size, inputs.source, ": tensor 'x' has input size ",
          x_t.shape[2], " (shape ", x_t.shape_string(), ") but the LSTM in ", params_file.source,
          " has input_size ", config.input_size);
    const int64_t cells = config.num_cells(), hidden = config.hidden_size;
    const int64_t hs = config.state_size();  // width of h (proj_size with a projection)
    const std::vector<int64_t> h_shape = {cells, batch, hs};
    const std::vector<int64_t> c_shape = {cells, batch, hidden};
    const std::vector<int64_t> y_shape = {seq_len, batch, config.output_size()};

    std::vector<int64_t> lengths;
    if (const io::Tensor* t = inputs.find("lengths")) {
        require_shape(inputs, *t, {batch}, "(N)");
        lengths = t->integers();
    }
    // Reads an optional float input of shape `shape`; empty when absent.
    auto optional_input = [&](const char* name, const std::vector<int64_t>& shape,
                              const char* meaning) -> std::optional<std::vector<T>> {
        const io::Tensor* t = inputs.find(name);
        if (t == nullptr) return std::nullopt;
        require_shape(inputs, *t, shape, meaning);
        return t->values<T>();
    };
    const auto h0 = optional_input("h0", h_shape, "(L*D, N, S)");
    const auto c0 = optional_input("c0", c_shape, "(L*D, N, H)");
    std::optional<std::vector<T>> dy, dhn, dcn;
    if (req.backward) {
        check(inputs.contains("dy"), inputs.source,
              ": --backward needs tensor 'dy' (T, N, D*S) = ", io::shape_string(y_shape),
              "; the file has ", inputs.name_list());
        dy = optional_input("dy", y_shape, "(T, N, D*S)");
        dhn = optional_input("dhn", h_shape, "(L*D, N, S)");
        dcn = optional_input("dcn", c_shape, "(L*D, N, H)");
    }

    const Variant& variant = detail::pick_variant(req.variant, req.device);
    const Device dev = variant.device();
    const Span<const int64_t> lengths_span(lengths.data(), static_cast<int64_t>(lengths.size()));
    // Lengths first, so "lengths[1] = 9 exceeds T = 8" wins over a variant's objection to them.
    try {
        lstm::detail::check_lengths(lengths_span, seq_len, batch);
    } catch (const InvalidArgument& e) {
        fail(inputs.source, ": tensor 'lengths': ", e.what());  // the file to fix, like the rest
    }
    variant.require(config, dtype, lstm::detail::has_variable_lengths(lengths_span, seq_len));

    const size_t workspace = variant.workspace_bytes(config, dtype, seq_len, batch);
    const size_t reserve = req.backward ? variant.reserve_bytes(config, dtype, seq_len, batch) : 0;
    check_host_memory<T>(variant, config, seq_len, batch, req.backward, workspace, reserve);

    const DeviceContext device_context = open_device_context(dev);
    using P = ProblemTensor;
    LstmProblem<T> problem(config, seq_len, batch, dev, device_context.get());
    problem.lengths = lengths;
    problem.set(P::x, x_t.values<T>());
    problem.set(P::params, params);
    if (h0) problem.set(P::h0, *h0);
    if (c0) problem.set(P::c0, *c0);
    for (P output : {P::y, P::hn, P::cn}) problem.allocate(output);
    problem.allocate_scratch(variant, req.backward);
    variant.forward(config, problem.forward_args(req.backward));

    io::TensorFile out;
    out.metadata = {{"lstm_tool", "lstm"},
                    {"variant", variant.name()},
                    {"device", to_string(dev)},
                    {"dtype", to_string(dtype)},
                    {"input_size", std::to_string(config.input_size)},
                    {"hidden_size", std::to_string(config.hidden_size)},
                    {"num_layers", std::to_string(config.num_layers)},
                    {"bidirectional", config.bidirectional ? "true" : "false"},
                    {"bias", config.bias ? "true" : "false"},
                    {"proj_size", std::to_string(config.proj_size)}};
    out.add(io::Tensor::from("y", y_shape, problem.get(P::y)));
    out.add(io::Tensor::from("hn", h_shape, problem.get(P::hn)));
    out.add(io::Tensor::from("cn", c_shape, problem.get(P::cn)));
    if (!req.backward) return out;

    problem.set(P::dy, *dy);
    if (dhn) problem.set(P::dhn, *dhn);
    if (dcn) problem.set(P::dcn, *dcn);
    problem.allocate(P::dx);
    if (h0) problem.allocate(P::dh0);
    if (c0) problem.allocate(P::dc0);
    problem.fill(P::dparams, T(0));  // backward accumulates into it
    variant.backward(config, problem.backward_args());

    out.add(io::Tensor::from("dx", x_t.shape, problem.get(P::dx)));
    if (h0) out.add(io::Tensor::from("dh0", h_shape, problem.get(P::dh0)));
    if (c0) out.add(io::Tensor::from("dc0", c_shape, problem.get(P::dc0)));
    const std::vector<T> grads = problem.get(P::dparams);
    io::export_lstm<T>(out, config, Span<const T>(grads.data(), static_cast<int64_t>(grads.size())),
                       "grad.");
    return out;
}

// Parses the words after "lstm", runs, writes --out. Returns the exit code; throws UsageError
// and lstm::Error for the caller to report.
inline int lstm_command(const std::vector<std::string>& args, std::ostream& out) {
    const ParsedArgs parsed = parse_args(args, {{"params", true},
                                                {"inputs", true},
                                                {"out", true},
                                                {"variant", true},
                                                {"device", true},
                                                {"prefix", true},
                                                {"backward", false}});
    if (parsed.help) {
        out << lstm_help();
        out << "\nvariants in this binary:";
        for (const Variant* v : variants())
            out << " " << v->name() << " (" << to_string(v->device()) << ")";
        out << "\n";
        return kExitOk;
    }
    if (!parsed.positional.empty())
        throw UsageError("unexpected argument '" + parsed.positional.front() + "'");
    LstmRequest req;
    req.params_path = parsed.required("params");
    req.inputs_path = parsed.required("inputs");
    req.out_path = parsed.required("out");
    req.variant = parsed.value("variant").value_or("");
    req.prefix = parsed.value("prefix").value_or("");
    req.device = parse_device(parsed.value("device").value_or("cpu"));
    req.backward = parsed.flags.count("backward") != 0;

    const io::TensorFile params = read_input_file("--params", req.params_path);
    const io::TensorFile inputs = read_input_file("--inputs", req.inputs_path);
    const io::Tensor& x = inputs.at("x");
    io::TensorFile result;
    if (x.dtype == io::ScalarType::f32)
        result = run_lstm<float>(req, params, inputs);
    else if (x.dtype == io::ScalarType::f64)
        result = run_lstm<double>(req, params, inputs);
    else
        fail(inputs.source, ": tensor 'x' has dtype ", io::to_string(x.dtype),
             ", expected F32 or F64");
    io::write_safetensors(req.out_path, result);
    return kExitOk;
}

}  // namespace lstm::tool
