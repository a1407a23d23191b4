#!/usr/bin/env bash
# GPU job: configure a Release CUDA build, build it, run every `gpu`-labelled test with
# Y9_REQUIRE_GPU=1 (a skip is a failure), then the CUDA cases of each bench/*_bench briefly.
# Designed for < 8 minutes on one GPU. Usage: tests/gpu/run.sh [build-dir]   (default build-gpu)
# Env: JOBS (build parallelism, default nproc), BENCH_MIN_TIME (seconds per case, default 0.05).
# It needs our Debian dev libraries on the GPU machine. The lent bare machine (the `run` tool) has
# none: there, use the device kit instead (tests/gpu/kit.sh builds y9-gpu-kit.tar.xz here, its run.sh
# runs the same tests, compute-sanitizer and benchmarks there; docs/gpu_kit.md).
set -u  # no pipefail: `echo | grep -q` may SIGPIPE the echo
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${1:-$ROOT/build-gpu}"
JOBS="${JOBS:-$(nproc)}"
MIN_TIME="${BENCH_MIN_TIME:-0.05}"
START=$(date +%s)
mkdir -p "$BUILD"
status_cfg=0; status_build=0; status_test=0; status_bench=0

echo "== GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'nvidia-smi unavailable')"

echo "== configure ($BUILD)"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DY9_WITH_CUDA=ON -DY9_BUILD_TESTS=ON \
      -DY9_BUILD_BENCH=ON > "$BUILD/y9_configure.log" 2>&1 || status_cfg=$?
if [ $status_cfg -ne 0 ]; then
  # Retry without benchmarks (Google Benchmark may be missing on the GPU machine).
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DY9_WITH_CUDA=ON -DY9_BUILD_TESTS=ON \
        -DY9_BUILD_BENCH=OFF > "$BUILD/y9_configure.log" 2>&1 && status_cfg=0
fi
[ $status_cfg -ne 0 ] && { tail -30 "$BUILD/y9_configure.log"; echo "SUMMARY: configure FAILED"; exit 1; }

echo "== build (-j$JOBS)"
if command -v ninja > /dev/null; then ninja -C "$BUILD" -j"$JOBS" > "$BUILD/y9_build.log" 2>&1 || status_build=$?
else cmake --build "$BUILD" -j"$JOBS" > "$BUILD/y9_build.log" 2>&1 || status_build=$?; fi
[ $status_build -ne 0 ] && { grep -E "error|FAILED" "$BUILD/y9_build.log" | head -40; echo "SUMMARY: build FAILED"; exit 1; }
BUILT=$(date +%s)

echo "== ctest -L gpu (Y9_REQUIRE_GPU=1)"
( cd "$BUILD" && Y9_REQUIRE_GPU=1 Y9_SYNC_CHECK=1 timeout 300 ctest -L gpu --output-on-failure --timeout 240 ) \
  > "$BUILD/y9_gpu_tests.log" 2>&1
status_test=$?
grep -vE "^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* Passed" "$BUILD/y9_gpu_tests.log" | tail -60
grep -qE "100% tests passed" "$BUILD/y9_gpu_tests.log" || status_test=1
TESTED=$(date +%s)

echo "== benchmarks (CUDA cases, min_time ${MIN_TIME}s)"
bench_lines=()
for b in "$BUILD"/*_bench; do
  [ -x "$b" ] || continue
  name=$(basename "$b")
  out=$(timeout 120 "$b" --benchmark_filter='cuda|CUDA|gpu' --benchmark_min_time="${MIN_TIME}" 2>&1)
  rc=$?
  echo "$out" | grep -vE "^\s*$" | tail -20
  if echo "$out" | grep -q "Failed to match any benchmarks"; then bench_lines+=("$name: no CUDA cases");
  elif [ $rc -ne 0 ] || echo "$out" | grep -q "ERROR OCCURRED"; then status_bench=1; bench_lines+=("$name: FAILED (rc $rc)");
  else bench_lines+=("$name: ok"); fi
done
END=$(date +%s)

echo
echo "================ GPU SUMMARY ================"
echo "build: ok ($((BUILT - START)) s)"
echo "gpu tests: $(grep -E 'tests passed' "$BUILD/y9_gpu_tests.log" || echo 'no ctest summary') ($((TESTED - BUILT)) s)"
for l in "${bench_lines[@]}"; do echo "bench $l"; done
[ ${#bench_lines[@]} -eq 0 ] && echo "bench: none built"
echo "total: $((END - START)) s"
if [ $status_test -ne 0 ] || [ $status_bench -ne 0 ]; then echo "RESULT: FAIL"; exit 1; fi
echo "RESULT: PASS"
