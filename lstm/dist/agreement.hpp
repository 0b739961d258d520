#pragma once

// What the ranks of a DataParallel job must agree on, and how they find out that they do not.
// Ranks that disagree would otherwise deadlock, hit MPI errors or train on garbage, so
// DataParallel checks what it can cheaply. Its constructor compares a fixed-size description of
// every rank's model and options with rank 0's (check_same_model) and throws on every rank,
// naming the field and the ranks that differ. Every collective call (the constructor, train_step,
// compute_gradients, broadcast_parameters, parameters_in_sync) starts with one small fixed-size
// allreduce, the Handshake, that also carries which call this is, how many calls the object has
// made, and whether this rank refused its arguments; when the ranks disagree on any of that,
// every rank throws (naming each rank's call, or the rank that refused) instead of waiting in
// mismatched collectives. In a step the handshake is the sum of item counts the step needs
// anyway. What no collective can see is a rank that stops calling (returns, or exits) while the
// others still call: they wait in the next handshake (docs/distributed.md).

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "lstm/dist/communicator.hpp"
#include "lstm/error.hpp"
#include "lstm/nn/model.hpp"
#include "lstm/params.hpp"

namespace lstm::dist {

// Which gradient allreduces run during the backward pass. Every rank must use the same (the
// collectives must match; DataParallel's constructor checks it).
enum class Overlap {
    dense_head,  // the dense head's during the LSTM backward; the LSTM's as one after it
    per_layer,   // also each LSTM layer's, from the top, during the backward of the layers below
};

inline const char* to_string(Overlap overlap) {
    switch (overlap) {
        case Overlap::dense_head:
            return "dense_head";
        case Overlap::per_layer:
            return "per_layer";
    }
    return "unknown";
}

namespace detail {

// The collective calls of DataParallel, as the handshake tells them apart.
enum class Call {
    construct,
    compute_gradients,
    train_step,
    broadcast_parameters,
    parameters_in_sync
};
constexpr int kCalls = 5;

inline const char* call_name(Call call) {
    static const char* const names[kCalls] = {"the DataParallel constructor", "compute_gradients",
                                              "train_step", "broadcast_parameters",
                                              "parameters_in_sync"};
    return names[static_cast<int>(call)];
}

// The first collective of every DataParallel call. One per DataParallel object: it counts the
// object's calls. Its buffer is sized once (a step allocates nothing here).
class Handshake {
public:
    explicit Handshake(Communicator& comm) : comm_(comm) {}

    // Sums `payload` over the ranks and returns the sum, or throws on every rank when the ranks
    // made different calls or any rank refused its arguments (`refused`: this rank's
    // lstm::Error, or null).
    double exchange(Call call, double payload, const std::exception_ptr& refused) {
        ++calls_;
        const double call_number = static_cast<double>(calls_ % kNumberModulus);
        const size_t kind = static_cast<size_t>(1 + static_cast<int>(call));
        sums_.fill(0.0);
        sums_[0] = payload;
        sums_[kind] = 1;
        sums_[kNumber] = call_number;
        sums_[kNumberSquared] = call_number * call_number;
        sums_[kRefused] = refused ? 1 : 0;
        host().allreduce_sum(sums_.data(), kSize, DType::f64);
        const int ranks = comm_.size();
        bool agree = sums_[kind] == ranks;
        // Equal numbers iff sum^2 == p * sum of squares; exact in uint64 below 2^16 ranks (sums
        // below 2^32 and 2^48). Beyond, the kinds alone are compared.
        if (ranks < kNumberModulus) {
            const auto sum = static_cast<uint64_t>(sums_[kNumber]);
            const auto squares = static_cast<uint64_t>(sums_[kNumberSquared]);
            agree = agree && sum * sum == static_cast<uint64_t>(ranks) * squares;
        }
        if (agree && sums_[kRefused] == 0) return sums_[0];
        report_disagreement(call, refused);
    }

private:
    // The doubles: the payload (summed), one count per kind of call, the call number modulo
    // kNumberModulus and its square, and the number of ranks that refused their arguments.
    static constexpr int kSize = 1 + kCalls + 3;
    static constexpr size_t kNumber = 1 + kCalls, kNumberSquared = kNumber + 1,
                            kRefused = kNumber + 2;
    static constexpr int64_t kNumberModulus = 65536;

    Backend& host() const { return comm_.backend_for(Device::cpu); }

    // Every rank gets here together (the handshake's sums are the same everywhere): one more
    // collective gathers each rank's call, call number and refusal, and every rank throws.
    [[noreturn]] void report_disagreement(Call call, const std::exception_ptr& refused) {
        const int ranks = comm_.size(), me = comm_.rank();
        std::vector<double> all(static_cast<size_t>(3 * ranks), 0.0);
        all[static_cast<size_t>(3 * me)] = static_cast<double>(call);
        all[static_cast<size_t>(3 * me + 1)] = static_cast<double>(calls_);
        all[static_cast<size_t>(3 * me + 2)] = refused ? 1 : 0;
        host().allreduce_sum(all.data(), static_cast<int64_t>(all.size()), DType::f64);
        auto at = [&all](int r, int k) { return all[static_cast<size_t>(3 * r + k)]; };
        bool same_calls = true;
        for (int r = 1; r < ranks; ++r)
            same_calls = same_calls && at(r, 0) == at(0, 0) && at(r, 1) == at(0, 1);
        std::ostringstream out;
        constexpr int kListed = 8;  // longer lists say how many more
        if (!same_calls) {
            out << "DataParallel: the ranks made different calls (every rank must make the same "
                   "DataParallel calls in the same order; call n counts this object's calls, the "
                   "constructor being call 1):";
            for (int r = 0; r < ranks && r < kListed; ++r)
                out << (r == 0 ? " " : ", ") << "rank " << r << ": "
                    << call_name(static_cast<Call>(static_cast<int>(at(r, 0)))) << " (call "
                    << static_cast<int64_t>(at(r, 1)) << ")";
            if (ranks > kListed) out << ", and " << ranks - kListed << " more ranks";
            fail(out.str());
        }
        if (refused) std::rethrow_exception(refused);
        out << "DataParallel: " << call_name(call) << " stopped on every rank because rank";
        int listed = 0, count = 0;
        for (int r = 0; r < ranks; ++r) {
            if (at(r, 2) == 0) continue;
            if (listed < kListed) out << (listed == 0 ? " " : ", ") << r, ++listed;
            ++count;
        }
        if (count > listed) out << " and " << count - listed << " more";
        out << " refused its arguments (its own error says why); the others would otherwise "
               "wait for it";
        fail(out.str());
    }

    Communicator& comm_;
    int64_t calls_ = 0;  // collective calls of the object so far
    std::array<double, kSize> sums_{};
};

// The fields every rank must agree on, as doubles (exact for these integers).
enum class FieldKind { number, flag, dtype, device, head, overlap };
struct ModelField {
    const char* name;
    FieldKind kind;
};
constexpr int kModelFields = 25;
using ModelDescription = std::array<double, kModelFields>;

inline const ModelField& model_field(int k) {
    static const ModelField fields[kModelFields] = {
        {"dtype", FieldKind::dtype},
        {"device", FieldKind::device},
        {"overlap", FieldKind::overlap},
        {"lstm.input_size", FieldKind::number},
        {"lstm.hidden_size", FieldKind::number},
        {"lstm.num_layers", FieldKind::number},
        {"lstm.bidirectional", FieldKind::flag},
        {"lstm.proj_size", FieldKind::number},
        {"lstm.bias", FieldKind::flag},
        {"lstm.batch_first", FieldKind::flag},
        {"lstm.dropout", FieldKind::number},
        {"the LSTM's parameter count", FieldKind::number},
        {"classes", FieldKind::number},
        {"dense_bias", FieldKind::flag},
        {"the dense head's parameter count", FieldKind::number},
        {"head", FieldKind::head},
        {"ctc.blank", FieldKind::number},
        {"ctc.zero_infinity", FieldKind::flag},
        {"ctc.infeasible_is_error", FieldKind::flag},
        {"the optimizer's lr", FieldKind::number},
        {"adam.beta1", FieldKind::number},
        {"adam.beta2", FieldKind::number},
        {"adam.eps", FieldKind::number},
        {"adam.weight_decay", FieldKind::number},
        {"adam.decoupled_weight_decay", FieldKind::flag},
    };
    return fields[k];
}

// `model` with `overlap` and its dense head's parameter count, in model_field() order.
template <typename T>
ModelDescription describe_model(nn::SequenceModel<T>& model, Overlap overlap,
                                int64_t dense_parameters) {
    const nn::ModelConfig& mc = model.config();
    const Config& c = model.lstm().config();
    const nn::AdamOptions& adam = model.optimizer().options();
    auto d = [](auto v) { return static_cast<double>(v); };
    return {d(static_cast<int>(dtype_of<T>())),
            d(static_cast<int>(model.device())),
            d(static_cast<int>(overlap)),
            d(c.input_size),
            d(c.hidden_size),
            d(c.num_layers),
            d(c.bidirectional),
            d(c.proj_size),
            d(c.bias),
            d(c.batch_first),
            c.dropout,
            d(param_count(c)),
            d(mc.classes),
            d(mc.dense_bias),
            d(dense_parameters),
            d(static_cast<int>(mc.head)),
            d(mc.ctc.blank),
            d(mc.ctc.zero_infinity),
            d(mc.ctc.infeasible_is_error),
            adam.lr,
            adam.beta1,
            adam.beta2,
            adam.eps,
            adam.weight_decay,
            d(adam.decoupled_weight_decay)};
}

// Field k's value v as a message shows it.
inline std::string show_field(int k, double v) {
    const int e = static_cast<int>(v);
    switch (model_field(k).kind) {
        case FieldKind::dtype:
            return to_string(static_cast<DType>(e));
        case FieldKind::device:
            return to_string(static_cast<Device>(e));
        case FieldKind::head:
            return nn::to_string(static_cast<nn::Head>(e));
        case FieldKind::overlap:
            return to_string(static_cast<Overlap>(e));
        case FieldKind::flag:
            return v != 0 ? "true" : "false";
        case FieldKind::number:
            break;
    }
    // The shortest form that reads back as the same double, so a difference always shows.
    std::ostringstream out;
    out << std::setprecision(15) << v;
    if (std::stod(out.str()) != v) {
        out.str("");
        out << std::setprecision(17) << v;
    }
    return out.str();
}

// Throws on every rank when any rank's description differs from rank 0's: broadcasts rank 0's,
// then one allreduce of each rank's first differing field and its value there. A collective.
inline void check_same_model(Communicator& comm, const ModelDescription& mine) {
    Backend& host = comm.backend_for(Device::cpu);
    ModelDescription root = mine;
    host.broadcast(root.data(), sizeof root, 0);
    const int ranks = comm.size(), me = comm.rank();
    std::vector<double> firsts(static_cast<size_t>(2 * ranks), 0.0);
    for (int k = 0; k < kModelFields; ++k)
        if (std::memcmp(&mine[static_cast<size_t>(k)], &root[static_cast<size_t>(k)],
                        sizeof(double)) != 0) {
            firsts[static_cast<size_t>(2 * me)] = k + 1;
            firsts[static_cast<size_t>(2 * me + 1)] = mine[static_cast<size_t>(k)];
            break;
        }
    host.allreduce_sum(firsts.data(), static_cast<int64_t>(firsts.size()), DType::f64);
    std::ostringstream out;
    int listed = 0, count = 0;
    constexpr int kListed = 4;
    for (int r = 1; r < ranks; ++r) {
        const int k = static_cast<int>(firsts[static_cast<size_t>(2 * r)]) - 1;
        if (k < 0) continue;
        ++count;
        if (listed == kListed) continue;
        out << (listed == 0 ? "" : "; ") << "rank " << r << " has " << model_field(k).name << " = "
            << show_field(k, firsts[static_cast<size_t>(2 * r + 1)]) << " where rank 0 has "
            << show_field(k, root[static_cast<size_t>(k)]);
        ++listed;
    }
    if (count == 0) return;
    if (count > listed) out << "; and " << count - listed << " more ranks differ";
    fail(
        "DataParallel: every rank must pass the same model config, dtype, device, optimizer "
        "options and overlap, but ",
        out.str());
}

}  // namespace detail
}  // namespace lstm::dist
