#!/usr/bin/env bash
# Spoken-digits example: ctest's test of make_data.sh (test `spoken_digits_make_data`).
#
# Usage: test_make_data.sh CHECKER WORK_DIR
#
# Speaks a small data set twice with one seed and once with another into WORK_DIR, then checks
# that the same seed gives byte-identical files, another seed gives other files, numbers with
# leading zeros read as decimal (bash arithmetic took 010 for 8), bad arguments are refused with
# exit status 2 and create nothing, --help prints the usage, and CHECKER
# (spoken_digits_check_data) accepts the data set.
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
bash "$here/make_data.sh" "$work/c" --seed 10 --count $count >/dev/null
bash "$here/make_data.sh" "$work/d" --seed 010 --count 0$count >/dev/null
diff -r "$work/a" "$work/b" || { echo "FAIL: the same seed gave different data" >&2; exit 1; }
if cmp -s "$work/a/manifest.tsv" "$work/c/manifest.tsv"; then
    echo "FAIL: seeds 3 and 10 gave the same manifest" >&2
    exit 1
fi
diff -r "$work/c" "$work/d" ||
    { echo "FAIL: --seed 010 --count 0$count is not --seed 10 --count $count" >&2; exit 1; }
for bad in "--count 0" "--count x" "--count 09x" "--count 1000001" "--count 99999999999999999999" \
    "--seed -1" "--seed 4294967296" "--what 1" "--count"; do
    status=0
    # shellcheck disable=SC2086  # word-splitting the arguments is the point
    bash "$here/make_data.sh" "$work/bad" $bad 2>/dev/null || status=$?
    if [ "$status" != 2 ] || [ -e "$work/bad" ]; then
        echo "FAIL: make_data.sh '$bad' exited $status (expected 2) or created $work/bad" >&2
        exit 1
    fi
done
# An OUT_DIR that looks like an option is refused, not handed to mkdir as one.
status=0
(cd "$work" && bash "$here/make_data.sh" -x 2>/dev/null) || status=$?
if [ "$status" != 2 ] || [ -e "$work/-x" ]; then
    echo "FAIL: make_data.sh -x exited $status (expected 2) or created $work/-x" >&2
    exit 1
fi
bash "$here/make_data.sh" --help | grep -q '^usage: .*make_data.sh OUT_DIR' ||
    { echo "FAIL: make_data.sh --help printed no usage" >&2; exit 1; }
[ ! -e "$work/--help" ] && [ ! -e ./--help ] ||
    { echo "FAIL: make_data.sh --help created a directory" >&2; exit 1; }
"$checker" "$work/a/manifest.tsv" $count
