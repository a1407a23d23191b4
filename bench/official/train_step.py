"""Times the official training step on the CPU, FP32, as train_dual.py runs it: forward, ComputeLoss
(utils/loss_tal_dual.py), backward, and every `accumulate` = max(round(64 / batch), 1) steps the
gradient clipping, SGD step (smart_optimizer, hyp.scratch-high) and EMA update. One batch of a
coco128-layout folder (the official dataloader with its training augmentation, workers 0) is
repeated, as `yolov9 train --benchmark N --benchmark-data synthetic` repeats its first batch.
Steps are counted from 0 like the official ni: WARMUP untimed steps, then STEPS timed ones.
The dataset is reached through a temporary folder of symlinks (label cache there; removed after).

usage: train_step.py COCO128_DIR --cfg yolov9-s.yaml --img 640 --batch 8 [--steps 5] [--warmup 3]
       [--threads N]
prints {"ms_per_step":..., "ms_per_image":..., "peak_rss_gb":...} (peak_rss_gb: the process's
ru_maxrss, the same measure as VmHWM)
"""
import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time

p = argparse.ArgumentParser()
p.add_argument("coco128")
p.add_argument("--cfg", default="yolov9-s.yaml")
p.add_argument("--img", type=int, default=640)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--steps", type=int, default=5)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--threads", type=int, default=os.cpu_count())
a = p.parse_args()
root = os.environ["YOLOV9_OFFICIAL"]
sys.path.insert(0, root)
import torch  # noqa: E402
import yaml  # noqa: E402
from models.yolo import Model  # noqa: E402
from utils.dataloaders import create_dataloader  # noqa: E402
from utils.loss_tal_dual import ComputeLoss  # noqa: E402
from utils.torch_utils import ModelEMA, smart_optimizer  # noqa: E402

torch.set_num_threads(a.threads)
tmp = tempfile.mkdtemp(prefix="y9_official_step_")
try:
    for sub in ("images", "labels"):
        os.makedirs(os.path.join(tmp, sub))
        os.symlink(os.path.join(os.path.abspath(a.coco128), sub, "train2017"), os.path.join(tmp, sub, "train2017"))
    with open(os.path.join(root, "data", "hyps", "hyp.scratch-high.yaml")) as f:
        hyp = yaml.safe_load(f)
    nc = 80
    model = Model(os.path.join(root, "models", "detect", a.cfg), ch=3, nc=nc)
    gs = max(int(model.stride.max()), 32)
    nbs = 64
    accumulate = max(round(nbs / a.batch), 1)
    hyp["weight_decay"] *= a.batch * accumulate / nbs
    hyp["label_smoothing"] = 0.0
    model.nc, model.hyp = nc, hyp
    optimizer = smart_optimizer(model, "SGD", hyp["lr0"], hyp["momentum"], hyp["weight_decay"])
    ema = ModelEMA(model)
    loader, _ = create_dataloader(os.path.join(tmp, "images", "train2017"), a.img, a.batch, gs, hyp=hyp,
                                  augment=True, workers=0, shuffle=True)
    imgs, targets, _, _ = next(iter(loader))
    compute_loss = ComputeLoss(model)
    model.train()
    last_opt_step = -1
    t0 = None
    for ni in range(a.warmup + a.steps):
        if ni == a.warmup:
            t0 = time.perf_counter()
        x = imgs.float() / 255
        pred = model(x)
        loss, _ = compute_loss(pred, targets)
        loss.backward()
        if ni - last_opt_step >= accumulate:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
            optimizer.step()
            optimizer.zero_grad()
            ema.update(model)
            last_opt_step = ni
    dt = (time.perf_counter() - t0) / a.steps
finally:
    shutil.rmtree(tmp, ignore_errors=True)
rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
print(json.dumps({"cfg": a.cfg, "img": a.img, "batch": a.batch, "steps": a.steps, "threads": a.threads,
                  "ms_per_step": dt * 1e3, "ms_per_image": dt * 1e3 / a.batch, "peak_rss_gb": rss_gb}))
