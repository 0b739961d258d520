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
// Precision::bf16 (float data): the same GEMMs on operands rounded to bf16 and held in floats
// (kernels/common/bf16.hpp), so the products accumulate in fp32 exactly as at full precision:
// the weights are rounded once per call into the workspace, and each step rounds the rows of x,
// h, h_raw (projection) and, in backward, dh (projection) and dgates as they enter a product.
// Bias, gate math, c and every output and gradient stay fp32; the bias gradient sums the fp32
// dgates. It is the reference-grade bf16 path: no faster than fp32, and the rounding points
// docs/precision.md lists and the oracle models (lstm/reference/lstm_reference.hpp).
//
// Projections (proj_size P > 0): each step adds a third GEMM, h (rows, P) = h_raw W_hr^T with
// h_raw = o * tanh(c); the state carried to the next step and the output are h, width S = P.
// A training forward keeps h_raw, and backward keeps each step's gradient w.r.t. h, because the
// weights part needs both for dW_hr after dgates has overwritten the gates that made h_raw.

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

#include "kernels/common/bf16.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/permute.hpp"
#include "kernels/cpu/unfused_cell.hpp"
#include "lstm/stack_loop.hpp"
#include "lstm/variant.hpp"

namespace lstm::cpu {

namespace basic_detail {

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

// The step engine of `basic` (lstm/detail/stack_loop.hpp runs it): per step two GEMMs and the
// separate element-wise passes of kernels/cpu/unfused_cell.hpp; backward per step, with the
// weight-gradient GEMMs per step.
template <typename T>
class BasicEngine {
public:
    static constexpr const char* kName = "basic";
    // kernels/cpu/unfused_cell.hpp's passes compute PyTorch's cell.
    using Cell = kernels::PyTorchCell;
    // Every nn.LSTM option, at full precision and in bf16.
    static std::optional<std::string> supports(const Config&) { return std::nullopt; }
    static std::optional<std::string> supports_precision(const Config&, Precision) {
        return std::nullopt;
    }
    static std::string describe() {
        return std::string("Eigen GEMMs compiled for ") + kernels::cpu::gemm_instruction_sets();
    }
    static std::string describe_precision(Precision precision) {
        if (precision == Precision::full) return describe();
        return "operands rounded to bf16 and widened to fp32 for the same Eigen GEMMs: the "
               "rounding of a bf16 path, not its speed";
    }

    BasicEngine(const Config& config, int64_t seq_len, int64_t batch,
                Precision precision = Precision::full)
        : config_(config), seq_len_(seq_len), batch_(batch), bf16_(precision == Precision::bf16) {}

    void carve_workspace(detail::Carver& carve) {
        const int64_t hidden = config_.hidden_size;
        gates_ = carve.take<T>(batch_ * 4 * hidden);
        for (T** state : {&h_raw_, &c_prev_, &dh_, &dh_raw_, &dc_})
            *state = carve.take<T>(batch_ * hidden);
        for (T** sums : {&db_rows_, &db_step_, &db_block_}) *sums = carve.take<T>(4 * hidden);
        if (!bf16_) return;
        const int64_t widest = std::max(config_.input_size, config_.output_size());
        weights_bf16_ = carve.take<T>(param_count(config_));
        for (T** rows : {&a_bf16_, &b_bf16_})
            *rows = carve.take<T>(batch_ * std::max(widest, 4 * hidden));
    }

    // What a training forward leaves for backward, all in sorted row order: per cell the
    // activated gates (L*D, T, N, 4H; backward overwrites the valid rows with dgates), c_t
    // (L*D, T, N, H) and, with a projection, o * tanh(c_t) (L*D, T, N, H) and backward's
    // gradient w.r.t. h_t (L*D, T, N, P): the weights part needs both for dW_hr after dgates has
    // overwritten the gates that made h_raw.
    void carve_reserve(detail::Carver& carve) {
        const int64_t frames = config_.num_cells() * seq_len_ * batch_;
        const bool proj = config_.proj_size > 0;
        rs_gates_ = carve.take<T>(frames * 4 * config_.hidden_size);
        rs_cell_ = carve.take<T>(frames * config_.hidden_size);
        rs_h_raw_ = carve.take<T>(proj ? frames * config_.hidden_size : 0);
        rs_dh_ = carve.take<T>(proj ? frames * config_.proj_size : 0);
    }

    void forward_step(const ForwardStep<T>& st) {
        using kernels::cpu::gemm;
        const int64_t hidden = config_.hidden_size, gates_width = 4 * hidden;
        const int64_t hs = config_.state_size(), proj = config_.proj_size;
        const int64_t rows = st.rows, frame = st.frame;
        const CellOffsets& p = st.p;
        T* gates = st.training ? rs_gates_ + frame * gates_width : gates_;
        T* c = st.training ? rs_cell_ + frame * hidden : st.c;
        const T* w = weights(st.params);
        gemm(false, true, rows, gates_width, st.in_width, T(1),
             operand(st.x, rows, st.in_width, st.in_width, a_bf16_), st.in_width, w + p.weight_ih,
             st.in_width, T(0), gates, gates_width);
        gemm(false, true, rows, gates_width, hs, T(1), operand(st.h, rows, hs, hs, a_bf16_), hs,
             w + p.weight_hh, hs, T(1), gates, gates_width);
        if (p.has_bias())
            kernels::cpu::add_biases(gates, rows, hidden, st.params + p.bias_ih,
                                     st.params + p.bias_hh);
        kernels::cpu::activate_gates(gates, rows, hidden);
        kernels::cpu::update_cell(gates, rows, hidden, st.c, c);
        if (proj > 0) {
            T* h_raw = st.training ? rs_h_raw_ + frame * hidden : h_raw_;
            kernels::cpu::update_hidden(gates, rows, hidden, c, h_raw, hidden);
            gemm(false, true, rows, proj, hidden, T(1),
                 operand(h_raw, rows, hidden, hidden, a_bf16_), hidden, w + p.weight_hr, hidden,
                 T(0), st.out, st.out_width);
        } else {
            kernels::cpu::update_hidden(gates, rows, hidden, c, st.out, st.out_width);
        }
        // Carry the new state; rows past `rows` keep theirs.
        if (c != st.c) std::memcpy(st.c, c, sizeof(T) * rows * hidden);
        for (int64_t r = 0; r < rows; ++r)
            std::memcpy(st.h + r * hs, st.out + r * st.out_width, sizeof(T) * hs);
    }

    // Leaves the step's dgates in the reserve over its activated gates (every element is read
    // before it is written), for weight_step.
    void backward_step(const BackwardStep<T>& st) {
        using kernels::cpu::gemm;
        const int64_t hidden = config_.hidden_size, gates_width = 4 * hidden;
        const int64_t hs = config_.state_size(), proj = config_.proj_size;
        const int64_t rows = st.rows, frame = st.frame;
        const CellOffsets& p = st.p;
        T* gates = rs_gates_ + frame * gates_width;  // activated gates in, dgates out
        const T* c = rs_cell_ + frame * hidden;
        // c_{t-1} of the active rows: the step before's for rows that ran it, c0 for the others
        // (only the reverse direction starts sequences late).
        const T* c_before = rs_cell_ + st.frame_prev * hidden;
        for (int64_t r = 0; r < rows; ++r) {
            const T* src = r < st.rows_prev ? c_before + r * hidden : st.c_init + r * hidden;
            std::memcpy(c_prev_ + r * hidden, src, sizeof(T) * hidden);
        }
        T* dh = proj > 0 ? rs_dh_ + frame * proj : dh_;
        kernels::cpu::add_output_grad(st.dh, st.d_out, st.out_width, rows, hs, dh);
        const T* w = weights(st.params);
        const T* dh_raw = dh;
        if (proj > 0) {
            // h = h_raw W_hr^T, so d h_raw = dh W_hr.
            gemm(false, false, rows, hidden, proj, T(1), operand(dh, rows, proj, proj, a_bf16_),
                 proj, w + p.weight_hr, hidden, T(0), dh_raw_, hidden);
            dh_raw = dh_raw_;
        }
        kernels::cpu::hidden_backward(gates, c, dh_raw, st.dc, rows, hidden, gates, dc_);
        kernels::cpu::cell_backward_pass(gates, c_prev_, dc_, rows, hidden, gates, st.dc);
        // Gradient into h_{t-1} for the active rows; inactive rows keep their carry.
        const T* dgates = operand(gates, rows, gates_width, gates_width, a_bf16_);
        gemm(false, false, rows, hs, gates_width, T(1), dgates, gates_width, w + p.weight_hh, hs,
             T(0), st.dh, hs);
        if (st.d_in)
            gemm(false, false, rows, st.in_width, gates_width, T(1), dgates, gates_width,
                 w + p.weight_ih, st.in_width, T(1), st.d_in, st.in_width);
    }

    // ADDS dgates^T h_{t-1} into dW_hh, dgates^T x_t into dW_ih, the column sums of dgates into
    // both biases and, with a projection, dh^T h_raw into dW_hr.
    void weight_step(const WeightStep<T>& st) {
        using kernels::cpu::gemm;
        const int64_t hidden = config_.hidden_size, gates_width = 4 * hidden;
        const int64_t hs = config_.state_size(), proj = config_.proj_size;
        const int64_t rows = st.rows, frame = st.frame;
        const CellOffsets& p = st.p;
        T* grads = st.dparams;
        const T* dgates_full = rs_gates_ + frame * gates_width;
        const T* dgates = operand(dgates_full, rows, gates_width, gates_width, a_bf16_);
        gemm(true, false, gates_width, hs, rows, T(1), dgates, gates_width,
             operand(st.h_prev, rows, hs, hs, b_bf16_), hs, T(1), grads + p.weight_hh, hs);
        gemm(true, false, gates_width, st.in_width, rows, T(1), dgates, gates_width,
             operand(st.x, rows, st.in_width, st.in_width, b_bf16_), st.in_width, T(1),
             grads + p.weight_ih, st.in_width);
        if (p.has_bias())
            step_bias_grads(st.s, dgates_full, rows, gates_width, grads + p.bias_ih,
                            grads + p.bias_hh);
        if (proj > 0)
            gemm(true, false, proj, hidden, rows, T(1),
                 operand(rs_dh_ + frame * proj, rows, proj, proj, a_bf16_), proj,
                 operand(rs_h_raw_ + frame * hidden, rows, hidden, hidden, b_bf16_), hidden, T(1),
                 grads + p.weight_hr, hidden);
    }

private:
    // The weights the products read: the masters, or in bf16 their rounded copy, made by the
    // first step that needs it (once per call: the engine lives for one call).
    const T* weights(const T* params) {
        if (!bf16_) return params;
        if (!weights_rounded_) {
            // Biases are rounded too but never read from here: they enter in fp32.
            kernels::round_rows_to_bf16(params, 1, param_count(config_), 0, weights_bf16_);
            weights_rounded_ = true;
        }
        return weights_bf16_;
    }

    // The operand a product reads of src (rows, cols) dense: src itself, or in bf16 its rounded
    // copy in `scratch` (a_bf16_ or b_bf16_, one per operand of a product).
    const T* operand(const T* src, int64_t rows, int64_t cols, int64_t ld, T* scratch) const {
        if (!bf16_) return src;
        kernels::round_rows_to_bf16(src, rows, cols, ld, scratch);
        return scratch;
    }

    // Step s's share of both bias gradients (see kBiasRowChunk): the column sums of dgates
    // (rows, width) join the block of steps s belongs to, whose sum is added into db_ih and db_hh
    // once its last step (steps run from s = T - 1 down to 0) is in.
    void step_bias_grads(int64_t s, const T* dgates, int64_t rows, int64_t width, T* db_ih,
                         T* db_hh) {
        using kernels::cpu::add_into;
        using kernels::cpu::column_sums;
        const bool opens_block = s == seq_len_ - 1 || (s + 1) % kBiasStepBlock == 0;
        T* step_sum = opens_block ? db_block_ : db_step_;
        column_sums(dgates, std::min(rows, kBiasRowChunk), width, step_sum);
        for (int64_t r = kBiasRowChunk; r < rows; r += kBiasRowChunk) {
            column_sums(dgates + r * width, std::min(rows - r, kBiasRowChunk), width, db_rows_);
            add_into(db_rows_, width, step_sum);
        }
        if (!opens_block) add_into(db_step_, width, db_block_);
        if (s % kBiasStepBlock == 0) {
            add_into(db_block_, width, db_ih);
            add_into(db_block_, width, db_hh);
        }
    }

    const Config& config_;
    int64_t seq_len_, batch_;
    bool bf16_;                     // Precision::bf16
    bool weights_rounded_ = false;  // weights_bf16_ holds this call's rounded weights
    T* weights_bf16_ = nullptr;     // (param_count) bf16: the weights rounded
    T* a_bf16_ = nullptr;           // (N, max(widest, 4H)) bf16: one product's rounded operand
    T* b_bf16_ = nullptr;           // the same for the other operand
    T* gates_ = nullptr;            // (N, 4H) inference: one step's gates
    T* h_raw_ = nullptr;            // (N, H) inference with a projection: one step's o * tanh(c)
    T* c_prev_ = nullptr;           // (N, H) backward: c_{t-1} of the active rows
    T* dh_ = nullptr;               // (N, S) backward: total gradient reaching h_t
    T* dh_raw_ = nullptr;    // (N, H) backward with a projection: gradient reaching o * tanh(c_t)
    T* dc_ = nullptr;        // (N, H) backward: total gradient reaching c_t
    T* db_rows_ = nullptr;   // (4H) column sums of a chunk of one step's dgates rows
    T* db_step_ = nullptr;   // (4H) column sums of one step's dgates
    T* db_block_ = nullptr;  // (4H) sum of the db_step of the steps of one block
    T* rs_gates_ = nullptr;
    T* rs_cell_ = nullptr;
    T* rs_h_raw_ = nullptr;
    T* rs_dh_ = nullptr;
};

}  // namespace basic_detail

// `basic` as a registry entry: the stack loop on BasicEngine.
using BasicVariant = EngineVariant<basic_detail::BasicEngine>;

}  // namespace lstm::cpu
