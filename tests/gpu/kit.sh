#!/usr/bin/env bash
# Builds the GPU device kit (docs/gpu_kit.md): OUT_DIR/y9-gpu-kit.tar.xz, a self-contained bundle for
# the bare GPU machine (driver, CUDA toolkit and nvidia-* wheels there, none of our Debian libraries):
#   bin/    yolov9 (train, val, detect, info; OpenCV core/imgproc only, no video, no ONNX export), the
#           gpu tests (*_cuda_test), the CUDA benchmarks
#   configs/  the shipped model and hyp YAMLs (yolov9 finds them at bin/../configs, the tests too)
# OUT_DIR/y9-gpu-kit-data.tar.xz (same top folder, unpacked over the kit):
#   reference/, coco128/  the official fixtures and 24 coco128 images the gpu tests compare with
#   lib/    the Debian libraries they need (oneDNN, OpenBLAS, libgomp, yaml-cpp, libjpeg, libpng, OpenCV
#           core/imgproc, OpenMPI's libmpi...),
#           found through the binaries' DT_RPATH $ORIGIN/../lib; no CUDA library (libcudart, libcublas*,
#           libcudnn*, libnccl, libcuda: the device's driver and wheels provide them)
#   run.sh  (tests/gpu/kit_run.sh) the device run, or `run.sh --self-check` on any machine
#   MANIFEST  the files, their sizes and the `ldd` of each binary as built here
# Usage: tests/gpu/kit.sh OUT_DIR     Env: KIT_BUILD (build folder, default build-kit), JOBS (default 2),
#        KIT_CUDA_ARCHS (default "90": sm_90 SASS plus compute_90 PTX, for the lent H200; "80-real;90"
#        adds A100 SASS),
#        KIT_MAX_MIB (size limit of the tarball, default 48).
set -euo pipefail
command -v patchelf > /dev/null || { echo "kit.sh: needs patchelf (apt-get install patchelf)"; exit 1; }
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:?usage: tests/gpu/kit.sh OUT_DIR}"
BUILD="${KIT_BUILD:-$ROOT/build-kit}"
JOBS="${JOBS:-2}"
ARCHS="${KIT_CUDA_ARCHS:-90}"
MAX_MIB="${KIT_MAX_MIB:-48}"
mkdir -p "$OUT" "$BUILD"
OUT="$(cd "$OUT" && pwd)"

echo "== configure $BUILD (Y9_KIT=ON, CUDA archs $ARCHS)"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DY9_KIT=ON \
      -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" > "$BUILD/kit_configure.log" 2>&1 \
  || { tail -30 "$BUILD/kit_configure.log"; echo "kit.sh: configure FAILED"; exit 1; }
echo "== build (ninja kit, -j$JOBS)"
ninja -C "$BUILD" -j"$JOBS" kit > "$BUILD/kit_build.log" 2>&1 \
  || { grep -E "error|FAILED" "$BUILD/kit_build.log" | head -40; echo "kit.sh: build FAILED"; exit 1; }

STAGE_PARENT=$(mktemp -d)
trap 'rm -rf "$STAGE_PARENT"' EXIT
STAGE="$STAGE_PARENT/y9-gpu-kit"
mkdir -p "$STAGE/bin" "$STAGE/lib"

# The binaries: yolov9, every gpu test and benchmark the kit build made (cmake/kit.cmake), stripped
# of host symbols (the CUDA fatbins, with their -lineinfo, stay).
cp "$BUILD/yolov9" "$STAGE/bin/"
for f in "$BUILD"/*_cuda_test "$BUILD"/*_bench; do
  [ -x "$f" ] && cp "$f" "$STAGE/bin/"
done
strip --strip-unneeded "$STAGE"/bin/*
# The CUPTI profiler library (CUDA_INJECTION64_PATH; its libcupti comes from the device).
[ -f "$BUILD/libyolov9_cupti_profile.so" ] && cp "$BUILD/libyolov9_cupti_profile.so" "$STAGE/lib/"

# The libraries: every dependency `ldd` resolves, but glibc's own and the CUDA ones.
SKIP_RE='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libresolv|libutil\.so)'
CUDA_RE='^(libcuda\.so|libcudart|libcublas|libcublasLt|libcudnn|libnccl|libnvrtc|libnvJitLink)'
for b in "$STAGE"/bin/*; do
  ldd "$b" | awk '/=>/ {print $1, $3}' | while read -r name path; do
    [[ "$name" =~ $SKIP_RE || "$name" =~ $CUDA_RE ]] && continue
    [ "$path" = "not" ] && { echo "kit.sh: $(basename "$b") needs $name, not found here"; exit 1; }
    [ -e "$STAGE/lib/$name" ] || cp -L "$path" "$STAGE/lib/$name"
  done
done
chmod 644 "$STAGE"/lib/*
# RPATHs: the binaries look in ../lib only (not in this machine's openblas/cuda/openmpi folders that
# the linker recorded), and every bundled library in its own folder: Debian's libmpi and
# libopen-rte carry RUNPATH=/usr/lib/x86_64-linux-gnu/openmpi/lib, which would otherwise load
# their dependencies from the system (or fail on the bare machine). DT_RPATH (--force-rpath), not
# DT_RUNPATH, so that it also applies to the dependencies' dependencies.
for b in "$STAGE"/bin/*; do patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$b"; done
for l in "$STAGE"/lib/*; do patchelf --force-rpath --set-rpath '$ORIGIN' "$l"; done

# Test data that the gpu tests read and the device machine lacks (../shared does not travel there):
# the official fixtures the CUDA fixture tests compare with (loss_*, model_*, step_*, nms*; run.sh
# sets YOLOV9_REFERENCE) and the first 24 coco128 images with their labels (augment_cuda_test needs 24,
# device_e2e_cuda_test's val/detect comparison; YOLOV9_COCO128). They go into a second tarball, y9-gpu-kit-data.tar.xz
# (about 25 MiB: random weights and gradients do not compress), with the same top folder, unpacked
# over the kit: the kit stays within its 48 MiB, both together within a device call's 64 MiB.
# Build artefacts only: nothing of them is committed.
DATA_PARENT="$STAGE_PARENT/data"
DATA="$DATA_PARENT/y9-gpu-kit"
mkdir -p "$DATA"
REF="${YOLOV9_REFERENCE:-$ROOT/../shared/reference}"
COCO="${YOLOV9_COCO128:-$ROOT/../shared/data/coco128}"
if [ -d "$REF" ]; then
  mkdir -p "$DATA/reference"
  cp "$REF"/loss_* "$REF"/model_* "$REF"/step_* "$REF"/nms* "$DATA/reference/"
else
  echo "kit.sh: WARNING: no fixtures at $REF: fixtures_cuda_test, optim_step_ref_cuda_test and nms_cuda_test will skip (a failure on the device)"
fi
if [ -d "$COCO/images/train2017" ]; then
  mkdir -p "$DATA/coco128/images/train2017" "$DATA/coco128/labels/train2017"
  cp "$COCO/coco128.yaml" "$DATA/coco128/"
  for im in $(ls "$COCO/images/train2017" | sort | head -24); do
    cp "$COCO/images/train2017/$im" "$DATA/coco128/images/train2017/"
    lab="$COCO/labels/train2017/${im%.*}.txt"
    [ -f "$lab" ] && cp "$lab" "$DATA/coco128/labels/train2017/"
  done
else
  echo "kit.sh: WARNING: no coco128 at $COCO: device_e2e_cuda_test's coco128 case will skip (a failure on the device)"
fi
# The official step beside ours (docs/gpu_kit.md): when YOLOV9_OFFICIAL names an export of the
# official repository, its models/, utils/ and data/hyps/ (about 1 MB, a build artefact like the
# rest: never committed) and bench/official/train_step_cuda.py go into the data tarball; run.sh
# times the official AMP step on the device's PyTorch next to `yolov9 train --benchmark`.
if [ -n "${YOLOV9_OFFICIAL:-}" ] && [ -d "$YOLOV9_OFFICIAL/models" ] && [ -d "$YOLOV9_OFFICIAL/utils" ]; then
  mkdir -p "$DATA/official/data"
  cp -r "$YOLOV9_OFFICIAL/models" "$YOLOV9_OFFICIAL/utils" "$DATA/official/"
  cp -r "$YOLOV9_OFFICIAL/data/hyps" "$DATA/official/data/"
  find "$DATA/official" -name __pycache__ -prune -exec rm -rf {} +
  cp "$ROOT/bench/official/train_step_cuda.py" "$DATA/official/"
else
  echo "kit.sh: note: YOLOV9_OFFICIAL unset (or not an export of the official repository): no official step in the kit"
fi

cp -r "$ROOT/configs" "$STAGE/configs"
install -m 755 "$ROOT/tests/gpu/kit_run.sh" "$STAGE/run.sh"
cp "$ROOT/docs/gpu_kit.md" "$STAGE/README.md"
echo "y9 gpu kit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo '+dirty'), built $(date -u +%Y-%m-%dT%H:%MZ), CUDA archs $ARCHS" > "$STAGE/VERSION"
{
  cat "$STAGE/VERSION"
  echo; echo "== files"; (cd "$STAGE" && find . -type f -printf '%10s  %p\n' | sort -k2)
  for b in "$STAGE"/bin/*; do
    echo; echo "== ldd bin/$(basename "$b") (here, LD_LIBRARY_PATH unset)"
    env -u LD_LIBRARY_PATH ldd "$b" | sed 's/ (0x[0-9a-f]*)//'
  done
} > "$STAGE/MANIFEST"

echo "== pack"
# One xz stream with a large dictionary: the binaries share most of their bytes (the kernels' fatbins).
tar -C "$STAGE_PARENT" --owner=0 --group=0 --numeric-owner -cf - y9-gpu-kit \
  | xz --lzma2=preset=9,dict=256MiB -T1 > "$OUT/y9-gpu-kit.tar.xz.tmp"
mv "$OUT/y9-gpu-kit.tar.xz.tmp" "$OUT/y9-gpu-kit.tar.xz"
bytes=$(stat -c %s "$OUT/y9-gpu-kit.tar.xz")
unpacked=$(du -sb "$STAGE" | cut -f1)
echo "kit: $OUT/y9-gpu-kit.tar.xz  $bytes bytes ($((bytes / 1048576)) MiB; unpacked $((unpacked / 1048576)) MiB)"
# The test data, its own tarball (same top folder: unpack it over the kit).
tar -C "$DATA_PARENT" --owner=0 --group=0 --numeric-owner -cf - y9-gpu-kit \
  | xz -9 -T1 > "$OUT/y9-gpu-kit-data.tar.xz.tmp"
mv "$OUT/y9-gpu-kit-data.tar.xz.tmp" "$OUT/y9-gpu-kit-data.tar.xz"
dbytes=$(stat -c %s "$OUT/y9-gpu-kit-data.tar.xz")
echo "kit data: $OUT/y9-gpu-kit-data.tar.xz  $dbytes bytes ($((dbytes / 1048576)) MiB); both: $(((bytes + dbytes) / 1048576)) MiB"
if [ "$bytes" -gt $((MAX_MIB * 1048576)) ]; then
  echo "kit.sh: FAILED: the kit is larger than ${MAX_MIB} MiB"
  exit 1
fi
if [ $((bytes + dbytes)) -gt $((63 * 1048576)) ]; then
  echo "kit.sh: FAILED: the kit and its data are larger than 63 MiB together (a device call carries 64 MiB)"
  exit 1
fi
