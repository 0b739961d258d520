#pragma once

// Command-line parsing shared by lstm_tool's subcommands: "--name value", "--name=value" and
// flags; anything the command does not declare is a usage error (exit code 2), and so is a
// "--name" whose next word is another option rather than its value.

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "lstm/io/safetensors.hpp"
#include "lstm/tensor.hpp"

namespace lstm::tool {

// Exit codes: usage errors (unknown option, missing option or file) are told apart from failures
// of the work itself (a malformed file, shapes that do not fit), so scripts can react to each.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// A mistake in how the tool was called, as opposed to in what it was given to work on.
class UsageError : public std::runtime_error {
public:
    explicit UsageError(const std::string& message) : std::runtime_error(message) {}
};

struct OptionSpec {
    std::string name;  // without the leading "--"
    bool takes_value;
};

struct ParsedArgs {
    std::map<std::string, std::string> values;
    std::set<std::string> flags;
    std::vector<std::string> positional;
    bool help = false;

    bool has(const std::string& name) const { return values.count(name) || flags.count(name); }

    std::optional<std::string> value(const std::string& name) const {
        const auto it = values.find(name);
        if (it == values.end()) return std::nullopt;
        return it->second;
    }

    std::string required(const std::string& name) const {
        const auto it = values.find(name);
        if (it == values.end()) throw UsageError("missing required option --" + name);
        return it->second;
    }
};

// Parses `args` (the words after the subcommand) against `specs`.
inline ParsedArgs parse_args(const std::vector<std::string>& args,
                             const std::vector<OptionSpec>& specs) {
    ParsedArgs out;
    for (size_t k = 0; k < args.size(); ++k) {
        const std::string& word = args[k];
        if (word == "--help" || word == "-h") {
            out.help = true;
            continue;
        }
        // Many tools read "--" as the end of the options; this one has no such marker, and a
        // FILE that starts with '-' is reached by its path instead.
        if (word == "--")
            throw UsageError(
                "unknown option '--' (there is no end-of-options marker; give a FILE that starts "
                "with '-' as ./FILE)");
        if (word.size() < 2 || word.compare(0, 2, "--") != 0) {
            if (!word.empty() && word[0] == '-' && word != "-")
                throw UsageError("unknown option '" + word + "'");
            out.positional.push_back(word);
            continue;
        }
        const size_t eq = word.find('=');
        const std::string name = word.substr(2, eq == std::string::npos ? eq : eq - 2);
        if (name == "help") throw UsageError("option --help takes no value, got '" + word + "'");
        const OptionSpec* spec = nullptr;
        for (const OptionSpec& s : specs)
            if (s.name == name) spec = &s;
        if (spec == nullptr) throw UsageError("unknown option '--" + name + "'");
        if (out.has(name)) throw UsageError("option --" + name + " is given more than once");
        if (!spec->takes_value) {
            if (eq != std::string::npos) throw UsageError("option --" + name + " takes no value");
            out.flags.insert(name);
            continue;
        }
        if (eq != std::string::npos) {
            out.values[name] = word.substr(eq + 1);
        } else {
            if (k + 1 >= args.size()) throw UsageError("option --" + name + " needs a value");
            // "--out --backward" forgot the value: taking the next option as one would write a
            // file named "--backward" and drop the option.
            const std::string& next = args[k + 1];
            if (next.compare(0, 2, "--") == 0)
                throw UsageError("option --" + name + " needs a value, got the option '" + next +
                                 "' (a value that starts with '--' goes as --" + name + "=VALUE)");
            out.values[name] = args[++k];
        }
        if (out.values[name].empty()) throw UsageError("option --" + name + " has an empty value");
    }
    return out;
}

inline Device parse_device(const std::string& text) {
    if (text == "cpu") return Device::cpu;
    if (text == "cuda") return Device::cuda;
    throw UsageError("--device must be cpu or cuda, got '" + text + "'");
}

// A missing input file is a usage error (exit 2); a file that exists but is malformed is a
// failure of the work (lstm::Error, exit 1).
inline io::TensorFile read_input_file(const std::string& option, const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
        throw UsageError(option + ": file '" + path + "' does not exist");
    // A pipe or a character device is read whole (`lstm_tool ... --out /dev/stdout | lstm_tool
    // info /dev/stdin`); a directory, socket or block device is not a file of tensors.
    const std::filesystem::file_status status = std::filesystem::status(path, ec);
    if (!std::filesystem::is_regular_file(status) && !std::filesystem::is_fifo(status) &&
        !std::filesystem::is_character_file(status))
        throw UsageError(option + ": '" + path +
                         "' is not a regular file (nor a pipe or a character device)");
    std::ifstream probe(path, std::ios::binary);
    if (!probe.is_open()) throw UsageError(option + ": cannot open '" + path + "' for reading");
    return io::read_safetensors(path);
}

}  // namespace lstm::tool
