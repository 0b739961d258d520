#pragma once

// The stack loop: everything an LSTM call does around the cell's arithmetic, written once for
// every engine (`fused`'s team engine, lstm/variants/fused.hpp; the CUDA `basic` / `fused`
// engine, lstm/variants/cuda_common.hpp; the step engines of `basic`, lstm/variants/basic.hpp,
// and `concat`, lstm/variants/concat.hpp, the worked example docs/architecture.md walks through).
// It sorts the batch by length so the sequences still running at step t are the sorted rows
// [0, active[t]) (lstm/detail/batch_order.hpp), keeps every sequence plane compact (step t's rows
// start at offsets[t], so a plane holds exactly the valid frames), has the input gathered and the
// output and their gradients scattered, walks layers, directions and time, carves the workspace
// and the reserve, and splits backward into its data and weights parts. An engine supplies the
// arithmetic: hooks around each cell and one per step.
//
// Threads: the engine runs the loop on its team (run_team hands every member the team's Crew,
// kernels/cpu/crew.hpp; a serial or GPU engine's crew has one member). The loop meets the crew
// after each cell's opening hook and after each step, so a step's hook may read what every
// member wrote in the step before. A bidirectional layer may run its two directions side by
// side, each on half of the team with its own barrier (side_by_side; the cell's `lane` says which
// of the engine's two scratch sets it uses); the team meets after such a layer.
//
// Memory: the loop's row index is host memory (it reads step sizes); its planes (sorted input,
// ping-pong, layer outputs) live where the engine's buffers do, and the engine moves sequences in
// and out of them (gather_frames / scatter_frames), so one loop serves host and device engines.
//
// The engine E (a class for one element type T; ForwardCell, BackwardCell and StepTime below say
// what each hook gets; HostEngine gives a host engine the first four lines' members):
//   static constexpr bool kHostMemory                    buffers in host memory: the loop's row
//                                                        index goes in the workspace; else
//   int64_t* host_rows()                                 gives stack_row_count(T, N) int64
//   static constexpr size_t kBoundary                    buffers carved from such a boundary
//   gather_frames(rows, src, width, dst, ld, team)       dst (frames, ld) <- src (T, N, width)
//   scatter_frames(rows, src, ld, width, dst, team)      dst (T, N, width) <- src, padding zeroed
//   E(const Config&, int64_t seq_len, int64_t batch, extra...)  constructed per call, cheap
//   void carve_workspace(Carver&) / carve_reserve(Carver&)  its own buffers, after the loop's
//   int64_t x_stride() const                             row stride of the sorted layer-0 input
//   bool side_by_side(int threads) const                 run a bidirectional layer's directions
//                                                        side by side on a team of `threads`
//   void run_team(Body body)                             body(const Crew& team) on every member
//   begin_forward(cell, crew), forward_step(cell, step, crew), end_forward(cell, crew)
//   begin_backward(cell, crew), backward_step(cell, step, crew), end_backward(cell, crew)
//   input_grads(cell, team)     ADDS d(layer input) of a cell whose time loop is done (or nothing,
//                               where backward_step adds it)
// and optionally, for an engine that rounds its products' operands (Precision::bf16):
//   bool rounds_operands() const                         whether it does, for this call
//   round_operand_plane(rows, plane, width, ld, team)    rounds a plane (frames, ld) in place,
//                               the member's share of the steps: a plane from then on read only
//                               as a product's operand (the gathered layer-0 input, a layer's
//                               output once the layer above is next, the last layer's output
//                               before the weight gradients pair it with dgates)
//   begin_weights(cell, crew), weight_step(cell, step, crew), end_weights(cell, crew)
// Forward steps run s = 0 .. T-1, backward and weight steps s = T-1 .. 0; cells in order (layer,
// then direction) unless side by side. `all` calls weight_step right after each backward_step;
// `weights` runs begin_weights, the weight steps and end_weights per cell on the whole team, so
// the two give the same bits. StepEngine (below) gives the hooks to an engine that computes one
// step at a time and lets the loop carry h and c, as basic and concat do.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "kernels/cpu/crew.hpp"
#include "kernels/cpu/permute.hpp"
#include "lstm/detail/batch_order.hpp"
#include "lstm/detail/carve.hpp"
#include "lstm/params.hpp"
#include "lstm/variant.hpp"

namespace lstm {

using kernels::cpu::Crew;

// The time index of the s-th step a direction processes.
inline int64_t step_time(int64_t s, int64_t seq_len, int64_t direction) {
    return direction == 0 ? s : seq_len - 1 - s;
}

// The call's rows, sorted by length (longest first), and the compact planes built on them; host.
struct RowLayout {
    const int64_t* order;    // (N) caller's row of sorted row r
    const int64_t* active;   // (T) rows still running at step t: a sorted prefix
    const int64_t* offsets;  // (T + 1) plane row of step t's first row; offsets[T] = frames
    const int64_t* lengths;  // (N) length of sorted row r
    int64_t seq_len, batch;

    // Valid frames: the rows of every compact plane.
    int64_t frames() const { return offsets[seq_len]; }
};

// int64 entries of a RowLayout's arrays for (T, N).
inline int64_t stack_row_count(int64_t seq_len, int64_t batch) {
    return 2 * batch + 2 * seq_len + 1;
}

// One cell (layer, direction) as the loop hands it to an engine's hooks. The planes of the
// structs below (in, out, d_out, d_in) lie where the engine's buffers do (host memory, or a
// device engine's device), the call's tensors where the call put them.
struct CellRun {
    int64_t layer, direction, cell;  // cell = layer * D + direction
    int64_t in_width;                // this layer's input features
    int lane;                        // 0, or 1 for the second direction running side by side
    CellOffsets p;                   // this cell's parameters in the flat layout
    const RowLayout* layout;
};

template <typename T>
struct ForwardCell : CellRun {
    const ForwardArgs<T>* args;  // the call: params, h0, c0, hn, cn (caller's row order)
    const T* in;                 // (frames, ld_in) the layer input
    int64_t ld_in;
    T* out;         // (frames, D*S) the layer output; this cell writes columns direction * S on
    bool training;  // keep what backward reads in the engine's reserve
};

template <typename T>
struct BackwardCell : CellRun {
    const BackwardArgs<T>* args;  // the call: params, h0, c0, dhn, dcn, dh0, dc0, dparams
    const T* in;                  // (frames, ld_in) the layer input (weights part only)
    int64_t ld_in;
    const T* out;    // (frames, D*S) this layer's output, kept by the training forward
    const T* d_out;  // (frames, D*S) gradient w.r.t. the layer output (data part)
    T* d_in;         // (frames, in_width) gradient w.r.t. the layer input; null: not wanted
    bool weights;    // the weights part runs too (`all`)
};

// Where one step of a cell stands.
struct StepTime {
    int64_t s, t;        // the s-th step this direction takes is time t
    int64_t rows;        // active rows at t (a sorted prefix)
    int64_t row;         // plane row of t's first row
    int64_t t_prev;      // the step before (s - 1); 0 at s 0
    int64_t rows_prev;   // its rows; 0 at s 0
    int64_t row_prev;    // its first plane row
    int64_t frame;       // row of (cell, t) in a per-cell (L*D, T*N, ...) plane: cell T N + row
    int64_t frame_prev;  // the same for t_prev
};

template <typename T, typename Engine>
class StackLoop {
public:
    // `extra`: what the engine's constructor takes after (config, seq_len, batch).
    template <typename... Extra>
    StackLoop(const Config& config, int64_t seq_len, int64_t batch, Extra&&... extra)
        : config_(config),
          seq_len_(seq_len),
          batch_(batch),
          engine_(config, seq_len, batch, std::forward<Extra>(extra)...) {}

    // Every layer; a training forward when args.reserve is set. Host tensors.
    void forward(const ForwardArgs<T>& args) {
        const bool training = args.reserve != nullptr;
        carve_buffers(args.workspace, args.reserve);
        make_rows(args.lengths);
        engine_.run_team([&](const Crew& team) { forward_team(args, training, team); });
    }

    // Backward of the matching training forward: args.part picks the time loop (data), the
    // weight gradients (weights) or both (all).
    void backward(const BackwardArgs<T>& args) {
        carve_buffers(args.workspace, args.reserve);
        make_rows(args.lengths);
        engine_.run_team([&](const Crew& team) { backward_team(args, team); });
    }

    // Points the loop's and the engine's arrays into a call's workspace and (when not null)
    // reserve, each carved from its first Engine::kBoundary boundary. forward and backward do it
    // first; a caller may do it before, to learn where the engine's arrays lie.
    void carve_buffers(void* workspace, void* reserve) {
        detail::Carver ws_carve = detail::carver_from_boundary<Engine::kBoundary>(workspace);
        carve_workspace(ws_carve);
        if (reserve == nullptr) return;
        detail::Carver rs_carve = detail::carver_from_boundary<Engine::kBoundary>(reserve);
        carve_reserve(rs_carve);
    }

    // The loop's buffers, then the engine's (also the plan's sizing, with a counting Carver).
    // The row index is host memory: in the workspace of a host engine, else the engine's.
    void carve_workspace(detail::Carver& carve) {
        const int64_t frames = seq_len_ * batch_;
        const int64_t width = std::max(engine_.x_stride(), config_.output_size());
        int64_t* index = nullptr;
        if constexpr (Engine::kHostMemory)
            index = carve.take<int64_t>(stack_row_count(seq_len_, batch_));
        else
            index = engine_.host_rows();
        order_ = index;
        active_ = index ? order_ + batch_ : nullptr;
        offsets_ = index ? active_ + seq_len_ : nullptr;
        lengths_ = index ? offsets_ + seq_len_ + 1 : nullptr;
        x_sorted_ = carve.take<T>(frames * engine_.x_stride());
        ping_ = carve.take<T>(frames * width);
        pong_ = carve.take<T>(frames * width);
        engine_.carve_workspace(carve);
    }
    void carve_reserve(detail::Carver& carve) {
        out_ = carve.take<T>(config_.num_layers * seq_len_ * batch_ * config_.output_size());
        engine_.carve_reserve(carve);
    }

    const Engine& engine() const { return engine_; }

private:
    template <typename E, typename = void>
    struct RoundsOperands : std::false_type {};
    template <typename E>
    struct RoundsOperands<E, std::void_t<decltype(std::declval<const E&>().rounds_operands())>>
        : std::true_type {};

    bool rounds_operands() const {
        if constexpr (RoundsOperands<Engine>::value)
            return engine_.rounds_operands();
        else
            return false;
    }
    // The engine's round_operand_plane where it rounds operands; the member's share of steps.
    void operand_plane(T* plane, int64_t width, int64_t ld, const Crew& team) {
        if constexpr (RoundsOperands<Engine>::value)
            if (engine_.rounds_operands())
                engine_.round_operand_plane(rows_, plane, width, ld, team);
    }

    // The batch order, the plane offsets and each sorted row's length.
    void make_rows(Span<const int64_t> lengths) {
        detail::make_batch_order(lengths, seq_len_, batch_, detail::BatchOrder{order_, active_});
        offsets_[0] = 0;
        for (int64_t t = 0; t < seq_len_; ++t) offsets_[t + 1] = offsets_[t] + active_[t];
        std::fill(lengths_, lengths_ + batch_, int64_t(0));
        for (int64_t t = 0; t < seq_len_; ++t)
            for (int64_t r = 0; r < active_[t]; ++r) ++lengths_[r];
        rows_ = RowLayout{order_, active_, offsets_, lengths_, seq_len_, batch_};
    }

    // Layer l's output plane: the reserve keeps every layer's for backward; inference alternates
    // two buffers.
    T* layer_out(int64_t l, bool training) const {
        if (training) return out_ + l * seq_len_ * batch_ * config_.output_size();
        return l % 2 == 0 ? ping_ : pong_;
    }

    bool sides(const Crew& team) const {
        return config_.num_directions() == 2 && engine_.side_by_side(team.size);
    }

    // The crew of direction d when the directions run side by side: the first half of the team
    // runs direction 0, the second direction 1.
    Crew direction_crew(const Crew& team, int64_t d) const {
        const int half = team.size / 2;
        return Crew{team.rank - static_cast<int>(d) * half, half, &crew_barriers_[d]};
    }
    static int64_t my_direction(const Crew& team) { return team.rank < team.size / 2 ? 0 : 1; }

    template <typename Cell>
    void place_cell(Cell& c, int64_t l, int64_t d, int lane) const {
        c.layer = l;
        c.direction = d;
        c.cell = l * config_.num_directions() + d;
        c.in_width = config_.layer_input_size(l);
        c.lane = lane;
        c.p = cell_offsets(config_, l, d);
        c.layout = &rows_;
    }

    // Step s of direction d of cell `cell`.
    StepTime place_step(int64_t cell, int64_t d, int64_t s) const {
        StepTime st{};
        st.s = s;
        st.t = step_time(s, seq_len_, d);
        st.rows = active_[st.t];
        st.row = offsets_[st.t];
        st.t_prev = s > 0 ? step_time(s - 1, seq_len_, d) : 0;
        st.rows_prev = s > 0 ? active_[st.t_prev] : 0;
        st.row_prev = offsets_[st.t_prev];
        st.frame = cell * seq_len_ * batch_ + st.row;
        st.frame_prev = cell * seq_len_ * batch_ + st.row_prev;
        return st;
    }

    // Everything a forward does, run by every member of the team.
    void forward_team(const ForwardArgs<T>& args, bool training, const Crew& team) {
        const int64_t out_width = config_.output_size();
        engine_.gather_frames(rows_, args.x.data(), config_.input_size, x_sorted_,
                              engine_.x_stride(), team);
        operand_plane(x_sorted_, config_.input_size, engine_.x_stride(), team);
        team.sync();
        ForwardCell<T> c{};
        c.args = &args;
        c.in = x_sorted_;
        c.ld_in = engine_.x_stride();
        c.training = training;
        const bool side = sides(team);
        for (int64_t l = 0; l < config_.num_layers; ++l) {
            c.out = layer_out(l, training);
            if (side) {
                const int64_t d = my_direction(team);
                place_cell(c, l, d, static_cast<int>(d));
                forward_cell(c, direction_crew(team, d));
                // The next layer reads both directions' output.
                team.sync();
            } else {
                for (int64_t d = 0; d < config_.num_directions(); ++d) {
                    place_cell(c, l, d, 0);
                    forward_cell(c, team);
                }
            }
            if (l + 1 < config_.num_layers && rounds_operands()) {
                // Every cell of the layer is done with its output (hn included) before it is
                // rounded, and the layer above reads it whole.
                if (!side) team.sync();
                operand_plane(c.out, out_width, out_width, team);
                team.sync();
            }
            c.in = c.out;
            c.ld_in = out_width;
        }
        engine_.scatter_frames(rows_, c.out, out_width, out_width, args.y.data(), team);
    }

    void forward_cell(const ForwardCell<T>& c, const Crew& crew) {
        engine_.begin_forward(c, crew);
        crew.sync();
        for (int64_t s = 0; s < seq_len_; ++s) {
            engine_.forward_step(c, place_step(c.cell, c.direction, s), crew);
            crew.sync();
        }
        engine_.end_forward(c, crew);
    }

    // Everything a backward does, run by every member of the team. The data part walks the
    // layers top-down, each layer's d(input) feeding the one below.
    void backward_team(const BackwardArgs<T>& args, const Crew& team) {
        const bool data = args.part != BackwardPart::weights;
        const bool weights = args.part != BackwardPart::data;
        const int64_t out_width = config_.output_size();
        // The layer-0 input is only a partner of the input-weight gradient, and the top layer's
        // output (the forward rounded the others) of the recurrent one.
        if (weights) {
            engine_.gather_frames(rows_, args.x.data(), config_.input_size, x_sorted_,
                                  engine_.x_stride(), team);
            operand_plane(x_sorted_, config_.input_size, engine_.x_stride(), team);
            operand_plane(layer_out(config_.num_layers - 1, true), out_width, out_width, team);
        }
        BackwardCell<T> c{};
        c.args = &args;
        c.weights = weights;
        if (!data) {
            weights_team(c, team);
            return;
        }
        T* d_out = ping_;
        T* d_in = pong_;
        engine_.gather_frames(rows_, args.dy.data(), out_width, d_out, out_width, team);
        // Every cell reads rows of dy and x that other members gathered, and a crew's own
        // barrier does not wait for the rest of the team.
        team.sync();
        const bool side = sides(team);
        for (int64_t l = config_.num_layers - 1; l >= 0; --l) {
            place_layer(c, l);
            c.d_out = d_out;
            c.d_in = l > 0 || !args.dx.empty() ? d_in : nullptr;
            if (side) {
                const int64_t d = my_direction(team);
                place_cell(c, l, d, static_cast<int>(d));
                backward_cell(c, direction_crew(team, d));
                // d(input) may read every column of both directions' results.
                team.sync();
                for (int64_t e = 0; e < 2; ++e) {
                    place_cell(c, l, e, static_cast<int>(e));
                    engine_.input_grads(c, team);
                }
            } else {
                for (int64_t d = 0; d < config_.num_directions(); ++d) {
                    place_cell(c, l, d, 0);
                    backward_cell(c, team);
                    engine_.input_grads(c, team);
                }
            }
            team.sync();
            std::swap(d_out, d_in);
        }
        if (!args.dx.empty())
            engine_.scatter_frames(rows_, d_out, config_.input_size, config_.input_size,
                                   args.dx.data(), team);
    }

    // The layer input and output of layer l that backward reads, from the reserve.
    void place_layer(BackwardCell<T>& c, int64_t l) const {
        const int64_t out_width = config_.output_size();
        c.in = l == 0 ? x_sorted_ : layer_out(l - 1, true);
        c.ld_in = l == 0 ? engine_.x_stride() : out_width;
        c.out = layer_out(l, true);
    }

    void backward_cell(const BackwardCell<T>& c, const Crew& crew) {
        // Members may still read what the crew's previous cell left (its states, its packed
        // weights): the opening hook may overwrite them.
        crew.sync();
        engine_.begin_backward(c, crew);
        crew.sync();
        for (int64_t s = seq_len_ - 1; s >= 0; --s) {
            const StepTime st = place_step(c.cell, c.direction, s);
            engine_.backward_step(c, st, crew);
            if (c.weights) engine_.weight_step(c, st, crew);
            crew.sync();
        }
        engine_.end_backward(c, crew);
    }

    // BackwardPart::weights: every cell's weight gradients from what the data part left in the
    // reserve, on the whole team, one cell after another.
    void weights_team(BackwardCell<T>& c, const Crew& team) {
        for (int64_t l = 0; l < config_.num_layers; ++l) {
            place_layer(c, l);
            for (int64_t d = 0; d < config_.num_directions(); ++d) {
                place_cell(c, l, d, 0);
                team.sync();
                engine_.begin_weights(c, team);
                team.sync();
                for (int64_t s = seq_len_ - 1; s >= 0; --s)
                    engine_.weight_step(c, place_step(c.cell, d, s), team);
                engine_.end_weights(c, team);
            }
        }
    }

    const Config& config_;
    int64_t seq_len_, batch_;
    Engine engine_;
    RowLayout rows_{};
    int64_t* order_ = nullptr;    // (N)
    int64_t* active_ = nullptr;   // (T)
    int64_t* offsets_ = nullptr;  // (T + 1)
    int64_t* lengths_ = nullptr;  // (N)
    T* x_sorted_ = nullptr;       // (frames, x_stride) the layer-0 input, sorted
    T* ping_ = nullptr;  // (frames, W) W = max(x_stride, D*S): inference layer output / d_out
    T* pong_ = nullptr;  // (frames, W) the other half of the pair
    T* out_ = nullptr;   // reserve (L, T*N, D*S): every layer's output
    // The per-direction crews' barriers when a layer runs its directions side by side; shared by
    // the team (the loop outlives the call's one parallel region).
    mutable kernels::cpu::CrewBarrier crew_barriers_[2];
};

// ------------------------------------------------------------------------------------------------
// Step engines: one step at a time, h and c carried by the loop
// ------------------------------------------------------------------------------------------------

// A step of a cell, as a step engine's calls see it.
struct CellStep : CellRun, StepTime {};

// What a step engine's calls read and write (host memory).
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

// What an engine on host memory shares: the loop keeps its row index in the workspace, sequence
// planes move by the team's shares of the steps, arrays start at 64-byte boundaries.
template <typename T>
struct HostEngine {
    static constexpr bool kHostMemory = true;
    static constexpr size_t kBoundary = detail::Carver::kAlignment;

    // dst (frames, ld) compact <- src (T, N, width) caller order; the member's steps.
    void gather_frames(const RowLayout& rows, const T* src, int64_t width, T* dst, int64_t ld,
                       const Crew& team) const {
        const kernels::cpu::BlockRange steps = team.share(rows.seq_len);
        kernels::cpu::gather_compact(src, rows.batch, width, rows.order, rows.active, rows.offsets,
                                     steps.begin, steps.end, dst, ld);
    }
    // dst (T, N, width) caller order, padded rows zeroed <- src (frames, ld) compact.
    void scatter_frames(const RowLayout& rows, const T* src, int64_t ld, int64_t width, T* dst,
                        const Crew& team) const {
        const kernels::cpu::BlockRange steps = team.share(rows.seq_len);
        kernels::cpu::scatter_compact(src, ld, rows.batch, width, rows.order, rows.active,
                                      rows.offsets, steps.begin, steps.end, dst);
    }
};

// The loop's hooks for a step engine S, serial: S(config, T, N), carve_workspace/carve_reserve,
// forward_step(const ForwardStep<T>&), backward_step(const BackwardStep<T>&) and
// weight_step(const WeightStep<T>&) ADDING into dparams. The hooks carry h and c (running, sorted
// rows) between steps, gather the initial states and scatter the final ones and their gradients.
template <typename T, typename S>
class StepEngine : public HostEngine<T> {
public:
    // `precision`: an engine with a bf16 path (see EngineVariant) is constructed with it.
    StepEngine(const Config& config, int64_t seq_len, int64_t batch,
               Precision precision = Precision::full)
        : config_(config),
          batch_(batch),
          seq_len_(seq_len),
          step_(make_step(config, seq_len, batch, precision)) {}

    int64_t x_stride() const { return config_.input_size; }
    bool side_by_side(int) const { return false; }
    template <typename Body>
    void run_team(Body&& body) {
        body(Crew::alone());
    }

    void carve_workspace(detail::Carver& carve) {
        // Every state buffer is N * H: S <= H, so they fit the projected width too.
        for (T** state : {&h_, &c_, &h_prev_, &h_init_, &c_init_})
            *state = carve.take<T>(batch_ * config_.hidden_size);
        step_.carve_workspace(carve);
    }
    void carve_reserve(detail::Carver& carve) { step_.carve_reserve(carve); }

    void begin_forward(const ForwardCell<T>& c, const Crew&) {
        gather_cell(c, c.args->h0, config_.state_size(), h_);
        gather_cell(c, c.args->c0, config_.hidden_size, c_);
    }
    void forward_step(const ForwardCell<T>& c, const StepTime& st, const Crew&) {
        ForwardStep<T> f{};
        static_cast<CellRun&>(f) = c;
        static_cast<StepTime&>(f) = st;
        f.params = c.args->params.data();
        f.x = c.in + st.row * c.ld_in;
        f.out_width = config_.output_size();
        f.out = c.out + st.row * f.out_width + c.direction * config_.state_size();
        f.h = h_;
        f.c = c_;
        f.training = c.training;
        step_.forward_step(f);
    }
    void end_forward(const ForwardCell<T>& c, const Crew&) {
        scatter_cell(c, h_, config_.state_size(), c.args->hn);
        scatter_cell(c, c_, config_.hidden_size, c.args->cn);
    }

    void begin_backward(const BackwardCell<T>& c, const Crew&) {
        // d(layer input) sums over the steps of both directions.
        if (c.direction == 0 && c.d_in)
            std::fill(c.d_in, c.d_in + c.layout->frames() * c.in_width, T(0));
        // Initial states rebuild h_{t-1} / c_{t-1} of each sequence's first step.
        if (c.weights) gather_cell(c, c.args->h0, config_.state_size(), h_init_);
        gather_cell(c, c.args->c0, config_.hidden_size, c_init_);
        gather_cell(c, c.args->dhn, config_.state_size(), h_);
        gather_cell(c, c.args->dcn, config_.hidden_size, c_);
    }
    void backward_step(const BackwardCell<T>& c, const StepTime& st, const Crew&) {
        BackwardStep<T> b{};
        static_cast<CellRun&>(b) = c;
        static_cast<StepTime&>(b) = st;
        b.params = c.args->params.data();
        b.out_width = config_.output_size();
        b.d_out = c.d_out + st.row * b.out_width + c.direction * config_.state_size();
        b.d_in = c.d_in ? c.d_in + st.row * c.in_width : nullptr;
        b.dh = h_;
        b.dc = c_;
        b.c_init = c_init_;
        step_.backward_step(b);
    }
    void end_backward(const BackwardCell<T>& c, const Crew&) {
        scatter_cell(c, h_, config_.state_size(), c.args->dh0);
        scatter_cell(c, c_, config_.hidden_size, c.args->dc0);
    }
    // backward_step added d(layer input) step by step.
    void input_grads(const BackwardCell<T>&, const Crew&) {}

    void begin_weights(const BackwardCell<T>& c, const Crew&) {
        gather_cell(c, c.args->h0, config_.state_size(), h_init_);
    }
    // h_{t-1} of the active rows from the kept layer output (rows that ran the step before) and
    // h_init_ (rows starting here).
    void weight_step(const BackwardCell<T>& c, const StepTime& st, const Crew&) {
        const int64_t hs = config_.state_size(), out_width = config_.output_size();
        const T* prev = c.out + st.row_prev * out_width + c.direction * hs;
        for (int64_t r = 0; r < st.rows; ++r) {
            const T* src = r < st.rows_prev ? prev + r * out_width : h_init_ + r * hs;
            std::memcpy(h_prev_ + r * hs, src, sizeof(T) * hs);
        }
        WeightStep<T> w{};
        static_cast<CellRun&>(w) = c;
        static_cast<StepTime&>(w) = st;
        w.dparams = c.args->dparams.data();
        w.x = c.in + st.row * c.ld_in;
        w.h_prev = h_prev_;
        w.seq_len = seq_len_;
        step_.weight_step(w);
    }
    void end_weights(const BackwardCell<T>&, const Crew&) {}

private:
    static S make_step(const Config& config, int64_t seq_len, int64_t batch, Precision precision) {
        if constexpr (std::is_constructible_v<S, const Config&, int64_t, int64_t, Precision>)
            return S(config, seq_len, batch, precision);
        else
            return S(config, seq_len, batch);
    }

    // dst (N, width) sorted <- this cell's slice of an (L*D, N, width) state tensor (zeros when
    // it is empty).
    template <typename V>
    void gather_cell(const CellRun& c, const V& state, int64_t width, T* dst) const {
        kernels::cpu::gather_rows(state.empty() ? nullptr : state.data() + c.cell * batch_ * width,
                                  batch_, width, c.layout->order, dst);
    }

    // This cell's slice of an (L*D, N, width) state tensor <- src (N, width) sorted, back in the
    // caller's row order; nothing when the tensor is empty (not wanted).
    void scatter_cell(const CellRun& c, const T* src, int64_t width,
                      const TensorView<T>& state) const {
        if (state.empty()) return;
        kernels::cpu::scatter_rows(src, batch_, width, c.layout->order,
                                   state.data() + c.cell * batch_ * width);
    }

    const Config& config_;
    int64_t batch_, seq_len_;
    S step_;
    T* h_ = nullptr;       // (N, S) running h (forward) / gradient carried into h (backward)
    T* c_ = nullptr;       // (N, H) running c / gradient carried into c
    T* h_prev_ = nullptr;  // (N, S) weights: h_{t-1} of the active rows
    T* h_init_ = nullptr;  // (N, S) backward: this cell's h0, sorted
    T* c_init_ = nullptr;  // (N, H) backward: this cell's c0, sorted
};

// ------------------------------------------------------------------------------------------------
// Plans
// ------------------------------------------------------------------------------------------------

// Bytes of the workspace (or, with `reserve`, the reserve) of the stack loop on EngineFor<T>, T
// the dtype's element type; `extra` as the loop's constructor takes it.
template <template <typename> class EngineFor, typename... Extra>
size_t stack_buffer_bytes(const Config& config, DType dtype, int64_t seq_len, int64_t batch,
                          bool reserve, const Extra&... extra) {
    return detail::carved_bytes_from_boundary<EngineFor<float>::kBoundary>(
        dtype, [&](detail::Carver& carve, auto e) {
            using E = decltype(e);
            StackLoop<E, EngineFor<E>> loop(config, seq_len, batch, extra...);
            if (reserve)
                loop.carve_reserve(carve);
            else
                loop.carve_workspace(carve);
        });
}

// The plan of a step engine's variant: the stack loop's sizes, and the loop run on the engine in
// the dtype of the call.
template <template <typename> class Step>
class StackPlan final : public Plan {
public:
    template <typename T>
    using Engine = StepEngine<T, Step<T>>;

    StackPlan(const Variant& variant, const PlanRequest& r)
        : Plan(
              variant, r,
              stack_buffer_bytes<Engine>(r.config, r.dtype, r.seq_len, r.batch, false, r.precision),
              stack_buffer_bytes<Engine>(r.config, r.dtype, r.seq_len, r.batch, true,
                                         r.precision)) {}

protected:
    void run_forward(const ForwardArgs<float>& a) const override { loop(a.x).forward(a); }
    void run_forward(const ForwardArgs<double>& a) const override { loop(a.x).forward(a); }
    void run_backward(const BackwardArgs<float>& a) const override { loop(a.x).backward(a); }
    void run_backward(const BackwardArgs<double>& a) const override { loop(a.x).backward(a); }

private:
    // x (T, N, I), host.
    template <typename T>
    StackLoop<T, Engine<T>> loop(const TensorView<const T>& x) const {
        return StackLoop<T, Engine<T>>(config(), x.size(0), x.size(1), precision());
    }
};

namespace detail {

// Whether the step engine S says which precisions it computes (a bf16 path).
template <typename S, typename = void>
struct StepHasPrecision : std::false_type {};
template <typename S>
struct StepHasPrecision<
    S, std::void_t<decltype(S::supports_precision(std::declval<const Config&>(), Precision::bf16))>>
    : std::true_type {};

}  // namespace detail

// A CPU variant made of one step engine, in float and double, split backward included: what an
// engine needs to be registered (lstm/registry.hpp). The engine class says who it is:
//   static constexpr const char* kName;                          the variant's name
//   static std::optional<std::string> supports(const Config&);  why not, or nullopt
//   static std::string describe();                               what it runs, for reports
//   using Cell = ...;      its element-wise cell (kernels/common/gates.hpp), which the oracle reads
// and, for a bf16 path (Precision, lstm/tensor.hpp), optionally:
//   static std::optional<std::string> supports_precision(const Config&, Precision);
//   static std::string describe_precision(Precision);            what that path runs, for reports
//   S(const Config&, int64_t seq_len, int64_t batch, Precision)   the constructor it then takes
template <template <typename> class Step>
class EngineVariant final : public Variant {
public:
    const char* name() const override { return Step<float>::kName; }
    Device device() const override { return Device::cpu; }
    std::optional<std::string> supports(const Config& config, DType) const override {
        return Step<float>::supports(config);
    }
    std::optional<std::string> supports_precision(const Config& config, DType dtype,
                                                  Precision precision) const override {
        if constexpr (detail::StepHasPrecision<Step<float>>::value)
            return Step<float>::supports_precision(config, precision);
        else
            return Variant::supports_precision(config, dtype, precision);
    }
    std::string describe_precision(Precision precision) const override {
        if constexpr (detail::StepHasPrecision<Step<float>>::value)
            return Step<float>::describe_precision(precision);
        else
            return Variant::describe_precision(precision);
    }
    // The stack loop runs the weights part from what the data part left (see WeightStep).
    std::optional<std::string> supports_split_backward() const override { return std::nullopt; }
    std::string describe_path(const std::string&) const override { return Step<float>::describe(); }
    const CellFunctions& cell() const override {
        return cell_functions<typename Step<float>::Cell>();
    }

protected:
    std::unique_ptr<Plan> build_plan(const PlanRequest& request) const override {
        return std::make_unique<StackPlan<Step>>(*this, request);
    }
};

}  // namespace lstm
