#include "options.hpp"

#include <omp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <system_error>

#include "tools/parse_int.hpp"

namespace spoken_digits {

const char* to_string(Task task) { return task == Task::isolated ? "isolated" : "connected"; }

namespace {

// Measured on make_data.sh's default 4000-utterance set (docs/spoken_digits.md): the isolated
// task is near its best after 20 epochs; CTC needs longer to learn the alignment first.
constexpr int64_t kIsolatedEpochs = 20, kConnectedEpochs = 40;
// Bounds that keep every count inside the types it is used in: the schedule's steps (epochs x
// steps per epoch, at most one step per utterance) in int64, --threads in the int of
// set_num_threads, at most 16 per processor as lstm_bench allows (beyond that a run measures the
// scheduler). A million epochs is far beyond any use (the tasks' defaults are 20 and 40).
constexpr int64_t kMaxEpochs = 1000000, kMaxThreadsPerProcessor = 16;
constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

void print_usage(std::FILE* to) {
    std::fprintf(
        to,
        "usage: spoken_digits_train DATA_DIR [--task isolated|connected]\n"
        "       [--variant basic|fused|onednn] [--precision full|bf16] [--epochs E]\n"
        "       [--hidden H] [--batch B] [--threads T] [--seed S] [--lr LR] [--dropout P]\n"
        "       [--exact-lengths] [--checkpoint PATH] [--import PATH] [--export PATH]\n"
        "       [--curve PATH] [--min-accuracy A] [--max-ler L]\n"
        "DATA_DIR holds manifest.tsv and wav/ as written by make_data.sh. Options take\n"
        "their value as the next argument (--task connected). docs/spoken_digits.md\n"
        "says what each does.\n");
}

[[noreturn]] void usage(const std::string& problem) {
    std::fprintf(stderr, "spoken_digits_train: %s\n", problem.c_str());
    print_usage(stderr);
    std::exit(2);
}

int64_t parse_int(const std::string& flag, const char* text, int64_t min, int64_t max) {
    const auto value = lstm::cli::parse_int<int64_t>(text, min, max);
    if (!value) usage(lstm::cli::int_range_message(flag, min, max, text));
    return *value;
}

double parse_real(const std::string& flag, const char* text, double min, double max) {
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(text, &end);
    if (*text == '\0' || *end != '\0' || errno != 0 || !(value >= min && value <= max)) {
        std::ostringstream range;
        range << " must be a number in [" << min << ", " << max << "], got '" << text << "'";
        usage(flag + range.str());
    }
    return value;
}

// Refuses, before any work, an output path the run could not write at its end: training would
// otherwise run to completion and then lose its result. A regular output file is written beside
// the target and renamed over it (lstm::io::write_safetensors; a device or FIFO is written in
// place), so what must hold is that the path is not a directory and that its directory takes a
// new file. A probe file there shows that whatever could
// stop it; access() answers from permission bits, which root passes.
void check_writable(const std::string& flag, const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_directory(path, ec))
        usage(flag + " must name a file, got the directory '" + path + "'");
    const fs::path parent = fs::path(path).parent_path();
    const std::string dir = parent.empty() ? std::string(".") : parent.string();
    if (!fs::is_directory(dir, ec))
        usage(flag + ": cannot write '" + path + "': '" + dir + "' " +
              (fs::exists(dir, ec) ? "is not a directory" : "does not exist"));
    std::string probe = (fs::path(dir) / ".spoken_digits_probe_XXXXXX").string();
    const int fd = ::mkstemp(probe.data());
    if (fd < 0)
        usage(flag + ": cannot write '" + path + "': cannot create a file in '" + dir +
              "': " + std::strerror(errno));
    ::close(fd);
    ::unlink(probe.c_str());
}

}  // namespace

Options parse_options(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
            print_usage(stdout);
            std::exit(0);
        }
    }
    if (argc < 2) usage("missing DATA_DIR");
    Options o;
    o.data_dir = argv[1];
    if (o.data_dir.rfind("--", 0) == 0) usage("the first argument must be DATA_DIR");
    // Named here, before the default checkpoint path inside it is checked.
    std::error_code ec;
    if (!std::filesystem::is_directory(o.data_dir, ec))
        usage("DATA_DIR must be a directory, got '" + o.data_dir + "'");
    bool epochs_given = false, accuracy_given = false, ler_given = false, checkpoint_given = false;
    const int64_t max_threads = kMaxThreadsPerProcessor * omp_get_num_procs();
    using Setter = std::function<void(const std::string& flag, const char* value)>;
    const std::map<std::string, Setter> options = {
        {"--task",
         [&](const std::string&, const char* value) {
             const std::string task = value;
             if (task != "isolated" && task != "connected")
                 usage("--task must be isolated or connected, got '" + task + "'");
             o.task = task == "isolated" ? Task::isolated : Task::connected;
         }},
        {"--variant", [&](const std::string&, const char* value) { o.variant = value; }},
        {"--precision",
         [&](const std::string& flag, const char* value) {
             try {
                 o.precision = lstm::precision_named(value, flag.c_str());
             } catch (const lstm::Error& e) {
                 usage(e.what());
             }
         }},
        {"--epochs",
         [&](const std::string& flag, const char* value) {
             o.epochs = parse_int(flag, value, 0, kMaxEpochs);
             epochs_given = true;
         }},
        {"--hidden", [&](const std::string& flag,
                         const char* value) { o.hidden = parse_int(flag, value, 1, kMaxInt64); }},
        {"--batch", [&](const std::string& flag,
                        const char* value) { o.batch = parse_int(flag, value, 1, kMaxInt64); }},
        {"--threads",
         [&](const std::string& flag, const char* value) {
             o.threads = parse_int(flag, value, 1, max_threads);
         }},
        {"--seed", [&](const std::string& flag,
                       const char* value) { o.seed = parse_int(flag, value, 0, kMaxInt64); }},
        {"--lr", [&](const std::string& flag,
                     const char* value) { o.lr = parse_real(flag, value, 1e-6, 1.0); }},
        // 1 would zero every output between the layers.
        {"--dropout", [&](const std::string& flag,
                          const char* value) { o.dropout = parse_real(flag, value, 0.0, 0.95); }},
        {"--checkpoint",
         [&](const std::string&, const char* value) {
             o.checkpoint = value;
             checkpoint_given = true;
         }},
        {"--import", [&](const std::string&, const char* value) { o.import_path = value; }},
        {"--export", [&](const std::string&, const char* value) { o.export_path = value; }},
        {"--curve", [&](const std::string&, const char* value) { o.curve_path = value; }},
        {"--min-accuracy",
         [&](const std::string& flag, const char* value) {
             o.min_accuracy = parse_real(flag, value, 0.0, 1.0);
             accuracy_given = true;
         }},
        // An LER can exceed 1 (insertions), but a bound above 1 would test nothing.
        {"--max-ler",
         [&](const std::string& flag, const char* value) {
             o.max_ler = parse_real(flag, value, 0.0, 1.0);
             ler_given = true;
         }},
    };
    for (int i = 2; i < argc; ++i) {
        const std::string flag = argv[i];
        if (flag == "--exact-lengths") {
            o.exact_lengths = true;
            continue;
        }
        const auto option = options.find(flag);
        if (option == options.end()) {
            const size_t eq = flag.find('=');
            if (eq != std::string::npos && options.count(flag.substr(0, eq)))
                usage("unknown option '" + flag + "' (give the value as the next argument: " +
                      flag.substr(0, eq) + " " + flag.substr(eq + 1) + ")");
            usage("unknown option '" + flag + "'");
        }
        if (i + 1 >= argc) usage(flag + " needs a value");
        // "--checkpoint --export x" forgot the value; the next option is not one.
        if (std::strncmp(argv[i + 1], "--", 2) == 0)
            usage(flag + " needs a value, got the option '" + argv[i + 1] + "'");
        option->second(flag, argv[++i]);
    }
    if (o.variant != "basic" && o.variant != "fused" && o.variant != "onednn")
        usage("--variant must be basic, fused or onednn, got '" + o.variant + "'");
    if (accuracy_given && o.task != Task::isolated)
        usage("--min-accuracy is for --task isolated; use --max-ler for connected digits");
    if (ler_given && o.task != Task::connected)
        usage("--max-ler is for --task connected; use --min-accuracy for isolated digits");
    if (!epochs_given) o.epochs = o.task == Task::isolated ? kIsolatedEpochs : kConnectedEpochs;
    if (o.epochs == 0 && o.import_path.empty())
        usage("--epochs 0 evaluates an imported model and needs --import PATH");
    if (o.checkpoint.empty())
        o.checkpoint =
            o.data_dir + "/spoken_digits_" + to_string(o.task) + "_" + o.variant + ".safetensors";
    // --epochs 0 with --checkpoint saves the imported model as this library's checkpoint (its
    // optimizer at step 0), e.g. to resume a PyTorch-trained model with io::load_checkpoint.
    o.write_checkpoint = o.epochs > 0 || checkpoint_given;
    if (o.write_checkpoint) check_writable("--checkpoint", o.checkpoint);
    if (!o.export_path.empty()) check_writable("--export", o.export_path);
    if (!o.curve_path.empty()) check_writable("--curve", o.curve_path);
    return o;
}

}  // namespace spoken_digits
