#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build the `yolov9` program, and run it.
# (Training, validation and detection on the built-in synthetic dataset are added as those
# commands land; until then this prints the build facts and runs the engine self-check.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DY9_BUILD_TESTS=OFF -DY9_BUILD_BENCH=OFF
cmake --build "$BUILD_DIR" -j "$(nproc)" --target yolov9
"$BUILD_DIR/yolov9" --version
"$BUILD_DIR/yolov9" info --self-check
