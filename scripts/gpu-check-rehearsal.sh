#!/usr/bin/env bash
# Rehearses scripts/gpu-check.sh on a development machine without a GPU, under the conditions of
# the bare CUDA machine it is written for: the Debian -dev packages this project builds against
# are hidden (in a private mount namespace, so from CMake and the compiler alike), cuDNN's copy in
# the CUDA toolkit is hidden, and cuDNN comes only from the pip wheel nvidia-cudnn-cu13. The build
# dependencies come from the folder scripts/gpu-deps.sh makes. It must get as far as a device
# would: build, every case reported as skipped for want of a device, the summary written.
#
#   sudo bash scripts/gpu-check-rehearsal.sh [--quick] [build-dir]   (default: build-gpu-rehearsal)
#
# Needs root (mount namespace), the packages of scripts/install-deps.sh, and PyPI once to install
# the cuDNN wheel into <build-dir>/cudnn-wheel. Time limits are those of gpu-check.sh, except the
# build's, which a 2-core machine needs far more of (LSTM_GPU_CHECK_BUILD_LIMIT, default here
# 3600 s). The files gpu-check.sh writes land in <build-dir>/gpu-check. Exit status: gpu-check.sh's
# under LSTM_GPU_CHECK_REHEARSAL=1, so 0 when the build succeeded and every case was reported
# skipped (or passed) with nothing failed, crashed, timed out or left unrun.

set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
args=()
build="build-gpu-rehearsal"
for arg in "$@"; do
    case "$arg" in
        --quick) args+=("$arg") ;;
        -*) echo "gpu-check-rehearsal: unknown option $arg" >&2; exit 64 ;;
        *) build="$arg" ;;
    esac
done
case "$build" in /*) ;; *) build="$root/$build" ;; esac
if [ "$(id -u)" -ne 0 ]; then
    echo "gpu-check-rehearsal: needs root for its mount namespace (run it with sudo)" >&2
    exit 1
fi

[ -d "$root/.gpu-deps/usr" ] || bash "$root/scripts/gpu-deps.sh"
wheel="$build/cudnn-wheel"
if [ ! -d "$wheel/nvidia/cudnn" ]; then
    echo "gpu-check-rehearsal: installing the nvidia-cudnn-cu13 wheel into $wheel"
    python3 -m pip install -q --no-deps --target "$wheel" nvidia-cudnn-cu13
fi

# What the bare machine lacks: every file of these packages, and cuDNN inside the CUDA toolkit.
hidden_packages=(libeigen3-dev nlohmann-json3-dev catch2 libbenchmark-dev libhwy-dev libdnnl-dev
                 libopenmpi-dev)
toolkit="$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")"
# This machine's own instance of each (install-deps.sh adds arm64 copies of some, and dpkg
# refuses a bare name two architectures share); architecture-independent ones by the bare name.
arch="$(dpkg --print-architecture)"
{
    for p in "${hidden_packages[@]}"; do
        dpkg-query -W "$p:$arch" > /dev/null 2>&1 && p="$p:$arch"
        dpkg -L "$p" 2> /dev/null | grep -v -e '^/usr/share/doc' -e '^/usr/share/lintian' || true
    done
    find "$toolkit" /usr/local/cuda/ -name '*cudnn*' 2> /dev/null
} | sort -u > "$build.hidden"

hide_script="$(mktemp)"
trap 'rm -f "$hide_script" "$build.hidden"' EXIT
cat > "$hide_script" << 'EOF'
set -euo pipefail
# An overlay over /usr whose upper layer holds a whiteout (a 0:0 character device) for each hidden
# path: those files are gone for every process in this namespace, the rest of /usr is unchanged.
upper="$(mktemp -d)"
work="$(mktemp -d)"
while read -r path; do
    [ -d "$path" ] && [ ! -L "$path" ] && continue
    [ -e "$path" ] || [ -L "$path" ] || continue
    real="$(readlink -f "$(dirname "$path")")/$(basename "$path")"
    case "$real" in /usr/*) ;; *) continue ;; esac
    mkdir -p "$upper/$(dirname "${real#/usr/}")"
    [ -e "$upper/${real#/usr/}" ] || mknod "$upper/${real#/usr/}" c 0 0
done < "$1"
mount -t overlay overlay -o "lowerdir=/usr,upperdir=$upper,workdir=$work" /usr
echo "gpu-check-rehearsal: hid $(find "$upper" -type c | wc -l) files; checks:"
for probe in /usr/include/eigen3/Eigen/Dense /usr/include/nlohmann/json.hpp \
             /usr/include/catch2/catch.hpp /usr/include/benchmark/benchmark.h \
             /usr/include/hwy/highway.h "$3/include/cudnn.h"; do
    if [ -e "$probe" ]; then echo "  still visible: $probe" >&2; exit 1; fi
    echo "  gone: $probe"
done
if compgen -G "$3/lib*/libcudnn*" > /dev/null; then
    echo "  still visible: $(compgen -G "$3/lib*/libcudnn*" | head -1)" >&2
    exit 1
fi
echo "  gone: every libcudnn* of the CUDA toolkit"
shift 3
exec bash "$@"
EOF
export PYTHONPATH="$wheel${PYTHONPATH:+:$PYTHONPATH}"
export LSTM_GPU_CHECK_BUILD_LIMIT="${LSTM_GPU_CHECK_BUILD_LIMIT:-3600}"
export LSTM_GPU_CHECK_BUDGET="${LSTM_GPU_CHECK_BUDGET:-$((LSTM_GPU_CHECK_BUILD_LIMIT + 600))}"
# Without a device every case skips: that is this run's success, not "not verified".
export LSTM_GPU_CHECK_REHEARSAL=1
unset CUDNN_ROOT OUT
unshare --mount --propagation private bash "$hide_script" "$build.hidden" "$root" "$toolkit" \
    "$root/scripts/gpu-check.sh" "${args[@]}" "$build"
