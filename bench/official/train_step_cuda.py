"""Times the official training step on a CUDA device, as train_dual.py runs it with AMP: forward and
ComputeLoss (utils/loss_tal_dual.py) under torch.cuda.amp.autocast, GradScaler backward, and every
`accumulate` = max(round(64 / batch), 1) steps unscale, gradient clipping (max_norm 10), the SGD step
(smart_optimizer, hyp.scratch-high), scaler update and EMA update. One batch is repeated, as
`yolov9 train --benchmark N --benchmark-data synthetic` repeats its first batch; its pixels are random
and its targets are read from the first `batch` YOLO label files of --labels (e.g. a `yolov9 synth`
set's labels/train), so no image library is needed. The GPU kit (tests/gpu/kit.sh, docs/gpu_kit.md)
runs it next to `yolov9 train --benchmark` on the lent device, where Python has torch but maybe not
the official requirements: a module the official code imports but the step never calls (cv2, pandas,
matplotlib, PIL, ...) is replaced by an inert stand-in when it cannot be imported (--stub-missing).

Modes: `official` (train_dual.py's init_seeds(deterministic=True): torch.use_deterministic_algorithms,
cudnn.deterministic, cudnn.benchmark off) and `fast` (cudnn.benchmark on, nothing deterministic: the
best the official code gets from PyTorch without changes).

usage: train_step_cuda.py --labels DIR [--cfg yolov9-s.yaml] [--img 640] [--batch 64] [--steps 10]
       [--warmup 3] [--mode official|fast] [--no-amp] [--stub-missing]
prints {"img_per_s":..., "ms_per_step":..., "peak_gb":..., ...} on its last line (peak_gb:
torch.cuda.max_memory_allocated)
"""
import argparse
import importlib
import json
import os
import sys
import time
import types

p = argparse.ArgumentParser()
p.add_argument("--labels", required=True)
p.add_argument("--cfg", default="yolov9-s.yaml")
p.add_argument("--img", type=int, default=640)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--mode", choices=["official", "fast"], default="official")
p.add_argument("--no-amp", action="store_true")
p.add_argument("--device", default="cuda:0")
p.add_argument("--stub-missing", action="store_true")
p.add_argument("--force-stub", default="", help="comma-separated modules stubbed even when importable (tests)")
a = p.parse_args()


class _Inert:
    """Stands for any attribute, call, class or value of a missing module."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Inert()

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Inert()

    def __iter__(self):
        return iter(())

    def __getitem__(self, key):
        return _Inert()

    def __bool__(self):
        return False

    def __mro_entries__(self, bases):
        return (_Inert,)


class _InertModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Inert()


class _StubFinder:
    """Meta path finder: a top-level module in `names` (or under one) that cannot be imported is inert."""

    def __init__(self, names, forced):
        self.names, self.forced = names, forced

    def find_spec(self, fullname, path, target=None):
        top = fullname.split(".")[0]
        if top not in self.names:
            return None
        if top not in self.forced:
            sys.meta_path.remove(self)
            try:
                spec = importlib.util.find_spec(fullname)
            except (ImportError, ValueError):
                spec = None
            finally:
                sys.meta_path.insert(0, self)
            if spec is not None:
                return None
        STUBBED.add(top)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        m = _InertModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        if module.__name__ == "pkg_resources":  # check_version compares versions at import time
            module.parse_version = _parse_version


def _parse_version(v):
    out = []
    for part in str(v).split("+")[0].split("."):
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


STUBBED = set()
import importlib.machinery  # noqa: E402
import importlib.util  # noqa: E402

if a.stub_missing:
    names = {"cv2", "pandas", "matplotlib", "seaborn", "PIL", "scipy", "tqdm", "psutil", "requests", "IPython",
             "git", "thop", "torchvision", "pkg_resources", "albumentations", "pycocotools"}
    sys.meta_path.insert(0, _StubFinder(names, set(filter(None, a.force_stub.split(",")))))

root = os.environ["YOLOV9_OFFICIAL"]
sys.path.insert(0, root)
import torch  # noqa: E402
import yaml  # noqa: E402

if a.mode == "official":
    # train_dual.py: init_seeds(opt.seed + 1 + RANK, deterministic=True)
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
else:
    torch.backends.cudnn.benchmark = True
torch.manual_seed(1)

from models.yolo import Model  # noqa: E402
from utils.loss_tal_dual import ComputeLoss  # noqa: E402
from utils.torch_utils import ModelEMA, smart_optimizer  # noqa: E402

dev = torch.device(a.device)
amp = not a.no_amp and dev.type == "cuda"
with open(os.path.join(root, "data", "hyps", "hyp.scratch-high.yaml")) as f:
    hyp = yaml.safe_load(f)
nc = 80
model = Model(os.path.join(root, "models", "detect", a.cfg), ch=3, nc=nc).to(dev)
nbs = 64
accumulate = max(round(nbs / a.batch), 1)
hyp["weight_decay"] *= a.batch * accumulate / nbs
hyp["label_smoothing"] = 0.0
model.nc, model.hyp = nc, hyp
optimizer = smart_optimizer(model, "SGD", hyp["lr0"], hyp["momentum"], hyp["weight_decay"])
ema = ModelEMA(model)
scaler = torch.cuda.amp.GradScaler(enabled=amp)
compute_loss = ComputeLoss(model)

# The batch: random pixels, the labels of the first `batch` files (targets: image index, class, xywh).
files = sorted(f for f in os.listdir(a.labels) if f.endswith(".txt"))[: a.batch]
rows = []
for i, name in enumerate(files):
    with open(os.path.join(a.labels, name)) as f:
        for line in f:
            v = line.split()
            if len(v) == 5:
                rows.append([float(i)] + [float(x) for x in v])
targets = torch.tensor(rows, dtype=torch.float32).reshape(-1, 6)
g = torch.Generator().manual_seed(0)
imgs = torch.randint(0, 256, (a.batch, 3, a.img, a.img), generator=g, dtype=torch.uint8).to(dev)

model.train()
last_opt_step = -1
t0 = None
sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
for ni in range(a.warmup + a.steps):
    if ni == a.warmup:
        sync()
        t0 = time.perf_counter()
    x = imgs.float() / 255
    with torch.cuda.amp.autocast(amp):
        pred = model(x)
        loss, loss_items = compute_loss(pred, targets.to(dev))
    scaler.scale(loss).backward()
    if ni - last_opt_step >= accumulate:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        ema.update(model)
        last_opt_step = ni
sync()
dt = (time.perf_counter() - t0) / a.steps
peak = torch.cuda.max_memory_allocated(dev) / 1e9 if dev.type == "cuda" else 0.0
print(json.dumps({"img_per_s": round(a.batch / dt, 2), "ms_per_step": round(dt * 1e3, 2), "peak_gb": round(peak, 3),
                  "mode": a.mode, "amp": amp, "batch": a.batch, "img": a.img, "targets": int(targets.shape[0]),
                  "loss": [round(float(v), 5) for v in loss_items.flatten()], "torch": torch.__version__,
                  "stubbed": sorted(STUBBED)}))
