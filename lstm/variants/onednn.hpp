#pragma once

// `onednn` (cpu): the vendor reference on the CPU, as cuDNN is on the GPU. oneDNN's LSTM
// primitive (dnnl::lstm_forward / dnnl::lstm_backward of oneDNN 2.6, Debian's libdnnl-dev) runs
// the whole recurrence; this file only converts layouts and wires buffers. float32 only.
//
// How PyTorch's LSTM maps onto oneDNN's:
// - Layers: one primitive stacks layers only when every layer reads inputs as wide as its
//   output. Each stack is a "group" below. A unidirectional LSTM is one group when I == H, else
//   layer 0 alone and the layers above as a second group.
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
// Caching and allocation: primitive descriptors, primitives and the memory objects that carry
// their arguments are built once per (config, T, N) and kept in the variant object (the 16 most
// recently used, guarded by a mutex); workspace_bytes() and reserve_bytes() build the
// descriptors, since the sizes are theirs to tell, and the first forward / backward of a shape
// builds its primitives (oneDNN JIT-compiles kernels then). Steady-state calls only re-point
// data handles and call oneDNN's C execute with a prebuilt argument array; what still
// allocates lies inside oneDNN's execution (its per-execution argument hash map and execution
// context): about 50 small operator-new allocations per forward and 80 per backward of one
// layer group, measured with oneDNN 2.6. Calls on the same (config, T, N) through one variant
// object run one at a time, because they share those memory objects; calls on different
// shapes run concurrently.
// Threads: oneDNN's own OpenMP parallelism (Debian builds it with the OpenMP runtime).

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

#include "lstm/detail/carve.hpp"
#include "lstm/variant.hpp"

namespace lstm::cpu {

namespace onednn_detail {

using Dims = dnnl::memory::dims;
using Tag = dnnl::memory::format_tag;
constexpr auto kF32 = dnnl::memory::data_type::f32;

// Most (config, T, N) plans one variant object keeps. A training loop uses one or two shapes;
// a bucketed speech loader a handful. The least recently used plan goes first.
constexpr size_t kMaxPlans = 16;

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
    } else if (config.input_size == config.hidden_size || config.num_layers == 1) {
        out.push_back({0, config.num_layers, config.input_size});
    } else {
        out.push_back({0, 1, config.input_size});
        out.push_back({1, config.num_layers - 1, config.hidden_size});
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

// The arguments of the primitives this file runs (the forward's workspace only when training).
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

// One group's forward (training or inference): the LSTM primitive and the two weight reorders
// that feed it. Primitives are created on first use; the descriptors at plan time.
struct ForwardPlan {
    dnnl::lstm_forward::primitive_desc pd;
    dnnl::reorder::primitive_desc w_layer_pd, w_iter_pd;
    bool built = false;
    Bound lstm, w_layer, w_iter;

    void build(const dnnl::engine& engine, bool training) {
        if (built) return;
        lstm = Bound(dnnl::lstm_forward(pd), pd, engine, kForwardArgs);
        if (training) lstm.add(DNNL_ARG_WORKSPACE, pd.workspace_desc(), engine);
        w_layer = Bound(dnnl::reorder(w_layer_pd), w_layer_pd, engine, kReorderArgs);
        w_iter = Bound(dnnl::reorder(w_iter_pd), w_iter_pd, engine, kReorderArgs);
        built = true;
    }
};

// One group's backward: the LSTM primitive, the weight reorders feeding it and the reorders
// adding its weight gradients into dparams.
struct BackwardPlan {
    dnnl::lstm_backward::primitive_desc pd;
    dnnl::reorder::primitive_desc w_layer_pd, w_iter_pd, dw_layer_pd, dw_iter_pd;
    bool built = false;
    Bound lstm, w_layer, w_iter, dw_layer, dw_iter;

    void build(const dnnl::engine& engine) {
        if (built) return;
        lstm = Bound(dnnl::lstm_backward(pd), pd, engine, kBackwardArgs);
        w_layer = Bound(dnnl::reorder(w_layer_pd), w_layer_pd, engine, kReorderArgs);
        w_iter = Bound(dnnl::reorder(w_iter_pd), w_iter_pd, engine, kReorderArgs);
        dw_layer = Bound(dnnl::reorder(dw_layer_pd), dw_layer_pd, engine, kReorderArgs);
        dw_iter = Bound(dnnl::reorder(dw_iter_pd), dw_iter_pd, engine, kReorderArgs);
        built = true;
    }
};

struct GroupPlan {
    Group group;
    ForwardPlan training, inference;
    BackwardPlan backward;
};

// Everything one (config, T, N) needs. `mutex` is held for a whole call, since the Bound memory
// objects are re-pointed at the call's buffers.
struct Plan {
    Config config;
    int64_t seq_len = 0, batch = 0;
    std::vector<GroupPlan> groups;
    dnnl::engine engine;
    dnnl::stream stream;
    std::mutex mutex;
};

// Columns of the group's weight_ih (or weight_hh, when `iter`) matrices.
inline int64_t weights_width(const Config& config, const Group& group, bool iter) {
    return iter ? config.hidden_size : group.in_width;
}

// Elements of the group's weight_ih (or weight_hh) matrices, all cells.
inline int64_t plain_weights_count(const Config& config, const Group& group, bool iter) {
    return group.num_layers * config.num_directions() * 4 * config.hidden_size *
           weights_width(config, group, iter);
}

// PyTorch's weight_ih (or weight_hh) matrices of every layer and direction of a group, copied one
// after another: a oneDNN (layers, D, in, 4, H) tensor in ldgoi order, where element
// (l, d, i, g, h) is row g*H + h, column i of cell (l, d)'s matrix.
inline dnnl::memory::desc plain_weights_desc(const Config& config, const Group& group, bool iter) {
    return dnnl::memory::desc(Dims{group.num_layers, config.num_directions(),
                                   weights_width(config, group, iter), 4, config.hidden_size},
                              kF32, Tag::ldgoi);
}

// The group's weight_ih (or weight_hh) matrices, cell by cell: calls fn(offset of the cell's
// matrix in the flat parameters, offset in the plain layout, elements).
template <typename Fn>
void for_each_weight_matrix(const Config& config, const Group& group, bool iter, Fn&& fn) {
    const int64_t count = 4 * config.hidden_size * weights_width(config, group, iter);
    int64_t plain = 0;
    for (int64_t l = 0; l < group.num_layers; ++l)
        for (int64_t d = 0; d < config.num_directions(); ++d, plain += count) {
            const CellOffsets o = cell_offsets(config, group.first_layer + l, d);
            fn(iter ? o.weight_hh : o.weight_ih, plain, count);
        }
}

// plain (plain_weights_desc) <- the group's weight matrices in the flat params. Host; overwrites.
inline void gather_weights(const Config& config, const Group& group, bool iter, const float* params,
                           float* plain) {
    for_each_weight_matrix(config, group, iter, [&](int64_t at, int64_t to, int64_t count) {
        std::memcpy(plain + to, params + at, sizeof(float) * count);
    });
}

// The group's weight matrices in dparams += plain (plain_weights_desc). Host; accumulates.
inline void add_weight_grads(const Config& config, const Group& group, bool iter,
                             const float* plain, float* dparams) {
    for_each_weight_matrix(config, group, iter, [&](int64_t at, int64_t from, int64_t count) {
        for (int64_t k = 0; k < count; ++k) dparams[at + k] += plain[from + k];
    });
}

inline dnnl::memory::desc bias_desc(const Config& config, const Group& group) {
    return dnnl::memory::desc(
        Dims{group.num_layers, config.num_directions(), 4, config.hidden_size}, kF32, Tag::ldgo);
}

inline GroupPlan make_group_plan(const dnnl::engine& engine, const Config& config,
                                 const Group& group, int64_t seq_len, int64_t batch) {
    using dnnl::memory;
    const int64_t hidden = config.hidden_size, dirs = config.num_directions();
    const auto direction = config.bidirectional ? dnnl::rnn_direction::bidirectional_concat
                                                : dnnl::rnn_direction::unidirectional_left2right;
    const memory::desc src(Dims{seq_len, batch, group.in_width}, kF32, Tag::tnc);
    const memory::desc dst(Dims{seq_len, batch, config.output_size()}, kF32, Tag::tnc);
    const memory::desc state(Dims{group.num_layers, dirs, batch, hidden}, kF32, Tag::ldnc);
    const memory::desc w_layer(Dims{group.num_layers, dirs, group.in_width, 4, hidden}, kF32,
                               Tag::any);
    const memory::desc w_iter(Dims{group.num_layers, dirs, hidden, 4, hidden}, kF32, Tag::any);
    const memory::desc bias = bias_desc(config, group);
    const memory::desc user_w_layer = plain_weights_desc(config, group, false);
    const memory::desc user_w_iter = plain_weights_desc(config, group, true);
    const dnnl::primitive_attr attr = user_scratchpad_attr();

    auto forward = [&](dnnl::prop_kind kind) {
        const dnnl::lstm_forward::desc desc(kind, direction, src, state, state, w_layer, w_iter,
                                            bias, dst, state, state);
        ForwardPlan p;
        p.pd = dnnl::lstm_forward::primitive_desc(desc, attr, engine);
        p.w_layer_pd = dnnl::reorder::primitive_desc(engine, user_w_layer, engine,
                                                     p.pd.weights_layer_desc(), attr);
        p.w_iter_pd = dnnl::reorder::primitive_desc(engine, user_w_iter, engine,
                                                    p.pd.weights_iter_desc(), attr);
        // The bias is filled by hand (b_ih + b_hh), which needs oneDNN's plain ldgo layout.
        check(p.pd.bias_desc() == bias, "oneDNN chose a bias layout other than ldgo");
        return p;
    };
    GroupPlan out;
    out.group = group;
    out.training = forward(dnnl::prop_kind::forward_training);
    out.inference = forward(dnnl::prop_kind::forward_inference);

    const dnnl::lstm_backward::desc desc(dnnl::prop_kind::backward, direction, src, state, state,
                                         w_layer, w_iter, bias, dst, state, state, src, state,
                                         state, w_layer, w_iter, bias, dst, state, state);
    BackwardPlan& b = out.backward;
    b.pd = dnnl::lstm_backward::primitive_desc(desc, attr, engine, out.training.pd);
    b.w_layer_pd = dnnl::reorder::primitive_desc(engine, user_w_layer, engine,
                                                 b.pd.weights_layer_desc(), attr);
    b.w_iter_pd =
        dnnl::reorder::primitive_desc(engine, user_w_iter, engine, b.pd.weights_iter_desc(), attr);
    b.dw_layer_pd = dnnl::reorder::primitive_desc(engine, b.pd.diff_weights_layer_desc(), engine,
                                                  user_w_layer, attr);
    b.dw_iter_pd = dnnl::reorder::primitive_desc(engine, b.pd.diff_weights_iter_desc(), engine,
                                                 user_w_iter, attr);
    check(b.pd.bias_desc() == bias && b.pd.diff_bias_desc() == bias,
          "oneDNN chose a bias or bias-gradient layout other than ldgo");
    return out;
}

enum class Pass { training, inference, backward };

inline size_t scratchpad_bytes(const dnnl::primitive_desc_base& pd) {
    return pd.scratchpad_desc().get_size();
}

// Largest oneDNN scratchpad any primitive of `pass` asks for; primitives run one after another,
// so they share one.
inline size_t pass_scratchpad_bytes(const Plan& plan, Pass pass) {
    size_t most = 0;
    for (const GroupPlan& g : plan.groups) {
        if (pass == Pass::backward) {
            const BackwardPlan& b = g.backward;
            most = std::max({most, scratchpad_bytes(b.pd), scratchpad_bytes(b.w_layer_pd),
                             scratchpad_bytes(b.w_iter_pd), scratchpad_bytes(b.dw_layer_pd),
                             scratchpad_bytes(b.dw_iter_pd)});
        } else {
            const ForwardPlan& f = pass == Pass::training ? g.training : g.inference;
            most = std::max({most, scratchpad_bytes(f.pd), scratchpad_bytes(f.w_layer_pd),
                             scratchpad_bytes(f.w_iter_pd)});
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
    // The group's weight_ih / weight_hh matrices in the plain layout (plain_weights_desc); in
    // backward they receive the weight gradients once the weights were reordered.
    float* plain_layer;
    float* plain_iter;
    void* w_layer;   // the group's weight_ih matrices in the pass's oneDNN layout
    void* w_iter;    // its weight_hh matrices
    float* bias;     // (layers, D, 4, H) b_ih + b_hh
    void* dw_layer;  // backward: oneDNN adds weight gradients into these, so they are zeroed
    void* dw_iter;
    float* dbias;   // backward: (layers, D, 4, H)
    float* zeros;   // (L*D, N, H) stands in for an omitted h0, c0, dhn or dcn
    float* sink_h;  // (L*D, N, H) receives hn (inference) or dh0 (backward) nobody asked for
    float* sink_c;  // (L*D, N, H) the same for cn / dc0
    // (T, N, D*H) x2 with several groups: inference: the outputs of the groups below the top,
    // alternately; backward: the gradients w.r.t. those outputs, alternately. Else null.
    float* between[2];
    float* dx;  // (T, N, I) backward: receives dx when the caller omits it
    void* scratchpad;
};

inline Workspace carve_workspace(detail::Carver& carve, const Plan& plan, Pass pass) {
    const Config& config = plan.config;
    const int64_t state = config.num_cells() * plan.batch * config.hidden_size;
    const int64_t steps = plan.seq_len * plan.batch;
    size_t w_layer = 0, w_iter = 0, dw_layer = 0, dw_iter = 0;
    int64_t bias = 0, plain_layer = 0, plain_iter = 0;
    for (const GroupPlan& gp : plan.groups) {
        plain_layer = std::max(plain_layer, plain_weights_count(config, gp.group, false));
        plain_iter = std::max(plain_iter, plain_weights_count(config, gp.group, true));
        if (pass == Pass::backward) {
            const auto& pd = gp.backward.pd;
            w_layer = std::max(w_layer, pd.weights_layer_desc().get_size());
            w_iter = std::max(w_iter, pd.weights_iter_desc().get_size());
            dw_layer = std::max(dw_layer, pd.diff_weights_layer_desc().get_size());
            dw_iter = std::max(dw_iter, pd.diff_weights_iter_desc().get_size());
        } else {
            const auto& pd = pass == Pass::training ? gp.training.pd : gp.inference.pd;
            w_layer = std::max(w_layer, pd.weights_layer_desc().get_size());
            w_iter = std::max(w_iter, pd.weights_iter_desc().get_size());
        }
        bias =
            std::max(bias, gp.group.num_layers * config.num_directions() * 4 * config.hidden_size);
    }
    Workspace w{};
    w.plain_layer = carve.take<float>(plain_layer);
    w.plain_iter = carve.take<float>(plain_iter);
    w.w_layer = carve.take<unsigned char>(w_layer);
    w.w_iter = carve.take<unsigned char>(w_iter);
    w.bias = carve.take<float>(bias);
    if (pass == Pass::backward) {
        w.dw_layer = carve.take<unsigned char>(dw_layer);
        w.dw_iter = carve.take<unsigned char>(dw_iter);
        w.dbias = carve.take<float>(bias);
    }
    w.zeros = carve.take<float>(state);
    w.sink_h = carve.take<float>(state);
    w.sink_c = carve.take<float>(state);
    if (plan.groups.size() > 1 && pass != Pass::training) {
        // One buffer suffices between two groups; more groups alternate between two.
        w.between[0] = carve.take<float>(steps * config.output_size());
        w.between[1] =
            plan.groups.size() > 2 ? carve.take<float>(steps * config.output_size()) : nullptr;
    }
    w.dx = pass == Pass::backward ? carve.take<float>(steps * config.input_size) : nullptr;
    w.scratchpad = carve.take<unsigned char>(pass_scratchpad_bytes(plan, pass));
    return w;
}

// What a training forward leaves for backward (host memory).
struct Reserve {
    unsigned char* onednn;  // oneDNN's training workspace of group g at onednn + g * onednn_slot
    size_t onednn_slot;
    float* between;  // (G-1, T, N, D*H) the output of every group below the top; G = #groups
    float* hn;       // (L*D, N, H) final states, which oneDNN's backward takes as arguments
    float* cn;       // (L*D, N, H)

    void* group_workspace(size_t g) const { return onednn + g * onednn_slot; }
};

inline Reserve carve_reserve(detail::Carver& carve, const Plan& plan) {
    const Config& config = plan.config;
    const int64_t state = config.num_cells() * plan.batch * config.hidden_size;
    const int64_t groups = static_cast<int64_t>(plan.groups.size());
    Reserve r{};
    for (const GroupPlan& gp : plan.groups)
        r.onednn_slot =
            std::max(r.onednn_slot, aligned_bytes(gp.training.pd.workspace_desc().get_size()));
    r.onednn = carve.take<unsigned char>(groups * static_cast<int64_t>(r.onednn_slot));
    r.between =
        groups > 1
            ? carve.take<float>((groups - 1) * plan.seq_len * plan.batch * config.output_size())
            : nullptr;
    r.hn = carve.take<float>(state);
    r.cn = carve.take<float>(state);
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

// Rethrows oneDNN's exceptions as lstm::OutOfMemory (dnnl_out_of_memory) or lstm::BackendError,
// naming what failed.
template <typename Fn>
auto onednn_call(const char* what, Fn&& fn) -> decltype(fn()) {
    try {
        return fn();
    } catch (const dnnl::error& e) {
        const auto message = detail::concat("oneDNN failed ", what, ": ", e.what(),
                                            " (dnnl_status_t ", static_cast<int>(e.status), ")");
        if (e.status == dnnl_out_of_memory) throw OutOfMemory(message);
        throw BackendError(message);
    }
}

}  // namespace onednn_detail

class OnednnVariant final : public Variant {
public:
    const char* name() const override { return "onednn"; }
    Device device() const override { return Device::cpu; }

    std::optional<std::string> supports(const Config& config, DType dtype) const override {
        if (dtype != DType::f32)
            return std::string(
                "oneDNN's LSTM primitive computes in float32 only; use 'basic' or "
                "'fused' for float64");
        // oneDNN 2.6 has an LSTM with projection (weights_projection), but this variant does not
        // hand it one yet.
        if (config.proj_size > 0)
            return std::string(
                "projections (proj_size > 0) are not wired to oneDNN's projection LSTM yet; "
                "'basic' runs them");
        return std::nullopt;
    }

    std::optional<std::string> supports_variable_lengths() const override {
        return std::string(
            "oneDNN's LSTM primitive runs every sequence for all T steps (it has no sequence "
            "lengths), so hn/cn and the reverse direction would be wrong for shorter sequences; "
            "pass equal lengths or use 'basic', 'fused' or 'cudnn'");
    }
    std::optional<std::string> supports_split_backward() const override {
        return std::string(
            "oneDNN's LSTM backward is one primitive that computes the data gradients "
            "(diff_src_layer/iter) and the weight gradients (diff_weights_layer/iter, diff_bias) "
            "in a single execute, with no way to run either alone; use 'basic' or 'fused' for "
            "BackwardPart::data / weights");
    }

    // The largest of what a training forward, an inference forward and a backward need: our
    // converted weights, states and oneDNN's scratchpad. Builds (and caches) the plan.
    size_t workspace_bytes(const Config& config, DType dtype, int64_t seq_len,
                           int64_t batch) const override {
        using namespace onednn_detail;
        if (dtype != DType::f32) return 0;
        const std::shared_ptr<Plan> plan = plan_for(config, seq_len, batch);
        size_t most = 0;
        for (Pass pass : {Pass::training, Pass::inference, Pass::backward}) {
            detail::Carver carve(nullptr);
            carve_workspace(carve, *plan, pass);
            most = std::max(most, carve.bytes());
        }
        return most;
    }

    size_t reserve_bytes(const Config& config, DType dtype, int64_t seq_len,
                         int64_t batch) const override {
        using namespace onednn_detail;
        if (dtype != DType::f32) return 0;
        const std::shared_ptr<Plan> plan = plan_for(config, seq_len, batch);
        detail::Carver carve(nullptr);
        carve_reserve(carve, *plan);
        return carve.bytes();
    }

protected:
    // The float64 hooks stay the base's: supports() refuses float64 before they could run.
    using Variant::run_backward;
    using Variant::run_forward;

    void run_forward(const Config& config, const ForwardArgs<float>& args) const override {
        using namespace onednn_detail;
        const std::shared_ptr<Plan> plan = plan_for(config, args.x.size(0), args.x.size(1));
        std::lock_guard<std::mutex> lock(plan->mutex);
        onednn_call("in the LSTM forward", [&] { forward_pass(*plan, args); });
    }

    void run_backward(const Config& config, const BackwardArgs<float>& args) const override {
        using namespace onednn_detail;
        const std::shared_ptr<Plan> plan = plan_for(config, args.x.size(0), args.x.size(1));
        std::lock_guard<std::mutex> lock(plan->mutex);
        onednn_call("in the LSTM backward", [&] { backward_pass(*plan, args); });
    }

private:
    // Runs a prebuilt reorder from `from` to `to` (host buffers in its source and destination
    // layouts).
    static void reorder(onednn_detail::Plan& plan, onednn_detail::Bound& r, const void* from,
                        void* to, void* scratchpad) {
        r.set(DNNL_ARG_FROM, from);
        r.set(DNNL_ARG_TO, to);
        r.set_scratchpad(scratchpad);
        r.run(plan.stream);
    }

    // ws.w_layer / ws.w_iter <- the group's weight matrices of params in the layouts the pass's
    // primitive wants, through the plain copies in ws.
    static void convert_weights(onednn_detail::Plan& plan, const onednn_detail::Group& group,
                                const float* params, const onednn_detail::Workspace& ws,
                                onednn_detail::Bound& w_layer, onednn_detail::Bound& w_iter) {
        using namespace onednn_detail;
        gather_weights(plan.config, group, false, params, ws.plain_layer);
        gather_weights(plan.config, group, true, params, ws.plain_iter);
        reorder(plan, w_layer, ws.plain_layer, ws.w_layer, ws.scratchpad);
        reorder(plan, w_iter, ws.plain_iter, ws.w_iter, ws.scratchpad);
    }

    // Training forward when args.reserve is set, inference otherwise. Shapes as in ForwardArgs;
    // all host memory. Overwrites y, hn, cn.
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
        const int64_t state = plan.batch * config.hidden_size;  // one cell's (N, H)
        const int64_t layer_out = plan.seq_len * plan.batch * config.output_size();
        if (args.h0.empty() || args.c0.empty())
            std::memset(ws.zeros, 0, sizeof(float) * config.num_cells() * state);
        const float* params = args.params.data();
        const float* h0 = args.h0.empty() ? ws.zeros : args.h0.data();
        const float* c0 = args.c0.empty() ? ws.zeros : args.c0.data();
        float* hn = training ? rs.hn : (args.hn.empty() ? ws.sink_h : args.hn.data());
        float* cn = training ? rs.cn : (args.cn.empty() ? ws.sink_c : args.cn.data());
        // Output of group g below the top: kept for backward when training.
        auto group_out = [&](size_t g) {
            return training ? rs.between + g * layer_out : ws.between[g % 2];
        };

        const size_t groups = plan.groups.size();
        for (size_t g = 0; g < groups; ++g) {
            GroupPlan& gp = plan.groups[g];
            ForwardPlan& fp = training ? gp.training : gp.inference;
            fp.build(plan.engine, training);
            const Group& group = gp.group;
            const int64_t cell0 = group.first_layer * config.num_directions();

            convert_weights(plan, group, params, ws, fp.w_layer, fp.w_iter);
            sum_biases(config, group, params, ws.bias);

            Bound& lstm = fp.lstm;
            lstm.set(DNNL_ARG_SRC_LAYER, g == 0 ? args.x.data() : group_out(g - 1));
            lstm.set(DNNL_ARG_SRC_ITER, h0 + cell0 * state);
            lstm.set(DNNL_ARG_SRC_ITER_C, c0 + cell0 * state);
            lstm.set(DNNL_ARG_WEIGHTS_LAYER, ws.w_layer);
            lstm.set(DNNL_ARG_WEIGHTS_ITER, ws.w_iter);
            lstm.set(DNNL_ARG_BIAS, ws.bias);
            lstm.set(DNNL_ARG_DST_LAYER, g + 1 == groups ? args.y.data() : group_out(g));
            lstm.set(DNNL_ARG_DST_ITER, hn + cell0 * state);
            lstm.set(DNNL_ARG_DST_ITER_C, cn + cell0 * state);
            if (training) lstm.set(DNNL_ARG_WORKSPACE, rs.group_workspace(g));
            lstm.set_scratchpad(ws.scratchpad);
            lstm.run(plan.stream);
            // The next group's weights overwrite ws.w_layer / ws.w_iter / ws.bias.
            plan.stream.wait();
        }
        if (training) {
            const size_t bytes = sizeof(float) * config.num_cells() * state;
            if (!args.hn.empty()) std::memcpy(args.hn.data(), rs.hn, bytes);
            if (!args.cn.empty()) std::memcpy(args.cn.data(), rs.cn, bytes);
        }
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
        const int64_t state = plan.batch * config.hidden_size;
        const int64_t layer_out = plan.seq_len * plan.batch * config.output_size();
        if (args.h0.empty() || args.c0.empty() || args.dhn.empty() || args.dcn.empty())
            std::memset(ws.zeros, 0, sizeof(float) * config.num_cells() * state);
        const float* params = args.params.data();
        float* dparams = args.dparams.data();
        const float* h0 = args.h0.empty() ? ws.zeros : args.h0.data();
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

            convert_weights(plan, group, params, ws, bp.w_layer, bp.w_iter);
            sum_biases(config, group, params, ws.bias);
            std::memset(ws.dw_layer, 0, bp.pd.diff_weights_layer_desc().get_size());
            std::memset(ws.dw_iter, 0, bp.pd.diff_weights_iter_desc().get_size());
            std::memset(ws.dbias, 0, bp.pd.diff_bias_desc().get_size());

            Bound& lstm = bp.lstm;
            lstm.set(DNNL_ARG_SRC_LAYER, g == 0 ? args.x.data() : rs.between + (g - 1) * layer_out);
            lstm.set(DNNL_ARG_SRC_ITER, h0 + cell0 * state);
            lstm.set(DNNL_ARG_SRC_ITER_C, c0 + cell0 * state);
            lstm.set(DNNL_ARG_WEIGHTS_LAYER, ws.w_layer);
            lstm.set(DNNL_ARG_WEIGHTS_ITER, ws.w_iter);
            lstm.set(DNNL_ARG_BIAS, ws.bias);
            lstm.set(DNNL_ARG_DST_LAYER, top ? args.y.data() : rs.between + g * layer_out);
            lstm.set(DNNL_ARG_DST_ITER, rs.hn + cell0 * state);
            lstm.set(DNNL_ARG_DST_ITER_C, rs.cn + cell0 * state);
            lstm.set(DNNL_ARG_DIFF_DST_LAYER, top ? args.dy.data() : group_dout(g));
            lstm.set(DNNL_ARG_DIFF_DST_ITER, dhn + cell0 * state);
            lstm.set(DNNL_ARG_DIFF_DST_ITER_C, dcn + cell0 * state);
            lstm.set(DNNL_ARG_DIFF_SRC_LAYER, g == 0 ? dx : group_dout(g - 1));
            lstm.set(DNNL_ARG_DIFF_SRC_ITER, dh0 + cell0 * state);
            lstm.set(DNNL_ARG_DIFF_SRC_ITER_C, dc0 + cell0 * state);
            lstm.set(DNNL_ARG_DIFF_WEIGHTS_LAYER, ws.dw_layer);
            lstm.set(DNNL_ARG_DIFF_WEIGHTS_ITER, ws.dw_iter);
            lstm.set(DNNL_ARG_DIFF_BIAS, ws.dbias);
            lstm.set(DNNL_ARG_WORKSPACE, rs.group_workspace(g));
            lstm.set_scratchpad(ws.scratchpad);
            lstm.run(plan.stream);

            // Weight gradients: oneDNN's layout -> the plain one (the weights there were consumed
            // by the reorders above), then added into dparams.
            reorder(plan, bp.dw_layer, ws.dw_layer, ws.plain_layer, ws.scratchpad);
            reorder(plan, bp.dw_iter, ws.dw_iter, ws.plain_iter, ws.scratchpad);
            plan.stream.wait();
            add_weight_grads(config, group, false, ws.plain_layer, dparams);
            add_weight_grads(config, group, true, ws.plain_iter, dparams);
            add_bias_grads(config, group, ws.dbias, dparams);
        }
    }

    // The cached plan of (config, T, N), built on first request. Moves it to the front of the
    // most-recently-used list and drops the oldest beyond kMaxPlans; a dropped plan lives on
    // until the calls holding it return.
    std::shared_ptr<onednn_detail::Plan> plan_for(const Config& config, int64_t seq_len,
                                                  int64_t batch) const {
        using namespace onednn_detail;
        std::lock_guard<std::mutex> lock(cache_mutex_);
        for (size_t k = 0; k < plans_.size(); ++k) {
            const Plan& p = *plans_[k];
            if (p.config == config && p.seq_len == seq_len && p.batch == batch) {
                std::rotate(plans_.begin(), plans_.begin() + k, plans_.begin() + k + 1);
                return plans_.front();
            }
        }
        config.validate();
        auto plan = std::make_shared<Plan>();
        plan->config = config;
        plan->seq_len = seq_len;
        plan->batch = batch;
        onednn_call("creating the LSTM primitive descriptors", [&] {
            if (!engine_) engine_ = dnnl::engine(dnnl::engine::kind::cpu, 0);
            plan->engine = engine_;
            for (const Group& group : make_groups(config))
                plan->groups.push_back(make_group_plan(engine_, config, group, seq_len, batch));
            plan->stream = dnnl::stream(engine_);
        });
        if (plans_.size() >= kMaxPlans) plans_.pop_back();
        plans_.insert(plans_.begin(), plan);
        return plan;
    }

    mutable std::mutex cache_mutex_;
    mutable dnnl::engine engine_;  // one CPU engine for every plan, made on first use
    mutable std::vector<std::shared_ptr<onednn_detail::Plan>> plans_;
};

}  // namespace lstm::cpu
