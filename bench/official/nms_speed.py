"""Times the official non_max_suppression (utils/general.py) and torchvision.ops.nms on the
same kind of input as bench/nms_bench.cpp: 30000 anchors, 80 classes, seeded uniform boxes.

usage: nms_speed.py [--anchors 30000] [--iters 5]
prints {"official_nms_ms":..., "official_nms_multilabel_ms":..., "torchvision_nms_30k_ms":...}
"""
import argparse
import json
import os
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--anchors", type=int, default=30000)
p.add_argument("--iters", type=int, default=5)
a = p.parse_args()
sys.path.insert(0, os.environ["YOLOV9_OFFICIAL"])
import torch  # noqa: E402
import torchvision  # noqa: E402
from utils.general import non_max_suppression  # noqa: E402

# Same distributions as bench/nms_bench.cpp (not the same numbers: different generators).
g = torch.Generator().manual_seed(7)
n = a.anchors
hot = 40 + 560 * torch.rand(64, 2, generator=g)
idx = torch.arange(n) % 64
xy = hot[idx] + 20 * (torch.rand(n, 2, generator=g) - 0.5)
wh = 20 + 100 * torch.rand(n, 2, generator=g)
cls = torch.rand(n, 80, generator=g)
pred = torch.cat([xy, wh, cls], 1).T.unsqueeze(0).contiguous()  # (1, 84, n)


def timed(fn):
    fn()
    t = time.perf_counter()
    for _ in range(a.iters):
        fn()
    return (time.perf_counter() - t) / a.iters * 1000.0


r = {
    "official_nms_ms": timed(lambda: non_max_suppression(pred, 0.001, 0.7, max_det=300)),
    "official_nms_multilabel_ms": timed(lambda: non_max_suppression(pred, 0.001, 0.7, multi_label=True, max_det=300)),
}
# Bare greedy NMS, as BM_GreedyNms30k/0: uniform boxes 10..70 px, IoU 0.45, no cap.
xy2 = 640 * torch.rand(n, 2, generator=g)
wh2 = 10 + 60 * torch.rand(n, 2, generator=g)
boxes = torch.cat([xy2, xy2 + wh2], 1)
scores = torch.rand(n, generator=g)
r["torchvision_nms_30k_ms"] = timed(lambda: torchvision.ops.nms(boxes, scores, 0.45))
print(json.dumps(r))
