"""Makes official PyTorch YOLOv9 checkpoints and the official outputs on them, for the .pt reader's
parity test (tests/io/torch_pt_ref_test.cpp, env Y9_PT_FIXTURES). Runs the official code itself
(nothing of it is copied here) with Debian's python3-torch:

    YOLOV9_OFFICIAL=/path/to/WongKinYiu/yolov9 /usr/bin/python3 scripts/make_pt_fixtures.py "$PWD/../pt-fixtures"
    Y9_PT_FIXTURES="$PWD/../pt-fixtures" ctest --test-dir build -R torch_pt_ref

With --tiny it writes the small set that the repository keeps and CI tests (tests/data/pt/official,
read by the same test when Y9_PT_FIXTURES is unset): the same three kinds of checkpoint from the
official code, but of YAMLs derived from yolov9-t and gelan-s with every channel count divided by
16, one RepNBottleneck per RepNCSP and nc 1 (the official parser's width_multiple cannot shrink
them: it scales neither CBLinear nor the inner RepNCSPELAN4 widths), on coco128 images
downscaled to 1/4 (160 x 120) with a hashed noise, detect/val at 160 px. Only what the test reads
is kept (3.1 MB; every file under 2 MiB), and no image: the test remakes them from ../shared's
coco128 (reference.json "tiny_images"; cv::resize INTER_AREA and the same noise):

    YOLOV9_OFFICIAL=/path/to/WongKinYiu/yolov9 /usr/bin/python3 scripts/make_pt_fixtures.py tests/data/pt/official --tiny

Writes, in the output folder (the full-size set: keep it OUTSIDE the repository):
  yolov9-t-stripped.pt   (a) yolov9-t as the official strip_optimizer leaves it: FP16 model, ema None
  last.pt                (b) a full last.pt of a real `train_dual.py --epochs 1` run (CPU, 64 px, 4
                             images, fine-tuned from (a)): model + EMA (FP16), optimizer state, opt
  resume-parity/         (d) official `--resume` of a last.pt, with and without its momentum (make_d;
  resume-parity-adamw/       the same with --optimizer AdamW;
                             tests/apps/pt_resume_e2e_test.cpp; not with --tiny).
                             Y9_PT_FIXTURES_ONLY=resume makes only this (from (a) and train-data/
                             of (b)).
  gelan-s-converted.pt   (c) gelan-s saved as the official reparameterization notebook saves
                             converted models ({'model': model.half(), 'ema': None, 'epoch': -1, ...})
  images/                3 coco128 images;  val/ a dataset of them whose labels are (a)'s own
                         detections, jittered (so mAP is far from 0); val/data.yaml
  reference.json         per checkpoint: the official NMS output per image (letterboxed-input
                         pixels, unrounded, as detect.py/detect_dual.py compute it before
                         scale_boxes), and the official val_dual.py / val.py run() metrics
                         (mp, mr, map50, map) on val/.

Random weights detect nothing (the class biases start at log(5/nc/(640/s)^2)), so (a) and (c) get
seeded perturbations of their BatchNorm statistics and class biases first; they are otherwise the
official models.
"""
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
from copy import deepcopy
from pathlib import Path

import numpy as np

ROOT = os.environ.get("YOLOV9_OFFICIAL")
if not ROOT or not os.path.isdir(ROOT):
    sys.exit("set YOLOV9_OFFICIAL to a checkout of WongKinYiu/yolov9")
TINY = "--tiny" in sys.argv[1:]
ARGS = [a for a in sys.argv[1:] if a != "--tiny"]
if len(ARGS) != 1:
    sys.exit("usage: make_pt_fixtures.py OUT_DIR [--tiny]")
OUT = Path(ARGS[0]).resolve()
COCO = Path(os.environ.get("YOLOV9_COCO128", Path(__file__).resolve().parents[1] / ".." / "shared/data/coco128")).resolve()
os.environ.setdefault("YOLOV5_CONFIG_DIR", tempfile.mkdtemp(prefix="y9_ptfix_cfg_"))
sys.path.insert(0, ROOT)

import torch  # noqa: E402
import yaml  # noqa: E402

import models.yolo as yolo  # noqa: E402
from models.common import DetectMultiBackend  # noqa: E402
from utils.dataloaders import LoadImages  # noqa: E402
from utils.general import LOGGER, non_max_suppression, strip_optimizer  # noqa: E402

import utils.general  # noqa: E402

utils.general.check_font = lambda *a, **k: None  # no font download (offline machines)
LOGGER.setLevel(40)
torch.set_num_threads(2)
# val at conf 0.25, not the default 0.001: the perturbed random weights put most (anchor, class)
# scores above 0.001, which makes NMS a 30000-box chain of near-ties (and trips the official NMS
# time limit); the metric code is the same.
VAL_CONF = 0.25
IMG = 160 if TINY else 640  # detect and val image size
# The share of (anchor, class) scores above 0.25 that perturb() aims at: the tiny models have 420
# anchors and 1 class per 160 px image, the full ones 6300 x 80 per 640 px image.
SCORE_RATE = 1 / 10 if TINY else 1 / 3000
SOURCE_IMAGES = ["000000000009.jpg", "000000000064.jpg", "000000000089.jpg"]  # 640x480, 480x640: no padding
# The fixture images are these plus seeded noise in [-4, 4], saved as PNG: random weights turn
# uniform regions (letterbox gray, sky, over-exposure) into exactly tied scores at several
# positions, and the order of tied boxes (an unstable sort) then decides NMS.
IMAGES = [Path(n).stem + ".png" for n in SOURCE_IMAGES]
if TINY:  # the repository keeps no image: the test remakes these from ../shared's coco128
    IMAGES = [f"img{i}.png" for i in range(len(SOURCE_IMAGES))]
    TINY_DIV = 16  # every channel count of the official YAMLs divided by this (min 4)


def tiny_noise(shape):
    """The --tiny images' noise in [-4, 4]: a hash of (row, column, channel) that
    tests/io/torch_pt_ref_test.cpp computes the same way (uint32 arithmetic)."""
    y, x, c = np.indices(shape, dtype=np.uint64)
    m = np.uint64(0xFFFFFFFF)
    v = (y * np.uint64(2654435761) + x * np.uint64(40503) + c * np.uint64(97) + np.uint64(12345)) & m
    v ^= v >> np.uint64(13)
    v = (v * np.uint64(1274126177)) & m
    v ^= v >> np.uint64(16)
    return (v % np.uint64(9)).astype(np.int16) - 4
NAMES = yaml.safe_load(open(COCO / "coco128.yaml"))["names"]
NAMES = [NAMES[i] for i in range(len(NAMES))] if isinstance(NAMES, dict) else NAMES
NC = 1 if TINY else 80
NAMES = NAMES[:NC]
# The channel arguments of the modules of the official YAMLs (--tiny divides them by 8).
CHANNEL_ARGS = {"Conv": [0], "AConv": [0], "ADown": [0], "RepNCSPELAN4": [0, 1, 2], "ELAN1": [0, 1, 2], "SPPELAN": [0, 1]}


def model_cfg(name):
    """The official models/detect/<name>.yaml, or with --tiny its shrunk version (a dict)."""
    path = Path(ROOT) / "models/detect" / (name + ".yaml")
    if not TINY:
        return str(path)
    d = yaml.safe_load(path.read_text())
    d["nc"] = NC
    for _, _, m, args in d["backbone"] + d["head"]:
        for i in CHANNEL_ARGS.get(m, []):
            args[i] = max(args[i] // TINY_DIV, 4)
        if m == "CBLinear":
            args[0] = [max(c // TINY_DIV, 4) for c in args[0]]
        if m == "RepNCSPELAN4":  # one RepNBottleneck per RepNCSP: fewer tensors (each is a zip entry)
            args[3] = 1
    return d


def cls_convs(model):
    """The last conv of every class branch of the head (cv3 of DDetect, cv3 and cv5 of DualDDetect)."""
    for m in model.modules():
        if type(m).__name__ in ("DDetect", "DualDDetect"):
            for seqs in [getattr(m, "cv3", []), getattr(m, "cv5", [])]:
                for s in seqs:
                    yield s[-1]


def perturb(model, seed, dual):
    """Seeded BatchNorm affine parameters, statistics recalibrated on the images, and class biases
    shifted so that about SCORE_RATE of the (anchor, class) scores of the 3 images exceed 0.25: a model
    that detects something, like a trained one."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.copy_(1 + torch.randn(m.weight.shape, generator=g) * 0.1)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
        # BatchNorm statistics recalibrated on the images (cumulative average, train mode): with
        # the init weights' statistics the activations fade layer by layer and the output does not
        # depend on the input at all.
        bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
        for m in bns:
            m.reset_running_stats()
            m.momentum = None
        model.train()
        for _, im in letterboxed(32):
            model(torch.from_numpy(im).float()[None] / 255)
        for m in bns:  # a variance floor: tiny-variance channels would amplify rounding (FP32 vs FP64
            m.running_var.clamp_(min=m.running_var.mean().item())  # boxes 1 px apart without it)
            m.momentum = 0.03
        for c in cls_convs(model):
            c.bias.copy_(torch.randn(c.bias.shape, generator=g) * 0.5)
        model.eval()

        def class_logits():
            logits = []
            for _, im in letterboxed(32):
                pred = model(torch.from_numpy(im).float()[None] / 255)
                pred = pred[0][1] if dual else pred[0]
                p = pred[0, 4:].double().clamp(1e-12, 1 - 1e-12)
                logits.append((p / (1 - p)).log().flatten())
            return torch.cat(logits)

        logits = class_logits()
        if TINY:  # the shrunk models' class logits hardly depend on the image: spread them to a
            # standard deviation of 2, with none over 10 from the median (more saturates scores at
            # 1.0 after the shift below: ties, whose order decides NMS)
            k = min(2.0 / max(logits.std().item(), 1e-6), 10.0 / max((logits - logits.median()).abs().max().item(), 1e-6))
            for c in cls_convs(model):
                c.weight.mul_(k)
                c.bias.mul_(k)
            logits = class_logits()
        shift = math.log(0.25 / 0.75) - torch.quantile(logits[::7].float(), 1 - SCORE_RATE).item()
        for c in cls_convs(model):
            c.bias.add_(shift)
        print(f"perturb: class bias shift {shift:.3f}, logit std {logits.std().item():.3f}")


def save_like_train(model, path):
    """The dict train_dual.py saves (model and EMA FP16), then the official strip_optimizer."""
    ckpt = {"epoch": 0, "best_fitness": None, "model": deepcopy(model).half(), "ema": deepcopy(model).half(),
            "updates": 1, "optimizer": None, "opt": {}, "git": None, "date": "2024-06-01T00:00:00"}
    torch.save(ckpt, path)
    strip_optimizer(path)


def make_a():
    torch.manual_seed(1)
    m = yolo.Model(model_cfg("yolov9-t"), ch=3, nc=NC)
    m.nc, m.names = NC, NAMES  # as train_dual.py sets them
    perturb(m, 11, dual=True)
    save_like_train(m.eval(), OUT / "yolov9-t-stripped.pt")


def make_c():
    torch.manual_seed(3)
    m = yolo.Model(model_cfg("gelan-s"), ch=3, nc=NC)
    m.nc, m.names = NC, NAMES
    perturb(m, 33, dual=False)
    # tools/reparameterization.ipynb: the converted checkpoint
    ckpt = {"model": deepcopy(m.eval()).half(), "optimizer": None, "best_fitness": None, "ema": None, "updates": None,
            "opt": None, "git": None, "date": None, "epoch": -1}
    torch.save(ckpt, OUT / "gelan-s-converted.pt")


def make_b():
    data = OUT / "train-data"
    shutil.rmtree(data, ignore_errors=True)
    (data / "images").mkdir(parents=True)
    (data / "labels").mkdir(parents=True)
    for name in ["000000000009.jpg", "000000000025.jpg", "000000000030.jpg", "000000000034.jpg"]:
        shutil.copy(COCO / "images/train2017" / name, data / "images")
        lab = COCO / "labels/train2017" / (Path(name).stem + ".txt")
        if lab.exists():
            lines = lab.read_text().splitlines()
            if TINY:  # one class: every object is class 0
                lines = ["0 " + ln.split(None, 1)[1] for ln in lines if ln.strip()]
            (data / "labels" / lab.name).write_text("\n".join(lines) + "\n")
    (data / "data.yaml").write_text(yaml.safe_dump({"path": str(data), "train": "images", "val": "images",
                                                    "nc": NC, "names": NAMES}))
    runs = OUT / "train-runs"
    shutil.rmtree(runs, ignore_errors=True)
    # The official run, with strip_optimizer disabled so that last.pt keeps its optimizer and EMA
    # (the state of a checkpoint written during training).
    # Debian has no tensorboard package: the loggers get an inert SummaryWriter; no font download.
    code = ("import sys, types; tb = types.ModuleType('torch.utils.tensorboard'); "
            "tb.SummaryWriter = type('SummaryWriter', (), {'__init__': lambda s, *a, **k: None, "
            "'__getattr__': lambda s, n: (lambda *a, **k: None)}); sys.modules['torch.utils.tensorboard'] = tb; "
            "import utils.general as g; g.strip_optimizer = lambda *a, **k: None; g.check_font = lambda *a, **k: None; "
            "import train_dual; opt = train_dual.parse_opt(); train_dual.main(opt)")
    cfg = model_cfg("yolov9-t")
    if TINY:  # train_dual.py takes a file
        (runs / "yolov9-t-tiny.yaml").parent.mkdir(parents=True, exist_ok=True)
        (runs / "yolov9-t-tiny.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        cfg = str(runs / "yolov9-t-tiny.yaml")
    args = [sys.executable, "-c", code, "--weights", str(OUT / "yolov9-t-stripped.pt"), "--cfg",
            cfg, "--data", str(data / "data.yaml"), "--hyp",
            "data/hyps/hyp.scratch-high.yaml", "--epochs", "1", "--batch-size", "2", "--img", "64", "--device",
            "cpu", "--workers", "0", "--project", str(runs), "--name", "exp", "--exist-ok", "--noplots"]
    env = dict(os.environ, PYTHONPATH=ROOT)
    subprocess.run(args, cwd=ROOT, env=env, check=True)
    shutil.copy(runs / "exp/weights/last.pt", OUT / "last.pt")


def official_train(args, capture=None):
    """train_dual.py main() in a subprocess from the official checkout, with strip_optimizer
    disabled (last.pt keeps its optimizer and EMA) and an inert TensorBoard. capture: a file that
    gets the FP32 state_dict of the training model each time a checkpoint is made (the last one:
    the weights after the final epoch, before the FP16 rounding of the checkpoint)."""
    code = ("import sys, types; tb = types.ModuleType('torch.utils.tensorboard'); "
            "tb.SummaryWriter = type('SummaryWriter', (), {'__init__': lambda s, *a, **k: None, "
            "'__getattr__': lambda s, n: (lambda *a, **k: None)}); sys.modules['torch.utils.tensorboard'] = tb; "
            "import utils.general as g; g.strip_optimizer = lambda *a, **k: None; g.check_font = lambda *a, **k: None; "
            "import train_dual; ")
    if capture:
        code += ("import torch; _dp = train_dual.de_parallel; "
                 "_sd = lambda m: {k: (v.detach().float().clone() if v.is_floating_point() else v) "
                 "for k, v in m.state_dict().items()}; "
                 f"train_dual.de_parallel = lambda m: (torch.save(_sd(_dp(m)), {str(capture)!r}), _dp(m))[1]; ")
    code += "opt = train_dual.parse_opt(); train_dual.main(opt)"
    env = dict(os.environ, PYTHONPATH=ROOT)
    subprocess.run([sys.executable, "-c", code] + [str(a) for a in args], cwd=ROOT, env=env, check=True)


def make_d(optimizer="SGD", folder="resume-parity"):
    """<folder>/ (tests/apps/pt_resume_e2e_test.cpp; resume-parity with SGD, resume-parity-adamw
    with --optimizer AdamW): start/ is a train_dual.py run of epoch 0
    of 2 (run with --epochs 1, then opt.yaml set to 2 epochs: the schedule factor of epoch 0 is 1
    for any epoch count, so it is that run stopped after epoch 0) without augmentation (hyp.noaug.yaml:
    mosaic, flips, HSV, affine, mixup, copy-paste 0) and one batch of all 4 images (so the shuffle
    order does not matter). official/ is the official `--resume` of its last.pt (epoch 1: one SGD
    step in warm-up), after_fp32.pt the trained weights in FP32; fresh/ the same resume with the
    optimizer state emptied (fresh momentum buffers), after_fp32.pt likewise."""
    base = OUT / folder
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    hyp = yaml.safe_load(open(Path(ROOT) / "data/hyps/hyp.scratch-high.yaml"))
    for k in ("hsv_h", "hsv_s", "hsv_v", "degrees", "translate", "scale", "shear", "perspective", "flipud", "fliplr",
              "mosaic", "mixup", "copy_paste"):
        hyp[k] = 0.0
    (base / "hyp.noaug.yaml").write_text(yaml.safe_dump(hyp, sort_keys=False))
    official_train(["--weights", OUT / "yolov9-t-stripped.pt", "--cfg", "models/detect/yolov9-t.yaml", "--data",
                    OUT / "train-data/data.yaml", "--hyp", base / "hyp.noaug.yaml", "--epochs", "1", "--batch-size",
                    "4", "--img", "64", "--device", "cpu", "--workers", "0", "--project", base, "--name", "start",
                    "--exist-ok", "--noplots", "--optimizer", optimizer])
    (base / "start/weights/best.pt").unlink(missing_ok=True)

    def set_opt(run, **kv):
        o = yaml.safe_load(open(run / "opt.yaml"))
        o.update(kv)
        (run / "opt.yaml").write_text(yaml.safe_dump(o, sort_keys=False))

    set_opt(base / "start", epochs=2)
    for name in ("official", "fresh"):
        run = base / name
        shutil.copytree(base / "start", run)
        set_opt(run, save_dir=str(run))
        if name == "fresh":
            ck = torch.load(run / "weights/last.pt", map_location="cpu")
            ck["optimizer"]["state"] = {}
            torch.save(ck, run / "weights/last.pt")
        official_train(["--resume", run / "weights/last.pt"], capture=run / "after_fp32.pt")


def letterboxed(stride, folder=None):
    files = [str(Path(folder or OUT / "images") / n) for n in IMAGES]
    return [(Path(p).name, im) for p, im, _, _, _ in LoadImages(files, img_size=IMG, stride=stride, auto=True)]


def official_detect(weights, dual):
    """detect_dual.py (dual heads) / detect.py: DetectMultiBackend, LoadImages, forward, NMS."""
    model = DetectMultiBackend(str(weights), device=torch.device("cpu"), fuse=True)
    out = {}
    for name, im in letterboxed(model.stride):
        x = torch.from_numpy(im).float()[None] / 255
        with torch.no_grad():
            pred = model(x)
        pred = pred[0][1] if dual else pred[0]
        det = non_max_suppression(pred, 0.25, 0.45, None, False, max_det=1000)[0]
        out[name] = {"shape": list(x.shape), "det": det.tolist()}
    return out


def make_val_set(dets):
    """val/: the 3 images, labelled with the detections of (a) and (c) (up to 12 each), every other
    box shifted by 3%."""
    val = OUT / "val"
    shutil.rmtree(val, ignore_errors=True)
    (val / "images").mkdir(parents=True)
    (val / "labels").mkdir(parents=True)
    rnd = random.Random(5)
    for name in IMAGES:
        shutil.copy(OUT / "images" / name, val / "images")
        import cv2
        h0, w0 = cv2.imread(str(OUT / "images" / name)).shape[:2]
        _, _, hh, ww = dets[0][name]["shape"]
        gain = min(hh / h0, ww / w0)
        pw, ph = (ww - w0 * gain) / 2, (hh - h0 * gain) / 2
        lines = []
        rows = [r for det in dets for r in det[name]["det"][:12]]
        for k, (x1, y1, x2, y2, conf, c) in enumerate(rows):
            x1, x2 = [min(max((v - pw) / gain, 0), w0) for v in (x1, x2)]
            y1, y2 = [min(max((v - ph) / gain, 0), h0) for v in (y1, y2)]
            cx, cy, w, h = (x1 + x2) / 2 / w0, (y1 + y2) / 2 / h0, (x2 - x1) / w0, (y2 - y1) / h0
            if k % 2:
                cx, cy = cx + rnd.uniform(-0.03, 0.03) * w, cy + rnd.uniform(-0.03, 0.03) * h
            if w > 0.002 and h > 0.002:
                lines.append(f"{int(c)} {min(max(cx, 0), 1):.6f} {min(max(cy, 0), 1):.6f} {w:.6f} {h:.6f}")
        (val / "labels" / (Path(name).stem + ".txt")).write_text("\n".join(lines) + "\n")
    (val / "data.yaml").write_text(yaml.safe_dump({"path": str(val), "train": "images", "val": "images", "nc": NC,
                                                   "names": NAMES}))


def official_val(weights, dual):
    import val as val_single
    import val_dual
    import argparse
    mod = val_dual if dual else val_single
    mod.opt = argparse.Namespace(min_items=0)  # run() reads the CLI's global opt (official quirk)
    run = mod.run
    (mp, mr, map50, map_, *_), _, _ = run(data=str(OUT / "val/data.yaml"), weights=str(weights), batch_size=2,
                                          imgsz=IMG, conf_thres=VAL_CONF, iou_thres=0.7, device="cpu", workers=0,
                                          half=False, plots=False, project=str(OUT / "val-runs"), name="exp",
                                          exist_ok=True)
    return {"mp": mp, "mr": mr, "map50": map50, "map": map_}


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    import cv2
    shutil.rmtree(OUT / "images", ignore_errors=True)
    (OUT / "images").mkdir()
    rng = np.random.default_rng(9)
    for src, name in zip(SOURCE_IMAGES, IMAGES):
        im = cv2.imread(str(COCO / "images/train2017" / src))
        if TINY:
            im = cv2.resize(im, (im.shape[1] // 4, im.shape[0] // 4), interpolation=cv2.INTER_AREA)
            im = np.clip(im.astype(np.int16) + tiny_noise(im.shape), 0, 255).astype(np.uint8)
        else:
            im = np.clip(im.astype(np.int16) + rng.integers(-4, 5, im.shape), 0, 255).astype(np.uint8)
        cv2.imwrite(str(OUT / "images" / name), im)
    if os.environ.get("Y9_PT_FIXTURES_ONLY") == "resume" and not TINY:  # only resume-parity*/ (needs (a), train-data/)
        make_d()
        make_d("AdamW", "resume-parity-adamw")
        return
    if os.environ.get("Y9_PT_FIXTURES_REUSE") != "1" or not (OUT / "last.pt").exists():  # reuse: re-run the outputs only
        make_a()
        make_c()
        make_b()
    if not TINY:  # resume-parity*/ are big (full yolov9-t runs): the fixture folder, not the repository
        make_d()
        make_d("AdamW", "resume-parity-adamw")
    ckpts = {"yolov9-t-stripped.pt": True, "last.pt": True, "gelan-s-converted.pt": False}
    ref = {"torch": torch.__version__, "images": IMAGES, "img": IMG, "val_conf_thres": VAL_CONF, "checkpoints": {}}
    for name, dual in ckpts.items():
        ref["checkpoints"][name] = {"dual": dual, "detect": official_detect(OUT / name, dual)}
    make_val_set([ref["checkpoints"][n]["detect"] for n in ("yolov9-t-stripped.pt", "gelan-s-converted.pt")])
    for name, dual in ckpts.items():
        ref["checkpoints"][name]["val"] = official_val(OUT / name, dual)
        print(name, {k: len(v["det"]) for k, v in ref["checkpoints"][name]["detect"].items()},
              ref["checkpoints"][name]["val"])
    if TINY:  # keep only what the test reads; data.yaml without the absolute path (ours resolves
        # the lists against the YAML's folder); the detect images are val/images
        for d in ("train-data", "train-runs", "val-runs", "images", "val/images"):
            shutil.rmtree(OUT / d, ignore_errors=True)
        for f in OUT.rglob("*.cache"):
            f.unlink()
        (OUT / "val/data.yaml").write_text(yaml.safe_dump({"train": "images", "val": "images", "nc": NC,
                                                          "names": NAMES}))
        # the test remakes val/images: coco128 image, cv::resize INTER_AREA to 1/4, tiny_noise
        ref["tiny_images"] = dict(zip(IMAGES, SOURCE_IMAGES))
    (OUT / "reference.json").write_text(json.dumps(ref, indent=1))


if __name__ == "__main__":
    main()
