#pragma once

// Strict integer arguments for the project's command-line programs (lstm_bench, lstm_dist_bench,
// lstm_tool, the examples). atoi, atoll and strtol read "2x" as 2, "abc" as 0 and wrap values out
// of range, so a typo ran something other than what was asked for; from_chars with the whole text
// consumed and the range checked leaves no such reading. Each program words its own refusal
// around int_range_message, so they all say the same thing.

#include <charconv>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace lstm::cli {

// `text` as a decimal integer in [min, max]: an optional '-' and digits, nothing else (no blanks,
// no '+', no trailing characters). std::nullopt for anything else, including values that do not
// fit in T.
template <typename T>
std::optional<T> parse_int(std::string_view text, T min, T max) {
    T value{};
    const char* end = text.data() + text.size();
    const auto [stop, err] = std::from_chars(text.data(), end, value);
    if (text.empty() || err != std::errc() || stop != end || value < min || value > max)
        return std::nullopt;
    return value;
}

// "NAME must be an integer from MIN to MAX, got 'TEXT'".
template <typename T>
std::string int_range_message(std::string_view name, T min, T max, std::string_view text) {
    return std::string(name) + " must be an integer from " + std::to_string(min) + " to " +
           std::to_string(max) + ", got '" + std::string(text) + "'";
}

}  // namespace lstm::cli
