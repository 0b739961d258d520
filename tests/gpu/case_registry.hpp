#pragma once

// Test cases generated at run time, one per registered variant, dtype, shape or head, so that a
// new variant (or shape) gets its own cases by being registered once, and a runner can start each
// case in its own process: a sticky CUDA error or an exception in one cannot hide the others.
//
// A test file declares a generator at namespace scope,
//     const lstm::test::CaseGenerator generate{[] { add_case(...); ... }};
// and main() runs every generator before Catch starts (register_generated_cases), after static
// initialisation, so generators may read the variant registry.

#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "lstm/tensor.hpp"

namespace lstm::test {

// The dtype as case names spell it.
inline const char* dtype_name(DType dtype) { return dtype == DType::f32 ? "f32" : "f64"; }

namespace case_detail {

class FunctionInvoker final : public Catch::ITestInvoker {
public:
    explicit FunctionInvoker(std::function<void()> body) : body_(std::move(body)) {}
    void invoke() const override { body_(); }

private:
    std::function<void()> body_;
};

inline std::vector<std::function<void()>>& case_generators() {
    static std::vector<std::function<void()>> generators;
    return generators;
}

}  // namespace case_detail

// A name part that stays one argument of a Catch test spec and quotes simply in a shell: a
// comma separates specs and [ ] * ~ \ " have meanings to Catch, quotes and $ ` to the shell, so
// ", " becomes " / " and anything else outside a plain set becomes '_'.
inline std::string case_name_part(const std::string& text) {
    std::string out;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == ',') {
            out += " /";
            continue;
        }
        const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                           (c >= '0' && c <= '9') ||
                           std::string(" :_.+=/()-").find(c) != std::string::npos;
        out += plain ? c : '_';
    }
    return out;
}

// Registers one case with Catch (before Catch::Session::run). Catch copies the name and tags
// into its own strings (makeTestCase), so temporaries are fine; `where` is the caller's
// CATCH_INTERNAL_LINEINFO, whose file name is a string literal.
inline void add_case(const Catch::SourceLineInfo& where, const std::string& name,
                     const std::string& tags, std::function<void()> body) {
    const Catch::AutoReg registrar(
        new case_detail::FunctionInvoker(std::move(body)), where, Catch::StringRef(),
        Catch::NameAndTags{Catch::StringRef(name), Catch::StringRef(tags)});
}

struct CaseGenerator {
    explicit CaseGenerator(std::function<void()> generate) {
        case_detail::case_generators().push_back(std::move(generate));
    }
};

inline void register_generated_cases() {
    for (const auto& generate : case_detail::case_generators()) generate();
}

}  // namespace lstm::test
