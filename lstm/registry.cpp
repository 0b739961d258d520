// The registry's one list (lstm/registry.hpp). The CPU variants are built in here; onednn and the
// CUDA variants come from the optional parts lstm_onednn and lstm_cuda through weak hooks
// (lstm/detail/onednn_hooks.hpp), and a program adds its own with register_variant.

#include "lstm/registry.hpp"

#include <mutex>
#include <string>

#include "lstm/detail/onednn_hooks.hpp"
#include "lstm/error.hpp"
#include "lstm/variants/basic.hpp"
#include "lstm/variants/concat.hpp"
#include "lstm/variants/fused.hpp"

namespace lstm {

namespace {

// The CUDA variants' names, for the error that says where they live.
bool is_builtin_cuda_name(std::string_view name) {
    return name == "basic" || name == "fused" || name == "cudnn";
}

// The one object of a built-in variant type.
template <typename V>
const Variant* builtin() {
    static const V variant;
    return &variant;
}

struct Registry {
    std::mutex mutex;
    std::vector<const Variant*> list;  // registry order; guarded by mutex

    Registry() {
        list = {builtin<cpu::BasicVariant>(), builtin<cpu::FusedVariant>(),
                builtin<cpu::ConcatVariant>()};
        if (lstm_onednn_variant) list.push_back(lstm_onednn_variant());
        if (lstm_cuda_variants) {
            size_t count = 0;
            const Variant* const* cuda = lstm_cuda_variants(&count);
            list.insert(list.end(), cuda, cuda + count);
        }
    }
};

// Constructed on first use, so that a static initializer of the program may register before
// anything else has asked.
Registry& registry() {
    static Registry instance;
    return instance;
}

std::string describe(const std::vector<const Variant*>& all) {
    std::string known;
    for (const Variant* v : all)
        known += std::string(known.empty() ? "" : ", ") + v->name() + " (" +
                 to_string(v->device()) + ")";
    return known;
}

}  // namespace

std::vector<const Variant*> variants() {
    Registry& r = registry();
    const std::lock_guard<std::mutex> lock(r.mutex);
    return r.list;
}

void register_variant(const Variant& variant) {
    Registry& r = registry();
    const std::lock_guard<std::mutex> lock(r.mutex);
    for (const Variant* v : r.list)
        check(!(std::string_view(v->name()) == variant.name() && v->device() == variant.device()),
              "register_variant: the registry already has a variant '", variant.name(), "' on ",
              to_string(variant.device()), "; known: ", describe(r.list));
    r.list.push_back(&variant);
}

// Variants of one device, in registry order.
std::vector<const Variant*> variants_on(Device device) {
    std::vector<const Variant*> out;
    for (const Variant* v : variants())
        if (v->device() == device) out.push_back(v);
    return out;
}

// Looks a variant up by name and device; the error lists what this program has.
const Variant& find_variant(std::string_view name, Device device) {
    const std::vector<const Variant*> all = variants();
    for (const Variant* v : all)
        if (v->name() == name && v->device() == device) return *v;
    const std::string known = describe(all);
    // A device this build lacks is a valid request it cannot serve; a name it never had is not.
    if (device == Device::cuda && !LSTM_WITH_CUDA)
        fail_as<Unsupported>(
            "variant '", name,
            "' on cuda: this build has no CUDA back-end (LSTM_WITH_CUDA=0); known: ", known);
    // The CUDA variants register themselves only in programs that link lstm_cuda, so a library
    // built with CUDA reaches here for one of them exactly when the program does not link it.
    if (device == Device::cuda && !lstm_cuda_variants && is_builtin_cuda_name(name)) {
        if (name == "cudnn" && !LSTM_WITH_CUDNN)
            fail_as<Unsupported>(
                "variant 'cudnn' on cuda: this build has no cuDNN (LSTM_WITH_CUDNN=0); known: ",
                known);
        fail_as<Unsupported>("variant '", name,
                             "' on cuda lives in the lstm::cuda target (library lstm_cuda), which "
                             "this program does not link; known: ",
                             known);
    }
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
