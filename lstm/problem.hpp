#pragma once

// lstm::LstmProblem: the buffers of one forward/backward problem (inputs, outputs, gradients,
// workspace, reserve) in one memory space, and the ForwardArgs / BackwardArgs over them. The
// tests, the bench's reference check, the GPU tests and lstm_tool all build their arguments here,
// so each states only what it varies (which tensors are given, the lengths, where the scratch
// lies, which backward parts run). Device memory comes through lstm::Buffer, whose CUDA side
// (lstm/cuda/runtime.hpp, defined in lstm_cuda) allocates and copies: this header includes no
// CUDA header, and a host problem needs no CUDA at all.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "lstm/buffer.hpp"
#include "lstm/config.hpp"
#include "lstm/error.hpp"
#include "lstm/params.hpp"
#include "lstm/tensor.hpp"
#include "lstm/variant.hpp"

namespace lstm {

// The tensors of one problem, named as in ForwardArgs and BackwardArgs.
enum class ProblemTensor { x, h0, c0, params, y, hn, cn, dy, dhn, dcn, dx, dh0, dc0, dparams };

inline const char* to_string(ProblemTensor t) {
    static const char* const names[] = {"x",  "h0",  "c0",  "params", "y",   "hn",  "cn",
                                        "dy", "dhn", "dcn", "dx",     "dh0", "dc0", "dparams"};
    return names[static_cast<int>(t)];
}

// Where a call's scratch lies (the problem's memory space): a workspace of workspace_bytes() and,
// for training, a reserve of reserve_bytes(). Not owning.
struct ScratchBuffers {
    void* workspace = nullptr;
    size_t workspace_size = 0;
    void* reserve = nullptr;
    size_t reserve_size = 0;
};

// One problem of `config` on T steps and N sequences in precision T_ (the template argument) in
// host or device memory. A tensor is either given (storage of its full shape) or left out (an
// empty view: optional inputs read as zeros, optional outputs are not written). Storage only
// grows and is kept when a tensor is refilled or left out, so repeated calls repeat their
// pointers (what a CUDA graph replay needs).
template <typename T>
class LstmProblem {
public:
    // Every tensor left out and no scratch. `context` orders every copy and goes into the
    // arguments: required for Device::cuda, null on the host.
    LstmProblem(const Config& config, int64_t seq_len, int64_t batch, Device device = Device::cpu,
                cuda::Context* context = nullptr)
        : config_(config), seq_len_(seq_len), batch_(batch), device_(device), context_(context) {
        check(device == Device::cpu || context != nullptr,
              "LstmProblem on device cuda: context must be an lstm::cuda::Context, got null");
        for (Slot& s : slots_) s.buffer = Buffer(device);
        workspace_ = Buffer(device);
        reserve_ = Buffer(device);
    }

    // Host (N) sequence lengths, each in 1..T; empty: every sequence has length T. The arguments
    // point into it: keep it unchanged while a call made with them runs.
    std::vector<int64_t> lengths;

    const Config& config() const { return config_; }
    int64_t seq_len() const { return seq_len_; }
    int64_t batch() const { return batch_; }
    Device device() const { return device_; }
    cuda::Context* context() const { return context_; }

    // (T, N, I) for x and dx, (T, N, D*S) for y and dy, (L*D, N, S) for h0, hn, dhn and dh0,
    // (L*D, N, H) for c0, cn, dcn and dc0, (param_count) for params and dparams.
    std::vector<int64_t> shape(ProblemTensor t) const {
        const int64_t cells = config_.num_cells();
        switch (t) {
            case ProblemTensor::x:
            case ProblemTensor::dx:
                return {seq_len_, batch_, config_.input_size};
            case ProblemTensor::y:
            case ProblemTensor::dy:
                return {seq_len_, batch_, config_.output_size()};
            case ProblemTensor::h0:
            case ProblemTensor::hn:
            case ProblemTensor::dhn:
            case ProblemTensor::dh0:
                return {cells, batch_, config_.state_size()};
            case ProblemTensor::c0:
            case ProblemTensor::cn:
            case ProblemTensor::dcn:
            case ProblemTensor::dc0:
                return {cells, batch_, config_.hidden_size};
            case ProblemTensor::params:
            case ProblemTensor::dparams:
                return {param_count(config_)};
        }
        return {};
    }
    int64_t numel(ProblemTensor t) const {
        int64_t n = 1;
        for (int64_t d : shape(t)) n *= d;
        return n;
    }

    bool has(ProblemTensor t) const { return slot(t).given; }

    // Gives `t` storage for its shape in this memory space, contents unspecified.
    void allocate(ProblemTensor t) {
        Slot& s = slot(t);
        s.buffer.reserve(bytes(t));
        s.given = true;
    }
    // Leaves `t` out; its storage is kept for a later allocate(), set() or fill().
    void drop(ProblemTensor t) { slot(t).given = false; }

    // Copies `host` (numel(t) values of any arithmetic type, rounded to T) into `t`, giving it;
    // an empty vector leaves `t` out. Overwrites; returns once the copy is done.
    template <typename U>
    void set(ProblemTensor t, const std::vector<U>& host) {
        if (host.empty()) {
            drop(t);
            return;
        }
        check(static_cast<int64_t>(host.size()) == numel(t), "LstmProblem::set: ", to_string(t),
              " has ", host.size(), " values, expected ", numel(t), " for its shape");
        if constexpr (std::is_same_v<U, T>) {
            copy_in(t, host.data());
        } else {
            const std::vector<T> cast(host.begin(), host.end());
            copy_in(t, cast.data());
        }
    }
    // Gives `t` with every element `value`: zero for dparams, which backward adds into; NaN for
    // outputs, so that an element a call should write and does not shows up in a comparison.
    void fill(ProblemTensor t, T value) {
        if (value == T(0) && !std::signbit(value)) {
            allocate(t);
            slot(t).buffer.zero(bytes(t), context_);
            return;
        }
        copy_in(t, std::vector<T>(static_cast<size_t>(numel(t)), value).data());
    }
    // `t` on the host as U (empty when left out), after the work queued on the context's stream.
    template <typename U = T>
    std::vector<U> get(ProblemTensor t) const {
        if (!has(t)) return {};
        std::vector<T> out = slot(t).buffer.template download<T>(size_t(numel(t)), context_);
        if constexpr (std::is_same_v<U, T>)
            return out;
        else
            return std::vector<U>(out.begin(), out.end());
    }

    // A workspace and, for `training`, a reserve of the sizes `variant` asks for on this problem
    // (its default path), held by the problem (contents unspecified). Without `training` the
    // reserve is left out.
    void allocate_scratch(const Variant& variant, bool training = true) {
        constexpr DType dtype = dtype_of<T>();
        allocate_scratch(variant.workspace_bytes(config_, dtype, seq_len_, batch_),
                         variant.reserve_bytes(config_, dtype, seq_len_, batch_), training);
    }
    // The same for the sizes `plan` asks for.
    void allocate_scratch(const Plan& plan, bool training = true) {
        allocate_scratch(plan.workspace_bytes(), plan.reserve_bytes(), training);
    }
    void allocate_scratch(size_t workspace_bytes, size_t reserve_bytes, bool training) {
        scratch_.workspace_size = workspace_bytes;
        scratch_.workspace = workspace_.reserve(scratch_.workspace_size);
        scratch_.reserve_size = training ? reserve_bytes : 0;
        // A null reserve makes a forward an inference, so a training one gets an address even
        // where the variant asks for no bytes.
        scratch_.reserve =
            training ? reserve_.reserve(std::max<size_t>(scratch_.reserve_size, 1)) : nullptr;
    }
    // The caller's scratch instead (at any address, e.g. offset to test alignment); it must
    // outlive the calls made with the arguments.
    void use_scratch(const ScratchBuffers& scratch) { scratch_ = scratch; }
    const ScratchBuffers& scratch() const { return scratch_; }

    // Forward over the given tensors: reads x, lengths, h0, c0, params; overwrites y, hn, cn.
    // `training` passes the reserve (a training forward), otherwise null (inference).
    ForwardArgs<T> forward_args(bool training = true) const {
        ForwardArgs<T> f;
        f.x = view<const T>(ProblemTensor::x);
        f.lengths = Span<const int64_t>(lengths.data(), static_cast<int64_t>(lengths.size()));
        f.h0 = view<const T>(ProblemTensor::h0);
        f.c0 = view<const T>(ProblemTensor::c0);
        f.params = view<const T>(ProblemTensor::params);
        f.y = view<T>(ProblemTensor::y);
        f.hn = view<T>(ProblemTensor::hn);
        f.cn = view<T>(ProblemTensor::cn);
        f.workspace = scratch_.workspace;
        f.workspace_size = scratch_.workspace_size;
        f.reserve = training ? scratch_.reserve : nullptr;
        f.reserve_size = training ? scratch_.reserve_size : 0;
        f.context = context_;
        return f;
    }
    // Backward `part` of the training forward_args(): reads dy, dhn, dcn as well; overwrites dx,
    // dh0, dc0; ACCUMULATES into dparams (empty when left out, as a data part may have it).
    BackwardArgs<T> backward_args(BackwardPart part = BackwardPart::all) const {
        BackwardArgs<T> b = backward_args_from(forward_args(true));
        b.dy = view<const T>(ProblemTensor::dy);
        b.dhn = view<const T>(ProblemTensor::dhn);
        b.dcn = view<const T>(ProblemTensor::dcn);
        b.dx = view<T>(ProblemTensor::dx);
        b.dh0 = view<T>(ProblemTensor::dh0);
        b.dc0 = view<T>(ProblemTensor::dc0);
        b.dparams = view<T>(ProblemTensor::dparams);
        b.part = part;
        return b;
    }

private:
    struct Slot {
        Buffer buffer;
        bool given = false;
    };
    static constexpr size_t kTensors = static_cast<size_t>(ProblemTensor::dparams) + 1;

    Slot& slot(ProblemTensor t) { return slots_[static_cast<size_t>(t)]; }
    const Slot& slot(ProblemTensor t) const { return slots_[static_cast<size_t>(t)]; }
    size_t bytes(ProblemTensor t) const { return static_cast<size_t>(numel(t)) * sizeof(T); }

    // numel(t) values of T from the host into `t`, giving it.
    void copy_in(ProblemTensor t, const T* host) {
        allocate(t);
        slot(t).buffer.copy_from(host, Device::cpu, bytes(t), context_);
    }

    template <typename U>
    TensorView<U> view(ProblemTensor t) const {
        if (!has(t)) return {};
        U* data = slot(t).buffer.template as<U>();
        const std::vector<int64_t> s = shape(t);
        if (s.size() == 1) return TensorView<U>(data, {s[0]}, device_);
        return TensorView<U>(data, {s[0], s[1], s[2]}, device_);
    }

    Config config_;
    int64_t seq_len_, batch_;
    Device device_;
    cuda::Context* context_;
    std::array<Slot, kTensors> slots_;
    Buffer workspace_, reserve_;
    ScratchBuffers scratch_;
};

}  // namespace lstm
