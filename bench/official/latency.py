"""Times one inference framework on one model file: batch 1, a fixed 3 x IMG x IMG input, CPU,
FP32, THREADS intra-op threads. Model forward only (no letterbox, no NMS), as the C++ side times
ours (bench/latency_bench.cpp, which runs this script).

usage: latency.py FRAMEWORK FILE IMG [--threads N] [--iters K] [--warmup W]
  FRAMEWORK  torch   the official model in a converted .pt, loaded as the official attempt_load
                     does for detect_dual.py (ckpt['ema' or 'model'].float().fuse().eval()); needs
                     YOLOV9_OFFICIAL on the import path and PyTorch
             ort     onnxruntime (CPUExecutionProvider) on an ONNX file
             cvdnn   OpenCV's DNN module (cv2.dnn.readNetFromONNX) on an ONNX file
prints {"framework":..., "mean_ms":..., "median_ms":..., "min_ms":..., "iters":...} on its last line.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

p = argparse.ArgumentParser()
p.add_argument("framework", choices=["torch", "ort", "cvdnn"])
p.add_argument("file")
p.add_argument("img", type=int)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--iters", type=int, default=10)
p.add_argument("--warmup", type=int, default=2)
a = p.parse_args()
x = np.full((1, 3, a.img, a.img), 0.5, dtype=np.float32)

if a.framework == "torch":
    sys.path.insert(0, os.environ["YOLOV9_OFFICIAL"])
    import torch

    torch.set_num_threads(a.threads)
    ckpt = torch.load(a.file, map_location="cpu")
    model = (ckpt.get("ema") or ckpt["model"]).float().fuse().eval()
    xt = torch.from_numpy(x)

    def run():
        with torch.no_grad():
            model(xt)
elif a.framework == "ort":
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(a.file, so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name

    def run():
        sess.run(None, {name: x})
else:
    import cv2

    cv2.setNumThreads(a.threads)
    net = cv2.dnn.readNetFromONNX(a.file)
    net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
    net.setPreferableTarget(cv2.dnn.DNN_TARGET_CPU)

    def run():
        net.setInput(x)
        net.forward()

for _ in range(a.warmup):
    run()
times = []
for _ in range(a.iters):
    t = time.perf_counter()
    run()
    times.append((time.perf_counter() - t) * 1000.0)
print(json.dumps({"framework": a.framework, "mean_ms": statistics.fmean(times), "median_ms": statistics.median(times),
                  "min_ms": min(times), "iters": a.iters, "threads": a.threads}))
