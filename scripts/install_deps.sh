#!/usr/bin/env bash
# Installs every build and test dependency of the engine from Debian's packages.
# Safe to run again: apt-get skips what is already installed. Needs root (or sudo).
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PKGS=(
  build-essential cmake ninja-build ccache pkg-config
  libdnnl-dev ocl-icd-opencl-dev opencl-headers libopenblas-dev
  libyaml-cpp-dev libopencv-dev libjpeg-dev libpng-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  libonnx-dev libprotobuf-dev protobuf-compiler  # export --format onnx (onnx-ml.pb.h, onnx_proto)
  clang libclang-rt-14-dev  # scripts/fuzz.sh: libFuzzer, ASan, UBSan
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "install_deps: all packages present"
fi

# The aarch64 cross build and its qemu test (scripts/build_aarch64.sh, tests/infer/aarch64_qemu_test.sh;
# Y9_AARCH64_TEST=0 skips them and these packages): Debian's cross toolchain, qemu-user and the
# arm64 multiarch runtime/-dev packages that install beside the host's (docs/inference.md).
# A separate step: a package source without arm64 indices must not stop the rest of the tests;
# scripts/test.sh then reports the aarch64 test as SKIPPED with the reason.
if [ "${Y9_AARCH64_TEST:-1}" != "0" ]; then
  ARM_PKGS=(g++-aarch64-linux-gnu qemu-user file binutils
            libdnnl2:arm64 libopenblas-dev:arm64 libjpeg62-turbo-dev:arm64 libpng-dev:arm64 libyaml-cpp0.7:arm64)
  arm_missing=()
  for p in "${ARM_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || arm_missing+=("$p")
  done
  if [ ${#arm_missing[@]} -gt 0 ]; then
    echo "install_deps: installing (aarch64 cross build) ${arm_missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! { { dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64; } &&
           $SUDO apt-get update -qq &&
           $SUDO apt-get install -y -qq --no-install-recommends "${arm_missing[@]}" >/dev/null; }; then
      echo "install_deps: WARNING: the aarch64 cross packages could not be installed; the aarch64 qemu test will be reported as SKIPPED"
    fi
  fi
fi

# Reference tools for tests (optional: the tests that use them skip when absent).
# onnxruntime + onnx: tests/apps/onnx_export_e2e_test.cpp runs exported files in onnxruntime.
if command -v python3 >/dev/null 2>&1 && ! python3 -c "import onnxruntime, onnx" >/dev/null 2>&1; then
  python3 -m pip install -q onnxruntime onnx >/dev/null 2>&1 || echo "install_deps: onnxruntime not installed (the ONNX tests' onnxruntime checks will skip)"
fi
if command -v python3 >/dev/null 2>&1 && ! python3 -c "import pycocotools" >/dev/null 2>&1; then
  python3 -m pip install -q pycocotools >/dev/null 2>&1 || echo "install_deps: pycocotools not installed (its cross-check test will skip)"
fi
