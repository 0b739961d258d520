#pragma once

// lstm_tool's entry point as a function, so tests run the very same code in-process.
// Exit codes: 0 success, 1 the work failed (malformed file, shapes that do not fit, unsupported
// dtype), 2 usage error (unknown command or option, missing option, missing input file).

#include <exception>
#include <new>
#include <ostream>
#include <string>
#include <vector>

#include "lstm/error.hpp"
#include "tools/lstm_tool/cli.hpp"
#include "tools/lstm_tool/ctc_command.hpp"
#include "tools/lstm_tool/info_command.hpp"
#include "tools/lstm_tool/lstm_command.hpp"

namespace lstm::tool {

inline const char* tool_help() {
    return R"(usage: lstm_tool COMMAND [options]      (lstm_tool COMMAND --help for each)

Command-line access to the lstm library; files in, files out (safetensors).

commands:
  lstm    run an nn.LSTM state_dict forward (and backward) on the tensors of a file
  ctc     CTC loss and its gradient (PyTorch's ctc_loss semantics)
  info    list a file's tensors and the nn.LSTM configuration it holds; without a file,
          the host's CPU and the path each variant takes on it

exit codes: 0 success, 1 the work failed (e.g. a malformed file), 2 usage error
)";
}

// Runs lstm_tool with `args` (argv[1..]); normal output goes to `out`, errors to `err`.
inline int run_tool(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
    if (args.empty()) {
        err << tool_help();
        return kExitUsage;
    }
    const std::string& command = args.front();
    if (command == "--help" || command == "-h" || command == "help") {
        out << tool_help();
        return kExitOk;
    }
    const std::vector<std::string> rest(args.begin() + 1, args.end());
    try {
        if (command == "lstm") return lstm_command(rest, out);
        if (command == "ctc") return ctc_command(rest, out);
        if (command == "info") return info_command(rest, out);
        err << "lstm_tool: unknown command '" << command << "' (commands: lstm, ctc, info)\n";
        return kExitUsage;
    } catch (const UsageError& e) {
        err << "lstm_tool " << command << ": " << e.what() << " (see lstm_tool " << command
            << " --help)\n";
        return kExitUsage;
    } catch (const std::bad_alloc&) {
        // Every buffer the commands size from their input is checked before it is allocated
        // (lstm/memory.hpp), so this is an allocation nothing sized beforehand.
        err << "lstm_tool " << command
            << ": error: out of memory in an allocation that was not checked beforehand "
               "(std::bad_alloc); please report the command and the file sizes\n";
        return kExitFailure;
    } catch (const std::exception& e) {
        err << "lstm_tool " << command << ": error: " << e.what() << "\n";
        return kExitFailure;
    }
}

}  // namespace lstm::tool
