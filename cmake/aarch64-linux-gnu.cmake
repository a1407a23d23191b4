# Cross-compiling for 64-bit ARM Linux with Debian's cross toolchain (g++-aarch64-linux-gnu) and
# arm64 multiarch libraries (/usr/lib/aarch64-linux-gnu); scripts/build_aarch64.sh uses it.
# Programs built with it run on x86 under qemu-user: qemu-aarch64 -L /usr/aarch64-linux-gnu PROG.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Headers are shared with the host (/usr/include); libraries and CMake packages come from the
# arm64 multiarch folders only.
# Y9_AARCH64_SYSROOT (environment): unpacked arm64 -dev packages (scripts/build_aarch64.sh).
set(CMAKE_FIND_ROOT_PATH / /usr/aarch64-linux-gnu $ENV{Y9_AARCH64_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/aarch64-linux-gnu)
set(Y9_WITH_CUDA OFF CACHE BOOL "no CUDA when cross-compiling" FORCE)
