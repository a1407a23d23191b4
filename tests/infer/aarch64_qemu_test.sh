#!/usr/bin/env bash
# The aarch64 cross build under qemu-user against the host (scripts/build_aarch64.sh runs it with
# Y9_AARCH64_TEST=1). Weights from the full build (gelan-t, one epoch); the host inference build
# letterboxes a coco128 image exactly as `yolov9 detect` does and stores the input tensor; then the
# x86 and the aarch64 yolov9_infer_raw run the model and NMS on it. The NMS input must agree within
# a float tolerance (different SIMD paths: oneDNN's x64 JIT vs its aarch64/reference kernels,
# OpenBLAS kernels) and so must the boxes.
# Usage: aarch64_qemu_test.sh AARCH64_BUILD HOST_INFERENCE_BUILD FULL_BUILD [IMGSZ]
set -euo pipefail
A=$(cd "$1" && pwd)
H=$(cd "$2" && pwd)
F=$(cd "$3" && pwd)
IMG=${4:-128}
COCO=${YOLOV9_COCO128:-$(cd "$(dirname "$0")/../.." && pwd)/../shared/data/coco128}
QEMU=(qemu-aarch64 -L /usr/aarch64-linux-gnu)
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
fail() { echo "FAIL: $*"; exit 1; }
file "$A/yolov9_infer_raw" | grep -q "ARM aarch64" || fail "$A/yolov9_infer_raw is not an aarch64 program"
echo "aarch64 yolov9_infer_raw NEEDED: $(readelf -d "$A/yolov9_infer_raw" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
if readelf -d "$A/yolov9_infer_raw" | grep -Eq 'libmpi|libnccl|libprotobuf|libonnx|libgtest'; then fail "training library NEEDED"; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$F/yolov9" synth --out ds --n-train 8 --n-val 4 --img 64 >/dev/null
"$F/yolov9" train --data ds/data.yaml --cfg gelan-t.yaml --img 64 --batch 8 --epochs 1 --workers 0 --project runs \
  --name t --noplots >train.log 2>&1 || fail "train: $(tail -3 train.log)"
W=runs/t/weights/last.safetensors
image="$COCO/images/train2017/000000000009.jpg"
"$H/yolov9_infer_raw" input "$W" "$image" "$IMG" in.safetensors
"$H/yolov9_infer_raw" predict "$W" in.safetensors 0.001 pred_x86.safetensors >boxes_x86.txt
t0=$(date +%s)
"${QEMU[@]}" "$A/yolov9_infer_raw" predict "$W" in.safetensors 0.001 pred_arm.safetensors >boxes_arm.txt ||
  fail "the aarch64 program failed under qemu"
echo "qemu-aarch64 run: $(($(date +%s) - t0)) s, $(wc -l <boxes_arm.txt) boxes (x86: $(wc -l <boxes_x86.txt))"
python3 - <<'PY'
import json, struct, sys
import numpy as np
def load(p):
    d = open(p, 'rb').read()
    n = struct.unpack('<Q', d[:8])[0]
    h = json.loads(d[8:8 + n])['pred']
    a, b = h['data_offsets']
    return np.frombuffer(d[8 + n + a:8 + n + b], dtype=np.float32).reshape(h['shape'])
x, y = load('pred_x86.safetensors'), load('pred_arm.safetensors')
assert x.shape == y.shape, (x.shape, y.shape)
# boxes in letterboxed pixels (|v| up to the image size) and sigmoid scores in [0, 1]
box_err = np.abs(x[:, :4] - y[:, :4]).max()
score_err = np.abs(x[:, 4:] - y[:, 4:]).max()
print(f"NMS input {list(x.shape)}: max |x86 - aarch64| boxes {box_err:.3g} px, scores {score_err:.3g}")
assert box_err <= 1e-2 and score_err <= 1e-4, "prediction differs beyond float tolerance"
bx = [list(map(float, l.split())) for l in open('boxes_x86.txt')]
ba = [list(map(float, l.split())) for l in open('boxes_arm.txt')]
# NMS picks among near-tied scores may differ by float rounding: match boxes as sets
unmatched = [r for r in bx if not any(int(r[0]) == int(s[0]) and abs(r[1] - s[1]) <= 1e-4 and
                                      max(abs(r[k] - s[k]) for k in range(2, 6)) <= 1e-2 for s in ba)]
print(f"boxes: x86 {len(bx)}, aarch64 {len(ba)}, x86 boxes without an aarch64 match: {len(unmatched)}")
assert bx and len(unmatched) <= max(1, len(bx) // 50) and abs(len(bx) - len(ba)) <= max(1, len(bx) // 50)
PY
echo "aarch64_qemu_test: passed"
