#pragma once

// The stack loop: everything an LSTM call does around the cell's arithmetic, written once for
// the step engines that run on it (lstm/variants/basic.hpp's; lstm/variants/concat.hpp, the
// worked example docs/architecture.md walks through). It walks layers, directions and time, sorts
// the batch by length so the sequences still running at step t are the sorted rows [0, active[t])
// (lstm/detail/ batch_order.hpp), gathers inputs and initial states into that order and scatters
// outputs, final states and their gradients back, carves the workspace and the reserve, carries the
// running state of rows whose sequences have ended or not yet started, and splits backward into
// its data and weights parts. A step engine supplies only the arithmetic of one step.
//
// Layout, host memory: the layer-0 input, every layer's output and their gradients are (T, N, W)
// planes with rows in sorted order, so step t of a layer is rows [t N, t N + active[t]).
//
// The step engine E<T> (the step structs below say what each call reads and writes):
//   E(const Config&, int64_t seq_len, int64_t batch)       constructed per call, cheap
//   void carve_workspace(Carver&) / carve_reserve(Carver&)  its own buffers, after the loop's
//   void forward_step(const ForwardStep<T>&)                one step of one cell
//   void backward_step(const BackwardStep<T>&)              its data part
//   void weight_step(const WeightStep<T>&)                  its weight gradients (ADDED)
// Steps of a cell run in order (forward: s = 0 .. T-1, backward and weights: s = T-1 .. 0), cells
// in order (layer, then direction); a split backward calls weight_step in the order `all` does,
// so the two give the same bits.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "kernels/cpu/permute.hpp"
#include "lstm/detail/batch_order.hpp"
#include "lstm/detail/carve.hpp"
#include "lstm/params.hpp"
#include "lstm/variant.hpp"

namespace lstm {

// The time index of the s-th step a direction processes.
inline int64_t step_time(int64_t s, int64_t seq_len, int64_t direction) {
    return direction == 0 ? s : seq_len - 1 - s;
}

// Where one cell (layer, direction) stands; every pointer is host memory.
struct CellStep {
    int64_t layer, direction, cell;  // cell = layer * D + direction
    int64_t s, t;                    // the s-th step this direction takes is time t
    int64_t rows;                    // active rows at t (a sorted prefix)
    int64_t t_prev, rows_prev;       // the step before (s - 1) and its rows; rows_prev 0 at s 0
    int64_t in_width;                // this layer's input features
    CellOffsets p;                   // this cell's parameters in the flat layout
};

template <typename T>
struct ForwardStep : CellStep {
    const T* params;  // (param_count) flat, PyTorch order
    const T* x;       // (rows, in_width) this step's layer input, rows in_width apart
    T* out;           // (rows, S) this step's output: the layer output's rows, out_width apart
    int64_t out_width;
    T* h;           // (N, S) running h: in h_{t-1} of every row, out h_t of the active rows
    T* c;           // (N, H) running c: the same for c
    bool training;  // keep what backward reads in the engine's reserve
};

template <typename T>
struct BackwardStep : CellStep {
    const T* params;
    const T* d_out;  // (rows, S) gradient w.r.t. this step's output, out_width apart
    int64_t out_width;
    T* d_in;          // (rows, in_width) ADDED: gradient w.r.t. this step's input; null: not wanted
    T* dh;            // (N, S) in: gradient carried into h_t; out: into h_{t-1} (active rows)
    T* dc;            // (N, H) the same for c
    const T* c_init;  // (N, H) this cell's c0, sorted (zeros without)
};

template <typename T>
struct WeightStep : CellStep {
    T* dparams;       // (param_count) ADDED
    const T* x;       // (rows, in_width) this step's layer input
    const T* h_prev;  // (rows, S) h_{t-1} of the active rows (h0 where a sequence starts)
    int64_t seq_len;  // T
};

template <typename T, template <typename> class Engine>
class StackLoop {
    // The instantiation for the other element type, which the sizing queries use.
    template <typename, template <typename> class>
    friend class StackLoop;

public:
    StackLoop(const Config& config, int64_t seq_len, int64_t batch)
        : config_(config), seq_len_(seq_len), batch_(batch), engine_(config, seq_len, batch) {}

    // Bytes of workspace and reserve: the loop's, then the engine's.
    static size_t workspace_bytes(const Config& config, DType dtype, int64_t seq_len,
                                  int64_t batch) {
        return detail::carved_bytes(dtype, [&](detail::Carver& carve, auto element) {
            StackLoop<decltype(element), Engine> loop(config, seq_len, batch);
            loop.carve_workspace(carve);
        });
    }
    static size_t reserve_bytes(const Config& config, DType dtype, int64_t seq_len, int64_t batch) {
        return detail::carved_bytes(dtype, [&](detail::Carver& carve, auto element) {
            StackLoop<decltype(element), Engine> loop(config, seq_len, batch);
            loop.carve_reserve(carve);
        });
    }

    // Every layer; a training forward when args.reserve is set. Host tensors.
    void forward(const ForwardArgs<T>& args) {
        detail::Carver ws_carve(args.workspace);
        carve_workspace(ws_carve);
        const bool training = args.reserve != nullptr;
        if (training) {
            detail::Carver rs_carve(args.reserve);
            carve_reserve(rs_carve);
        }
        detail::make_batch_order(args.lengths, seq_len_, batch_, batch_order_);
        kernels::cpu::gather_steps(args.x.data(), seq_len_, batch_, config_.input_size,
                                   batch_order_.order, batch_order_.active, x_sorted_);
        const int64_t hidden = config_.hidden_size, out_width = config_.output_size();
        const int64_t hs = config_.state_size();
        const T* layer_in = x_sorted_;
        T* layer_out = nullptr;
        for (int64_t l = 0; l < config_.num_layers; ++l) {
            layer_out =
                training ? out_ + l * seq_len_ * batch_ * out_width : (l % 2 == 0 ? ping_ : pong_);
            for (int64_t d = 0; d < config_.num_directions(); ++d) {
                gather_cell(args.h0, l, d, hs, h_);
                gather_cell(args.c0, l, d, hidden, c_);
                ForwardStep<T> step{};
                step.params = args.params.data();
                step.out_width = out_width;
                step.h = h_;
                step.c = c_;
                step.training = training;
                for (int64_t s = 0; s < seq_len_; ++s) {
                    place(step, l, d, s);
                    const int64_t row = step.t * batch_;
                    step.x = layer_in + row * step.in_width;
                    step.out = layer_out + row * out_width + d * hs;
                    engine_.forward_step(step);
                }
                scatter_cell(h_, l, d, hs, args.hn);
                scatter_cell(c_, l, d, hidden, args.cn);
            }
            layer_in = layer_out;
        }
        kernels::cpu::scatter_steps(layer_out, seq_len_, batch_, out_width, batch_order_.order,
                                    batch_order_.active, args.y.data());
    }

    // Backward of the matching training forward: args.part picks the time loop (data), the
    // weight gradients (weights) or both (all).
    void backward(const BackwardArgs<T>& args) {
        const bool data = args.part != BackwardPart::weights;
        const bool weights = args.part != BackwardPart::data;
        detail::Carver ws_carve(args.workspace);
        carve_workspace(ws_carve);
        detail::Carver rs_carve(args.reserve);
        carve_reserve(rs_carve);
        detail::make_batch_order(args.lengths, seq_len_, batch_, batch_order_);
        // The layer-0 input is only a partner of the input-weight gradient.
        if (weights)
            kernels::cpu::gather_steps(args.x.data(), seq_len_, batch_, config_.input_size,
                                       batch_order_.order, batch_order_.active, x_sorted_);
        const int64_t hidden = config_.hidden_size, out_width = config_.output_size();
        const int64_t hs = config_.state_size();
        if (!data) {
            for (int64_t l = 0; l < config_.num_layers; ++l)
                for (int64_t d = 0; d < config_.num_directions(); ++d) {
                    gather_cell(args.h0, l, d, hs, h_init_);
                    for (int64_t s = seq_len_ - 1; s >= 0; --s) weight_step(args, l, d, s);
                }
            return;
        }
        // d(layer output) of the top layer is dy; each layer's d(input) feeds the one below.
        T* d_out = ping_;
        T* d_in = pong_;
        kernels::cpu::gather_steps(args.dy.data(), seq_len_, batch_, out_width, batch_order_.order,
                                   batch_order_.active, d_out);
        for (int64_t l = config_.num_layers - 1; l >= 0; --l) {
            const int64_t in_width = config_.layer_input_size(l);
            const bool want_d_in = l > 0 || !args.dx.empty();
            if (want_d_in) std::fill(d_in, d_in + seq_len_ * batch_ * in_width, T(0));
            for (int64_t d = 0; d < config_.num_directions(); ++d) {
                // Initial states rebuild h_{t-1} / c_{t-1} of each sequence's first step.
                if (weights) gather_cell(args.h0, l, d, hs, h_init_);
                gather_cell(args.c0, l, d, hidden, c_init_);
                gather_cell(args.dhn, l, d, hs, h_);
                gather_cell(args.dcn, l, d, hidden, c_);
                BackwardStep<T> step{};
                step.params = args.params.data();
                step.out_width = out_width;
                step.dh = h_;
                step.dc = c_;
                step.c_init = c_init_;
                for (int64_t s = seq_len_ - 1; s >= 0; --s) {
                    place(step, l, d, s);
                    const int64_t row = step.t * batch_;
                    step.d_out = d_out + row * out_width + d * hs;
                    step.d_in = want_d_in ? d_in + row * in_width : nullptr;
                    engine_.backward_step(step);
                    if (weights) weight_step(args, l, d, s);
                }
                scatter_cell(h_, l, d, hs, args.dh0);
                scatter_cell(c_, l, d, hidden, args.dc0);
            }
            std::swap(d_out, d_in);
        }
        if (!args.dx.empty())
            kernels::cpu::scatter_steps(d_out, seq_len_, batch_, config_.input_size,
                                        batch_order_.order, batch_order_.active, args.dx.data());
    }

    // The layer outputs a training forward keeps: (L, T, N, D*S), sorted rows.
    const T* layer_outputs() const { return out_; }

private:
    void carve_workspace(detail::Carver& carve) {
        const int64_t hidden = config_.hidden_size;
        const int64_t width = std::max(config_.input_size, config_.output_size());
        batch_order_.order = carve.take<int64_t>(batch_);
        batch_order_.active = carve.take<int64_t>(seq_len_);
        x_sorted_ = carve.take<T>(seq_len_ * batch_ * config_.input_size);
        ping_ = carve.take<T>(seq_len_ * batch_ * width);
        pong_ = carve.take<T>(seq_len_ * batch_ * width);
        // Every state buffer is N * H: S <= H, so they fit the projected width too.
        for (T** state : {&h_, &c_, &h_prev_, &h_init_, &c_init_})
            *state = carve.take<T>(batch_ * hidden);
        engine_.carve_workspace(carve);
    }

    void carve_reserve(detail::Carver& carve) {
        out_ = carve.take<T>(config_.num_layers * seq_len_ * batch_ * config_.output_size());
        engine_.carve_reserve(carve);
    }

    // Fills the CellStep part of `step` for step s of direction d of layer l.
    void place(CellStep& step, int64_t l, int64_t d, int64_t s) const {
        step.layer = l;
        step.direction = d;
        step.cell = l * config_.num_directions() + d;
        step.s = s;
        step.t = step_time(s, seq_len_, d);
        step.rows = batch_order_.active[step.t];
        step.t_prev = s > 0 ? step_time(s - 1, seq_len_, d) : 0;
        step.rows_prev = s > 0 ? batch_order_.active[step.t_prev] : 0;
        step.in_width = config_.layer_input_size(l);
        step.p = cell_offsets(config_, l, d);
    }

    // dst (N, width) sorted <- this cell's slice of an (L*D, N, width) state tensor (zeros when
    // it is empty).
    template <typename V>
    void gather_cell(const V& state, int64_t l, int64_t d, int64_t width, T* dst) const {
        const int64_t cell = l * config_.num_directions() + d;
        kernels::cpu::gather_rows(state.empty() ? nullptr : state.data() + cell * batch_ * width,
                                  batch_, width, batch_order_.order, dst);
    }

    // This cell's slice of an (L*D, N, width) state tensor <- src (N, width) sorted, back in the
    // caller's row order; nothing when the tensor is empty (not wanted).
    void scatter_cell(const T* src, int64_t l, int64_t d, int64_t width,
                      const TensorView<T>& state) const {
        if (state.empty()) return;
        const int64_t cell = l * config_.num_directions() + d;
        kernels::cpu::scatter_rows(src, batch_, width, batch_order_.order,
                                   state.data() + cell * batch_ * width);
    }

    // Step s of the weight gradients of direction d of layer l: h_{t-1} of the active rows from
    // the kept layer outputs (rows that ran the step before) and h_init_ (rows starting here).
    void weight_step(const BackwardArgs<T>& args, int64_t l, int64_t d, int64_t s) {
        const int64_t hs = config_.state_size(), out_width = config_.output_size();
        WeightStep<T> step{};
        place(step, l, d, s);
        const T* out = out_ + l * seq_len_ * batch_ * out_width + d * hs;
        const T* prev = out + step.t_prev * batch_ * out_width;
        for (int64_t r = 0; r < step.rows; ++r) {
            const T* src = r < step.rows_prev ? prev + r * out_width : h_init_ + r * hs;
            std::memcpy(h_prev_ + r * hs, src, sizeof(T) * hs);
        }
        const T* layer_in = l == 0 ? x_sorted_ : out_ + (l - 1) * seq_len_ * batch_ * out_width;
        step.dparams = args.dparams.data();
        step.x = layer_in + step.t * batch_ * step.in_width;
        step.h_prev = h_prev_;
        step.seq_len = seq_len_;
        engine_.weight_step(step);
    }

    const Config& config_;
    int64_t seq_len_, batch_;
    Engine<T> engine_;
    detail::BatchOrder batch_order_{};
    T* x_sorted_ = nullptr;  // (T, N, I) the layer-0 input, sorted
    T* ping_ = nullptr;      // (T, N, W) W = max(I, D*S): inference layer output / backward d_out
    T* pong_ = nullptr;      // (T, N, W) the other half of the pair
    T* h_ = nullptr;         // (N, S) running h (forward) / gradient carried into h (backward)
    T* c_ = nullptr;         // (N, H) running c / gradient carried into c
    T* h_prev_ = nullptr;    // (N, S) weights: h_{t-1} of the active rows
    T* h_init_ = nullptr;    // (N, S) backward: this cell's h0, sorted
    T* c_init_ = nullptr;    // (N, H) backward: this cell's c0, sorted
    T* out_ = nullptr;       // reserve (L, T, N, D*S): every layer's output
};

// The plan of a step engine's variant: the stack loop's sizes, and the loop run on the engine in
// the dtype of the call.
template <template <typename> class Engine>
class StackPlan final : public Plan {
public:
    StackPlan(const Variant& variant, const PlanRequest& r)
        : Plan(variant, r,
               StackLoop<float, Engine>::workspace_bytes(r.config, r.dtype, r.seq_len, r.batch),
               StackLoop<float, Engine>::reserve_bytes(r.config, r.dtype, r.seq_len, r.batch)) {}

protected:
    void run_forward(const ForwardArgs<float>& a) const override { loop(a.x).forward(a); }
    void run_forward(const ForwardArgs<double>& a) const override { loop(a.x).forward(a); }
    void run_backward(const BackwardArgs<float>& a) const override { loop(a.x).backward(a); }
    void run_backward(const BackwardArgs<double>& a) const override { loop(a.x).backward(a); }

private:
    // x (T, N, I), host.
    template <typename T>
    StackLoop<T, Engine> loop(const TensorView<const T>& x) const {
        return StackLoop<T, Engine>(config(), x.size(0), x.size(1));
    }
};

// A CPU variant made of one step engine, in float and double, split backward included: what an
// engine needs to be registered (lstm/registry.hpp). The engine class says who it is:
//   static constexpr const char* kName;                          the variant's name
//   static std::optional<std::string> supports(const Config&);  why not, or nullopt
//   static std::string describe();                               what it runs, for reports
//   using Cell = ...;      its element-wise cell (kernels/common/gates.hpp), which the oracle reads
template <template <typename> class Engine>
class EngineVariant final : public Variant {
public:
    const char* name() const override { return Engine<float>::kName; }
    Device device() const override { return Device::cpu; }
    std::optional<std::string> supports(const Config& config, DType) const override {
        return Engine<float>::supports(config);
    }
    // The stack loop runs the weights part from what the data part left (see WeightStep).
    std::optional<std::string> supports_split_backward() const override { return std::nullopt; }
    std::string describe_path(const std::string&) const override {
        return Engine<float>::describe();
    }
    const CellFunctions& cell() const override {
        return cell_functions<typename Engine<float>::Cell>();
    }

protected:
    std::unique_ptr<Plan> build_plan(const PlanRequest& request) const override {
        return std::make_unique<StackPlan<Engine>>(*this, request);
    }
};

}  // namespace lstm
