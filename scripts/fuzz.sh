#!/usr/bin/env bash
# Fuzzes the input parsers (label files, data.yaml, model YAML, safetensors, PyTorch .pt) with libFuzzer under
# ASan and UBSan for a bounded time each; runs no training. Builds only the parser sources
# (fuzz/CMakeLists.txt) with clang in its own tree. Exits non-zero when a target finds a crash,
# a sanitizer report, an exception other than the engine's own errors, or a broken invariant;
# the input is kept in <build>/artifacts/ (replay: <build>/<target>_fuzz <file>).
# Usage: bash scripts/fuzz.sh   (Y9_FUZZ_SECONDS per target, default 30; Y9_FUZZ_BUILD_DIR,
# default build-fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${Y9_FUZZ_SECONDS:-30}
BUILD=${Y9_FUZZ_BUILD_DIR:-build-fuzz}
if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: clang++ not found; scripts/install_deps.sh installs clang and libclang-rt-14-dev" >&2
  exit 1
fi
CC=clang CXX=clang++ cmake -S fuzz -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
mkdir -p "$BUILD/artifacts"
# Any input longer than this is a bigger version of a shorter one for these grammars.
declare -A MAXLEN=([label]=2048 [data_yaml]=4096 [model_yaml]=8192 [safetensors]=4096 [pt]=16384)
status=0
for t in label data_yaml model_yaml safetensors pt; do
  corpus="$BUILD/corpus/$t"
  mkdir -p "$corpus"
  if [ -d "fuzz/corpus/$t" ]; then cp -n fuzz/corpus/$t/* "$corpus"/; fi
  # Small seeds first: a mutation of one argument must be likely (the seeds spell out every
  # optional argument); two shipped configs bring the full grammar (CBLinear/CBFuse, dual heads).
  if [ "$t" = model_yaml ]; then cp -n configs/models/gelan-t.yaml configs/models/yolov9-t.yaml "$corpus"/; fi
  log="$BUILD/$t.log"
  # One job, bounded time and memory; leaks are not findings (yaml-cpp caches nodes).
  if ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 "$BUILD/${t}_fuzz" "$corpus" \
      -dict="fuzz/$t.dict" -max_total_time="$SECS" -max_len="${MAXLEN[$t]}" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$BUILD/artifacts/$t-" -print_final_stats=1 >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 || true)
    echo "fuzz $t: ok, $runs inputs in ${SECS}s ($cov)"
  else
    echo "fuzz $t: FAILED (log $log, input in $BUILD/artifacts/)"
    tail -n 60 "$log"
    status=1
  fi
done
exit $status
