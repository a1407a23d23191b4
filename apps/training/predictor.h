// The Predictor type, model_predictor and check_img_size (apps/training/predictor.cpp): what val,
// detect and the embedded inference build share. Its own header, free of the data pipeline and of
// OpenCV, so that the inference build without OpenCV (Y9_WITH_OPENCV=OFF) compiles it.
#pragma once

#include <functional>

#include "engine/tensor.h"
#include "io/batch.h"

namespace graph {
class Model;
}

namespace training {

/// A model for validation/inference: images [B, 3, H, W] F32 RGB in [0, 1] (letterboxed, H and W
/// multiples of 32) and the batch they come from -> prediction [B, 4 + nc, A]: rows cx, cy, w, h
/// in letterboxed-input pixels, then per-class sigmoid scores (the tensor NMS takes).
using Predictor = std::function<engine::Tensor(const engine::Tensor& images, const io::Batch& batch)>;

/// A Predictor running `model` in eval mode without autograd, returning the NMS input: the main
/// branch y2 for multi-branch (DualDDetect) heads, the only y for DDetect (ops::nms_input; the
/// last branch for TripleDDetect). The model must outlive the predictor. Sets model.eval().
/// autocast F16/BF16 (`--half` on CUDA, official model.half()): the forward runs under
/// ops::AutocastGuard (the CUDA convolutions and matmuls in that dtype, BatchNorm in FP32; CPU
/// tensors are never cast) and the prediction is cast back to F32; F32 (default): no autocast.
/// The predictor and its copies hold one engine::CpuCacheScope (the inference arena): CPU blocks
/// freed during its passes are reused by the next ones (up to 512 MiB kept unused) and go back to
/// the system when the last copy is destroyed.
Predictor model_predictor(graph::Model& model, engine::DType autocast = engine::DType::F32);

/// Official check_img_size: rounds `img` up to a multiple of `stride` (min `floor`), printing the
/// official warning when it changes.
int check_img_size(int img, int stride = 32, int floor = 0);

}  // namespace training
