#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace lstm {

// The one exception type of the library. Every message names the argument, what was
// expected and what came, e.g. "lengths[3] = 120 exceeds T = 100".
class Error : public std::invalid_argument {
public:
    explicit Error(const std::string& message) : std::invalid_argument(message) {}
};

namespace detail {

inline void append_all(std::ostringstream&) {}

template <typename First, typename... Rest>
void append_all(std::ostringstream& out, const First& first, const Rest&... rest) {
    out << first;
    append_all(out, rest...);
}

}  // namespace detail

// Builds a message from its pieces with operator<< and throws it as lstm::Error.
template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
    std::ostringstream out;
    detail::append_all(out, parts...);
    throw Error(out.str());
}

// Throws lstm::Error with the concatenated message when the condition does not hold.
template <typename... Parts>
void check(bool condition, const Parts&... parts) {
    if (!condition) fail(parts...);
}

}  // namespace lstm
