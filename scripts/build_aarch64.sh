#!/usr/bin/env bash
# Cross-compiles the inference build for aarch64 with Debian's cross toolchain (preset
# inference-aarch64, cmake/aarch64-linux-gnu.cmake) into build-aarch64/.
#   Needs: g++-aarch64-linux-gnu qemu-user, and arm64 multiarch libraries:
#     dpkg --add-architecture arm64 && apt-get update &&
#     apt-get install g++-aarch64-linux-gnu qemu-user libdnnl2:arm64 libopenblas-dev:arm64 \
#       libjpeg62-turbo-dev:arm64 libpng-dev:arm64 libyaml-cpp0.7:arm64
#   libdnnl-dev:arm64 and libyaml-cpp-dev:arm64 cannot be installed beside the host's -dev
#   packages (they ship a different dnnl_config.h / the same CMake files), so this script
#   unpacks them (apt-get download + dpkg -x, no installation) into build-aarch64/sysroot.
# OpenCV: libopencv-*-dev:arm64 conflicts with the host's OpenCV (apt removes it), so the cross
# build uses Y9_WITH_OPENCV=OFF (the default when cross-compiling): images through libjpeg-turbo
# and libpng (io/image_u8.h), no video; see docs/inference.md.
# Builds only the detect program `yolov9` (Y9_AARCH64_TARGETS to change: e.g. "yolov9 yolov9_infer_raw
# yolov9_infer_example"); Y9_AARCH64_TEST=1 then runs tests/infer/aarch64_qemu_test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${Y9_AARCH64_BUILD_DIR:-build-aarch64}
command -v aarch64-linux-gnu-g++ >/dev/null || { echo "install g++-aarch64-linux-gnu (see the header)"; exit 1; }
SYS="$PWD/$B/sysroot"
if [ ! -f "$SYS/.done" ]; then
  mkdir -p "$SYS/debs"
  (cd "$SYS/debs" && apt-get download libdnnl-dev:arm64 libyaml-cpp-dev:arm64 >/dev/null)
  for d in "$SYS"/debs/*.deb; do dpkg -x "$d" "$SYS"; done
  # the -dev symlinks point at the runtime libraries, which are installed (multiarch) in /usr
  for l in /usr/lib/aarch64-linux-gnu/libdnnl.so.* /usr/lib/aarch64-linux-gnu/libyaml-cpp.so.*; do
    ln -sf "$l" "$SYS/usr/lib/aarch64-linux-gnu/"
  done
  touch "$SYS/.done"
fi
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
export Y9_AARCH64_SYSROOT="$SYS"
export PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/openblas-pthread/pkgconfig:/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig
cmake -S . -B "$B" -G Ninja --toolchain cmake/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=Release \
  -DY9_INFERENCE_ONLY=ON -DY9_WITH_CUDA=OFF \
  -DCMAKE_CXX_FLAGS="-isystem $SYS/usr/include" "$@"
[ "${Y9_CONFIGURE_ONLY:-0}" = 1 ] && exit 0
# shellcheck disable=SC2086
cmake --build "$B" -j "${Y9_JOBS:-$(nproc)}" --target ${Y9_AARCH64_TARGETS:-yolov9}
# Y9_AARCH64_TEST=1: the aarch64 `yolov9 detect` under qemu against the host's full build.
if [ "${Y9_AARCH64_TEST:-0}" = 1 ]; then
  bash tests/infer/aarch64_qemu_test.sh "$B" "${Y9_FULL_BUILD_DIR:-build}"
fi
