#!/usr/bin/env bash
# The aarch64 cross build's `yolov9 detect` under qemu-user against the host's full build
# (scripts/build_aarch64.sh runs it with Y9_AARCH64_TEST=1; scripts/test.sh in CI). Weights from
# the full build (gelan-t trained one epoch on a small synthetic set); then the x86 full build's
# `yolov9 detect` (OpenCV: cv::imread, cv::resize) and the aarch64 one (no OpenCV: libjpeg-turbo,
# io::resize_linear_u8, one OpenMP thread under qemu-aarch64) run on the same two coco128 JPEGs
# (640x480 and 381x500: letterbox padding on either axis) with
# --save-txt --save-conf at a low confidence threshold, and their label files must agree; a video
# source must be refused by the aarch64 build with an error naming it.
# Tolerance: the letterboxed inputs are identical (tests/io/image_u8_test.cpp: decode and resize
# are bit-exact against OpenCV), but the convolutions are not (oneDNN's x64 JIT vs its aarch64
# kernels, OpenBLAS kernels: float sums in another order, about 1e-6 relative). Boxes are rounded
# to whole pixels of the original image, so a coordinate on a .5 boundary can move by 1 px: each
# x86 box must have an aarch64 box of the same class within 1 px (+1e-6) on every coordinate
# (cx, cy by 0.5 px, w, h by 1 px, in the image's pixels) and with a confidence within 1e-4;
# near-tied scores can change an NMS pick, so up to 2% of the boxes may go unmatched (at least
# 1 allowed) and the counts may differ by as much.
# Usage: aarch64_qemu_test.sh AARCH64_BUILD FULL_BUILD [IMGSZ]
set -euo pipefail
A=$(cd "$1" && pwd)
F=$(cd "$2" && pwd)
IMG=${3:-128}
COCO=${YOLOV9_COCO128:-$(cd "$(dirname "$0")/../.." && pwd)/../shared/data/coco128}
QEMU=(qemu-aarch64 -L /usr/aarch64-linux-gnu)
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
fail() { echo "FAIL: $*"; exit 1; }
P="$A/yolov9"
file "$P" | grep -q "ARM aarch64" || fail "$P is not an aarch64 program"
needed=$(readelf -d "$P" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
echo "aarch64 yolov9: $(stat -c %s "$P") bytes, NEEDED: $needed"
if grep -Eq 'libopencv|libmpi|libnccl|libprotobuf|libonnx|libgtest' <<<"$needed"; then
  fail "OpenCV or a training library NEEDED"
fi
stems=(000000000009 000000000049)
for st in "${stems[@]}"; do
  [ -f "$COCO/images/train2017/$st.jpg" ] || fail "coco128 image $COCO/images/train2017/$st.jpg missing (YOLOV9_COCO128)"
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
mkdir src
sizes=()
for st in "${stems[@]}"; do
  ln -s "$COCO/images/train2017/$st.jpg" src/
  sizes+=("$st:$(file -L "src/$st.jpg" | grep -oE ', [0-9]+x[0-9]+,' | tr -d ', ')")
done
"$F/yolov9" synth --out ds --n-train 8 --n-val 4 --img 64 >/dev/null
"$F/yolov9" train --data ds/data.yaml --cfg gelan-t.yaml --img 64 --batch 8 --epochs 1 --workers 0 --project runs \
  --name t --noplots >train.log 2>&1 || fail "train: $(tail -3 train.log)"
W=runs/t/weights/last.safetensors
args=(detect --weights "$W" --source src --img "$IMG" --conf-thres 0.001 --save-txt --save-conf --device cpu
      --project out --exist-ok)
"$F/yolov9" "${args[@]}" --name x86 >x86.log 2>&1 || fail "x86 detect: $(tail -3 x86.log)"
t0=$(date +%s)
"${QEMU[@]}" "$P" "${args[@]}" --name arm >arm.log 2>&1 || fail "the aarch64 detect failed under qemu: $(tail -3 arm.log)"
echo "qemu-aarch64 detect of ${#stems[@]} images at $IMG px: $(($(date +%s) - t0)) s"
grep '^image' arm.log
for st in "${stems[@]}"; do
  file "out/arm/$st.jpg" | grep -q "JPEG image data" || fail "no annotated JPEG $st.jpg from the aarch64 detect"
done
python3 - "${sizes[@]}" <<'PY'
import sys
ok = True
for arg in sys.argv[1:]:
    stem, size = arg.split(':')
    W, H = map(float, size.split('x'))
    bx = [list(map(float, l.split())) for l in open(f'out/x86/labels/{stem}.txt')]
    ba = [list(map(float, l.split())) for l in open(f'out/arm/labels/{stem}.txt')]
    scale = [W, H, W, H]
    def close(r, s):  # class, cx, cy, w, h (normalised), conf
        return int(r[0]) == int(s[0]) and abs(r[5] - s[5]) <= 1e-4 and \
            all(abs(r[k] - s[k]) * scale[k - 1] <= 1 + 1e-6 for k in range(1, 5))
    exact = sum(1 for r, s in zip(bx, ba) if r == s)
    unmatched = [r for r in bx if not any(close(r, s) for s in ba)]
    err = max((min(max(abs(r[k] - s[k]) * scale[k - 1] for k in range(1, 5)) for s in ba if close(r, s))
               for r in bx if r not in unmatched), default=0)
    print(f"{stem}.jpg {int(W)}x{int(H)}: x86 {len(bx)} boxes, aarch64 {len(ba)}, identical lines {exact}, "
          f"x86 boxes without an aarch64 match {len(unmatched)}, max coordinate difference {err:.3g} px")
    allowed = max(1, len(bx) // 50)
    ok &= bool(bx) and len(unmatched) <= allowed and abs(len(bx) - len(ba)) <= allowed
assert ok, "no x86 box, or labels differ beyond the tolerance"
PY
printf 'not a video' >clip.mp4
"${QEMU[@]}" "$P" detect --weights "$W" --source clip.mp4 --img "$IMG" --project out --name vid >vid.log 2>&1 || true
grep -q "clip.mp4.*without OpenCV" vid.log || fail "a video source was not refused naming it: $(tail -2 vid.log)"
echo "video source refused: $(grep -m1 'clip.mp4' vid.log | sed 's/^ *//')"
echo "aarch64_qemu_test: passed"
