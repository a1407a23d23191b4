#!/usr/bin/env bash
# Installs the dependencies, builds everything (CUDA too when nvcc is found), runs the test suite,
# builds and tests the embedded inference build (docs/inference.md) and its aarch64 cross build under
# qemu-user (Y9_AARCH64_TEST=0 skips that), runs the CUDA kernels under the CUDA-on-CPU emulator
# (docs/cuda_emulator.md; plain and ASan; Y9_EMU_TEST=0 skips that), and fuzzes the input parsers
# for a bounded time beside those steps (scripts/fuzz.sh: Y9_FUZZ_SECONDS per parser, default 30;
# Y9_FUZZ_SECONDS=0 skips it). With nvcc, scripts/ptxas_check.py checks the kernels for register
# spills. GPU tests skip cleanly on a machine without a GPU.
# Usage: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
# Tests run two at a time on two cores: idle OpenMP threads must sleep, not spin.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DY9_BUILD_TESTS=ON -DY9_BUILD_BENCH=ON ${Y9_CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "$(nproc)"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" ${Y9_CTEST_ARGS:-}
# The fuzz pass (scripts/fuzz.sh) is bounded by time, not work: it runs in the background from here,
# beside the steps below (its log is printed at the end and its exit status checked there), so its
# minutes overlap theirs instead of adding to them. The main tests above run alone: some of them
# measure timeouts and signals across processes.
fuzz_pid=""
fuzz_log="$BUILD_DIR/fuzz.log"
if [ "${Y9_FUZZ_SECONDS:-30}" != "0" ]; then
  setsid bash scripts/fuzz.sh >"$fuzz_log" 2>&1 &  # its own process group, stopped with it on an early exit
  fuzz_pid=$!
  trap 'kill -- -$fuzz_pid 2>/dev/null || true' EXIT
  echo "fuzz: started in the background (log $fuzz_log)"
fi
# Static checks of the CUDA kernels (issue 11; Y9_PTXAS_CHECK=0 skips): every kernels/cuda/*.cu
# compiled again for sm_80 and sm_90 with ptxas -v, -warn-spills and -warn-lmem-usage; fails on a
# register spill; the per-kernel registers / shared memory table goes to $BUILD_DIR/ptxas_table.md.
if [ "${Y9_PTXAS_CHECK:-1}" != "0" ] && command -v nvcc >/dev/null; then
  python3 scripts/ptxas_check.py "$BUILD_DIR" --table "$BUILD_DIR/ptxas_table.md" --jobs "$(nproc)"
fi
# The embedded inference build (docs/inference.md; Y9_INFERENCE_TEST=0 skips it): its own build
# folder, then its test against the full build above (readelf NEEDED, identical boxes).
if [ "${Y9_INFERENCE_TEST:-1}" != "0" ]; then
  cmake -S . -B "$BUILD_DIR-inference" -G Ninja -DCMAKE_BUILD_TYPE=Release -DY9_INFERENCE_ONLY=ON -DY9_WITH_CUDA=OFF \
    -DY9_FULL_BUILD_DIR="$PWD/$BUILD_DIR"
  cmake --build "$BUILD_DIR-inference" -j "$(nproc)"
  ctest --test-dir "$BUILD_DIR-inference" --output-on-failure
fi
# The CUDA-on-CPU emulator (docs/cuda_emulator.md; Y9_EMU_TEST=0 skips it): a build folder with
# only the emulated tests (label emu; every one runs with threads in forward and in reverse order),
# then the same tests (forward order) with AddressSanitizer on the emulator, the engine and
# kernels/cuda. The other layers are compiled as in the plain emulator folder, so the compiler
# cache serves them (CCACHE_BASEDIR makes the two folders' commands identical).
if [ "${Y9_EMU_TEST:-1}" != "0" ]; then
  for asan in OFF ON; do
    emu_dir="$BUILD_DIR-emu"
    [ "$asan" = "ON" ] && emu_dir="$BUILD_DIR-emu-asan"
    CCACHE_BASEDIR="$PWD" cmake -S . -B "$emu_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DY9_BUILD_TESTS=ON \
      -DY9_BUILD_BENCH=OFF -DY9_CUDA_EMULATOR=ON -DY9_EMU_ASAN=$asan
    CCACHE_BASEDIR="$PWD" cmake --build "$emu_dir" -j "$(nproc)"
    # ASan: forward order only (the plain folder ran both), and without the three whole-model
    # tests (autocast, device_e2e, autobatch: 16 of the 21 minutes under ASan), whose kernels the
    # per-kernel tests run under ASan too; the plain folder runs them in both orders.
    emu_filter=()
    [ "$asan" = "ON" ] && emu_filter=(-R "_emu_fwd$" -E "^(autocast|device_e2e|autobatch)_cuda_test_")
    ctest --test-dir "$emu_dir" --output-on-failure -j "$(nproc)" -L emu "${emu_filter[@]}"
  done
fi
# The aarch64 cross build of `yolov9` (no OpenCV) and its qemu-user test on a coco128 image against
# the full build above (docs/inference.md; Y9_AARCH64_TEST=0 skips both, and install_deps.sh then
# skips the cross packages). About 5 minutes cold on 2 cores, well under one with ccache.
if [ "${Y9_AARCH64_TEST:-1}" != "0" ]; then
  arm_ok=1
  for t in aarch64-linux-gnu-g++ qemu-aarch64 file; do command -v "$t" >/dev/null || { echo "aarch64: $t not found"; arm_ok=0; }; done
  for l in libdnnl.so.2 libopenblas.so.0 libjpeg.so.62 libpng16.so.16 libyaml-cpp.so.0.7; do
    found=0
    for f in /usr/lib/aarch64-linux-gnu/$l /usr/lib/aarch64-linux-gnu/*/$l; do [ -e "$f" ] && found=1; done
    [ "$found" = 1 ] || { echo "aarch64: /usr/lib/aarch64-linux-gnu/$l not found"; arm_ok=0; }
  done
  if [ "$arm_ok" = 1 ]; then
    t0=$(date +%s)
    Y9_AARCH64_BUILD_DIR="$BUILD_DIR-aarch64" Y9_FULL_BUILD_DIR="$BUILD_DIR" Y9_AARCH64_TEST=1 bash scripts/build_aarch64.sh
    echo "aarch64 cross build + qemu test: $(($(date +%s) - t0)) s"
  else
    echo "=== aarch64 qemu test: SKIPPED: the cross toolchain, qemu-user or the arm64 libraries are not installed (see the install_deps output above) ==="
  fi
fi
if [ -n "$fuzz_pid" ]; then
  fuzz_rc=0
  wait "$fuzz_pid" || fuzz_rc=$?
  trap - EXIT
  cat "$fuzz_log"
  [ "$fuzz_rc" = 0 ] || { echo "fuzz: FAILED (exit $fuzz_rc)"; exit "$fuzz_rc"; }
fi
