#!/usr/bin/env bash
# Builds the libFuzzer target of the safetensors reader with clang and runs it for a fixed time
# on the seed corpus (tests/fuzz/corpus). ctest runs it for 20 s (test fuzz_safetensors_smoke,
# label fuzz); run it longer by hand:
#
#   bash tests/fuzz/run-smoke.sh [WORK_DIR] [SECONDS]      # e.g. build/fuzz 600
#
# Exit codes: 0 no finding, 77 skipped because clang++ or libFuzzer is not installed (Debian
# packages clang and libclang-rt-dev; scripts/install-deps.sh installs them), anything else a
# failure: a crashing input is left in WORK_DIR as crash-* / timeout-* / oom-*, reproduce it
# with WORK_DIR/safetensors_fuzz <file>.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="${1:-$root/build/fuzz}"
seconds="${2:-20}"
cxx="${LSTM_FUZZ_CXX:-}"
if [ -z "$cxx" ]; then
    for c in clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14; do
        if command -v "$c" >/dev/null 2>&1; then cxx="$c"; break; fi
    done
fi
if [ -z "$cxx" ]; then
    echo "run-smoke: SKIP: no clang++ found (Debian package: clang)"
    exit 77
fi
mkdir -p "$work"

# libFuzzer ships in a separate package from the compiler; tell its absence from a broken build.
probe="$work/probe.cpp"
printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
    'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' > "$probe"
if ! "$cxx" -fsanitize=fuzzer "$probe" -o "$work/probe" >"$work/probe.log" 2>&1; then
    echo "run-smoke: SKIP: $cxx cannot link -fsanitize=fuzzer (Debian package: libclang-rt-dev)"
    cat "$work/probe.log"
    exit 77
fi

binary="$work/safetensors_fuzz"
src="$here/safetensors_fuzz.cpp"
# Rebuilt when the target or any library header is newer than the binary.
stale="$(find "$src" "$root/lstm" -newer "$binary" -name '*.[ch]pp' -print -quit 2>/dev/null || true)"
if [ ! -x "$binary" ] || [ -n "$stale" ]; then
    echo "run-smoke: building $binary with $cxx"
    # nlohmann/json.hpp comes from the default include path (Debian nlohmann-json3-dev).
    "$cxx" -std=c++17 -O1 -g -fno-omit-frame-pointer \
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
        -Wall -Wextra -Wpedantic -Wshadow \
        -I"$root" "$src" -o "$binary"
fi

# New inputs go into a scratch corpus in the build tree, never into the source tree's seeds.
corpus="$work/corpus"
mkdir -p "$corpus"
cd "$work"
echo "run-smoke: fuzzing for ${seconds}s (seeds: $here/corpus)"
"$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 "$corpus" "$here/corpus"
