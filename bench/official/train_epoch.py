"""Times the official train_dual.py for E epochs on a coco128-layout folder, CPU, from scratch
(--weights ''). The dataset is reached through a temporary folder of symlinks (label cache and
runs are written there, never into the dataset).

usage: train_epoch.py COCO128_DIR --cfg yolov9-t.yaml --img 320 --batch 16 [--epochs 1] [--workers 2]
       train_epoch.py --data DATA_YAML --script train.py --cfg gelan-t.yaml ...  (a dataset of its own,
       e.g. a `yolov9 synth` set the caller made and may write into; the single-branch GELAN models
       train with the official train.py, the dual-branch YOLOv9 ones with train_dual.py)
prints {"epochs":..., "seconds":..., "seconds_per_epoch":...}
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

p = argparse.ArgumentParser()
p.add_argument("coco128", nargs="?")
p.add_argument("--data", default="", help="a data YAML used as is (instead of COCO128_DIR)")
p.add_argument("--script", default="train_dual.py", help="official training script")
p.add_argument("--cfg", default="yolov9-t.yaml")
p.add_argument("--img", type=int, default=320)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--epochs", type=int, default=1)
p.add_argument("--workers", type=int, default=2)
a = p.parse_args()
if bool(a.coco128) == bool(a.data):
    p.error("give either COCO128_DIR or --data")
root = os.environ["YOLOV9_OFFICIAL"]
tmp = tempfile.mkdtemp(prefix="y9_official_train_")
import yaml  # noqa: E402

if a.data:
    # The official code resolves a relative `path` against its own folder: make it absolute
    # (relative to the YAML's folder, as `yolov9 train` reads it) in a copy.
    with open(a.data) as f:
        data = yaml.safe_load(f)
    base = os.path.dirname(os.path.abspath(a.data))
    data["path"] = os.path.normpath(os.path.join(base, str(data.get("path") or ".")))
else:
    for sub in ("images", "labels"):
        os.makedirs(os.path.join(tmp, sub))
        os.symlink(os.path.join(os.path.abspath(a.coco128), sub, "train2017"), os.path.join(tmp, sub, "train2017"))
    with open(os.path.join(a.coco128, "coco128.yaml")) as f:
        data = yaml.safe_load(f)
    data.update({"path": tmp, "train": "images/train2017", "val": "images/train2017"})
data_yaml = os.path.join(tmp, "data.yaml")
with open(data_yaml, "w") as f:
    yaml.safe_dump(data, f)
cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_official.py"), a.script, "--cfg", os.path.join(root, "models", "detect", a.cfg),
       "--data", data_yaml, "--hyp", os.path.join(root, "data", "hyps", "hyp.scratch-high.yaml"), "--img", str(a.img), "--batch-size", str(a.batch), "--epochs",
       str(a.epochs), "--weights", "", "--device", "cpu", "--workers", str(a.workers), "--project",
       os.path.join(tmp, "runs"), "--name", "exp", "--noplots"]
t = time.perf_counter()
r = subprocess.run(cmd, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
dt = time.perf_counter() - t
shutil.rmtree(tmp, ignore_errors=True)
if r.returncode != 0:
    sys.stderr.write(r.stderr[-4000:])
    sys.exit(r.returncode)
print(json.dumps({"epochs": a.epochs, "seconds": dt, "seconds_per_epoch": dt / a.epochs}))
