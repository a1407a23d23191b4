#!/usr/bin/env bash
# The device kit's driver (copied as run.sh into y9-gpu-kit.tar.xz by tests/gpu/kit.sh; see
# docs/gpu_kit.md). Runs from the unpacked bundle on the bare GPU machine:
#   ./run.sh               every gpu test with Y9_REQUIRE_GPU=1 (a skip is a failure), then
#                          compute-sanitizer memcheck/racecheck/synccheck over them (when found), the
#                          CUDA benchmarks briefly, `yolov9 info --backends`, synth -> train -> val ->
#                          detect on cuda:0, `yolov9 train --benchmark` (yolov9-s 640 b64 AMP, synthetic
#                          and real data), the official train_dual.py step beside it (when the kit has
#                          it: kit.sh with YOLOV9_OFFICIAL set), and a SUMMARY. About 5 minutes.
#   ./run.sh --self-check  the CPU-side check (any machine): every binary starts, `ldd` finds every
#                          library but the CUDA ones, each gpu test runs with its GPU cases skipped,
#                          `yolov9 info --backends` prints the kernel table, synth -> train -> val ->
#                          detect run on the CPU from JPEG files.
# The CUDA libraries (libcudart, libcublas*, libcudnn*, libnccl, libcuda) are not in the bundle: they
# come from the driver and the nvidia-* Python wheels (site-packages/nvidia/*/lib), or a CUDA 13
# toolkit, which this script puts on LD_LIBRARY_PATH. Env: SANITIZE=0 skips compute-sanitizer,
# SANITIZER_BUDGET (seconds, default 150), SANITIZE_ONLY (an extended regex: only the gpu tests it
# matches go under the sanitizer, in the budget), SANITIZE_TOOLS (default "memcheck racecheck
# synccheck"), BENCH=0 skips the CUDA benchmarks, BENCH_MIN_TIME (seconds per case, default 0.05),
# TRAIN_BENCH=0 skips the train benchmark, BENCH_BATCH (64), BENCH_STEPS (20), BENCH_WORKERS (12),
# BENCH_AMP (more precisions of the synthetic step: "bf16 fp32"), CUDNN_LOG=1 (those and FP16 again
# with Y9_CUDNN_LOG: every cudnnFind's fastest algorithms in their logs), PROFILE=1 reruns the
# synthetic benchmark under the CUPTI profiler (the per-kernel table in KIT_LOGS),
# STEP_TIMEOUT (seconds one test, workflow step or benchmark may run, default 300: a hang on the device
# costs its whole lease), KIT_LOGS (a folder: every test's, workflow step's and benchmark's full output
# is kept there as NAME.log; the SUMMARY shows only the failing lines).
set -u
STEP_TIMEOUT="${STEP_TIMEOUT:-300}"
KIT_LOGS="${KIT_LOGS:-}"
[ -n "$KIT_LOGS" ] && mkdir -p "$KIT_LOGS"
keep_log() {  # keep_log NAME TEXT: the full output, when KIT_LOGS is set
  [ -n "$KIT_LOGS" ] && printf '%s\n' "$2" > "$KIT_LOGS/$1.log"
  return 0
}
KIT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODE=device
[ "${1:-}" = "--self-check" ] && MODE=self
START=$(date +%s)
CUDA_RE='libcuda\.so|libcudart|libcublas|libcublasLt|libcudnn|libnccl|libnvrtc|libnvJitLink'
GLIBC_RE='linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libresolv|libutil\.so'

# --- the CUDA libraries: nvidia wheels first, then a CUDA toolkit, then the driver's folder ----------
cuda_dirs=""
if command -v python3 > /dev/null; then
  cuda_dirs=$(python3 - <<'EOF' 2>/dev/null
import glob, os, site
roots = []
try:
    import nvidia
    roots += list(nvidia.__path__)
except Exception:
    pass
try:
    roots += [os.path.join(p, "nvidia") for p in site.getsitepackages() + [site.getusersitepackages()]]
except Exception:
    pass
seen = []
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "*", "lib"))):
        d = os.path.realpath(d)
        if d not in seen and os.path.isdir(d):
            seen.append(d)
print(":".join(seen))
EOF
)
fi
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
  [ -d "$d" ] && cuda_dirs="${cuda_dirs:+$cuda_dirs:}$d"
done
# Only the CUDA folders: the kit's own libraries are found through the binaries' and libraries'
# RPATH ($ORIGIN/../lib, $ORIGIN), so what runs here is what runs when started by hand.
export LD_LIBRARY_PATH="${cuda_dirs}${LD_LIBRARY_PATH:+${cuda_dirs:+:}$LD_LIBRARY_PATH}"
# The test data the kit carries (kit.sh): official fixtures and 24 coco128 images.
[ -d "$KIT/reference" ] && export YOLOV9_REFERENCE="$KIT/reference"
[ -d "$KIT/coco128" ] && export YOLOV9_COCO128="$KIT/coco128"
[ -d "$KIT/configs/models" ] && export YOLOV9_CONFIGS="$KIT/configs/models"  # cuda_val_bench
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"
echo "== y9 gpu kit ($MODE) in $KIT"
echo "   $(cat "$KIT/VERSION" 2>/dev/null)"
echo "   CUDA library folders: ${cuda_dirs:-none found}"
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null)
echo "   GPU: ${gpu:-nvidia-smi unavailable}"
if [ "$MODE" = device ] && [ -z "$gpu" ]; then
  echo "   NOTE: no GPU is visible here; the device run needs one (on a CPU machine use ./run.sh --self-check)"
fi

TESTS=$(cd "$KIT/bin" && ls *_cuda_test 2>/dev/null)
BENCHES=$(cd "$KIT/bin" && ls *_bench 2>/dev/null)
fail=0
lines=()
note() { lines+=("$1"); echo "-- $1"; }

# --- every binary finds its libraries ---------------------------------------------------------
echo "== ldd"
for b in "$KIT"/bin/*; do
  missing=$(ldd "$b" 2>&1 | grep "not found" | awk '{print $1}' | tr '\n' ' ')
  if [ "$MODE" = self ]; then missing=$(echo "$missing" | tr ' ' '\n' | grep -vE "$CUDA_RE" | tr '\n' ' '); fi
  if [ -n "${missing// /}" ]; then note "ldd $(basename "$b"): FAILED, not found: $missing"; fail=1; fi
  # Found, but outside the bundle (so it would be missing on the bare machine): neither glibc's nor CUDA's.
  # (Paths may contain spaces: split each "name => path (0x...)" line at " => ".)
  outside=""
  while IFS= read -r line; do
    name=${line%% => *}; name=${name//[[:space:]]/}; path=${line#* => }; path=${path% (0x*}
    [[ "$path" = /* ]] || continue
    [[ "$name" =~ ^($CUDA_RE|$GLIBC_RE) ]] && continue
    [[ "$path" = "$KIT/"* ]] || outside="$outside$name "
  done < <(ldd "$b" 2>&1 | grep " => ")
  if [ -n "${outside// /}" ]; then note "ldd $(basename "$b"): FAILED, found outside the kit: $outside"; fail=1; fi
done
[ $fail -eq 0 ] && note "ldd: every binary finds its libraries, all but glibc's and CUDA's in lib/$([ "$MODE" = self ] && echo ' (CUDA ones not required here)')"

# --- yolov9 -------------------------------------------------------------------------------------
out=$("$KIT/bin/yolov9" --version 2>&1); rc=$?
echo "$out"
[ $rc -eq 0 ] && note "yolov9 --version: ok" || { note "yolov9 --version: FAILED (rc $rc)"; fail=1; }
out=$("$KIT/bin/yolov9" info --backends 2>&1); rc=$?
echo "$out" | head -12; echo "   ... ($(echo "$out" | wc -l) lines)"
if [ $rc -eq 0 ] && echo "$out" | grep -qi "cuda"; then note "yolov9 info --backends: ok ($(echo "$out" | wc -l) lines)"
else note "yolov9 info --backends: FAILED (rc $rc)"; fail=1; fi

# --- the gpu tests --------------------------------------------------------------------------
echo "== gpu tests ($MODE)"
for t in $TESTS; do
  if [ "$MODE" = self ]; then
    out=$(cd "$KIT" && env -u Y9_REQUIRE_GPU timeout "$STEP_TIMEOUT" "bin/$t" 2>&1); rc=$?
    keep_log "$t" "$out"
    n_pass=$(echo "$out" | grep -oE "\[  PASSED  \] [0-9]+" | grep -oE "[0-9]+$")
    n_skip=$(echo "$out" | grep -oE "\[  SKIPPED \] [0-9]+ test" | grep -oE "[0-9]+")
    if [ $rc -eq 0 ] && [ -n "$n_pass" ]; then note "$t: starts, ${n_pass} passed, ${n_skip:-0} skipped (no GPU here)"
    else echo "$out" | tail -20; note "$t: FAILED (rc $rc)"; fail=1; fi
  else
    t0=$(date +%s)
    out=$(cd "$KIT" && Y9_REQUIRE_GPU=1 Y9_SYNC_CHECK=1 NCCL_DEBUG="${NCCL_DEBUG:-WARN}" timeout "$STEP_TIMEOUT" "bin/$t" 2>&1); rc=$?
    keep_log "$t" "$out"
    echo "   $t: rc $rc in $(( $(date +%s) - t0 )) s"
    n_pass=$(echo "$out" | grep -oE "\[  PASSED  \] [0-9]+" | grep -oE "[0-9]+$")
    if [ $rc -eq 0 ] && ! echo "$out" | grep -q "\[  SKIPPED \]"; then note "$t: PASS (${n_pass:-?} tests)"
    else echo "$out" | grep -E "FAILED|SKIPPED|Failure|error" | head -30; note "$t: FAILED (rc $rc)"; fail=1; fi
  fi
done

# --- the workflow from JPEG files: synth, train, val, detect --------------------------------------
# A small synthetic dataset written as JPEG files by the kit's own yolov9 (no dataset travels with
# the kit), then train -> val -> detect: on the CPU in --self-check mode, on cuda:0 on the device.
echo "== yolov9 synth/train/val/detect ($MODE)"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
DEV=$([ "$MODE" = self ] && echo cpu || echo 0)
Y9="$KIT/bin/yolov9"
wf() {  # wf <name> <command...>: runs it in $WORK, keeps its log, notes the result
  local name=$1; shift
  (cd "$WORK" && timeout "$STEP_TIMEOUT" "$@") > "$WORK/$name.log" 2>&1; local rc=$?
  [ -n "$KIT_LOGS" ] && cp "$WORK/$name.log" "$KIT_LOGS/yolov9_$name.log"
  if [ $rc -eq 0 ]; then return 0; fi
  tail -25 "$WORK/$name.log"; note "yolov9 $name: FAILED (rc $rc)"; fail=1; return 1
}
if wf synth "$Y9" synth --out synth --n-train 16 --n-val 8 --img 128 --seed 0 &&
   wf train "$Y9" train --cfg yolov9-t --data synth/data.yaml --img 64 --batch 4 --epochs 2 --workers 2 \
     --device "$DEV" --project runs --name train --seed 0; then
  last=$(grep -E "^ +[0-9]+/[0-9]+ " "$WORK/train.log" | tail -1)
  note "yolov9 train (yolov9-t, 16 JPEG images, 64 px, 2 epochs, device $DEV): ok; $(tail -1 "$WORK/runs/train/results.csv" | tr -s ' ' | cut -c1-120)"
  W="runs/train/weights/best.safetensors"
  if wf val "$Y9" val --weights "$W" --data synth/data.yaml --img 64 --batch 8 --device "$DEV" --project runs --name val; then
    note "yolov9 val: ok; $(grep -E "^ +all " "$WORK/val.log" | tail -1 | tr -s ' ')"
  fi
  if wf detect "$Y9" detect --weights "$W" --source synth/images/val --img 64 --conf-thres 0.001 --device "$DEV" \
       --project runs --name detect; then
    note "yolov9 detect: ok; $(ls "$WORK/runs/detect" | grep -c jpg) annotated images"
  fi
fi

# --- compute-sanitizer ---------------------------------------------------------------------------
if [ "$MODE" = device ] && [ "${SANITIZE:-1}" != 0 ]; then
  SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
        /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
  if [ -z "$SAN" ] && command -v python3 > /dev/null; then
    SAN=$(python3 -c 'import nvidia, glob, os; print(next(iter(sorted(g for p in nvidia.__path__ for g in glob.glob(os.path.join(p, "*", "compute-sanitizer", "compute-sanitizer")) + glob.glob(os.path.join(p, "*", "bin", "compute-sanitizer")))), ""))' 2>/dev/null)
  fi
  if [ -z "$SAN" ]; then
    note "compute-sanitizer: SKIPPED (not found: install the CUDA toolkit's, or the PyPI nvidia-cuda-sanitizer-api wheel)"
  else
    budget=${SANITIZER_BUDGET:-150}
    # A bad SANITIZE_ONLY pattern would make [[ =~ ]] fail for every test: say so instead.
    if [ -n "${SANITIZE_ONLY:-}" ]; then
      [[ "x" =~ $SANITIZE_ONLY ]]
      [ $? -eq 2 ] && { note "sanitizer: SANITIZE_ONLY='$SANITIZE_ONLY' is not a valid regex: no test filtered"; SANITIZE_ONLY=""; }
    fi
    echo "== compute-sanitizer ($SAN), budget ${budget}s"
    san_start=$(date +%s)
    for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
      for t in $TESTS; do
        [ -n "${SANITIZE_ONLY:-}" ] && ! [[ "$t" =~ $SANITIZE_ONLY ]] && continue
        left=$(( budget - ($(date +%s) - san_start) ))
        if [ $left -le 5 ]; then note "sanitizer $tool $t: not run (budget of ${budget}s spent)"; continue; fi
        # --report-api-errors no: a failing CUDA call is our code's to report (every one is checked and
        # throws), and allocator_cuda_test's out-of-memory probes fail on purpose.
        out=$(cd "$KIT" && Y9_REQUIRE_GPU=1 NCCL_DEBUG="${NCCL_DEBUG:-WARN}" timeout "$left" "$SAN" --tool "$tool" \
              --error-exitcode 99 --report-api-errors no \
              "bin/$t" 2>&1); rc=$?
        keep_log "sanitizer_${tool}_$t" "$out"
        if echo "$out" | grep -qE "Device not supported|unable to initialize|Unable to (find|load)"; then
          echo "$out" | grep -m3 -E "Device not supported|unable|Unable"
          note "sanitizer $tool $t: UNAVAILABLE here (the sanitizer cannot attach to this device)"
        elif [ $rc -eq 124 ]; then note "sanitizer $tool $t: TIMEOUT (budget)"
        elif [ $rc -eq 0 ]; then note "sanitizer $tool $t: clean ($(echo "$out" | grep -oE 'ERROR SUMMARY: [0-9]+ error' | tail -1))"
        else echo "$out" | grep -vE "^\[ +(RUN|OK) " | tail -30; note "sanitizer $tool $t: FAILED (rc $rc)"; fail=1; fi
      done
    done
  fi
fi

# --- benchmarks -----------------------------------------------------------------------------------
echo "== benchmarks"
[ "$MODE" = device ] && [ "${BENCH:-1}" = 0 ] && BENCHES=""
for b in $BENCHES; do
  if [ "$MODE" = self ]; then
    out=$(timeout 60 "$KIT/bin/$b" --benchmark_list_tests 2>&1); rc=$?
    [ $rc -eq 0 ] && note "$b: starts ($(echo "$out" | grep -c .) cases listed)" || { echo "$out" | tail; note "$b: FAILED (rc $rc)"; fail=1; }
  else
    # cuda_* benchmarks are CUDA throughout (their case names do not say so): every case runs.
    filter='cuda|CUDA|gpu'; [[ "$b" == cuda_* ]] && filter='.'
    out=$(timeout "$STEP_TIMEOUT" "$KIT/bin/$b" --benchmark_filter="$filter" --benchmark_min_time="${BENCH_MIN_TIME:-0.05}" 2>&1); rc=$?
    keep_log "$b" "$out"
    echo "$out" | grep -vE "^\s*$" | tail -25
    if echo "$out" | grep -q "Failed to match any benchmarks"; then note "$b: no CUDA cases"
    elif [ $rc -ne 0 ] || echo "$out" | grep -q "ERROR OCCURRED"; then note "$b: FAILED (rc $rc)"; fail=1
    else note "$b: ok"; fi
  fi
done

# --- yolov9 train --benchmark: yolov9-s at 640, batch 64, AMP (device only) --------------------------
# The issue's headline number: images/s with synthetic batches (the first batch repeated: the GPU
# step alone) and with the real loader on JPEG files (decode and augmentation included).
if [ "$MODE" = device ] && [ "${TRAIN_BENCH:-1}" != 0 ]; then
  echo "== yolov9 train --benchmark (yolov9-s, 640 px, batch ${BENCH_BATCH:-64}, AMP)"
  if wf synth640 "$Y9" synth --out synth640 --n-train 256 --n-val 8 --img 640 --seed 0; then
    for data in synthetic real; do
      if wf "bench_$data" "$Y9" train --cfg yolov9-s --data synth640/data.yaml --img 640 --batch "${BENCH_BATCH:-64}" \
           --epochs 100 --workers "${BENCH_WORKERS:-12}" --device 0 --benchmark "${BENCH_STEPS:-20}" \
           --benchmark-data "$data" --project runs --name "bench_$data"; then
        grep -A2 "^benchmark:" "$WORK/bench_$data.log"
        note "train --benchmark $data: $(grep "^benchmark:" "$WORK/bench_$data.log" | sed 's/.*: //'); $(grep "peak memory" "$WORK/bench_$data.log" | sed 's/^ *//')"
      fi
    done
    # More precisions of the synthetic step (BENCH_AMP, e.g. "bf16 fp32"); CUDNN_LOG=1 runs them and
    # the FP16 one with Y9_CUDNN_LOG set (each cudnnFind's five fastest results, in KIT_LOGS).
    for amp in ${BENCH_AMP:-} ${CUDNN_LOG:+fp16}; do
      case "$amp" in
        fp16) flag="--amp" ;; bf16) flag="--amp bf16" ;; fp32) flag="--no-amp" ;;
        *) note "BENCH_AMP: unknown precision '$amp' (fp16, bf16, fp32)"; continue ;;
      esac
      # shellcheck disable=SC2086
      if wf "bench_synthetic_$amp" env ${CUDNN_LOG:+Y9_CUDNN_LOG=1} "$Y9" train --cfg yolov9-s --data synth640/data.yaml \
           --img 640 --batch "${BENCH_BATCH:-64}" --epochs 100 --workers "${BENCH_WORKERS:-12}" --device 0 \
           --benchmark "${BENCH_STEPS:-20}" --benchmark-data synthetic $flag --project runs --name "bench_$amp"; then
        note "train --benchmark synthetic $amp: $(grep "^benchmark:" "$WORK/bench_synthetic_$amp.log" | sed 's/.*: //'); $(grep "peak memory" "$WORK/bench_synthetic_$amp.log" | sed 's/^ *//')"
      fi
    done
    # The official train_dual.py step on the same device (kit.sh packs it when YOLOV9_OFFICIAL is
    # set): the device's PyTorch, the labels of the same synthetic set, random pixels.
    PY=""
    for p in /opt/torch/.venv/bin/python3 python3; do
      command -v "$p" > /dev/null && "$p" -c "import torch" 2> /dev/null && { PY=$(command -v "$p"); break; }
    done
    if [ -f "$KIT/official/train_step_cuda.py" ] && [ -n "$PY" ]; then
      # Not a kit failure when it fails (it is the official code on whatever PyTorch is there).
      (cd "$WORK" && YOLOV9_OFFICIAL="$KIT/official" timeout "$STEP_TIMEOUT" "$PY" "$KIT/official/train_step_cuda.py" \
         --labels synth640/labels/train --batch "${BENCH_BATCH:-64}" --img 640 --steps "${BENCH_STEPS:-20}" \
         --mode fast --stub-missing) > "$WORK/official_step.log" 2>&1
      rc=$?
      [ -n "$KIT_LOGS" ] && cp "$WORK/official_step.log" "$KIT_LOGS/official_step.log"
      if [ $rc -eq 0 ]; then note "official train_dual step (PyTorch, AMP FP16, synthetic): $(tail -1 "$WORK/official_step.log")"
      else tail -5 "$WORK/official_step.log"; note "official step: failed (rc $rc; not counted as a kit failure)"; fi
    else
      note "official step: not run ($([ -f "$KIT/official/train_step_cuda.py" ] && echo "no Python with torch here" || echo "not in the kit: build it with YOLOV9_OFFICIAL set"))"
    fi
    # Where the GPU time goes (PROFILE=1): the synthetic benchmark again under the CUPTI profiler
    # (lib/libyolov9_cupti_profile.so; its libcupti from the toolkit), the table kept in KIT_LOGS.
    if [ "${PROFILE:-0}" = 1 ] && [ -f "$KIT/lib/libyolov9_cupti_profile.so" ]; then
      prof="${KIT_LOGS:-$WORK}/cupti_ours_fp16.txt"
      if wf bench_cupti env CUDA_INJECTION64_PATH="$KIT/lib/libyolov9_cupti_profile.so" Y9_CUPTI_OUT="$prof" \
           Y9_CUPTI_LAST_MS=2000 Y9_CUPTI_TOP=60 \
           LD_LIBRARY_PATH="$LD_LIBRARY_PATH:/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64" \
           "$Y9" train --cfg yolov9-s --data synth640/data.yaml --img 640 --batch "${BENCH_BATCH:-64}" --epochs 100 \
           --workers "${BENCH_WORKERS:-12}" --device 0 --benchmark "${BENCH_STEPS:-20}" --benchmark-data synthetic \
           --project runs --name bench_cupti; then
        note "CUPTI profile of the synthetic step: $(head -1 "$prof" 2>/dev/null || echo "no output (libcupti not found?)")"
      fi
    fi
  fi
fi

END=$(date +%s)
echo
echo "================ SUMMARY (y9 gpu kit, $MODE) ================"
for l in "${lines[@]}"; do echo "$l"; done
echo "total: $((END - START)) s"
if [ $fail -ne 0 ]; then echo "RESULT: FAIL"; exit 1; fi
echo "RESULT: PASS"
