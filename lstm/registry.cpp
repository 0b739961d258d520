// The registry's one list (lstm/registry.hpp): the only translation unit that sees every
// variant's implementation, except oneDNN's, which lives in the optional lstm_onednn.

#include "lstm/registry.hpp"

#include <string>

#include "lstm/detail/onednn_hooks.hpp"
#include "lstm/error.hpp"
#include "lstm/variants/basic.hpp"
#include "lstm/variants/fused.hpp"
#if LSTM_WITH_CUDA
#include "lstm/variants/cuda_basic.hpp"
#include "lstm/variants/cuda_fused.hpp"
#endif
#if LSTM_WITH_CUDA && LSTM_WITH_CUDNN
#include "lstm/variants/cudnn.hpp"
#endif

namespace lstm {

const std::vector<const Variant*>& variants() {
    static const cpu::BasicVariant basic_cpu;
    static const cpu::FusedVariant fused_cpu;
#if LSTM_WITH_CUDA
    static const cuda::BasicVariant basic_cuda;
    static const cuda::FusedVariant fused_cuda;
#endif
#if LSTM_WITH_CUDA && LSTM_WITH_CUDNN
    static const cuda::CudnnVariant cudnn_cuda;
#endif
    static const std::vector<const Variant*> all = {
        &basic_cpu,
        &fused_cpu,
        // Null unless the program links lstm::onednn (lstm/detail/onednn_hooks.hpp).
        lstm_onednn_variant ? lstm_onednn_variant() : nullptr,
#if LSTM_WITH_CUDA
        &basic_cuda,
        &fused_cuda,
#endif
#if LSTM_WITH_CUDA && LSTM_WITH_CUDNN
        &cudnn_cuda,
#endif
    };
    static const std::vector<const Variant*> linked = [] {
        std::vector<const Variant*> out;
        for (const Variant* v : all)
            if (v != nullptr) out.push_back(v);
        return out;
    }();
    return linked;
}

// Variants of one device, in registry order.
std::vector<const Variant*> variants_on(Device device) {
    std::vector<const Variant*> out;
    for (const Variant* v : variants())
        if (v->device() == device) out.push_back(v);
    return out;
}

// Looks a variant up by name and device; the error lists what this binary has.
const Variant& find_variant(std::string_view name, Device device) {
    std::string known;
    for (const Variant* v : variants()) {
        if (v->name() == name && v->device() == device) return *v;
        known += std::string(known.empty() ? "" : ", ") + v->name() + " (" +
                 to_string(v->device()) + ")";
    }
    // A device this build lacks is a valid request it cannot serve; a name it never had is not.
    if (device == Device::cuda && !LSTM_WITH_CUDA)
        fail_as<Unsupported>(
            "variant '", name,
            "' on cuda: this build has no CUDA back-end (LSTM_WITH_CUDA=0); known: ", known);
    // onednn registers itself only in programs that link lstm_onednn, so a library built with
    // oneDNN reaches here exactly when the program does not link it: say where it lives.
    if (name == "onednn" && device == Device::cpu) {
        if (LSTM_WITH_ONEDNN)
            fail_as<Unsupported>(
                "variant 'onednn' on cpu lives in the lstm::onednn target (library lstm_onednn), "
                "which this program does not link; known: ",
                known);
        fail_as<Unsupported>(
            "variant 'onednn' on cpu: this build has no oneDNN (LSTM_WITH_ONEDNN=0); known: ",
            known);
    }
    fail("variant '", name, "' on ", to_string(device),
         " is not built into this binary; known: ", known);
}

}  // namespace lstm
