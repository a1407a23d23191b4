"""Makes converted official checkpoints for the inference latency benchmark (bench/latency_bench.cpp)
with the official code (YOLOV9_OFFICIAL), as its tools/reparameterization.ipynb writes them:

  yolov9-s-converted.pt   yolov9-s (seeded random init) whose main branch is copied into gelan-s:
                          the layers before the head by index, and the main-branch half of
                          yolov9-s's DualDDetect (cv4, cv5, dfl2) into gelan-s's DDetect (cv2, cv3,
                          dfl)
  gelan-s-converted.pt    gelan-s (seeded random init)

each saved as {'model': model.half(), 'optimizer': None, 'best_fitness': None, 'ema': None,
'updates': None, 'opt': None, 'git': None, 'date': None, 'epoch': -1}. Latency does not depend on
the weight values; the conversion is done anyway so that the file is what a user downloads.

usage: YOLOV9_OFFICIAL=... /usr/bin/python3 make_converted.py OUT_DIR
"""
import os
import sys

root = os.environ["YOLOV9_OFFICIAL"]
sys.path.insert(0, root)
import torch  # noqa: E402
from models.yolo import Model  # noqa: E402

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def save(model, name):
    ckpt = {'model': model.half(), 'optimizer': None, 'best_fitness': None, 'ema': None, 'updates': None,
            'opt': None, 'git': None, 'date': None, 'epoch': -1}
    tmp = os.path.join(out, name + ".tmp")
    torch.save(ckpt, tmp)
    os.replace(tmp, os.path.join(out, name))


torch.manual_seed(0)
cfg = lambda n: os.path.join(root, "models", "detect", n)  # noqa: E731
src = Model(cfg("yolov9-s.yaml"), ch=3, nc=80).eval()
dst = Model(cfg("gelan-s.yaml"), ch=3, nc=80).eval()
head = len(dst.model) - 1                      # gelan-s: DDetect index
aux_head = len(src.model) - 1                  # yolov9-s: DualDDetect index
s = src.state_dict()
d = dst.state_dict()
with torch.no_grad():
    for k in d:
        idx = int(k.split(".")[1])
        if idx < head:
            kr = k
        else:  # the main-branch half of DualDDetect: cv4/cv5/dfl2
            rest = k[len(f"model.{idx}."):]
            part = rest.split(".")[0]
            kr = f"model.{aux_head}." + {"cv2": "cv4", "cv3": "cv5", "dfl": "dfl2"}[part] + rest[len(part):]
        assert s[kr].shape == d[k].shape, (k, kr)
        d[k].copy_(s[kr])
dst.names = [f"class{i}" for i in range(80)]
save(dst, "yolov9-s-converted.pt")

torch.manual_seed(1)
g = Model(cfg("gelan-s.yaml"), ch=3, nc=80).eval()
g.names = [f"class{i}" for i in range(80)]
save(g, "gelan-s-converted.pt")
print("wrote", out)
