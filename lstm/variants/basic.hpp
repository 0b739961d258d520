#pragma once

// `basic` (cpu): the flexible cell loop, PyTorch's LSTMCell-basic. Per step two GEMMs (input and
// recurrent) and then separate, unfused element-wise passes; backward is the same loop reversed
// (full BPTT) with per-step weight-gradient GEMMs. It is the baseline the papers call "basic",
// and the easiest place to try a change to the cell.
//
// Split backward (BackwardPart): the backward passes write each step's dgates over the activated
// gates in the reserve (in place: every element is read before it is written), so `data` leaves
// them there and `weights` replays the per-step weight GEMMs from them, rebuilding h_{t-1} from
// the reserve and h0. Steps run in the same order as in `all`, which does those GEMMs inside its
// loop, so the gradients are the same bits either way.
//
// Projections (proj_size P > 0): each step adds a third GEMM, h (rows, P) = h_raw W_hr^T with
// h_raw = o * tanh(c); the state carried to the next step and the output are h, width S = P.
// A training forward keeps h_raw, and backward keeps each step's gradient w.r.t. h, because the
// weights part needs both for dW_hr after dgates has overwritten the gates that made h_raw.

#include <algorithm>
#include <cstring>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/permute.hpp"
#include "kernels/cpu/unfused_cell.hpp"
#include "lstm/detail/batch_order.hpp"
#include "lstm/detail/carve.hpp"
#include "lstm/variant.hpp"

namespace lstm::cpu {

namespace basic_detail {

// Scratch of one call. Rows are in length-sorted order (detail::BatchOrder).
template <typename T>
struct Workspace {
    detail::BatchOrder batch;
    T* x_sorted;  // (T, N, I) the layer-0 input, sorted
    T* ping;      // (T, N, W) W = max(I, D*S): inference layer output / backward dy of a layer
    T* pong;      // (T, N, W) the other half of the ping-pong pair
    T* gates;     // (N, 4H) inference: one step's gates
    T* h_raw;     // (N, H) inference with a projection: one step's o * tanh(c)
    T* h;         // (N, S) running h (forward) / gradient carried into h_{t-1} (backward)
    T* c;         // (N, H) running c (forward) / gradient carried into c_{t-1} (backward)
    T* h_prev;    // (N, S) backward: h_{t-1} of the active rows
    T* c_prev;    // (N, H) backward: c_{t-1} of the active rows
    T* dh;        // (N, S) backward: total gradient reaching h_t
    T* dh_raw;    // (N, H) backward with a projection: gradient reaching o * tanh(c_t)
    T* dc;        // (N, H) backward: total gradient reaching c_t
    T* h_init;    // (N, S) backward: h0 of this cell, sorted
    T* c_init;    // (N, H) backward: c0 of this cell, sorted
    T* db_rows;   // (4H) backward: column sums of a chunk of one step's dgates rows
    T* db_step;   // (4H) backward: column sums of one step's dgates
    T* db_block;  // (4H) backward: sum of the db_step of the steps of one block
};

// What a training forward leaves for backward, all in sorted row order.
template <typename T>
struct Reserve {
    T* out;    // (L, T, N, D*H) every layer's output
    T* gates;  // (L*D, T, N, 4H) activated gates of every cell; backward overwrites them with
               // dgates (valid rows of each step)
    T* cell;   // (L*D, T, N, H) c_t of every cell
    T* h_raw;  // (L*D, T, N, H) with a projection: o * tanh(c_t) of every cell; else empty
    T* dh;     // (L*D, T, N, P) with a projection: backward's gradient w.r.t. h_t; else empty
};

template <typename T>
Workspace<T> carve_workspace(detail::Carver& carve, const Config& config, int64_t seq_len,
                             int64_t batch) {
    const int64_t hidden = config.hidden_size;
    const int64_t width = std::max(config.input_size, config.output_size());
    Workspace<T> w{};
    w.batch.order = carve.take<int64_t>(batch);
    w.batch.active = carve.take<int64_t>(seq_len);
    w.x_sorted = carve.take<T>(seq_len * batch * config.input_size);
    w.ping = carve.take<T>(seq_len * batch * width);
    w.pong = carve.take<T>(seq_len * batch * width);
    w.gates = carve.take<T>(batch * 4 * hidden);
    // Every state buffer is N * H: S <= H, so they fit the projected width too.
    for (T** state : {&w.h_raw, &w.h, &w.c, &w.h_prev, &w.c_prev, &w.dh, &w.dh_raw, &w.dc,
                      &w.h_init, &w.c_init})
        *state = carve.take<T>(batch * hidden);
    for (T** sums : {&w.db_rows, &w.db_step, &w.db_block}) *sums = carve.take<T>(4 * hidden);
    return w;
}

template <typename T>
Reserve<T> carve_reserve(detail::Carver& carve, const Config& config, int64_t seq_len,
                         int64_t batch) {
    const int64_t steps = seq_len * batch;
    Reserve<T> r{};
    r.out = carve.take<T>(config.num_layers * steps * config.output_size());
    r.gates = carve.take<T>(config.num_cells() * steps * 4 * config.hidden_size);
    r.cell = carve.take<T>(config.num_cells() * steps * config.hidden_size);
    const bool proj = config.proj_size > 0;
    r.h_raw = carve.take<T>(proj ? config.num_cells() * steps * config.hidden_size : 0);
    r.dh = carve.take<T>(proj ? config.num_cells() * steps * config.proj_size : 0);
    return r;
}

// The bias gradient is the sum of dgates over every valid (step, row), T * N rows of one cell.
// Added one row at a time into db, each addition rounds relative to the whole running sum, so the
// error grew like T * N (2.2e-5 of max|db| in float at T 500, N 1024, H 32, against 4.8e-7 for
// PyTorch, which sums with a cascade). Instead rows are summed in chunks from zero, a step's
// chunk sums into its step sum, a block of steps' sums into a block sum, and only block sums
// into db; each partial sum then holds few terms and the error grows about like the square root
// of the terms at each level. The order is fixed by the step index and the row count, so the
// bits do not depend on the thread count, and the data + weights split gives the bits of `all`.
constexpr int64_t kBiasRowChunk = 32;
constexpr int64_t kBiasStepBlock = 64;

// The time index of the s-th step a direction processes.
inline int64_t step_time(int64_t s, int64_t seq_len, int64_t direction) {
    return direction == 0 ? s : seq_len - 1 - s;
}

// Copies the state (N, H rows) each active row had before step s into dst: from the previous
// step's output for rows that were already running, from the initial state for rows whose
// sequence starts here (only the reverse direction starts sequences late).
template <typename T>
void previous_state(const T* initial, const T* prev_step, int64_t ld_prev, int64_t rows_prev,
                    int64_t rows, int64_t hidden, T* dst) {
    for (int64_t r = 0; r < rows; ++r) {
        const T* src = r < rows_prev ? prev_step + r * ld_prev : initial + r * hidden;
        std::memcpy(dst + r * hidden, src, sizeof(T) * hidden);
    }
}

template <typename T>
class BasicLoop {
public:
    BasicLoop(const Config& config, int64_t seq_len, int64_t batch)
        : config_(config), seq_len_(seq_len), batch_(batch) {}

    // Forward over all layers. Training when reserve is non-null.
    void forward(const ForwardArgs<T>& args) const {
        detail::Carver ws_carve(args.workspace);
        Workspace<T> ws = carve_workspace<T>(ws_carve, config_, seq_len_, batch_);
        Reserve<T> rs{};
        const bool training = args.reserve != nullptr;
        if (training) {
            detail::Carver rs_carve(args.reserve);
            rs = carve_reserve<T>(rs_carve, config_, seq_len_, batch_);
        }
        detail::make_batch_order(args.lengths, seq_len_, batch_, ws.batch);
        kernels::cpu::gather_steps(args.x.data(), seq_len_, batch_, config_.input_size,
                                   ws.batch.order, ws.batch.active, ws.x_sorted);
        const int64_t hidden = config_.hidden_size, out_width = config_.output_size();
        const int64_t hs = config_.state_size();
        const T* layer_in = ws.x_sorted;
        T* layer_out = nullptr;
        for (int64_t l = 0; l < config_.num_layers; ++l) {
            layer_out = training ? rs.out + l * seq_len_ * batch_ * out_width
                                 : (l % 2 == 0 ? ws.ping : ws.pong);
            for (int64_t d = 0; d < config_.num_directions(); ++d) {
                const int64_t cell = l * config_.num_directions() + d;
                const T* h0 = args.h0.empty() ? nullptr : args.h0.data() + cell * batch_ * hs;
                const T* c0 = args.c0.empty() ? nullptr : args.c0.data() + cell * batch_ * hidden;
                kernels::cpu::gather_rows(h0, batch_, hs, ws.batch.order, ws.h);
                kernels::cpu::gather_rows(c0, batch_, hidden, ws.batch.order, ws.c);
                T* gates_all =
                    training ? rs.gates + cell * seq_len_ * batch_ * 4 * hidden : nullptr;
                T* cell_all = training ? rs.cell + cell * seq_len_ * batch_ * hidden : nullptr;
                T* h_raw_all = training && config_.proj_size > 0
                                   ? rs.h_raw + cell * seq_len_ * batch_ * hidden
                                   : nullptr;
                forward_cell(args.params.data(), l, d, ws, layer_in, layer_out, gates_all, cell_all,
                             h_raw_all);
                if (!args.hn.empty())
                    kernels::cpu::scatter_rows(ws.h, batch_, hs, ws.batch.order,
                                               args.hn.data() + cell * batch_ * hs);
                if (!args.cn.empty())
                    kernels::cpu::scatter_rows(ws.c, batch_, hidden, ws.batch.order,
                                               args.cn.data() + cell * batch_ * hidden);
            }
            layer_in = layer_out;
        }
        kernels::cpu::scatter_steps(layer_out, seq_len_, batch_, out_width, ws.batch.order,
                                    ws.batch.active, args.y.data());
    }

    // Backward of the matching training forward; args.part picks the time loop (data), the
    // weight GEMMs (weights) or both (all).
    void backward(const BackwardArgs<T>& args) const {
        const bool data = args.part != BackwardPart::weights;
        const bool weights = args.part != BackwardPart::data;
        detail::Carver ws_carve(args.workspace);
        Workspace<T> ws = carve_workspace<T>(ws_carve, config_, seq_len_, batch_);
        detail::Carver rs_carve(args.reserve);
        const Reserve<T> rs = carve_reserve<T>(rs_carve, config_, seq_len_, batch_);
        detail::make_batch_order(args.lengths, seq_len_, batch_, ws.batch);
        // The layer-0 input is only a partner of the input-weight gradient.
        if (weights)
            kernels::cpu::gather_steps(args.x.data(), seq_len_, batch_, config_.input_size,
                                       ws.batch.order, ws.batch.active, ws.x_sorted);
        const int64_t hidden = config_.hidden_size, out_width = config_.output_size();
        auto layer_input = [&](int64_t l) -> const T* {
            return l == 0 ? ws.x_sorted : rs.out + (l - 1) * seq_len_ * batch_ * out_width;
        };
        if (!data) {
            for (int64_t l = 0; l < config_.num_layers; ++l)
                for (int64_t d = 0; d < config_.num_directions(); ++d)
                    weight_grads_cell(args, l, d, ws, rs, layer_input(l));
            return;
        }
        // d(layer output) of the top layer is dy; each layer's d(input) feeds the one below.
        T* d_out = ws.ping;
        T* d_in = ws.pong;
        kernels::cpu::gather_steps(args.dy.data(), seq_len_, batch_, out_width, ws.batch.order,
                                   ws.batch.active, d_out);
        for (int64_t l = config_.num_layers - 1; l >= 0; --l) {
            const int64_t in_width = config_.layer_input_size(l);
            const bool want_d_in = l > 0 || !args.dx.empty();
            if (want_d_in) std::fill(d_in, d_in + seq_len_ * batch_ * in_width, T(0));
            for (int64_t d = 0; d < config_.num_directions(); ++d) {
                const int64_t cell = l * config_.num_directions() + d;
                const int64_t hs = config_.state_size();
                backward_cell(args, l, d, ws, rs, layer_input(l), d_out, want_d_in ? d_in : nullptr,
                              weights);
                if (!args.dh0.empty())
                    kernels::cpu::scatter_rows(ws.h, batch_, hs, ws.batch.order,
                                               args.dh0.data() + cell * batch_ * hs);
                if (!args.dc0.empty())
                    kernels::cpu::scatter_rows(ws.c, batch_, hidden, ws.batch.order,
                                               args.dc0.data() + cell * batch_ * hidden);
            }
            std::swap(d_out, d_in);
        }
        if (!args.dx.empty())
            kernels::cpu::scatter_steps(d_out, seq_len_, batch_, config_.input_size, ws.batch.order,
                                        ws.batch.active, args.dx.data());
    }

private:
    // One direction of one layer. ws.h / ws.c hold the sorted initial state and end as the final
    // state of every row (a row keeps its state once its sequence has ended).
    // h_raw_all (T, N, H) receives o * tanh(c) of every step in a training forward with a
    // projection, and is null otherwise.
    void forward_cell(const T* params, int64_t layer, int64_t direction, const Workspace<T>& ws,
                      const T* layer_in, T* layer_out, T* gates_all, T* cell_all,
                      T* h_raw_all) const {
        using kernels::cpu::gemm;
        const int64_t hidden = config_.hidden_size, gates_width = 4 * hidden;
        const int64_t hs = config_.state_size(), proj = config_.proj_size;
        const int64_t in_width = config_.layer_input_size(layer);
        const int64_t out_width = config_.output_size();
        const CellOffsets p = cell_offsets(config_, layer, direction);
        for (int64_t s = 0; s < seq_len_; ++s) {
            const int64_t t = step_time(s, seq_len_, direction);
            const int64_t rows = ws.batch.active[t];
            const int64_t step = t * batch_;
            T* gates = gates_all ? gates_all + step * gates_width : ws.gates;
            T* c = cell_all ? cell_all + step * hidden : ws.c;
            T* h = layer_out + step * out_width + direction * hs;
            gemm(false, true, rows, gates_width, in_width, T(1), layer_in + step * in_width,
                 in_width, params + p.weight_ih, in_width, T(0), gates, gates_width);
            gemm(false, true, rows, gates_width, hs, T(1), ws.h, hs, params + p.weight_hh, hs, T(1),
                 gates, gates_width);
            if (p.has_bias())
                kernels::cpu::add_biases(gates, rows, hidden, params + p.bias_ih,
                                         params + p.bias_hh);
            kernels::cpu::activate_gates(gates, rows, hidden);
            kernels::cpu::update_cell(gates, rows, hidden, ws.c, c);
            if (proj > 0) {
                T* h_raw = h_raw_all ? h_raw_all + step * hidden : ws.h_raw;
                kernels::cpu::update_hidden(gates, rows, hidden, c, h_raw, hidden);
                gemm(false, true, rows, proj, hidden, T(1), h_raw, hidden, params + p.weight_hr,
                     hidden, T(0), h, out_width);
            } else {
                kernels::cpu::update_hidden(gates, rows, hidden, c, h, out_width);
            }
            // Carry the new state; rows past `rows` keep theirs.
            if (c != ws.c) std::memcpy(ws.c, c, sizeof(T) * rows * hidden);
            for (int64_t r = 0; r < rows; ++r)
                std::memcpy(ws.h + r * hs, h + r * out_width, sizeof(T) * hs);
        }
    }

    // Backward of one direction of one layer: reads d_out (this layer's output gradient), adds
    // into d_in (this layer's input gradient, when wanted), leaves every step's dgates in the
    // reserve and, when `weights`, adds the weight gradients into dparams step by step. Leaves
    // the gradient w.r.t. the initial state in ws.h / ws.c.
    void backward_cell(const BackwardArgs<T>& args, int64_t layer, int64_t direction,
                       const Workspace<T>& ws, const Reserve<T>& rs, const T* layer_in,
                       const T* d_out, T* d_in, bool weights) const {
        using kernels::cpu::gemm;
        const int64_t hidden = config_.hidden_size, gates_width = 4 * hidden;
        const int64_t hs = config_.state_size(), proj = config_.proj_size;
        const int64_t in_width = config_.layer_input_size(layer);
        const int64_t out_width = config_.output_size();
        const int64_t cell = layer * config_.num_directions() + direction;
        const int64_t h_state = cell * batch_ * hs, c_state = cell * batch_ * hidden;
        const CellOffsets p = cell_offsets(config_, layer, direction);
        const T* params = args.params.data();
        T* gates_all = rs.gates + cell * seq_len_ * batch_ * gates_width;
        const T* cell_all = rs.cell + cell * seq_len_ * batch_ * hidden;

        // Initial states rebuild h_{t-1}/c_{t-1} of each sequence's first step.
        if (weights) gather_initial(args.h0, h_state, hs, ws, ws.h_init);
        gather_initial(args.c0, c_state, hidden, ws, ws.c_init);
        kernels::cpu::gather_rows(args.dhn.empty() ? nullptr : args.dhn.data() + h_state, batch_,
                                  hs, ws.batch.order, ws.h);
        kernels::cpu::gather_rows(args.dcn.empty() ? nullptr : args.dcn.data() + c_state, batch_,
                                  hidden, ws.batch.order, ws.c);
        for (int64_t s = seq_len_ - 1; s >= 0; --s) {
            const int64_t t = step_time(s, seq_len_, direction);
            const int64_t rows = ws.batch.active[t];
            const int64_t step = t * batch_;
            T* gates = gates_all + step * gates_width;  // activated gates in, dgates out
            const T* c = cell_all + step * hidden;
            // c_{t-1} of the active rows.
            const int64_t tp = s > 0 ? step_time(s - 1, seq_len_, direction) : 0;
            const int64_t rows_prev = s > 0 ? ws.batch.active[tp] : 0;
            previous_state(ws.c_init, cell_all + tp * batch_ * hidden, hidden, rows_prev, rows,
                           hidden, ws.c_prev);
            T* dh = proj > 0 ? rs.dh + (cell * seq_len_ * batch_ + step) * proj : ws.dh;
            kernels::cpu::add_output_grad(ws.h, d_out + step * out_width + direction * hs,
                                          out_width, rows, hs, dh);
            const T* dh_raw = dh;
            if (proj > 0) {
                // h = h_raw W_hr^T, so d h_raw = dh W_hr.
                gemm(false, false, rows, hidden, proj, T(1), dh, proj, params + p.weight_hr, hidden,
                     T(0), ws.dh_raw, hidden);
                dh_raw = ws.dh_raw;
            }
            kernels::cpu::hidden_backward(gates, c, dh_raw, ws.c, rows, hidden, gates, ws.dc);
            kernels::cpu::cell_backward_pass(gates, ws.c_prev, ws.dc, rows, hidden, gates, ws.c);
            // Gradient into h_{t-1} for the active rows; inactive rows keep their carry.
            gemm(false, false, rows, hs, gates_width, T(1), gates, gates_width,
                 params + p.weight_hh, hs, T(0), ws.h, hs);
            if (weights) step_weight_grads(args, layer, direction, s, ws, rs, layer_in);
            if (d_in)
                gemm(false, false, rows, in_width, gates_width, T(1), gates, gates_width,
                     params + p.weight_ih, in_width, T(1), d_in + step * in_width, in_width);
        }
    }

    // BackwardPart::weights for one direction of one layer: the per-step weight GEMMs of
    // backward_cell, in its step order, from the dgates the data part left in the reserve.
    void weight_grads_cell(const BackwardArgs<T>& args, int64_t layer, int64_t direction,
                           const Workspace<T>& ws, const Reserve<T>& rs, const T* layer_in) const {
        const int64_t cell = layer * config_.num_directions() + direction;
        const int64_t hs = config_.state_size();
        gather_initial(args.h0, cell * batch_ * hs, hs, ws, ws.h_init);
        for (int64_t s = seq_len_ - 1; s >= 0; --s)
            step_weight_grads(args, layer, direction, s, ws, rs, layer_in);
    }

    // Step s of one cell: ADDS dgates^T h_{t-1} into dW_hh, dgates^T x_t into dW_ih, the column
    // sums of dgates into both biases and, with a projection, dh^T h_raw into dW_hr (dparams,
    // PyTorch layout, host). dgates (rows, 4H), dh (rows, P) and h_raw (rows, H) are the
    // reserve's, h_{t-1} (rows, S) comes from the reserve's outputs and ws.h_init (this cell's h0,
    // sorted), x_t (rows, in) from layer_in (T, N, in) sorted.
    void step_weight_grads(const BackwardArgs<T>& args, int64_t layer, int64_t direction, int64_t s,
                           const Workspace<T>& ws, const Reserve<T>& rs, const T* layer_in) const {
        using kernels::cpu::gemm;
        const int64_t hidden = config_.hidden_size, gates_width = 4 * hidden;
        const int64_t hs = config_.state_size(), proj = config_.proj_size;
        const int64_t in_width = config_.layer_input_size(layer);
        const int64_t out_width = config_.output_size();
        const int64_t cell = layer * config_.num_directions() + direction;
        const CellOffsets p = cell_offsets(config_, layer, direction);
        T* grads = args.dparams.data();
        const int64_t t = step_time(s, seq_len_, direction);
        const int64_t rows = ws.batch.active[t];
        const int64_t step = t * batch_;
        const int64_t cell_step = cell * seq_len_ * batch_ + step;
        const T* dgates = rs.gates + cell_step * gates_width;
        const T* out = rs.out + layer * seq_len_ * batch_ * out_width + direction * hs;
        const int64_t tp = s > 0 ? step_time(s - 1, seq_len_, direction) : 0;
        const int64_t rows_prev = s > 0 ? ws.batch.active[tp] : 0;
        previous_state(ws.h_init, out + tp * batch_ * out_width, out_width, rows_prev, rows, hs,
                       ws.h_prev);
        gemm(true, false, gates_width, hs, rows, T(1), dgates, gates_width, ws.h_prev, hs, T(1),
             grads + p.weight_hh, hs);
        gemm(true, false, gates_width, in_width, rows, T(1), dgates, gates_width,
             layer_in + step * in_width, in_width, T(1), grads + p.weight_ih, in_width);
        if (p.has_bias())
            step_bias_grads(s, dgates, rows, gates_width, ws, grads + p.bias_ih, grads + p.bias_hh);
        if (proj > 0)
            gemm(true, false, proj, hidden, rows, T(1), rs.dh + cell_step * proj, proj,
                 rs.h_raw + cell_step * hidden, hidden, T(1), grads + p.weight_hr, hidden);
    }

    // Step s's share of both bias gradients (see kBiasRowChunk): the column sums of dgates
    // (rows, width) join the block of steps s belongs to, whose sum is added into db_ih and db_hh
    // once its last step (steps run from s = T - 1 down to 0) is in.
    void step_bias_grads(int64_t s, const T* dgates, int64_t rows, int64_t width,
                         const Workspace<T>& ws, T* db_ih, T* db_hh) const {
        using kernels::cpu::add_into;
        using kernels::cpu::column_sums;
        const bool opens_block = s == seq_len_ - 1 || (s + 1) % kBiasStepBlock == 0;
        T* step_sum = opens_block ? ws.db_block : ws.db_step;
        column_sums(dgates, std::min(rows, kBiasRowChunk), width, step_sum);
        for (int64_t r = kBiasRowChunk; r < rows; r += kBiasRowChunk) {
            column_sums(dgates + r * width, std::min(rows - r, kBiasRowChunk), width, ws.db_rows);
            add_into(ws.db_rows, width, step_sum);
        }
        if (!opens_block) add_into(ws.db_step, width, ws.db_block);
        if (s % kBiasStepBlock == 0) {
            add_into(ws.db_block, width, db_ih);
            add_into(ws.db_block, width, db_hh);
        }
    }

    // dst (N, width) sorted <- the h0 (width S) or c0 (width H) slice of this cell starting at
    // element `state` (zeros when omitted).
    void gather_initial(const TensorView<const T>& init, int64_t state, int64_t width,
                        const Workspace<T>& ws, T* dst) const {
        kernels::cpu::gather_rows(init.empty() ? nullptr : init.data() + state, batch_, width,
                                  ws.batch.order, dst);
    }

    const Config& config_;
    int64_t seq_len_;
    int64_t batch_;
};

}  // namespace basic_detail

class BasicVariant final : public Variant {
public:
    const char* name() const override { return "basic"; }
    Device device() const override { return Device::cpu; }

    std::optional<std::string> supports(const Config&, DType) const override {
        return std::nullopt;
    }
    // The data part leaves every step's dgates in the reserve; the weights part replays the
    // per-step GEMMs from them (see the top of this file).
    std::optional<std::string> supports_split_backward() const override { return std::nullopt; }

protected:
    size_t run_workspace_bytes(const Config& config, DType dtype, int64_t seq_len,
                               int64_t batch) const override {
        return detail::carved_bytes(dtype, [&](detail::Carver& carve, auto element) {
            basic_detail::carve_workspace<decltype(element)>(carve, config, seq_len, batch);
        });
    }

    size_t run_reserve_bytes(const Config& config, DType dtype, int64_t seq_len,
                             int64_t batch) const override {
        return detail::carved_bytes(dtype, [&](detail::Carver& carve, auto element) {
            basic_detail::carve_reserve<decltype(element)>(carve, config, seq_len, batch);
        });
    }

    void run_forward(const Config& c, const ForwardArgs<float>& a) const override { fwd(c, a); }
    void run_forward(const Config& c, const ForwardArgs<double>& a) const override { fwd(c, a); }
    void run_backward(const Config& c, const BackwardArgs<float>& a) const override { bwd(c, a); }
    void run_backward(const Config& c, const BackwardArgs<double>& a) const override { bwd(c, a); }

private:
    template <typename T>
    static void fwd(const Config& config, const ForwardArgs<T>& args) {
        basic_detail::BasicLoop<T>(config, args.x.size(0), args.x.size(1)).forward(args);
    }
    template <typename T>
    static void bwd(const Config& config, const BackwardArgs<T>& args) {
        basic_detail::BasicLoop<T>(config, args.x.size(0), args.x.size(1)).backward(args);
    }
};

}  // namespace lstm::cpu
