#!/usr/bin/env bash
# Prepares the folder of build dependencies that scripts/gpu-check.sh needs on a bare CUDA
# machine: one that has the CUDA toolkit, CMake, ninja, g++ and Python but none of the Debian -dev
# packages this project builds against, and no network to fetch them.
#
#   bash scripts/gpu-deps.sh [DIR]          (default DIR: .gpu-deps, ignored by git)
#
# Run it here, on a development machine where scripts/install-deps.sh has installed the packages.
# It copies the files of the packages gpu-check.sh's build needs (Eigen, nlohmann-json, Catch2,
# Google Benchmark and Highway, with the shared libraries of the last two) into DIR/usr, keeping
# Debian's layout: each package's CMake config file finds its headers and libraries relative to
# its own location, so DIR/usr works as a CMAKE_PREFIX_PATH wherever the folder is copied.
# The libraries were built on Debian 12 (glibc 2.36); a machine with the same or a newer glibc
# and libstdc++ runs them.
#
# Then carry the folder with the working tree to the GPU machine and run
#   LSTM_GPU_DEPS=.gpu-deps bash scripts/gpu-check.sh
# (.gpu-deps is also gpu-check.sh's default). About 15 MiB.

set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$root/.gpu-deps}"
# Header-only: Eigen, nlohmann-json, Catch2 v2. Compiled: Google Benchmark and Highway, whose
# -dev packages hold the headers, the CMake config and the link name, and whose runtime packages
# hold the shared objects that the config points at.
packages=(libeigen3-dev nlohmann-json3-dev catch2 libbenchmark-dev libbenchmark1debian
          libhwy-dev libhwy1)

for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed"; then
        echo "gpu-deps: package $p is not installed; run scripts/install-deps.sh first" >&2
        exit 1
    fi
done

# This machine's own instance of a package: scripts/install-deps.sh also installs arm64 copies of
# some (libhwy-dev:arm64, for the emulated ARM tests), and dpkg refuses a bare name that two
# architectures share. Architecture-independent packages (Eigen) answer only to the bare name.
arch="$(dpkg --print-architecture)"
native() { if dpkg-query -W "$1:$arch" > /dev/null 2>&1; then echo "$1:$arch"; else echo "$1"; fi; }

rm -rf "$dest"
mkdir -p "$dest"
for p in "${packages[@]}"; do
    # Regular files and symbolic links (the .so link chain), not directories or documentation.
    dpkg -L "$(native "$p")" | grep -v -e '^/usr/share/doc' -e '^/usr/share/lintian' |
        while read -r path; do
            if [ -f "$path" ] || [ -L "$path" ]; then
                mkdir -p "$dest$(dirname "$path")"
                cp -P "$path" "$dest$path"
            fi
        done
done

# The manifest says what the folder holds and where it came from, for whoever reads the copy.
{
    echo "made by scripts/gpu-deps.sh on $(date -u +%Y-%m-%d) from these Debian packages:"
    for p in "${packages[@]}"; do dpkg-query -W -f='  ${Package} ${Version}\n' "$(native "$p")"; done
} > "$dest/MANIFEST"
echo "gpu-deps: $(du -sh "$dest" | cut -f1) in $dest (CMAKE_PREFIX_PATH=$dest/usr)"
