# Toolchain file: builds for 64-bit ARM Linux on another machine with Debian's cross compiler
# (g++-aarch64-linux-gnu) and the arm64 builds of the dependencies, which Debian installs side by
# side with the host's once dpkg knows the architecture (`dpkg --add-architecture arm64`, then
# e.g. libhwy-dev:arm64). tests/emulated/arm64.cmake uses it; by hand:
#   cmake -S . -B build-arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# find_package searches Debian's arm64 directories (/usr/lib/aarch64-linux-gnu), never the
# host's: a package found for the build machine's architecture would not link.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
