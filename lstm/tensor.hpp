#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

#include "lstm/error.hpp"

namespace lstm {

// Where a buffer lives. Views carry it so that a host pointer is never handed to a GPU kernel.
enum class Device { cpu, cuda };

enum class DType { f32, f64 };

// What the matrix products of an LSTM call compute in; the data at the API keeps its DType.
//  - full: the data's own precision (fp32 products for float32 data, fp64 for float64).
//  - bf16: mixed precision for float32 data (Kalamkar et al. 2019; oneDNN's and cuDNN's bf16
//    RNNs): every operand entering a matrix product (weights, x, h, and in backward the gradients
//    that enter the products) is rounded to bfloat16 with round-to-nearest-even
//    (kernels/common/bf16.hpp); the products accumulate in fp32; bias, gate math, c and every
//    output and gradient stay fp32. docs/precision.md lists each rounding point.
enum class Precision { full, bf16 };

inline const char* to_string(Device device) { return device == Device::cpu ? "cpu" : "cuda"; }
inline const char* to_string(DType dtype) { return dtype == DType::f32 ? "float32" : "float64"; }
inline const char* to_string(Precision precision) {
    return precision == Precision::full ? "full" : "bf16";
}

// The precision named `name` ("full" or "bf16"), as flags and files spell it; `what` names the
// argument in the error.
inline Precision precision_named(const std::string& name, const char* what) {
    for (Precision p : {Precision::full, Precision::bf16})
        if (name == to_string(p)) return p;
    fail(what, ": expected a compute precision, full or bf16, got '", name, "'");
}

template <typename T>
constexpr DType dtype_of() {
    static_assert(std::is_same_v<std::remove_const_t<T>, float> ||
                      std::is_same_v<std::remove_const_t<T>, double>,
                  "only float and double tensors exist");
    return std::is_same_v<std::remove_const_t<T>, float> ? DType::f32 : DType::f64;
}

// A non-owning pointer + count. Used for host-side index arrays (lengths, targets).
template <typename T>
struct Span {
    T* data = nullptr;
    int64_t size = 0;

    Span() = default;
    Span(T* d, int64_t n) : data(d), size(n) {}
    template <typename Container, typename = decltype(std::declval<Container&>().data() + 0)>
    Span(Container& c) : data(c.data()), size(static_cast<int64_t>(c.size())) {}  // NOLINT
    // A read-only span also binds a const or temporary container, as std::span<const T> and
    // string_view do, so `accuracy(argmax_classes(scores), targets)` compiles; like them it must
    // not outlive the container (a temporary dies at the end of the full expression).
    template <typename Container, typename U = T, typename = std::enable_if_t<std::is_const_v<U>>,
              typename = decltype(std::declval<const Container&>().data() + 0)>
    Span(const Container& c) : data(c.data()), size(static_cast<int64_t>(c.size())) {}  // NOLINT

    bool empty() const { return size == 0; }
    T& operator[](int64_t i) const { return data[i]; }
    T* begin() const { return data; }
    T* end() const { return data + size; }
    operator Span<const T>() const { return {data, size}; }  // NOLINT
};

// A non-owning view of a dense, contiguous, row-major tensor of rank <= 4, tagged with the memory
// space it lives in. An empty view (null data) means "not given" for optional arguments.
template <typename T>
class TensorView {
public:
    static constexpr int kMaxRank = 4;

    TensorView() = default;
    TensorView(T* data, std::initializer_list<int64_t> shape, Device device = Device::cpu)
        : data_(data), rank_(static_cast<int>(shape.size())), device_(device) {
        check(shape.size() <= kMaxRank, "TensorView supports rank <= 4, got rank ", shape.size());
        int i = 0;
        for (int64_t s : shape) shape_[i++] = s;
        // Every size and element count derived from a view is an int64 product: a negative size
        // or a count past 2^63 would wrap into a plausible one somewhere downstream. (The shape
        // string is built only to refuse: views are made in time loops.)
        int64_t elements = 1;
        for (int d = 0; d < rank_; ++d) {
            if (shape_[d] < 0) fail("TensorView: sizes must be >= 0, got shape ", shape_string());
            if (__builtin_mul_overflow(elements, shape_[d], &elements))
                fail("TensorView: shape ", shape_string(), " has more than 2^63 elements");
        }
    }

    T* data() const { return data_; }
    int rank() const { return rank_; }
    int64_t size(int dim) const { return shape_[dim]; }
    Device device() const { return device_; }
    bool empty() const { return data_ == nullptr; }
    int64_t numel() const {
        int64_t n = 1;
        for (int i = 0; i < rank_; ++i) n *= shape_[i];
        return n;
    }
    T& operator[](int64_t i) const { return data_[i]; }

    // "(3, 4, 5)", for error messages.
    std::string shape_string() const {
        std::string out = "(";
        for (int i = 0; i < rank_; ++i) {
            if (i) out += ", ";
            out += std::to_string(shape_[i]);
        }
        return out + ")";
    }

    bool has_shape(std::initializer_list<int64_t> shape) const {
        if (static_cast<int>(shape.size()) != rank_) return false;
        int i = 0;
        for (int64_t s : shape)
            if (shape_[i++] != s) return false;
        return true;
    }

    operator TensorView<const T>() const {  // NOLINT: views convert to read-only views freely
        TensorView<const T> out;
        out.assign(data_, shape_, rank_, device_);
        return out;
    }

    // Low-level: used by the const conversion.
    void assign(T* data, const std::array<int64_t, kMaxRank>& shape, int rank, Device device) {
        data_ = data;
        shape_ = shape;
        rank_ = rank;
        device_ = device;
    }

private:
    T* data_ = nullptr;
    std::array<int64_t, kMaxRank> shape_{};
    int rank_ = 0;
    Device device_ = Device::cpu;
};

// Checks that `view` has exactly `shape`; the message names the argument and both shapes.
template <typename T>
void check_shape(const TensorView<T>& view, const char* name,
                 std::initializer_list<int64_t> shape) {
    if (view.has_shape(shape)) return;
    std::string want = "(";
    int i = 0;
    for (int64_t s : shape) want += (i++ ? ", " : "") + std::to_string(s);
    fail(name, " must have shape ", want, "), got ", view.shape_string());
}

namespace detail {

// Whether two arrays share memory (addresses compared as integers: the arrays are unrelated).
template <typename A, typename B>
bool overlaps(const A* a, int64_t a_count, const B* b, int64_t b_count) {
    const auto a0 = reinterpret_cast<std::uintptr_t>(a);
    const auto b0 = reinterpret_cast<std::uintptr_t>(b);
    return a0 < b0 + static_cast<std::uintptr_t>(b_count) * sizeof(B) &&
           b0 < a0 + static_cast<std::uintptr_t>(a_count) * sizeof(A);
}

// The same for two views' elements (either memory space). An empty view (null data, as an
// output not asked for) overlaps nothing: a default view claims one element at address 0.
template <typename A, typename B>
bool overlaps(const TensorView<A>& a, const TensorView<B>& b) {
    return !a.empty() && !b.empty() && overlaps(a.data(), a.numel(), b.data(), b.numel());
}

// Refuses a caller's tensor that shares memory with one of the layer's own buffers (`own`, e.g.
// its parameters()): the call reads or writes that buffer while it runs, so the results would be
// wrong without a sign.
template <typename A, typename B>
void check_apart_from_own(const TensorView<A>& view, const char* fn, const char* name,
                          const TensorView<B>& own, const char* own_name) {
    if (overlaps(view, own)) fail(fn, ": ", name, " overlaps the layer's ", own_name);
}

}  // namespace detail

}  // namespace lstm
