#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace lstm {

// What went wrong, so training code can react to each: retry with a smaller batch on
// out_of_memory, fall back to another variant on unsupported, stop on the others.
enum class ErrorKind {
    invalid_argument,  // the caller passed something wrong (shape, length, index, file content)
    unsupported,       // valid, but this variant (or build) cannot do it: supports() objected
    out_of_memory,     // an allocation on the host or the device failed
    backend,           // a device or back-end library (CUDA, cuBLAS, cuDNN, oneDNN) failed
};

inline const char* to_string(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::invalid_argument:
            return "invalid argument";
        case ErrorKind::unsupported:
            return "unsupported";
        case ErrorKind::out_of_memory:
            return "out of memory";
        case ErrorKind::backend:
            return "backend failure";
    }
    return "unknown";
}

// The one exception type of the library (catch it for every kind). Every message names the
// argument, what was expected and what came, e.g. "lengths[3] = 120 exceeds T = 100"; kind()
// and the four subclasses below tell the kinds apart.
class Error : public std::runtime_error {
public:
    Error(const std::string& message, ErrorKind kind) : std::runtime_error(message), kind_(kind) {}
    ErrorKind kind() const noexcept { return kind_; }

private:
    ErrorKind kind_;
};

class InvalidArgument : public Error {
public:
    explicit InvalidArgument(const std::string& message)
        : Error(message, ErrorKind::invalid_argument) {}
};

class Unsupported : public Error {
public:
    explicit Unsupported(const std::string& message) : Error(message, ErrorKind::unsupported) {}
};

class OutOfMemory : public Error {
public:
    explicit OutOfMemory(const std::string& message) : Error(message, ErrorKind::out_of_memory) {}
};

class BackendError : public Error {
public:
    explicit BackendError(const std::string& message) : Error(message, ErrorKind::backend) {}
};

namespace detail {

inline void append_all(std::ostringstream&) {}

template <typename First, typename... Rest>
void append_all(std::ostringstream& out, const First& first, const Rest&... rest) {
    out << first;
    append_all(out, rest...);
}

template <typename... Parts>
std::string concat(const Parts&... parts) {
    std::ostringstream out;
    append_all(out, parts...);
    return out.str();
}

}  // namespace detail

// Builds a message from its pieces with operator<< and throws it as exception type E (one of
// the Error classes above).
template <typename E, typename... Parts>
[[noreturn]] void fail_as(const Parts&... parts) {
    throw E(detail::concat(parts...));
}

// The same as lstm::InvalidArgument, the kind of almost every check.
template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
    fail_as<InvalidArgument>(parts...);
}

// Throws lstm::InvalidArgument with the concatenated message when the condition does not hold.
template <typename... Parts>
void check(bool condition, const Parts&... parts) {
    if (!condition) fail(parts...);
}

}  // namespace lstm
