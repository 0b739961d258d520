// Spoken-digits example: the manifest reader declared in manifest.hpp.

#include "manifest.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "lstm/error.hpp"

namespace spoken_digits {

const char* const kClassWords[kNumClasses] = {"zero", "one",   "two",   "three", "four", "five",
                                              "six",  "seven", "eight", "nine",  "oh"};

namespace {

constexpr const char* kHeader = "path\tsplit\tlabels\twords\tvoice\tvariant\tspeed\tpitch\tgap";
constexpr size_t kColumns = 9;

std::vector<std::string> split_on(const std::string& line, char separator) {
    std::vector<std::string> parts;
    std::string part;
    std::istringstream in(line);
    while (std::getline(in, part, separator)) parts.push_back(part);
    // getline drops an empty last field; keep it so a missing column is counted.
    if (!line.empty() && line.back() == separator) parts.emplace_back();
    return parts;
}

// The whole of `text` as a non-negative integer, or -1.
int64_t parse_count(const std::string& text) {
    if (text.empty() || text.size() > 9) return -1;  // 9 digits cannot overflow int64_t
    int64_t value = 0;
    for (char c : text) {
        if (c < '0' || c > '9') return -1;
        value = value * 10 + (c - '0');
    }
    return value;
}

}  // namespace

std::vector<Utterance> read_manifest(const std::string& manifest_path) {
    std::ifstream in(manifest_path);
    lstm::check(in.good(), "spoken_digits: cannot open manifest '", manifest_path, "'");
    const std::filesystem::path folder =
        std::filesystem::absolute(std::filesystem::path(manifest_path)).parent_path();
    std::string line;
    lstm::check(std::getline(in, line) && line == kHeader, "spoken_digits: '", manifest_path,
                "' line 1: expected the header \"", kHeader, "\"");
    std::vector<Utterance> rows;
    for (int64_t number = 2; std::getline(in, line); ++number) {
        const auto where = [&] {
            return lstm::detail::concat("spoken_digits: '", manifest_path, "' line ", number, ": ");
        };
        const std::vector<std::string> f = split_on(line, '\t');
        lstm::check(f.size() == kColumns, where(), "expected ", kColumns,
                    " tab-separated columns, got ", f.size());
        Utterance u;
        u.path = (folder / f[0]).string();
        u.split = f[1];
        lstm::check(u.split == "train" || u.split == "heldout", where(), "split '", u.split,
                    "' is neither train nor heldout");
        std::string expected_words;
        for (const std::string& token : split_on(f[2], ' ')) {
            const int64_t label = parse_count(token);
            lstm::check(label >= 0 && label < kNumClasses, where(), "label '", token,
                        "' is not a class id 0..", kNumClasses - 1);
            u.labels.push_back(label);
            expected_words += (expected_words.empty() ? "" : " ");
            expected_words += kClassWords[label];
        }
        lstm::check(!u.labels.empty(), where(), "no labels");
        u.words = f[3];
        lstm::check(u.words == expected_words, where(), "words '", u.words,
                    "' do not spell the labels (expected '", expected_words, "')");
        u.voice = f[4];
        u.variant = f[5];
        lstm::check(!u.voice.empty() && !u.variant.empty(), where(), "empty voice or variant");
        const int64_t speed = parse_count(f[6]), pitch = parse_count(f[7]), gap = parse_count(f[8]);
        lstm::check(speed >= 0 && pitch >= 0 && gap >= 0, where(),
                    "speed, pitch and gap must be non-negative integers, got '", f[6], "', '", f[7],
                    "', '", f[8], "'");
        u.speed = static_cast<int>(speed);
        u.pitch = static_cast<int>(pitch);
        u.gap = static_cast<int>(gap);
        rows.push_back(std::move(u));
    }
    return rows;
}

}  // namespace spoken_digits
