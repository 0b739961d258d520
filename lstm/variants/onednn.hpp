#pragma once

// `onednn` (cpu): the vendor reference on the CPU, as cuDNN is on the GPU. oneDNN's LSTM
// primitive (dnnl::lstm_forward / dnnl::lstm_backward of oneDNN 2.6, Debian's libdnnl-dev) runs
// the whole recurrence; this file only converts layouts and wires buffers. float32 only.
//
// How PyTorch's LSTM maps onto oneDNN's:
// - Layers: one primitive stacks layers only when every layer reads inputs as wide as its
//   output. Each stack is a "group" below. A unidirectional LSTM is one group when I == S (H, or
//   proj_size with a projection), else layer 0 alone and the layers above as a second group.
// - Directions: bidirectional_concat, whose output (forward half first) is PyTorch's. Within
//   one primitive, though, oneDNN runs each direction's stack on its own and concatenates only
//   the top layer's outputs, while PyTorch feeds both halves of layer l into both directions of
//   layer l+1; so a bidirectional LSTM runs one primitive per layer.
// - Gates: oneDNN orders gate blocks i, f, c~, o (its RNN developer guide, "LSTM"), which is
//   PyTorch's i, f, g, o, so blocks move unpermuted.
// - Weights: oneDNN picks its own weight formats (format_tag::any: padded, blocked or its
//   packed-GEMM format, and different for training, inference and backward, and from one CPU to
//   the next). PyTorch's (4H, in) row-major matrices of a group's cells are first copied one
//   after another into a contiguous buffer (oneDNN's plain ldgoi layout), and a oneDNN reorder
//   converts that once per call. Reordering straight from a strided view of the flat parameters
//   saves the copy but fails where oneDNN picks its packed format (oneDNN 2.6 on AVX2 CPUs,
//   e.g. H 256 with N 32, or T = 1 with H not a multiple of 4: "could not create a primitive
//   descriptor for a reorder primitive"), and a plain source reorders into any format. Weight
//   gradients travel back the same way: reordered into the plain layout, then added into dparams.
// - Projections (proj_size P > 0): oneDNN's LSTM with projection, without peepholes. Its h (the
//   output, src_iter / dst_iter) is P wide and its c (src_iter_c / dst_iter_c) H wide, as in
//   PyTorch, and weights_iter reads P columns. Its projection weights are a (layers, D, H, P)
//   tensor of input channel H and output channel P; PyTorch's weight_hr, (P, H) row-major, is
//   that tensor's ldoi order, so the matrices travel like the others: copied one after another,
//   then reordered (the reorder does the transpose into whatever oneDNN picks, ldio or packed).
//   oneDNN 2.6.3 builds it under every DNNL_MAX_CPU_ISA cap down to SSE4.1 (measured; training
//   and backward run its reference RNN kernel); should a build or CPU lack it, the call throws
//   lstm::Unsupported, not a backend error.
// - Biases: oneDNN has one bias per gate row; it gets b_ih + b_hh, and its gradient is added to
//   the gradients of both.
// - Lengths: oneDNN runs every sequence for all T steps, so per-sequence lengths are refused.
//
// Memory: every buffer oneDNN reads or writes during a call comes from the caller. oneDNN's
// scratchpad (scratchpad mode "user") and the converted weights live in our workspace; oneDNN's
// own training "workspace" (all gates and states of every step, what backward reads) lives in
// our reserve, next to the outputs of the layer groups below the top and copies of hn/cn
// (backward's primitive takes them as arguments). Both are large: on H 320, I 123, N 64, T 100,
// one unidirectional layer, 169 MiB of workspace (159 MiB of it oneDNN's scratchpad) and
// 150 MiB of reserve, where `basic` needs 20 and 47 MiB.
//
// Plans and allocation: primitive descriptors, primitives and the memory objects that carry
// their arguments are built once per (config, T, N, OpenMP thread count) in an OnednnPlan
// (lstm::Plan), which a PlanCache keeps (lstm/plan_cache.hpp: the layer's, or the default one of
// direct Variant calls); the sizes are the descriptors' to tell, so sizing makes the plan, and
// oneDNN JIT-compiles its kernels then. Steady-state calls only re-point
// data handles and call oneDNN's C execute with a prebuilt argument array; what still
// allocates lies inside oneDNN's execution, in libdnnl: with oneDNN 2.6 a forward's and a
// backward's malloc count grows by about 4 per time step, which no caller of oneDNN can change
// (so tests/allocation_test.cpp leaves this variant out). Calls on one plan run one at a time,
// because they share those memory objects; calls on different plans run concurrently.
// Threads: oneDNN's own OpenMP parallelism (Debian builds it with the OpenMP runtime). oneDNN
// splits a primitive's work for the thread count it was built under and computes wrong numbers
// when a call's parallel region gets another (measured with oneDNN 2.6: y off by 10-20x under
// OMP_DYNAMIC=true or OMP_THREAD_LIMIT below the count). So each call runs under a FullTeam
// (dynamic adjustment off, the count capped at the thread limit, both restored after), and plans
// are kept per thread count: a shape built under 8 threads is not run by a caller asking for 1.
// What this cannot see: concurrent OpenMP teams of one process that together exceed an
// explicit OMP_THREAD_LIMIT (libgomp then shrinks a team while it starts).

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/bf16.hpp"
#include "lstm/detail/carve.hpp"
#include "lstm/detail/onednn_hooks.hpp"
#include "lstm/variant.hpp"

namespace lstm::cpu {

namespace onednn_detail {

using Dims = dnnl::memory::dims;
using Tag = dnnl::memory::format_tag;
constexpr auto kF32 = dnnl::memory::data_type::f32;
constexpr auto kBf16 = dnnl::memory::data_type::bf16;

// Layers [first_layer, first_layer + num_layers) run as one oneDNN primitive; every one of them
// reads inputs in_width wide.
struct Group {
    int64_t first_layer;
    int64_t num_layers;
    int64_t in_width;
};

// The groups of `config`, bottom to top (see the file comment). Allocates: plan time only.
inline std::vector<Group> make_groups(const Config& config) {
    std::vector<Group> out;
    if (config.bidirectional) {
        for (int64_t l = 0; l < config.num_layers; ++l)
            out.push_back({l, 1, config.layer_input_size(l)});
    } else if (config.input_size == config.state_size() || config.num_layers == 1) {
        out.push_back({0, config.num_layers, config.input_size});
    } else {
        out.push_back({0, 1, config.input_size});
        out.push_back({1, config.num_layers - 1, config.state_size()});
    }
    return out;
}

// A primitive together with the memory objects of its arguments. The memory objects carry the
// descriptors the primitive was built for and no buffer; each call points them at its buffers.
// The argument array is built once and handed to oneDNN's C API, because the C++ execute()
// would copy an argument map into a fresh vector on every call.
struct Bound {
    dnnl::primitive primitive;
    std::vector<dnnl::memory> memories;
    std::vector<dnnl_exec_arg_t> args;  // {id, memories[k].get()}, parallel to memories

    Bound() = default;
    template <typename Ids>
    Bound(dnnl::primitive p, const dnnl::primitive_desc_base& pd, const dnnl::engine& engine,
          const Ids& arg_ids)
        : primitive(std::move(p)) {
        for (int id : arg_ids) add(id, pd.query_md(dnnl::query::exec_arg_md, id), engine);
        const dnnl::memory::desc scratch = pd.scratchpad_desc();
        if (scratch.get_size() > 0) add(DNNL_ARG_SCRATCHPAD, scratch, engine);
    }

    void add(int id, const dnnl::memory::desc& md, const dnnl::engine& engine) {
        memories.push_back(dnnl::memory(md, engine, DNNL_MEMORY_NONE));
        args.push_back({id, memories.back().get()});
    }

    // oneDNN takes void* even for inputs; it never writes through input arguments.
    void set(int id, const void* data) {
        for (size_t k = 0; k < args.size(); ++k)
            if (args[k].arg == id) {
                memories[k].set_data_handle(const_cast<void*>(data));
                return;
            }
        fail("onednn variant: primitive has no argument ", id, " (a bug in onednn.hpp)");
    }
    // Primitives that need no scratchpad have no such argument.
    void set_scratchpad(void* data) {
        for (size_t k = 0; k < args.size(); ++k)
            if (args[k].arg == DNNL_ARG_SCRATCHPAD) memories[k].set_data_handle(data);
    }
    void run(const dnnl::stream& stream) const {
        dnnl::error::wrap_c_api(dnnl_primitive_execute(primitive.get(), stream.get(),
                                                       static_cast<int>(args.size()), args.data()),
                                "could not execute a primitive");
    }
};

inline dnnl::primitive_attr user_scratchpad_attr() {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return attr;
}

// The arguments of the primitives this file runs (the forward's workspace only when training,
// the projection weights and their gradient only with a projection).
constexpr std::array<int, 2> kReorderArgs = {DNNL_ARG_FROM, DNNL_ARG_TO};
constexpr std::array<int, 9> kForwardArgs = {
    DNNL_ARG_SRC_LAYER,     DNNL_ARG_SRC_ITER,     DNNL_ARG_SRC_ITER_C,
    DNNL_ARG_WEIGHTS_LAYER, DNNL_ARG_WEIGHTS_ITER, DNNL_ARG_BIAS,
    DNNL_ARG_DST_LAYER,     DNNL_ARG_DST_ITER,     DNNL_ARG_DST_ITER_C};
constexpr std::array<int, 19> kBackwardArgs = {
    DNNL_ARG_SRC_LAYER,          DNNL_ARG_SRC_ITER,          DNNL_ARG_SRC_ITER_C,
    DNNL_ARG_WEIGHTS_LAYER,      DNNL_ARG_WEIGHTS_ITER,      DNNL_ARG_BIAS,
    DNNL_ARG_DST_LAYER,          DNNL_ARG_DST_ITER,          DNNL_ARG_DST_ITER_C,
    DNNL_ARG_DIFF_SRC_LAYER,     DNNL_ARG_DIFF_SRC_ITER,     DNNL_ARG_DIFF_SRC_ITER_C,
    DNNL_ARG_DIFF_WEIGHTS_LAYER, DNNL_ARG_DIFF_WEIGHTS_ITER, DNNL_ARG_DIFF_BIAS,
    DNNL_ARG_DIFF_DST_LAYER,     DNNL_ARG_DIFF_DST_ITER,     DNNL_ARG_DIFF_DST_ITER_C,
    DNNL_ARG_WORKSPACE};

// One group's forward (training or inference): the LSTM primitive and the weight reorders that
// feed it (w_proj_pd empty without a projection). Primitives are created on first use; the
// descriptors at plan time.
struct ForwardPlan {
    dnnl::lstm_forward::primitive_desc pd;
    dnnl::reorder::primitive_desc w_layer_pd, w_iter_pd, w_proj_pd;
    bool built = false;
    Bound lstm, w_layer, w_iter, w_proj;

    void build(const dnnl::engine& engine, bool training) {
        if (built) return;
        lstm = Bound(dnnl::lstm_forward(pd), pd, engine, kForwardArgs);
        if (training) lstm.add(DNNL_ARG_WORKSPACE, pd.workspace_desc(), engine);
        w_layer = Bound(dnnl::reorder(w_layer_pd), w_layer_pd, engine, kReorderArgs);
        w_iter = Bound(dnnl::reorder(w_iter_pd), w_iter_pd, engine, kReorderArgs);
        if (w_proj_pd) {
            lstm.add(DNNL_ARG_WEIGHTS_PROJECTION, pd.weights_projection_desc(), engine);
            w_proj = Bound(dnnl::reorder(w_proj_pd), w_proj_pd, engine, kReorderArgs);
        }
        built = true;
    }
};

// One group's backward: the LSTM primitive, the weight reorders feeding it and the reorders
// adding its weight gradients into dparams (the projection's empty without one).
struct BackwardPlan {
    dnnl::lstm_backward::primitive_desc pd;
    dnnl::reorder::primitive_desc w_layer_pd, w_iter_pd, w_proj_pd, dw_layer_pd, dw_iter_pd,
        dw_proj_pd;
    bool built = false;
    Bound lstm, w_layer, w_iter, w_proj, dw_layer, dw_iter, dw_proj;

    void build(const dnnl::engine& engine) {
        if (built) return;
        lstm = Bound(dnnl::lstm_backward(pd), pd, engine, kBackwardArgs);
        w_layer = Bound(dnnl::reorder(w_layer_pd), w_layer_pd, engine, kReorderArgs);
        w_iter = Bound(dnnl::reorder(w_iter_pd), w_iter_pd, engine, kReorderArgs);
        dw_layer = Bound(dnnl::reorder(dw_layer_pd), dw_layer_pd, engine, kReorderArgs);
        dw_iter = Bound(dnnl::reorder(dw_iter_pd), dw_iter_pd, engine, kReorderArgs);
        if (w_proj_pd) {
            lstm.add(DNNL_ARG_WEIGHTS_PROJECTION, pd.weights_projection_desc(), engine);
            lstm.add(DNNL_ARG_DIFF_WEIGHTS_PROJECTION, pd.diff_weights_projection_desc(), engine);
            w_proj = Bound(dnnl::reorder(w_proj_pd), w_proj_pd, engine, kReorderArgs);
            dw_proj = Bound(dnnl::reorder(dw_proj_pd), dw_proj_pd, engine, kReorderArgs);
        }
        built = true;
    }
};

struct GroupPlan {
    Group group;
    ForwardPlan training, inference;
    BackwardPlan backward;
};

// The calling thread's OpenMP team, made what oneDNN assumes for the guard's lifetime: exactly
// threads() threads in every parallel region it opens (see the file comment). Restores the
// caller's dynamic setting and thread count.
class FullTeam {
public:
    FullTeam() : dynamic_(omp_get_dynamic()), asked_(omp_get_max_threads()) {
        omp_set_dynamic(0);
        threads_ = std::min(asked_, omp_get_thread_limit());
        if (threads_ != asked_) omp_set_num_threads(threads_);
    }
    ~FullTeam() {
        omp_set_dynamic(dynamic_);
        if (threads_ != asked_) omp_set_num_threads(asked_);
    }
    FullTeam(const FullTeam&) = delete;
    FullTeam& operator=(const FullTeam&) = delete;
    int threads() const { return threads_; }

private:
    int dynamic_, asked_, threads_;
};

// Everything one (config, T, N) needs under one thread count; the config, compared whole,
// includes proj_size and bias, which change the primitives. `mutex` is held for a whole call,
// since the Bound memory objects are re-pointed at the call's buffers.
struct Plan {
    Config config;
    int64_t seq_len = 0, batch = 0;
    int threads = 0;
    // Precision::bf16: oneDNN's bf16 LSTM (see the top of this file).
    bool bf16 = false;
    // Bytes of one element of the layer inputs and outputs and h states oneDNN reads and
    // writes: 2 in bf16, else 4.
    size_t act_bytes() const { return bf16 ? 2 : 4; }
    std::vector<GroupPlan> groups;
    dnnl::engine engine;
    dnnl::stream stream;
    std::mutex mutex;
};

// Which of a cell's weight matrices: weight_ih (4H, in), weight_hh (4H, S) or weight_hr (P, H),
// oneDNN's weights_layer, weights_iter and weights_projection.
enum class Matrix { ih, hh, hr };

// Elements of one cell's `m` matrix in the group (0 for weight_hr without a projection).
inline int64_t matrix_elements(const Config& config, const Group& group, Matrix m) {
    const int64_t gates = 4 * config.hidden_size;
    switch (m) {
        case Matrix::ih:
            return gates * group.in_width;
        case Matrix::hh:
            return gates * config.state_size();
        case Matrix::hr:
            return config.proj_size * config.hidden_size;
    }
    return 0;
}

// Elements of the group's `m` matrices, all cells.
inline int64_t plain_weights_count(const Config& config, const Group& group, Matrix m) {
    return group.num_layers * config.num_directions() * matrix_elements(config, group, m);
}

// PyTorch's `m` matrices of every layer and direction of a group, copied one after another.
// weight_ih / weight_hh: a oneDNN (layers, D, in, 4, H) tensor in ldgoi order, where element
// (l, d, i, g, h) is row g*H + h, column i of cell (l, d)'s matrix (in: the group's input width,
// or S). weight_hr: a (layers, D, H, P) tensor in ldoi order, where element (l, d, h, p) is row p,
// column h of cell (l, d)'s matrix; a zero descriptor without a projection.
inline dnnl::memory::desc plain_weights_desc(const Config& config, const Group& group, Matrix m) {
    const int64_t layers = group.num_layers, dirs = config.num_directions();
    if (m == Matrix::hr)
        return config.proj_size == 0
                   ? dnnl::memory::desc()
                   : dnnl::memory::desc(Dims{layers, dirs, config.hidden_size, config.proj_size},
                                        kF32, Tag::ldoi);
    const int64_t in = m == Matrix::ih ? group.in_width : config.state_size();
    return dnnl::memory::desc(Dims{layers, dirs, in, 4, config.hidden_size}, kF32, Tag::ldgoi);
}

// The group's `m` matrices, cell by cell: calls fn(offset of the cell's matrix in the flat
// parameters, offset in the plain layout, elements).
template <typename Fn>
void for_each_weight_matrix(const Config& config, const Group& group, Matrix m, Fn&& fn) {
    const int64_t count = matrix_elements(config, group, m);
    int64_t plain = 0;
    for (int64_t l = 0; l < group.num_layers; ++l)
        for (int64_t d = 0; d < config.num_directions(); ++d, plain += count) {
            const CellOffsets o = cell_offsets(config, group.first_layer + l, d);
            fn(m == Matrix::ih   ? o.weight_ih
               : m == Matrix::hh ? o.weight_hh
                                 : o.weight_hr,
               plain, count);
        }
}

// plain (plain_weights_desc) <- the group's `m` matrices in the flat params. Host; overwrites.
inline void gather_weights(const Config& config, const Group& group, Matrix m, const float* params,
                           float* plain) {
    for_each_weight_matrix(config, group, m, [&](int64_t at, int64_t to, int64_t count) {
        std::memcpy(plain + to, params + at, sizeof(float) * count);
    });
}

// The group's `m` matrices in dparams += plain (plain_weights_desc). Host; accumulates.
inline void add_weight_grads(const Config& config, const Group& group, Matrix m, const float* plain,
                             float* dparams) {
    for_each_weight_matrix(config, group, m, [&](int64_t at, int64_t from, int64_t count) {
        for (int64_t k = 0; k < count; ++k) dparams[at + k] += plain[from + k];
    });
}

inline dnnl::memory::desc bias_desc(const Config& config, const Group& group) {
    return dnnl::memory::desc(
        Dims{group.num_layers, config.num_directions(), 4, config.hidden_size}, kF32, Tag::ldgo);
}

// The primitives of one group; `bf16`: the layer inputs and outputs, h states and weights in
// bf16, c states, bias and every gradient in f32 (oneDNN 2.6's bf16 LSTM).
inline GroupPlan make_group_plan(const dnnl::engine& engine, const Config& config,
                                 const Group& group, int64_t seq_len, int64_t batch, bool bf16) {
    using dnnl::memory;
    const int64_t hidden = config.hidden_size, dirs = config.num_directions();
    const int64_t layers = group.num_layers, width = config.state_size();
    const bool projected = config.proj_size > 0;
    const auto direction = config.bidirectional ? dnnl::rnn_direction::bidirectional_concat
                                                : dnnl::rnn_direction::unidirectional_left2right;
    const auto act = bf16 ? kBf16 : kF32;
    const Dims src_dims{seq_len, batch, group.in_width},
        dst_dims{seq_len, batch, config.output_size()};
    const Dims h_dims{layers, dirs, batch, width};
    const Dims w_layer_dims{layers, dirs, group.in_width, 4, hidden},
        w_iter_dims{layers, dirs, width, 4, hidden};
    const Dims w_proj_dims{layers, dirs, hidden, config.proj_size};
    const memory::desc src(src_dims, act, Tag::tnc);
    const memory::desc dst(dst_dims, act, Tag::tnc);
    const memory::desc h_state(h_dims, act, Tag::ldnc);
    const memory::desc c_state(Dims{layers, dirs, batch, hidden}, kF32, Tag::ldnc);
    const memory::desc w_layer(w_layer_dims, act, Tag::any);
    const memory::desc w_iter(w_iter_dims, act, Tag::any);
    // A zero descriptor: no peephole, and no projection unless the config has one.
    const memory::desc none;
    const memory::desc w_proj = projected ? memory::desc(w_proj_dims, act, Tag::any) : none;
    // The gradients: f32 whatever the precision.
    const memory::desc d_src(src_dims, kF32, Tag::tnc), d_dst(dst_dims, kF32, Tag::tnc);
    const memory::desc d_h_state(h_dims, kF32, Tag::ldnc);
    const memory::desc dw_layer(w_layer_dims, kF32, Tag::any), dw_iter(w_iter_dims, kF32, Tag::any);
    const memory::desc dw_proj = projected ? memory::desc(w_proj_dims, kF32, Tag::any) : none;
    const memory::desc bias = bias_desc(config, group);
    const memory::desc user_w_layer = plain_weights_desc(config, group, Matrix::ih);
    const memory::desc user_w_iter = plain_weights_desc(config, group, Matrix::hh);
    const memory::desc user_w_proj = plain_weights_desc(config, group, Matrix::hr);
    const dnnl::primitive_attr attr = user_scratchpad_attr();
    auto reorder_pd = [&](const memory::desc& from, const memory::desc& to) {
        return dnnl::reorder::primitive_desc(engine, from, engine, to, attr);
    };

    auto forward = [&](dnnl::prop_kind kind) {
        const dnnl::lstm_forward::desc desc(kind, direction, src, h_state, c_state, w_layer, w_iter,
                                            none, w_proj, bias, dst, h_state, c_state);
        ForwardPlan p;
        p.pd = dnnl::lstm_forward::primitive_desc(desc, attr, engine);
        p.w_layer_pd = reorder_pd(user_w_layer, p.pd.weights_layer_desc());
        p.w_iter_pd = reorder_pd(user_w_iter, p.pd.weights_iter_desc());
        if (projected) p.w_proj_pd = reorder_pd(user_w_proj, p.pd.weights_projection_desc());
        // The bias is filled by hand (b_ih + b_hh), which needs oneDNN's plain ldgo layout.
        check(p.pd.bias_desc() == bias, "oneDNN chose a bias layout other than ldgo");
        return p;
    };
    GroupPlan out;
    out.group = group;
    out.training = forward(dnnl::prop_kind::forward_training);
    out.inference = forward(dnnl::prop_kind::forward_inference);

    const dnnl::lstm_backward::desc desc(dnnl::prop_kind::backward, direction, src, h_state,
                                         c_state, w_layer, w_iter, none, w_proj, bias, dst, h_state,
                                         c_state, d_src, d_h_state, c_state, dw_layer, dw_iter,
                                         none, dw_proj, bias, d_dst, d_h_state, c_state);
    BackwardPlan& b = out.backward;
    b.pd = dnnl::lstm_backward::primitive_desc(desc, attr, engine, out.training.pd);
    b.w_layer_pd = reorder_pd(user_w_layer, b.pd.weights_layer_desc());
    b.w_iter_pd = reorder_pd(user_w_iter, b.pd.weights_iter_desc());
    b.dw_layer_pd = reorder_pd(b.pd.diff_weights_layer_desc(), user_w_layer);
    b.dw_iter_pd = reorder_pd(b.pd.diff_weights_iter_desc(), user_w_iter);
    if (projected) {
        b.w_proj_pd = reorder_pd(user_w_proj, b.pd.weights_projection_desc());
        b.dw_proj_pd = reorder_pd(b.pd.diff_weights_projection_desc(), user_w_proj);
    }
    check(b.pd.bias_desc() == bias && b.pd.diff_bias_desc() == bias,
          "oneDNN chose a bias or bias-gradient layout other than ldgo");
    return out;
}

enum class Pass { training, inference, backward };

// 0 for an empty descriptor (the projection's reorders without a projection).
inline size_t scratchpad_bytes(const dnnl::primitive_desc_base& pd) {
    return pd ? pd.scratchpad_desc().get_size() : 0;
}

// Largest oneDNN scratchpad any primitive of `pass` asks for; primitives run one after another,
// so they share one.
inline size_t pass_scratchpad_bytes(const Plan& plan, Pass pass) {
    size_t most = 0;
    for (const GroupPlan& g : plan.groups) {
        if (pass == Pass::backward) {
            const BackwardPlan& b = g.backward;
            most = std::max({most, scratchpad_bytes(b.pd), scratchpad_bytes(b.w_layer_pd),
                             scratchpad_bytes(b.w_iter_pd), scratchpad_bytes(b.w_proj_pd),
                             scratchpad_bytes(b.dw_layer_pd), scratchpad_bytes(b.dw_iter_pd),
                             scratchpad_bytes(b.dw_proj_pd)});
        } else {
            const ForwardPlan& f = pass == Pass::training ? g.training : g.inference;
            most = std::max({most, scratchpad_bytes(f.pd), scratchpad_bytes(f.w_layer_pd),
                             scratchpad_bytes(f.w_iter_pd), scratchpad_bytes(f.w_proj_pd)});
        }
    }
    return most;
}

// Rounds a byte count up to the carver's alignment, so equal slots can be indexed.
inline size_t aligned_bytes(size_t bytes) {
    constexpr size_t a = detail::Carver::kAlignment;
    return (bytes + a - 1) / a * a;
}

// Scratch of one call (host memory). Groups run one after another, so they share the weight
// buffers, each sized for the largest group.
struct Workspace {
    // The group's weight_ih / weight_hh / weight_hr matrices in the plain layout
    // (plain_weights_desc); in backward they receive the weight gradients once the weights were
    // reordered. The projection's are empty without a projection.
    float* plain_layer;
    float* plain_iter;
    float* plain_proj;
    void* w_layer;   // the group's weight_ih matrices in the pass's oneDNN layout
    void* w_iter;    // its weight_hh matrices
    void* w_proj;    // its weight_hr matrices
    float* bias;     // (layers, D, 4, H) b_ih + b_hh
    void* dw_layer;  // backward: oneDNN adds weight gradients into these, so they are zeroed
    void* dw_iter;
    void* dw_proj;
    float* dbias;   // backward: (layers, D, 4, H)
    float* zeros;   // (L*D, N, H) stands in for an omitted h0, c0, dhn or dcn (S <= H wide)
    float* sink_h;  // (L*D, N, S) receives hn (inference) or dh0 (backward) nobody asked for
    float* sink_c;  // (L*D, N, H) the same for cn / dc0
    // (T, N, D*S) x2 with several groups: inference: the outputs of the groups below the top,
    // alternately; backward: the gradients w.r.t. those outputs, alternately. Else null.
    float* between[2];
    float* dx;  // (T, N, I) backward: receives dx when the caller omits it
    // bf16 only (null in f32): what oneDNN reads or writes in bf16 where the caller's tensors
    // are f32.
    uint16_t* x;   // (T, N, I) x rounded
    uint16_t* h0;  // (L*D, N, S) h0 rounded
    uint16_t* y;   // (T, N, D*S) inference: the top group's output, widened into y
    uint16_t* hn;  // (L*D, N, S) inference: hn, widened into the caller's
    void* scratchpad;
};

inline Workspace carve_workspace(detail::Carver& carve, const Plan& plan, Pass pass) {
    const Config& config = plan.config;
    const int64_t c_state = config.num_cells() * plan.batch * config.hidden_size;
    const int64_t h_state = config.num_cells() * plan.batch * config.state_size();
    const int64_t steps = plan.seq_len * plan.batch;
    // A descriptor's bytes; 0 for the zero descriptor of an absent projection.
    auto bytes = [](const dnnl::memory::desc& md) { return md ? md.get_size() : size_t{0}; };
    size_t w_layer = 0, w_iter = 0, w_proj = 0, dw_layer = 0, dw_iter = 0, dw_proj = 0;
    int64_t bias = 0, plain_layer = 0, plain_iter = 0, plain_proj = 0;
    for (const GroupPlan& gp : plan.groups) {
        plain_layer = std::max(plain_layer, plain_weights_count(config, gp.group, Matrix::ih));
        plain_iter = std::max(plain_iter, plain_weights_count(config, gp.group, Matrix::hh));
        plain_proj = std::max(plain_proj, plain_weights_count(config, gp.group, Matrix::hr));
        if (pass == Pass::backward) {
            const auto& pd = gp.backward.pd;
            w_layer = std::max(w_layer, pd.weights_layer_desc().get_size());
            w_iter = std::max(w_iter, pd.weights_iter_desc().get_size());
            w_proj = std::max(w_proj, bytes(pd.weights_projection_desc()));
            dw_layer = std::max(dw_layer, pd.diff_weights_layer_desc().get_size());
            dw_iter = std::max(dw_iter, pd.diff_weights_iter_desc().get_size());
            dw_proj = std::max(dw_proj, bytes(pd.diff_weights_projection_desc()));
        } else {
            const auto& pd = pass == Pass::training ? gp.training.pd : gp.inference.pd;
            w_layer = std::max(w_layer, pd.weights_layer_desc().get_size());
            w_iter = std::max(w_iter, pd.weights_iter_desc().get_size());
            w_proj = std::max(w_proj, bytes(pd.weights_projection_desc()));
        }
        bias =
            std::max(bias, gp.group.num_layers * config.num_directions() * 4 * config.hidden_size);
    }
    Workspace w{};
    w.plain_layer = carve.take<float>(plain_layer);
    w.plain_iter = carve.take<float>(plain_iter);
    w.plain_proj = carve.take<float>(plain_proj);
    w.w_layer = carve.take<unsigned char>(w_layer);
    w.w_iter = carve.take<unsigned char>(w_iter);
    w.w_proj = carve.take<unsigned char>(w_proj);
    w.bias = carve.take<float>(bias);
    if (pass == Pass::backward) {
        w.dw_layer = carve.take<unsigned char>(dw_layer);
        w.dw_iter = carve.take<unsigned char>(dw_iter);
        w.dw_proj = carve.take<unsigned char>(dw_proj);
        w.dbias = carve.take<float>(bias);
    }
    w.zeros = carve.take<float>(c_state);
    w.sink_h = carve.take<float>(h_state);
    w.sink_c = carve.take<float>(c_state);
    if (plan.groups.size() > 1 && pass != Pass::training) {
        // One buffer suffices between two groups; more groups alternate between two. Outputs in
        // the pass's element type, gradients in f32.
        const int64_t plane = steps * config.output_size() *
                              static_cast<int64_t>(pass == Pass::backward ? 4 : plan.act_bytes());
        w.between[0] = reinterpret_cast<float*>(carve.take<unsigned char>(plane));
        w.between[1] = plan.groups.size() > 2
                           ? reinterpret_cast<float*>(carve.take<unsigned char>(plane))
                           : nullptr;
    }
    w.dx = pass == Pass::backward ? carve.take<float>(steps * config.input_size) : nullptr;
    if (plan.bf16) {
        w.x = carve.take<uint16_t>(steps * config.input_size);
        w.h0 = carve.take<uint16_t>(h_state);
        if (pass == Pass::inference) {
            w.y = carve.take<uint16_t>(steps * config.output_size());
            w.hn = carve.take<uint16_t>(h_state);
        }
    }
    w.scratchpad = carve.take<unsigned char>(pass_scratchpad_bytes(plan, pass));
    return w;
}

// What a training forward leaves for backward (host memory).
struct Reserve {
    unsigned char* onednn;  // oneDNN's training workspace of group g at onednn + g * onednn_slot
    size_t onednn_slot;
    // Elements of the plan's act_bytes() (bf16 or f32):
    void* between;  // (G-1, T, N, D*S) the output of every group below the top; G = #groups
    void* hn;       // (L*D, N, S) final states, which oneDNN's backward takes as arguments
    float* cn;      // (L*D, N, H)
    uint16_t* y;    // bf16 only: (T, N, D*S) the top group's output, widened into y

    void* group_workspace(size_t g) const { return onednn + g * onednn_slot; }
};

inline Reserve carve_reserve(detail::Carver& carve, const Plan& plan) {
    const Config& config = plan.config;
    const int64_t cells_n = config.num_cells() * plan.batch;
    const int64_t groups = static_cast<int64_t>(plan.groups.size());
    Reserve r{};
    for (const GroupPlan& gp : plan.groups)
        r.onednn_slot =
            std::max(r.onednn_slot, aligned_bytes(gp.training.pd.workspace_desc().get_size()));
    r.onednn = carve.take<unsigned char>(groups * static_cast<int64_t>(r.onednn_slot));
    const auto act = static_cast<int64_t>(plan.act_bytes());
    const int64_t layer_out = plan.seq_len * plan.batch * config.output_size();
    r.between = groups > 1 ? carve.take<unsigned char>((groups - 1) * layer_out * act) : nullptr;
    r.hn = carve.take<unsigned char>(cells_n * config.state_size() * act);
    r.cn = carve.take<float>(cells_n * config.hidden_size);
    r.y = plan.bf16 ? carve.take<uint16_t>(layer_out) : nullptr;
    return r;
}

// bias (layers, D, 4H) <- b_ih + b_hh of each cell of the group, read from the flat parameters,
// or zeros for a config without biases (oneDNN's LSTM always has one). Overwrites.
inline void sum_biases(const Config& config, const Group& group, const float* params, float* bias) {
    const int64_t gates = 4 * config.hidden_size;
    for (int64_t l = 0; l < group.num_layers; ++l)
        for (int64_t d = 0; d < config.num_directions(); ++d) {
            const CellOffsets o = cell_offsets(config, group.first_layer + l, d);
            float* out = bias + (l * config.num_directions() + d) * gates;
            for (int64_t k = 0; k < gates; ++k)
                out[k] = o.has_bias() ? params[o.bias_ih + k] + params[o.bias_hh + k] : 0.0f;
        }
}

// dparams' bias_ih and bias_hh of each cell of the group += dbias (layers, D, 4H). Accumulates;
// nothing for a config without biases.
inline void add_bias_grads(const Config& config, const Group& group, const float* dbias,
                           float* dparams) {
    const int64_t gates = 4 * config.hidden_size;
    for (int64_t l = 0; l < group.num_layers; ++l)
        for (int64_t d = 0; d < config.num_directions(); ++d) {
            const CellOffsets o = cell_offsets(config, group.first_layer + l, d);
            if (!o.has_bias()) continue;
            const float* in = dbias + (l * config.num_directions() + d) * gates;
            for (int64_t k = 0; k < gates; ++k) {
                dparams[o.bias_ih + k] += in[k];
                dparams[o.bias_hh + k] += in[k];
            }
        }
}

// dst (n) <- src (n) rounded to bf16 (kernels/common/bf16.hpp: this library's rounding, not
// oneDNN's). Host; overwrites.
inline void to_bf16(const float* src, int64_t n, uint16_t* dst) {
    for (int64_t k = 0; k < n; ++k) dst[k] = kernels::bf16_bits(src[k]);
}
// dst (n) <- src (n) widened (exact). Host; overwrites.
inline void from_bf16(const uint16_t* src, int64_t n, float* dst) {
    for (int64_t k = 0; k < n; ++k) dst[k] = kernels::bf16_to_float(src[k]);
}
// The element `index` of an array of `bytes`-byte elements at base.
inline void* element(void* base, int64_t index, size_t bytes) {
    return static_cast<unsigned char*>(base) + index * static_cast<int64_t>(bytes);
}
inline const void* element(const void* base, int64_t index, size_t bytes) {
    return static_cast<const unsigned char*>(base) + index * static_cast<int64_t>(bytes);
}

// Rethrows oneDNN's exceptions as lstm::OutOfMemory (dnnl_out_of_memory), lstm::Unsupported
// (dnnl_unimplemented for a config with a projection: oneDNN's projection LSTM is younger and
// narrower than its plain one, so a oneDNN build or CPU without it is a limit of this variant, and
// the caller can fall back to 'basic') or lstm::BackendError, naming what failed.
template <typename Fn>
auto onednn_call(const Config& config, const char* what, Fn&& fn) -> decltype(fn()) {
    try {
        return fn();
    } catch (const dnnl::error& e) {
        const auto message = detail::concat("oneDNN failed ", what, ": ", e.what(),
                                            " (dnnl_status_t ", static_cast<int>(e.status), ")");
        if (e.status == dnnl_out_of_memory) throw OutOfMemory(message);
        if (e.status == dnnl_unimplemented && config.proj_size > 0) {
            const dnnl::version_t* v = dnnl::version();
            // lstm_onednn_cpu_isa() is defined in lstm/registry_onednn.cpp, the file that
            // includes this header.
            throw Unsupported(detail::concat(
                "oneDNN ", v->major, ".", v->minor, ".", v->patch,
                " has no LSTM with projection (proj_size ", config.proj_size, ", hidden_size ",
                config.hidden_size, ") for this shape on this CPU (instruction set up to ",
                lstm_onednn_cpu_isa(),
                ", capped by DNNL_MAX_CPU_ISA if set); use 'basic', which runs projections. ",
                message));
        }
        throw BackendError(message);
    }
}

}  // namespace onednn_detail

class OnednnVariant final : public Variant {
public:
    const char* name() const override { return "onednn"; }
    Device device() const override { return Device::cpu; }

    // Every config in float32. Projections run on oneDNN's LSTM with projection; where oneDNN
    // lacks it, plan creation throws lstm::Unsupported (onednn_call), since only building the
    // primitive tells.
    std::optional<std::string> supports(const Config& /*config*/, DType dtype) const override {
        if (dtype != DType::f32)
            return std::string(
                "oneDNN's LSTM primitive computes in float32 only; use 'basic' or "
                "'fused' for float64");
        return std::nullopt;
    }

    // bf16: oneDNN's bf16 LSTM, where this oneDNN build and CPU (under DNNL_MAX_CPU_ISA) have it
    // and the config has no projection (oneDNN 2.6 has no bf16 LSTM with projection).
    std::optional<std::string> supports_precision(const Config& config, DType,
                                                  Precision) const override {
        if (config.proj_size > 0)
            return std::string("oneDNN ") + onednn_version() +
                   " has no bf16 LSTM with projection (proj_size " +
                   std::to_string(config.proj_size) + "); use 'fused' or 'basic'";
        if (const std::optional<std::string>& why = bf16_unavailable()) return *why;
        return std::nullopt;
    }
    std::string describe_precision(Precision precision) const override {
        if (precision == Precision::full) return describe_path("default");
        if (const std::optional<std::string>& why = bf16_unavailable()) return "none: " + *why;
        return std::string("oneDNN's bf16 LSTM, JIT up to ") + lstm_onednn_cpu_isa() +
               ": x, h, y and weights in bf16, c, bias and gradients in f32; y and hn come out "
               "rounded to bf16";
    }
    // oneDNN rounds its outputs y and hn to bf16 and its internal operands where it chooses.
    bool rounds_at_library_points(Precision precision) const override {
        return precision == Precision::full;
    }

    std::optional<std::string> supports_variable_lengths() const override {
        return std::string(
            "oneDNN's LSTM primitive runs every sequence for all T steps (it has no sequence "
            "lengths), so hn/cn and the reverse direction would be wrong for shorter sequences; "
            "pass no lengths (or every length equal to T) or use 'basic', 'fused' or 'cudnn'");
    }
    std::optional<std::string> supports_split_backward() const override {
        return std::string(
            "oneDNN's LSTM backward is one primitive that computes the data gradients "
            "(diff_src_layer/iter) and the weight gradients (diff_weights_layer/iter, diff_bias) "
            "in a single execute, with no way to run either alone; use 'basic' or 'fused' for "
            "BackwardPart::data / weights");
    }

    std::string describe_path(const std::string&) const override {
        return std::string("oneDNN JIT up to ") + lstm_onednn_cpu_isa();
    }

    // oneDNN's primitives follow the thread count they were built for (see the top of this
    // file), so a cache keeps one plan per count.
    int64_t plan_tag(const PlanRequest&) const override {
        return std::min(omp_get_max_threads(), omp_get_thread_limit());
    }

protected:
    std::unique_ptr<lstm::Plan> build_plan(const PlanRequest& request) const override;

private:
    friend class OnednnPlan;

    static std::string onednn_version() {
        const dnnl::version_t* v = dnnl::version();
        return std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
               std::to_string(v->patch);
    }

    // Why oneDNN cannot build a bf16 LSTM here, asked once per process by building the
    // descriptors of a small one (oneDNN reads DNNL_MAX_CPU_ISA once, at its first use), or
    // std::nullopt.
    static const std::optional<std::string>& bf16_unavailable() {
        static const std::optional<std::string> why = []() -> std::optional<std::string> {
            using namespace onednn_detail;
            try {
                const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
                const Config config{8, 16, 1, false};
                make_group_plan(engine, config, Group{0, 1, 8}, 2, 2, true);
            } catch (const dnnl::error& e) {
                return "oneDNN " + onednn_version() + " builds no bf16 LSTM on this CPU (up to " +
                       lstm_onednn_cpu_isa() + ", capped by DNNL_MAX_CPU_ISA if set): " + e.what();
            }
            return std::nullopt;
        }();
        return why;
    }

    // Runs a prebuilt reorder from `from` to `to` (host buffers in its source and destination
    // layouts).
    static void reorder(onednn_detail::Plan& plan, onednn_detail::Bound& r, const void* from,
                        void* to, void* scratchpad) {
        r.set(DNNL_ARG_FROM, from);
        r.set(DNNL_ARG_TO, to);
        r.set_scratchpad(scratchpad);
        r.run(plan.stream);
    }

    // ws.w_layer / ws.w_iter / ws.w_proj (with a projection) <- the group's weight matrices of
    // params (host, flat PyTorch layout) in the layouts the pass's primitive wants, through the
    // plain copies in ws. Overwrites.
    static void convert_weights(onednn_detail::Plan& plan, const onednn_detail::Group& group,
                                const float* params, const onednn_detail::Workspace& ws,
                                onednn_detail::Bound& w_layer, onednn_detail::Bound& w_iter,
                                onednn_detail::Bound& w_proj) {
        using namespace onednn_detail;
        gather_weights(plan.config, group, Matrix::ih, params, ws.plain_layer);
        gather_weights(plan.config, group, Matrix::hh, params, ws.plain_iter);
        reorder(plan, w_layer, ws.plain_layer, ws.w_layer, ws.scratchpad);
        reorder(plan, w_iter, ws.plain_iter, ws.w_iter, ws.scratchpad);
        if (plan.config.proj_size > 0) {
            gather_weights(plan.config, group, Matrix::hr, params, ws.plain_proj);
            reorder(plan, w_proj, ws.plain_proj, ws.w_proj, ws.scratchpad);
        }
    }

    // Training forward when args.reserve is set, inference otherwise. Shapes as in ForwardArgs;
    // all host memory. Overwrites y, hn, cn. In bf16 oneDNN reads x and h0 rounded and writes
    // y and hn in bf16, which come back widened.
    static void forward_pass(onednn_detail::Plan& plan, const ForwardArgs<float>& args) {
        using namespace onednn_detail;
        const Config& config = plan.config;
        const bool training = args.reserve != nullptr;
        detail::Carver ws_carve(args.workspace);
        const Workspace ws =
            carve_workspace(ws_carve, plan, training ? Pass::training : Pass::inference);
        Reserve rs{};
        if (training) {
            detail::Carver rs_carve(args.reserve);
            rs = carve_reserve(rs_carve, plan);
        }
        const size_t act = plan.act_bytes();
        const int64_t cells = config.num_cells();
        const int64_t h_state = plan.batch * config.state_size();  // one cell's h: (N, S)
        const int64_t c_state = plan.batch * config.hidden_size;   // one cell's c: (N, H)
        const int64_t layer_out = plan.seq_len * plan.batch * config.output_size();
        if (args.h0.empty() || args.c0.empty())
            std::memset(ws.zeros, 0, sizeof(float) * cells * c_state);
        const float* params = args.params.data();
        const float* c0 = args.c0.empty() ? ws.zeros : args.c0.data();
        // What oneDNN reads and writes: the caller's tensors, or in bf16 copies of them.
        const void* x = args.x.data();
        const void* h0 = args.h0.empty() ? ws.zeros : args.h0.data();
        void* y = args.y.data();
        void* hn = training ? rs.hn : (args.hn.empty() ? ws.sink_h : args.hn.data());
        float* cn = training ? rs.cn : (args.cn.empty() ? ws.sink_c : args.cn.data());
        if (plan.bf16) {
            to_bf16(args.x.data(), args.x.numel(), ws.x);
            to_bf16(static_cast<const float*>(h0), cells * h_state, ws.h0);
            x = ws.x;
            h0 = ws.h0;
            y = training ? rs.y : ws.y;
            if (!training) hn = ws.hn;
        }
        // Output of group g below the top: kept for backward when training.
        auto group_out = [&](size_t g) -> void* {
            return training ? element(rs.between, static_cast<int64_t>(g) * layer_out, act)
                            : ws.between[g % 2];
        };

        const size_t groups = plan.groups.size();
        for (size_t g = 0; g < groups; ++g) {
            GroupPlan& gp = plan.groups[g];
            ForwardPlan& fp = training ? gp.training : gp.inference;
            fp.build(plan.engine, training);
            const Group& group = gp.group;
            const int64_t cell0 = group.first_layer * config.num_directions();

            convert_weights(plan, group, params, ws, fp.w_layer, fp.w_iter, fp.w_proj);
            sum_biases(config, group, params, ws.bias);

            Bound& lstm = fp.lstm;
            lstm.set(DNNL_ARG_SRC_LAYER, g == 0 ? x : group_out(g - 1));
            lstm.set(DNNL_ARG_SRC_ITER, element(h0, cell0 * h_state, act));
            lstm.set(DNNL_ARG_SRC_ITER_C, c0 + cell0 * c_state);
            lstm.set(DNNL_ARG_WEIGHTS_LAYER, ws.w_layer);
            lstm.set(DNNL_ARG_WEIGHTS_ITER, ws.w_iter);
            if (config.proj_size > 0) lstm.set(DNNL_ARG_WEIGHTS_PROJECTION, ws.w_proj);
            lstm.set(DNNL_ARG_BIAS, ws.bias);
            lstm.set(DNNL_ARG_DST_LAYER, g + 1 == groups ? y : group_out(g));
            lstm.set(DNNL_ARG_DST_ITER, element(hn, cell0 * h_state, act));
            lstm.set(DNNL_ARG_DST_ITER_C, cn + cell0 * c_state);
            if (training) lstm.set(DNNL_ARG_WORKSPACE, rs.group_workspace(g));
            lstm.set_scratchpad(ws.scratchpad);
            lstm.run(plan.stream);
            // The next group's weights overwrite ws.w_layer / ws.w_iter / ws.w_proj / ws.bias.
            plan.stream.wait();
        }
        if (plan.bf16) {
            from_bf16(static_cast<const uint16_t*>(y), layer_out, args.y.data());
            if (!args.hn.empty())
                from_bf16(static_cast<const uint16_t*>(hn), cells * h_state, args.hn.data());
        } else if (training && !args.hn.empty()) {
            std::memcpy(args.hn.data(), rs.hn, sizeof(float) * cells * h_state);
        }
        if (training && !args.cn.empty())
            std::memcpy(args.cn.data(), rs.cn, sizeof(float) * cells * c_state);
    }

    // Backward of the matching training forward. Shapes as in BackwardArgs; all host memory.
    // Overwrites dx, dh0, dc0; ADDS into dparams.
    static void backward_pass(onednn_detail::Plan& plan, const BackwardArgs<float>& args) {
        using namespace onednn_detail;
        const Config& config = plan.config;
        detail::Carver ws_carve(args.workspace);
        const Workspace ws = carve_workspace(ws_carve, plan, Pass::backward);
        detail::Carver rs_carve(args.reserve);
        const Reserve rs = carve_reserve(rs_carve, plan);
        const int64_t h_state = plan.batch * config.state_size();  // one cell's h: (N, S)
        const int64_t c_state = plan.batch * config.hidden_size;   // one cell's c: (N, H)
        const int64_t layer_out = plan.seq_len * plan.batch * config.output_size();
        const bool projected = config.proj_size > 0;
        if (args.h0.empty() || args.c0.empty() || args.dhn.empty() || args.dcn.empty())
            std::memset(ws.zeros, 0, sizeof(float) * config.num_cells() * c_state);
        const float* params = args.params.data();
        float* dparams = args.dparams.data();
        const size_t act = plan.act_bytes();
        // What oneDNN reads: the caller's x and h0 and its y, or in bf16 what the forward read
        // and wrote.
        const void* x = args.x.data();
        const void* h0 = args.h0.empty() ? ws.zeros : args.h0.data();
        const void* y = args.y.data();
        if (plan.bf16) {
            to_bf16(args.x.data(), args.x.numel(), ws.x);
            to_bf16(static_cast<const float*>(h0), config.num_cells() * h_state, ws.h0);
            x = ws.x;
            h0 = ws.h0;
            y = rs.y;
        }
        const float* c0 = args.c0.empty() ? ws.zeros : args.c0.data();
        const float* dhn = args.dhn.empty() ? ws.zeros : args.dhn.data();
        const float* dcn = args.dcn.empty() ? ws.zeros : args.dcn.data();
        float* dh0 = args.dh0.empty() ? ws.sink_h : args.dh0.data();
        float* dc0 = args.dc0.empty() ? ws.sink_c : args.dc0.data();
        float* dx = args.dx.empty() ? ws.dx : args.dx.data();
        // Gradient w.r.t. the output of group g below the top.
        auto group_dout = [&](size_t g) { return ws.between[g % 2]; };

        const size_t groups = plan.groups.size();
        for (size_t g = groups; g-- > 0;) {
            GroupPlan& gp = plan.groups[g];
            BackwardPlan& bp = gp.backward;
            bp.build(plan.engine);
            const Group& group = gp.group;
            const int64_t cell0 = group.first_layer * config.num_directions();
            const bool top = g + 1 == groups;

            convert_weights(plan, group, params, ws, bp.w_layer, bp.w_iter, bp.w_proj);
            sum_biases(config, group, params, ws.bias);
            std::memset(ws.dw_layer, 0, bp.pd.diff_weights_layer_desc().get_size());
            std::memset(ws.dw_iter, 0, bp.pd.diff_weights_iter_desc().get_size());
            if (projected)
                std::memset(ws.dw_proj, 0, bp.pd.diff_weights_projection_desc().get_size());
            std::memset(ws.dbias, 0, bp.pd.diff_bias_desc().get_size());

            Bound& lstm = bp.lstm;
            const auto below = static_cast<int64_t>(g);  // groups below this one
            lstm.set(DNNL_ARG_SRC_LAYER,
                     g == 0 ? x : element(rs.between, (below - 1) * layer_out, act));
            lstm.set(DNNL_ARG_SRC_ITER, element(h0, cell0 * h_state, act));
            lstm.set(DNNL_ARG_SRC_ITER_C, c0 + cell0 * c_state);
            lstm.set(DNNL_ARG_WEIGHTS_LAYER, ws.w_layer);
            lstm.set(DNNL_ARG_WEIGHTS_ITER, ws.w_iter);
            lstm.set(DNNL_ARG_BIAS, ws.bias);
            lstm.set(DNNL_ARG_DST_LAYER, top ? y : element(rs.between, below * layer_out, act));
            lstm.set(DNNL_ARG_DST_ITER, element(rs.hn, cell0 * h_state, act));
            lstm.set(DNNL_ARG_DST_ITER_C, rs.cn + cell0 * c_state);
            lstm.set(DNNL_ARG_DIFF_DST_LAYER, top ? args.dy.data() : group_dout(g));
            lstm.set(DNNL_ARG_DIFF_DST_ITER, dhn + cell0 * h_state);
            lstm.set(DNNL_ARG_DIFF_DST_ITER_C, dcn + cell0 * c_state);
            lstm.set(DNNL_ARG_DIFF_SRC_LAYER, g == 0 ? dx : group_dout(g - 1));
            lstm.set(DNNL_ARG_DIFF_SRC_ITER, dh0 + cell0 * h_state);
            lstm.set(DNNL_ARG_DIFF_SRC_ITER_C, dc0 + cell0 * c_state);
            lstm.set(DNNL_ARG_DIFF_WEIGHTS_LAYER, ws.dw_layer);
            lstm.set(DNNL_ARG_DIFF_WEIGHTS_ITER, ws.dw_iter);
            lstm.set(DNNL_ARG_DIFF_BIAS, ws.dbias);
            if (projected) {
                lstm.set(DNNL_ARG_WEIGHTS_PROJECTION, ws.w_proj);
                lstm.set(DNNL_ARG_DIFF_WEIGHTS_PROJECTION, ws.dw_proj);
            }
            lstm.set(DNNL_ARG_WORKSPACE, rs.group_workspace(g));
            lstm.set_scratchpad(ws.scratchpad);
            lstm.run(plan.stream);

            // Weight gradients: oneDNN's layout -> the plain one (the weights there were consumed
            // by the reorders above), then added into dparams. weight_hr's reorder transposes
            // oneDNN's (H, P) cells back into PyTorch's (P, H) rows.
            reorder(plan, bp.dw_layer, ws.dw_layer, ws.plain_layer, ws.scratchpad);
            reorder(plan, bp.dw_iter, ws.dw_iter, ws.plain_iter, ws.scratchpad);
            if (projected) reorder(plan, bp.dw_proj, ws.dw_proj, ws.plain_proj, ws.scratchpad);
            plan.stream.wait();
            add_weight_grads(config, group, Matrix::ih, ws.plain_layer, dparams);
            add_weight_grads(config, group, Matrix::hh, ws.plain_iter, dparams);
            if (projected) add_weight_grads(config, group, Matrix::hr, ws.plain_proj, dparams);
            add_bias_grads(config, group, ws.dbias, dparams);
        }
    }

    // The primitives of `request` under the calling thread's team. Allocates: plan time only.
    static std::unique_ptr<onednn_detail::Plan> make_primitives(const PlanRequest& request) {
        using namespace onednn_detail;
        const FullTeam team;
        auto plan = std::make_unique<onednn_detail::Plan>();
        const Config& config = request.config;
        plan->config = config;
        plan->seq_len = request.seq_len;
        plan->batch = request.batch;
        plan->threads = team.threads();
        plan->bf16 = request.precision == Precision::bf16;
        onednn_call(config, "creating the LSTM primitive descriptors", [&] {
            plan->engine = dnnl::engine(dnnl::engine::kind::cpu, 0);
            for (const Group& group : make_groups(config))
                plan->groups.push_back(make_group_plan(plan->engine, config, group, request.seq_len,
                                                       request.batch, plan->bf16));
            plan->stream = dnnl::stream(plan->engine);
        });
        return plan;
    }
};

// The plan of `onednn`: its primitives for one (config, T, N) under one thread count, and the
// sizes they ask for. Calls on one plan run one at a time (they re-point its memory objects).
class OnednnPlan final : public lstm::Plan {
public:
    OnednnPlan(const Variant& variant, const PlanRequest& request,
               std::unique_ptr<onednn_detail::Plan> primitives)
        : lstm::Plan(variant, request, workspace_size(*primitives), reserve_size(*primitives)),
          primitives_(std::move(primitives)) {}

protected:
    void run_forward(const ForwardArgs<float>& args) const override {
        const onednn_detail::FullTeam team;
        check_team(team);
        std::lock_guard<std::mutex> lock(primitives_->mutex);
        onednn_detail::onednn_call(config(), "in the LSTM forward",
                                   [&] { OnednnVariant::forward_pass(*primitives_, args); });
    }
    void run_backward(const BackwardArgs<float>& args) const override {
        const onednn_detail::FullTeam team;
        check_team(team);
        std::lock_guard<std::mutex> lock(primitives_->mutex);
        onednn_detail::onednn_call(config(), "in the LSTM backward",
                                   [&] { OnednnVariant::backward_pass(*primitives_, args); });
    }

private:
    // The largest of what a training forward, an inference forward and a backward need: our
    // converted weights, states and oneDNN's scratchpad.
    static size_t workspace_size(const onednn_detail::Plan& primitives) {
        using namespace onednn_detail;
        size_t most = 0;
        for (Pass pass : {Pass::training, Pass::inference, Pass::backward}) {
            detail::Carver carve(nullptr);
            carve_workspace(carve, primitives, pass);
            most = std::max(most, carve.bytes());
        }
        return most;
    }
    static size_t reserve_size(const onednn_detail::Plan& primitives) {
        detail::Carver carve(nullptr);
        onednn_detail::carve_reserve(carve, primitives);
        return carve.bytes();
    }
    // A plan run by another team size than it was built for computes wrong numbers (see the
    // top of this file); a cache keys plans by it, a caller holding one must keep it.
    void check_team(const onednn_detail::FullTeam& team) const {
        check(team.threads() == primitives_->threads, "onednn: the plan was made for ",
              primitives_->threads, " OpenMP threads and the call runs ", team.threads(),
              "; make a plan under the call's thread count");
    }

    std::unique_ptr<onednn_detail::Plan> primitives_;
};

inline std::unique_ptr<lstm::Plan> OnednnVariant::build_plan(const PlanRequest& request) const {
    return std::make_unique<OnednnPlan>(*this, request, make_primitives(request));
}

}  // namespace lstm::cpu
