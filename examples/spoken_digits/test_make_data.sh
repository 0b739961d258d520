#!/usr/bin/env bash
# Spoken-digits example: ctest's test of make_data.sh (test `spoken_digits_make_data`).
#
# Usage: test_make_data.sh CHECKER WORK_DIR
#
# Speaks a small data set twice with one seed and once with another into WORK_DIR, then checks
# that the same seed gives byte-identical files, another seed gives other files, bad arguments
# are refused, and CHECKER (spoken_digits_check_data) accepts the data set.
set -euo pipefail

checker=$1
work=$2
here=$(cd "$(dirname "$0")" && pwd)
# 40 utterances: 32 train (16 isolated, so every class at least once) and 8 held out, a few
# seconds of espeak-ng.
count=40

rm -rf "$work"
bash "$here/make_data.sh" "$work/a" --seed 3 --count $count
bash "$here/make_data.sh" "$work/b" --seed 3 --count $count >/dev/null
bash "$here/make_data.sh" "$work/c" --seed 4 --count $count >/dev/null
diff -r "$work/a" "$work/b" || { echo "FAIL: the same seed gave different data" >&2; exit 1; }
if cmp -s "$work/a/manifest.tsv" "$work/c/manifest.tsv"; then
    echo "FAIL: seeds 3 and 4 gave the same manifest" >&2
    exit 1
fi
for bad in "--count 0" "--count x" "--seed -1" "--what 1" "--count"; do
    # shellcheck disable=SC2086  # word-splitting the arguments is the point
    if bash "$here/make_data.sh" "$work/bad" $bad 2>/dev/null; then
        echo "FAIL: make_data.sh accepted '$bad'" >&2
        exit 1
    fi
done
"$checker" "$work/a/manifest.tsv" $count
