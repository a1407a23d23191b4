"""Times the official training loader (utils/dataloaders.py create_dataloader, mosaic on,
hyp.scratch-high.yaml) on a coco128-layout folder: images/s at IMG, batch BATCH, WORKERS workers.
The dataset is reached through a temporary folder of symlinks so the official label cache is
written there, never into the dataset.

usage: loader_speed.py COCO128_DIR --img 640 --batch 16 --workers 1 [--batches 16]
prints {"workers":..., "images_per_s":...}
"""
import argparse
import json
import os
import sys
import tempfile
import time

p = argparse.ArgumentParser()
p.add_argument("coco128")
p.add_argument("--img", type=int, default=640)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--workers", type=int, default=1)
p.add_argument("--batches", type=int, default=16)
a = p.parse_args()
root = os.environ["YOLOV9_OFFICIAL"]
sys.path.insert(0, root)
import yaml  # noqa: E402
from utils.dataloaders import create_dataloader  # noqa: E402

tmp = tempfile.mkdtemp(prefix="y9_official_loader_")
for sub in ("images", "labels"):
    os.makedirs(os.path.join(tmp, sub))
    os.symlink(os.path.join(os.path.abspath(a.coco128), sub, "train2017"), os.path.join(tmp, sub, "train2017"))
with open(os.path.join(root, "data", "hyps", "hyp.scratch-high.yaml")) as f:
    hyp = yaml.safe_load(f)
loader, _ = create_dataloader(os.path.join(tmp, "images", "train2017"), a.img, a.batch, 32, hyp=hyp, augment=True,
                              workers=a.workers, shuffle=True, prefix="")
it = iter(loader)
next(it)  # warm-up: workers started, first batch
n, t = 0, time.perf_counter()
for _ in range(a.batches):
    try:
        imgs = next(it)[0]
    except StopIteration:
        it = iter(loader)
        imgs = next(it)[0]
    n += imgs.shape[0]
dt = time.perf_counter() - t
print(json.dumps({"workers": a.workers, "images_per_s": n / dt}))
