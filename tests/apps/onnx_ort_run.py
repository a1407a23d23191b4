#!/usr/bin/env python3
"""Runs an ONNX file in onnxruntime for tests/apps/onnx_export_e2e_test.cpp.

usage: onnx_ort_run.py MODEL.onnx INPUT.f32 B,C,H,W OUTDIR
INPUT.f32 is raw little-endian float32 NCHW; it is cast to float16 when the model's input is.
Writes OUTDIR/<output name>.bin (float32, or int32 for integer outputs) and <name>.shape
(comma-separated dims). Exits 3 when onnxruntime is not installed (the test skips).
"""
import sys

try:
    import numpy as np
    import onnxruntime as ort
except ImportError as e:  # the caller skips
    print(f"onnxruntime unavailable: {e}")
    sys.exit(3)


def main():
    model, inp, shape, outdir = sys.argv[1:5]
    dims = [int(d) for d in shape.split(",")]
    x = np.fromfile(inp, dtype=np.float32).reshape(dims)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    inp0 = sess.get_inputs()[0]
    if inp0.type == "tensor(float16)":
        x = x.astype(np.float16)
    outs = sess.run(None, {inp0.name: x})
    for o, v in zip(sess.get_outputs(), outs):
        v = np.ascontiguousarray(v)
        if v.dtype == np.float16 or v.dtype == np.float64:
            v = v.astype(np.float32)
        elif v.dtype == np.int64:
            v = v.astype(np.int32)
        v.tofile(f"{outdir}/{o.name}.bin")
        with open(f"{outdir}/{o.name}.shape", "w") as f:
            f.write(",".join(str(d) for d in v.shape))
        print(o.name, v.dtype, v.shape)


if __name__ == "__main__":
    main()
