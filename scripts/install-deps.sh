#!/usr/bin/env bash
# Installs every build and test dependency from Debian's packages. Idempotent: when everything is
# present it prints nothing and touches nothing. The CUDA toolkit and cuDNN are not Debian
# packages; they are used when present on the machine and skipped otherwise. clang, its
# compiler-rt and its OpenMP runtime (libomp-dev) build the libFuzzer targets (tests/fuzz/); the
# sanitized test build (scripts/sanitize.sh) uses g++'s own sanitizer runtimes.
# ocl-icd-opencl-dev is only a recommendation of libdnnl-dev, but Debian's oneDNN CMake config
# cannot be loaded without it. espeak-ng speaks the spoken-digits example's data and
# libsndfile1-dev reads it (examples/spoken_digits/). OpenMPI (libopenmpi-dev, openmpi-bin: mpirun)
# builds and runs the data-parallel part (lstm/dist/, tests/dist/); NCCL comes with the CUDA toolkit.
# qemu-user's qemu-x86_64 runs the instruction-set cases as CPUs without AVX-512 or AVX
# (tests/emulated/run.cmake), and its qemu-aarch64 runs them on 64-bit ARM: on an x86-64 machine
# Debian's cross compiler builds them (tests/emulated/arm64.cmake) against the arm64 builds of
# Highway and of the GCC runtimes, which need dpkg to know the arm64 architecture (multiarch: they
# install beside the machine's own and change nothing it runs).
set -euo pipefail

packages=(cmake ninja-build g++ make libeigen3-dev catch2 libbenchmark-dev libdnnl-dev
          ocl-icd-opencl-dev nlohmann-json3-dev libhwy-dev clang libclang-rt-dev libomp-dev
          espeak-ng libsndfile1-dev libopenmpi-dev openmpi-bin qemu-user)
arm64_packages=()
if [ "$(dpkg --print-architecture)" = amd64 ]; then
    arm64_packages=(g++-aarch64-linux-gnu libhwy-dev:arm64 libgomp1:arm64 libstdc++6:arm64)
    packages+=("${arm64_packages[@]}")
fi

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
if [ ${#arm64_packages[@]} -gt 0 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
    "${sudo_cmd[@]}" dpkg --add-architecture arm64
fi
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
