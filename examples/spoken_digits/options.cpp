#include "options.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace spoken_digits {

const char* to_string(Task task) { return task == Task::isolated ? "isolated" : "connected"; }

namespace {

// Measured on make_data.sh's default 4000-utterance set (docs/spoken_digits.md): the isolated
// task is near its best after 20 epochs; CTC needs longer to learn the alignment first.
constexpr int64_t kIsolatedEpochs = 20, kConnectedEpochs = 40;

[[noreturn]] void usage(const std::string& problem) {
    std::fprintf(stderr,
                 "spoken_digits_train: %s\n"
                 "usage: spoken_digits_train DATA_DIR [--task isolated|connected]\n"
                 "       [--variant basic|fused|onednn] [--epochs E] [--hidden H] [--batch B]\n"
                 "       [--threads T] [--seed S] [--lr LR] [--dropout P] [--exact-lengths]\n"
                 "       [--checkpoint PATH] [--import PATH] [--export PATH] [--curve PATH]\n"
                 "       [--min-accuracy A] [--max-ler L]\n"
                 "DATA_DIR holds manifest.tsv and wav/ as written by make_data.sh.\n",
                 problem.c_str());
    std::exit(2);
}

int64_t parse_int(const std::string& flag, const char* text, int64_t min) {
    char* end = nullptr;
    errno = 0;
    const long long value = std::strtoll(text, &end, 10);
    if (*text == '\0' || *end != '\0' || errno != 0 || value < min)
        usage(flag + " must be an integer >= " + std::to_string(min) + ", got '" + text + "'");
    return value;
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

}  // namespace

Options parse_options(int argc, char** argv) {
    if (argc < 2) usage("missing DATA_DIR");
    Options o;
    o.data_dir = argv[1];
    if (o.data_dir.rfind("--", 0) == 0) usage("the first argument must be DATA_DIR");
    bool epochs_given = false, accuracy_given = false, ler_given = false;
    for (int i = 2; i < argc; ++i) {
        const std::string flag = argv[i];
        if (flag == "--exact-lengths") {
            o.exact_lengths = true;
            continue;
        }
        if (i + 1 >= argc) usage(flag + " needs a value");
        const char* value = argv[++i];
        if (flag == "--task") {
            const std::string task = value;
            if (task != "isolated" && task != "connected")
                usage("--task must be isolated or connected, got '" + task + "'");
            o.task = task == "isolated" ? Task::isolated : Task::connected;
        } else if (flag == "--variant") {
            o.variant = value;
        } else if (flag == "--epochs") {
            o.epochs = parse_int(flag, value, 0);
            epochs_given = true;
        } else if (flag == "--hidden") {
            o.hidden = parse_int(flag, value, 1);
        } else if (flag == "--batch") {
            o.batch = parse_int(flag, value, 1);
        } else if (flag == "--threads") {
            o.threads = parse_int(flag, value, 1);
        } else if (flag == "--seed") {
            o.seed = parse_int(flag, value, 0);
        } else if (flag == "--lr") {
            o.lr = parse_real(flag, value, 1e-6, 1.0);
        } else if (flag == "--dropout") {
            // 1 would zero every output between the layers.
            o.dropout = parse_real(flag, value, 0.0, 0.95);
        } else if (flag == "--checkpoint") {
            o.checkpoint = value;
        } else if (flag == "--import") {
            o.import_path = value;
        } else if (flag == "--export") {
            o.export_path = value;
        } else if (flag == "--curve") {
            o.curve_path = value;
        } else if (flag == "--min-accuracy") {
            o.min_accuracy = parse_real(flag, value, 0.0, 1.0);
            accuracy_given = true;
        } else if (flag == "--max-ler") {
            // An LER can exceed 1 (insertions), but a bound above 1 would test nothing.
            o.max_ler = parse_real(flag, value, 0.0, 1.0);
            ler_given = true;
        } else {
            usage("unknown option '" + flag + "'");
        }
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
    return o;
}

}  // namespace spoken_digits
