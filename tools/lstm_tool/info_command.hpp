#pragma once

// `lstm_tool info FILE`: lists the tensors of a safetensors file and, where the file holds an
// nn.LSTM state_dict (possibly under a module prefix), the configuration inferred from it.

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "lstm/io/safetensors.hpp"
#include "lstm/io/state_dict.hpp"
#include "tools/lstm_tool/cli.hpp"

namespace lstm::tool {

inline const char* info_help() {
    return R"(usage: lstm_tool info FILE

Lists the tensors of the safetensors FILE (name, dtype, shape, bytes) and its metadata. For every
nn.LSTM state_dict in it (tensors named [PREFIX]weight_ih_l0 and so on), prints the inferred
configuration, or why the tensors do not form a valid one (missing, extra, mis-shaped).

options:
  --help    this text
)";
}

// Prefixes under which the file has a "weight_ih_l0": "" for a bare nn.LSTM state_dict,
// "encoder.lstm." for one inside a model.
inline std::vector<std::string> lstm_prefixes(const io::TensorFile& file) {
    const std::string key = "weight_ih_l0";
    std::vector<std::string> out;
    for (const io::Tensor& t : file.tensors())
        if (t.name.size() >= key.size() &&
            t.name.compare(t.name.size() - key.size(), key.size(), key) == 0)
            out.push_back(t.name.substr(0, t.name.size() - key.size()));
    return out;
}

inline void print_info(const io::TensorFile& file, std::ostream& out) {
    uint64_t data_bytes = 0;
    size_t width = 4;
    for (const io::Tensor& t : file.tensors()) {
        data_bytes += t.bytes.size();
        width = std::max(width, t.name.size());
    }
    out << file.source << ": " << file.size() << " tensor" << (file.size() == 1 ? "" : "s") << ", "
        << data_bytes << " bytes of data\n";
    for (const io::Tensor& t : file.tensors())
        out << "  " << t.name << std::string(width - t.name.size() + 2, ' ')
            << io::to_string(t.dtype) << "  " << t.shape_string() << "\n";
    if (!file.metadata.empty()) {
        out << "metadata:\n";
        for (const auto& kv : file.metadata) out << "  " << kv.first << " = " << kv.second << "\n";
    }
    for (const std::string& prefix : lstm_prefixes(file)) {
        const std::string label = prefix.empty()
                                      ? std::string("nn.LSTM state_dict")
                                      : "nn.LSTM state_dict under prefix '" + prefix + "'";
        try {
            const Config c = io::infer_lstm_config(file, prefix);
            out << label << ": input_size " << c.input_size << ", hidden_size " << c.hidden_size
                << ", num_layers " << c.num_layers << ", "
                << (c.bidirectional ? "bidirectional" : "unidirectional") << " (" << param_count(c)
                << " parameters)\n";
        } catch (const Error& e) {
            out << label << ": invalid: " << e.what() << "\n";
        }
    }
}

inline int info_command(const std::vector<std::string>& args, std::ostream& out) {
    const ParsedArgs parsed = parse_args(args, {});
    if (parsed.help) {
        out << info_help();
        return kExitOk;
    }
    if (parsed.positional.size() != 1)
        throw UsageError(parsed.positional.empty() ? "info needs a FILE"
                                                   : "info takes one FILE, got " +
                                                         std::to_string(parsed.positional.size()));
    print_info(read_input_file("FILE", parsed.positional.front()), out);
    return kExitOk;
}

}  // namespace lstm::tool
