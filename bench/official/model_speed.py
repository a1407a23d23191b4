"""Times the official model: eval forward and train forward+backward per image, CPU, FP32.

usage: model_speed.py CFG_NAME IMG [--threads N] [--iters K]
prints {"cfg":..., "img":..., "forward_ms":..., "forward_backward_ms":...}
"""
import argparse
import json
import os
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("cfg")
p.add_argument("img", type=int)
p.add_argument("--threads", type=int, default=os.cpu_count())
p.add_argument("--iters", type=int, default=3)
a = p.parse_args()
root = os.environ["YOLOV9_OFFICIAL"]
sys.path.insert(0, root)
import torch  # noqa: E402
from models.yolo import Model  # noqa: E402

torch.set_num_threads(a.threads)
m = Model(os.path.join(root, "models", "detect", a.cfg), ch=3, nc=80)
x = torch.rand(1, 3, a.img, a.img)


def timed(fn):
    fn()  # warm-up
    t = time.perf_counter()
    for _ in range(a.iters):
        fn()
    return (time.perf_counter() - t) / a.iters * 1000.0


m.eval()
with torch.no_grad():
    fwd = timed(lambda: m(x))
m.train()


def fb():
    m.zero_grad(set_to_none=True)
    out = m(x)
    s = 0
    for branch in out:
        for t in (branch if isinstance(branch, (list, tuple)) else [branch]):
            s = s + t.float().sum()
    s.backward()


fwdbwd = timed(fb)
print(json.dumps({"cfg": a.cfg, "img": a.img, "threads": a.threads, "forward_ms": fwd, "forward_backward_ms": fwdbwd}))
