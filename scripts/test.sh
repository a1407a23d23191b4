#!/usr/bin/env bash
# Installs the dependencies, builds everything (CUDA too when nvcc is found), runs the test suite,
# then fuzzes the input parsers for a bounded time (scripts/fuzz.sh: Y9_FUZZ_SECONDS per parser,
# default 30; Y9_FUZZ_SECONDS=0 skips it). GPU tests skip cleanly on a machine without a GPU.
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
if [ "${Y9_FUZZ_SECONDS:-30}" != "0" ]; then
  bash scripts/fuzz.sh
fi
