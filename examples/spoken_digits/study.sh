#!/usr/bin/env bash
# study.sh: the consistency study. Trains each CPU variant on both tasks from the same initial
# parameters on the same batches in the same order, moves every trained model to PyTorch and
# back, and writes everything study_report.py turns into the table and plot of
# docs/spoken_digits.md.
#
# Usage: study.sh BUILD_DIR DATA_DIR OUT_DIR [--threads T] [--variants "basic fused onednn"]
#                 [--tasks "isolated connected"] [--pytorch-epochs "ISOLATED CONNECTED"]
#
# Per task T and variant V, in OUT_DIR:
#   T_V.log, T_V.tsv (curve), T_V.safetensors (checkpoint), T_V_export.safetensors (--export)
#     trained with --exact-lengths, so that every variant sees the same batches (onednn cannot
#     take per-sequence lengths; see train_digits.cpp);
#   T_V_compare.log: the trained model evaluated in PyTorch against the library's outputs;
#   T_fused_padded.*: fused on padded length buckets, the default for variants with lengths;
#   T_pytorch.safetensors, T_pytorch_train.log: the same model trained in PyTorch on the same
#     features (for fewer epochs by default: PyTorch's CPU LSTM trained these models 3 to 7x
#     slower than the library here, and the point is a trained model to compare, not the
#     best one); T_pytorch_eval.log and T_pytorch_compare.log: that model evaluated by the library
#     (fused) and compared with PyTorch's own outputs.
# The PyTorch steps need a python3 with torch, $PYTHON if set (a development-time tool; nothing
# else needs PyTorch).
set -euo pipefail

usage() {
    echo "usage: $0 BUILD_DIR DATA_DIR OUT_DIR [--threads T] [--variants LIST] [--tasks LIST]" \
         "[--pytorch-epochs \"I C\"]" >&2
    exit 2
}
[ $# -ge 3 ] || usage
build_dir=$1 data_dir=$2 out_dir=$3
shift 3
threads=2
variants="basic fused onednn"
tasks="isolated connected"
pytorch_epochs="10 6"
while [ $# -gt 0 ]; do
    case $1 in
        --threads) [ $# -ge 2 ] || usage; threads=$2; shift 2 ;;
        --variants) [ $# -ge 2 ] || usage; variants=$2; shift 2 ;;
        --tasks) [ $# -ge 2 ] || usage; tasks=$2; shift 2 ;;
        --pytorch-epochs) [ $# -ge 2 ] || usage; pytorch_epochs=$2; shift 2 ;;
        *) usage ;;
    esac
done
here=$(cd "$(dirname "$0")" && pwd)
train=$build_dir/examples/spoken_digits/spoken_digits_train
crosscheck=$here/pytorch_crosscheck.py
python=${PYTHON:-python3}
[ -x "$train" ] || { echo "study.sh: $train not built" >&2; exit 1; }
mkdir -p "$out_dir"

run_variant() {  # task variant name [extra flags...]
    local task=$1 variant=$2 name=$3
    shift 3
    echo "== $task $name"
    "$train" "$data_dir" --task "$task" --variant "$variant" --threads "$threads" --seed 1 \
        --checkpoint "$out_dir/${task}_$name.safetensors" --curve "$out_dir/${task}_$name.tsv" \
        --export "$out_dir/${task}_${name}_export.safetensors" "$@" | tee "$out_dir/${task}_$name.log"
    "$python" "$crosscheck" compare "$out_dir/${task}_${name}_export.safetensors" \
        "$out_dir/${task}_$name.safetensors" | tee "$out_dir/${task}_${name}_compare.log" || true
}

read -r isolated_epochs connected_epochs <<< "$pytorch_epochs"
for task in $tasks; do
    epochs=$isolated_epochs
    [ "$task" = connected ] && epochs=$connected_epochs
    for variant in $variants; do
        run_variant "$task" "$variant" "$variant" --exact-lengths
    done
    run_variant "$task" fused fused_padded
    echo "== $task pytorch"
    "$python" "$crosscheck" train "$out_dir/${task}_fused_export.safetensors" \
        "$out_dir/${task}_pytorch.safetensors" --threads "$threads" --exact-lengths \
        --epochs "$epochs" |
        tee "$out_dir/${task}_pytorch_train.log"
    "$train" "$data_dir" --task "$task" --variant fused --threads "$threads" --epochs 0 \
        --import "$out_dir/${task}_pytorch.safetensors" \
        --export "$out_dir/${task}_pytorch_export.safetensors" | tee "$out_dir/${task}_pytorch_eval.log"
    "$python" "$crosscheck" compare "$out_dir/${task}_pytorch_export.safetensors" \
        "$out_dir/${task}_pytorch.safetensors" | tee "$out_dir/${task}_pytorch_compare.log" || true
done
echo "study.sh: done; python3 $here/study_report.py $out_dir writes the table and plot"
