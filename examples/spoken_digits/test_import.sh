#!/usr/bin/env bash
# Spoken-digits example: ctest's test of moving a trained model out and back in
# (test `spoken_digits_import`).
#
# Usage: test_import.sh TRAINER DATA_DIR WORK_DIR
#
# For each task: trains 2 epochs with --checkpoint and --export, then evaluates that checkpoint
# with --import --epochs 0 (the route of a model trained elsewhere: lstm.* and fc.* only) and
# checks that the final held-out score line is the one training printed and that the imported
# run's exported held-out outputs are byte-identical to the trained run's. That run also names
# --checkpoint, which --epochs 0 then writes (it once wrote nothing without a word): the imported
# model as this library's checkpoint, which evaluates to the same outputs once more. Also checks
# that --epochs 0 without --import and a file that is not a model are refused.
set -euo pipefail

trainer=$1 data=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
score() { grep -o 'final held-out [a-z ]* [0-9.]*' "$1"; }
# Exported files are compared by their data section (the tail after the 8-byte length and the
# JSON header): both hold the same tensors (features, labels, held-out logits) in the same
# layout, while the headers differ in their metadata (epochs).
header() { od -An -t u8 -N 8 "$1" | tr -d ' '; }
same_data() {
    local a_data=$(($(stat -c %s "$1") - 8 - $(header "$1")))
    local b_data=$(($(stat -c %s "$2") - 8 - $(header "$2")))
    [ "$a_data" = "$b_data" ] && cmp -s <(tail -c "$a_data" "$1") <(tail -c "$b_data" "$2")
}
for task in isolated connected; do
    "$trainer" "$data" --task "$task" --hidden 16 --epochs 2 --threads 1 \
        --checkpoint "$work/$task.safetensors" --export "$work/${task}_trained.safetensors" \
        > "$work/$task.log"
    # Another seed, so that only the imported parameters can make the outputs equal.
    "$trainer" "$data" --task "$task" --hidden 16 --epochs 0 --threads 1 --seed 2 \
        --import "$work/$task.safetensors" --export "$work/${task}_imported.safetensors" \
        --checkpoint "$work/${task}_resaved.safetensors" > "$work/${task}_imported.log"
    if [ "$(score "$work/$task.log")" != "$(score "$work/${task}_imported.log")" ]; then
        echo "FAIL ($task): trained '$(score "$work/$task.log")', imported" \
            "'$(score "$work/${task}_imported.log")'" >&2
        exit 1
    fi
    if ! same_data "$work/${task}_trained.safetensors" "$work/${task}_imported.safetensors"; then
        echo "FAIL ($task): the imported model's outputs differ from the trained model's" >&2
        exit 1
    fi
    if [ ! -f "$work/${task}_resaved.safetensors" ]; then
        echo "FAIL ($task): --epochs 0 --checkpoint wrote no checkpoint" >&2
        exit 1
    fi
    "$trainer" "$data" --task "$task" --hidden 16 --epochs 0 --threads 1 --seed 3 \
        --import "$work/${task}_resaved.safetensors" \
        --export "$work/${task}_resaved_outputs.safetensors" > "$work/${task}_resaved.log"
    if [ "$(score "$work/$task.log")" != "$(score "$work/${task}_resaved.log")" ] ||
        ! same_data "$work/${task}_trained.safetensors" \
            "$work/${task}_resaved_outputs.safetensors"; then
        echo "FAIL ($task): the checkpoint written by --epochs 0 --checkpoint does not give the" \
            "trained model's outputs" >&2
        exit 1
    fi
    echo "$task: $(score "$work/$task.log") all three times, outputs identical"
done
if "$trainer" "$data" --epochs 0 2>/dev/null; then
    echo "FAIL: --epochs 0 without --import was accepted" >&2
    exit 1
fi
if "$trainer" "$data" --hidden 16 --epochs 0 --import "$work/isolated_trained.safetensors" \
    2> "$work/bad.log"; then
    echo "FAIL: an export file was imported as a model" >&2
    exit 1
fi
grep -q "lstm.weight_ih_l0" "$work/bad.log" || {
    echo "FAIL: importing a file without a model did not name what is missing:" >&2
    cat "$work/bad.log" >&2
    exit 1
}
