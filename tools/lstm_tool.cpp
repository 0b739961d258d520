// lstm_tool: the command-line face of the library (see tools/lstm_tool/tool.hpp and
// docs/interop.md for the file contract).

#include <iostream>
#include <string>
#include <vector>

#include "tools/lstm_tool/tool.hpp"

int main(int argc, char** argv) {
    const std::vector<std::string> args(argv + 1, argv + argc);
    return lstm::tool::run_tool(args, std::cout, std::cerr);
}
