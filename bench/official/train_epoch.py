"""Times the official train_dual.py for E epochs on a coco128-layout folder, CPU, from scratch
(--weights ''). The dataset is reached through a temporary folder of symlinks (label cache and
runs are written there, never into the dataset).

usage: train_epoch.py COCO128_DIR --cfg yolov9-t.yaml --img 320 --batch 16 [--epochs 1] [--workers 2]
prints {"epochs":..., "seconds":..., "seconds_per_epoch":...}
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

p = argparse.ArgumentParser()
p.add_argument("coco128")
p.add_argument("--cfg", default="yolov9-t.yaml")
p.add_argument("--img", type=int, default=320)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--epochs", type=int, default=1)
p.add_argument("--workers", type=int, default=2)
a = p.parse_args()
root = os.environ["YOLOV9_OFFICIAL"]
tmp = tempfile.mkdtemp(prefix="y9_official_train_")
for sub in ("images", "labels"):
    os.makedirs(os.path.join(tmp, sub))
    os.symlink(os.path.join(os.path.abspath(a.coco128), sub, "train2017"), os.path.join(tmp, sub, "train2017"))
import yaml  # noqa: E402

with open(os.path.join(a.coco128, "coco128.yaml")) as f:
    data = yaml.safe_load(f)
data.update({"path": tmp, "train": "images/train2017", "val": "images/train2017"})
with open(os.path.join(tmp, "data.yaml"), "w") as f:
    yaml.safe_dump(data, f)
cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_official.py"), "train_dual.py", "--cfg", os.path.join(root, "models", "detect", a.cfg),
       "--data", os.path.join(tmp, "data.yaml"), "--img", str(a.img), "--batch-size", str(a.batch), "--epochs",
       str(a.epochs), "--weights", "", "--device", "cpu", "--workers", str(a.workers), "--project",
       os.path.join(tmp, "runs"), "--name", "exp", "--noplots"]
t = time.perf_counter()
r = subprocess.run(cmd, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
dt = time.perf_counter() - t
if r.returncode != 0:
    sys.stderr.write(r.stderr[-4000:])
    sys.exit(r.returncode)
print(json.dumps({"epochs": a.epochs, "seconds": dt, "seconds_per_epoch": dt / a.epochs}))
