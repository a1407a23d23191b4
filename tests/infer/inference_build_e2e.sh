#!/usr/bin/env bash
# The inference build's e2e test (ctest inference_build_e2e, label e2e; cmake/inference.cmake).
#   1. readelf -d: no training dependency is NEEDED by the inference programs (MPI, NCCL, protobuf/
#      ONNX, GoogleTest, benchmark), and libyolov9_infer.a holds no optimizer or loader symbols.
#   2. Boxes: weights made by the full build (gelan-t trained 1 epoch, its --fuse export, and the
#      official tiny .pt of tests/data/pt), then
#      `yolov9 detect --save-txt --save-conf` of both builds on coco128 images must give the same
#      label files byte for byte, and the API example (apps/infer/example.cpp) the same boxes.
# Usage: inference_build_e2e.sh INFERENCE_BUILD_DIR FULL_BUILD_DIR  (exit 77 = skipped)
# Env: YOLOV9_COCO128 (default ../shared/data/coco128), Y9_INFER_FORBIDDEN (extra NEEDED regex),
#      Y9_INFER_EXE_WRAPPER (e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu" for a cross build).
set -euo pipefail
IB=$(cd "$1" && pwd)
FB=${2:-build}
COCO=${YOLOV9_COCO128:-../shared/data/coco128}
RUN=${Y9_INFER_EXE_WRAPPER:-}
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
fail() { echo "FAIL: $*"; exit 1; }

# --- 1. linked libraries -----------------------------------------------------------------------
forbidden='libmpi|libopen-rte|libopen-pal|libnccl|libprotobuf|libonnx|libgtest|libbenchmark'
[ -n "${Y9_INFER_FORBIDDEN:-}" ] && forbidden="$forbidden|$Y9_INFER_FORBIDDEN"
for exe in yolov9 yolov9_infer_example; do
  [ -x "$IB/$exe" ] || fail "$IB/$exe not built"
  needed=$(readelf -d "$IB/$exe" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  echo "$exe NEEDED: $(echo $needed)"
  if echo "$needed" | grep -Eq "$forbidden"; then
    fail "$exe needs a training library: $(echo "$needed" | grep -E "$forbidden" | tr '\n' ' ')"
  fi
done
# No training code inside the library either (names of the training layer's entry points).
syms=$(nm -C "$IB/libyolov9_infer.a" "$IB/liby9_io.a" "$IB/liby9_kernels_cpu.a" 2>/dev/null | grep -E ' [TW] ' || true)
for s in 'training::Optimizer' 'training::Trainer' 'io::AugmentedDataset' 'io::DataLoader' 'sgd_step' 'MPI_Init'; do
  if echo "$syms" | grep -q "$s"; then fail "inference libraries define $s"; fi
done
out=$($RUN "$IB/yolov9" --help 2>&1) || true
echo "$out" | grep -q "detect" || fail "yolov9 --help lists no detect: $out"
if echo "$out" | grep -Eq '^\s+(train|val|export)\b'; then fail "the inference yolov9 has training commands: $out"; fi

# The docs example is the built example, verbatim.
SRC=$(cd "$(dirname "$0")/../.." && pwd)
diff <(sed -n '/^```cpp$/,/^```$/p' "$SRC/docs/inference.md" | sed '1d;$d') "$SRC/apps/infer/example.cpp" >/dev/null ||
  fail "docs/inference.md's example differs from apps/infer/example.cpp"

# --- 2. same boxes as the full build -----------------------------------------------------------
if [ ! -x "$FB/yolov9" ]; then
  echo "SKIP: no full build at $FB (set Y9_FULL_BUILD_DIR) to compare boxes with"
  exit 77
fi
FB=$(cd "$FB" && pwd)
[ -d "$COCO/images/train2017" ] || { echo "SKIP: no coco128 at $COCO"; exit 77; }
imgs=()
for f in 000000000009 000000000025 000000000030; do imgs+=("$(cd "$COCO/images/train2017" && pwd)/$f.jpg"); done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && "$FB/yolov9" synth --out ds --n-train 8 --n-val 4 --img 64 >/dev/null &&
  "$FB/yolov9" train --data ds/data.yaml --cfg gelan-t.yaml --img 64 --batch 8 --epochs 1 --workers 0 --project runs \
    --name t --noplots >train.log 2>&1 &&
  "$FB/yolov9" export --weights runs/t/weights/last.safetensors --fuse --out fused.safetensors >export.log 2>&1) ||
  fail "making weights with the full build: $(tail -5 "$work"/*.log 2>/dev/null)"
mkdir -p "$work/src"
for i in "${imgs[@]}"; do ln -s "$i" "$work/src/"; done
n=0
for w in runs/t/weights/last.safetensors fused.safetensors; do
  for img in 320 416; do
    args=(detect --weights "$work/$w" --source "$work/src" --img $img --conf-thres 0.001 --save-txt --save-conf --nosave
          --exist-ok)
    "$FB/yolov9" "${args[@]}" --project "$work/full" --name "$n" >"$work/full_$n.log" 2>&1 ||
      fail "full detect: $(tail -3 "$work/full_$n.log")"
    $RUN "$IB/yolov9" "${args[@]}" --project "$work/inf" --name "$n" >"$work/inf_$n.log" 2>&1 ||
      fail "inference detect: $(tail -3 "$work/inf_$n.log")"
    boxes=$(cat "$work/full/$n/labels/"*.txt | wc -l)
    [ "$boxes" -gt 0 ] || fail "$w --img $img: the full build found no box; nothing to compare"
    diff -r "$work/full/$n/labels" "$work/inf/$n/labels" >/dev/null ||
      fail "$w --img $img: labels differ (diff -r $work/full/$n/labels $work/inf/$n/labels)"
    echo "$w --img $img: $boxes boxes over ${#imgs[@]} images, labels identical"
    n=$((n + 1))
  done
done
# An official .pt checkpoint (tests/data/pt, made by the official code) loads the same way.
pt="$SRC/tests/data/pt/tiny_yolo.pt"
if [ -f "$pt" ]; then
  args=(detect --weights "$pt" --source "$work/src" --img 320 --conf-thres 0.001 --save-txt --save-conf --nosave --exist-ok)
  "$FB/yolov9" "${args[@]}" --project "$work/full" --name pt >"$work/full_pt.log" 2>&1 || fail "full detect .pt: $(tail -3 "$work/full_pt.log")"
  $RUN "$IB/yolov9" "${args[@]}" --project "$work/inf" --name pt >"$work/inf_pt.log" 2>&1 ||
    fail "inference detect .pt: $(tail -3 "$work/inf_pt.log")"
  diff -r "$work/full/pt/labels" "$work/inf/pt/labels" >/dev/null || fail "tiny_yolo.pt: labels differ"
  echo "tiny_yolo.pt --img 320: $(cat "$work/full/pt/labels/"*.txt | wc -l) boxes, labels identical"
fi
# One bad input must not end the run (either build): a JPEG under another image name (the build
# without OpenCV cannot write its annotated copy under that name) and a header over the 2^30-pixel
# limit (cv::imdecode throws) are reported naming the file, and the image after them is processed.
mkdir -p "$work/bad"
cp "${imgs[0]}" "$work/bad/a_jpeg.bmp"
python3 - "${imgs[0]}" "$work/bad/b_huge.jpg" <<'PY'
import sys, struct
d = bytearray(open(sys.argv[1], 'rb').read())
i = 2
while d[i + 1] not in (0xC0, 0xC1, 0xC2):
    i += 2 + struct.unpack('>H', d[i + 2:i + 4])[0]
d[i + 5:i + 9] = struct.pack('>HH', 60000, 60000)
open(sys.argv[2], 'wb').write(d)
PY
cp "${imgs[1]}" "$work/bad/c_good.jpg"  # a copy: detect reports a symlink under its target
for b in full:"$FB" inf:"$IB"; do
  name=${b%%:*}
  exe=${b#*:}/yolov9
  [ "$name" = inf ] && exe="$RUN $exe"
  $exe detect --weights "$work/fused.safetensors" --source "$work/bad" --img 320 --conf-thres 0.001 --save-txt \
    --exist-ok --project "$work/bad_$name" --name r >"$work/bad_$name.log" 2>&1 || true
  grep -q '^yolov9: error' "$work/bad_$name.log" && fail "$name build: one bad input ended the run: $(grep '^yolov9: error' "$work/bad_$name.log")"
  grep -q "ERROR image 2/3 .*b_huge.jpg" "$work/bad_$name.log" || fail "$name build: no error naming b_huge.jpg: $(cat "$work/bad_$name.log")"
  grep -q "^image 3/3 .*c_good.jpg: " "$work/bad_$name.log" || fail "$name build: the image after the bad ones was not processed"
done
echo "bad inputs: reported per file, the run goes on (both builds)"
# The API example at the detect defaults except conf: its boxes in pixels against detect's labels.
$RUN "$IB/yolov9_infer_example" "$work/fused.safetensors" "${imgs[@]}" --conf 0.001 >"$work/api.txt" ||
  fail "example failed"
"$FB/yolov9" detect --weights "$work/fused.safetensors" --source "$work/src" --conf-thres 0.001 --save-txt --save-conf \
  --nosave --exist-ok --project "$work/full" --name api >/dev/null 2>&1
python3 - "$work/api.txt" "$work/full/api/labels" <<'PY'
import sys, os, glob, struct
def jpeg_size(path):  # (h, w) from the first SOF marker
    d = open(path, 'rb').read()
    i = 2
    while i < len(d):
        m, ln = d[i + 1], struct.unpack('>H', d[i + 2:i + 4])[0]
        if m in (0xC0, 0xC1, 0xC2):
            return struct.unpack('>HH', d[i + 5:i + 9])
        i += 2 + ln
paths = {}
api = {}
for line in open(sys.argv[1]):
    p, c, s, x1, y1, x2, y2, _ = line.split()
    paths[os.path.basename(p).rsplit('.', 1)[0]] = p
    api.setdefault(os.path.basename(p).rsplit('.', 1)[0], []).append((int(c), float(s), *map(float, (x1, y1, x2, y2))))
n = 0
for f in glob.glob(os.path.join(sys.argv[2], '*.txt')):
    stem = os.path.basename(f)[:-4]
    rows = [l.split() for l in open(f)][::-1]  # detect writes reversed(det)
    a = api.get(stem, [])
    assert len(rows) == len(a), f"{stem}: detect {len(rows)} boxes, API {len(a)}"
    h, w = jpeg_size(paths[stem])
    for r, b in zip(rows, a):
        assert int(r[0]) == b[0] and abs(float(r[5]) - b[1]) <= 1e-5 * max(1, b[1]), (stem, r, b)
        # labels are %g (6 significant digits) of the normalised centre and size
        xywh = ((b[2] + b[4]) / 2 / w, (b[3] + b[5]) / 2 / h, (b[4] - b[2]) / w, (b[5] - b[3]) / h)
        assert all(abs(float(r[k + 1]) - xywh[k]) <= 1e-5 for k in range(4)), (stem, r, b, xywh)
    n += len(a)
assert n > 0 and len(api) == len(glob.glob(os.path.join(sys.argv[2], '*.txt')))
print(f"API example: {n} boxes; classes, scores and boxes equal to detect's labels")
PY
echo "inference_build_e2e: passed"
