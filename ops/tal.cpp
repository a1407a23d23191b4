// Task-Aligned Assigner op, anchors, target preprocessing, bbox2dist/dist2bbox (ops/tal.h).
#include "ops/tal.h"

#include <algorithm>
#include <cmath>

#include "engine/autograd.h"
#include "engine/layout.h"
#include "kernels/common/box_loss.h"

namespace ops {

using engine::DType;
using engine::Shape;
using engine::Tensor;

namespace {
void check_input(const Tensor& t, const Tensor& ref, const char* op, const char* name) {
  Y9_CHECK_SHAPE(t.defined(), op, ": ", name, " is undefined");
  Y9_CHECK_SHAPE(t.dtype() == ref.dtype(), op, ": ", name, " dtype must match pd_scores, got ", t.str());
  Y9_CHECK_SHAPE(t.device() == ref.device(), op, ": ", name, " must be on pd_scores' device, got ", t.str());
}
}  // namespace

TalResult tal_assign(const Tensor& pd_scores, const Tensor& pd_bboxes, const Tensor& anc_points,
                     const Tensor& gt_labels, const Tensor& gt_bboxes, const Tensor& mask_gt, const TalConfig& cfg) {
  const char* op = "tal_assign";
  Y9_CHECK_SHAPE(pd_scores.defined() && pd_scores.dim() == 3, op, ": pd_scores must be [B, A, nc]");
  const DType dt = pd_scores.dtype();
  const engine::Device dev = pd_scores.device();
  check_input(pd_bboxes, pd_scores, op, "pd_bboxes");
  check_input(anc_points, pd_scores, op, "anc_points");
  check_input(gt_labels, pd_scores, op, "gt_labels");
  check_input(gt_bboxes, pd_scores, op, "gt_bboxes");
  check_input(mask_gt, pd_scores, op, "mask_gt");
  auto k = engine::kernel(kernels::kTalAssign, dt, dev);
  const int64_t B = pd_scores.size(0), A = pd_scores.size(1), nc = pd_scores.size(2);
  Y9_CHECK_SHAPE(nc == cfg.num_classes, op, ": pd_scores has ", nc, " classes, config ", cfg.num_classes);
  Y9_CHECK_SHAPE(pd_bboxes.shape() == Shape({B, A, 4}), op, ": pd_bboxes ", engine::shape_str(pd_bboxes.shape()),
                 " vs pd_scores ", engine::shape_str(pd_scores.shape()));
  Y9_CHECK_SHAPE(anc_points.shape() == Shape({A, 2}), op, ": anc_points must be [", A, ", 2], got ",
                 engine::shape_str(anc_points.shape()));
  Y9_CHECK_SHAPE(gt_bboxes.dim() == 3 && gt_bboxes.size(0) == B && gt_bboxes.size(2) == 4, op,
                 ": gt_bboxes must be [B, M, 4], got ", engine::shape_str(gt_bboxes.shape()));
  const int64_t M = gt_bboxes.size(1);
  Y9_CHECK_SHAPE(gt_labels.shape() == Shape({B, M, 1}) && mask_gt.shape() == Shape({B, M, 1}), op,
                 ": gt_labels/mask_gt must be [", B, ", ", M, ", 1], got ", engine::shape_str(gt_labels.shape()), " / ",
                 engine::shape_str(mask_gt.shape()));
  Y9_CHECK_SHAPE(M == 0 || cfg.topk <= A, op, ": topk ", cfg.topk, " > number of anchors ", A);

  engine::autograd::NoGradGuard ng;
  Tensor ps = pd_scores.detach().contiguous(), pb = pd_bboxes.detach().contiguous();
  Tensor ap = anc_points.detach().contiguous(), gl = gt_labels.detach().contiguous();
  Tensor gb = gt_bboxes.detach().contiguous(), mg = mask_gt.detach().contiguous();
  TalResult r;
  r.target_labels = Tensor::empty({B, A}, DType::I64, dev);
  r.target_bboxes = Tensor::empty({B, A, 4}, dt, dev);
  r.target_scores = Tensor::empty({B, A, nc}, dt, dev);
  r.fg_mask = Tensor::empty({B, A}, DType::Bool, dev);
  r.target_gt_idx = Tensor::empty({B, A}, DType::I64, dev);
  k.fn(k.ctx, dt, ps.data_ptr(), pb.data_ptr(), ap.data_ptr(), gl.data_ptr(), gb.data_ptr(), mg.data_ptr(), B, A, M, cfg,
       r.target_labels.data<int64_t>(), r.target_bboxes.data_ptr(), r.target_scores.data_ptr(), r.fg_mask.data<bool>(),
       r.target_gt_idx.data<int64_t>());
  return r;
}

Anchors make_anchors(const std::vector<std::pair<int64_t, int64_t>>& level_hw, const std::vector<double>& strides,
                     DType dtype, double offset, engine::Device device) {
  Y9_CHECK_SHAPE(level_hw.size() == strides.size(), "make_anchors: ", level_hw.size(), " levels but ",
                 strides.size(), " strides");
  std::vector<double> pts, st;
  for (size_t l = 0; l < level_hw.size(); ++l) {
    const auto [h, w] = level_hw[l];
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        pts.push_back(static_cast<double>(x) + offset);
        pts.push_back(static_cast<double>(y) + offset);
        st.push_back(strides[l]);
      }
  }
  const int64_t A = static_cast<int64_t>(st.size());
  Anchors a;
  a.points = Tensor::from_vector(pts, {A, 2}).to(dtype).to(device);
  a.strides = Tensor::from_vector(st, {A, 1}).to(dtype).to(device);
  return a;
}

Tensor preprocess_targets(const Tensor& targets, int64_t batch_size, double img_h, double img_w) {
  Y9_CHECK_SHAPE(targets.dim() == 2 && targets.size(1) == 6, "preprocess_targets: targets must be [N, 6], got ",
                 engine::shape_str(targets.shape()));
  const DType dt = targets.dtype() == DType::F64 ? DType::F64 : DType::F32;
  const int64_t N = targets.size(0);
  std::vector<double> t = targets.to_vector<double>();
  std::vector<int64_t> count(static_cast<size_t>(batch_size), 0);
  for (int64_t i = 0; i < N; ++i) {
    const int64_t j = static_cast<int64_t>(t[i * 6]);
    Y9_CHECK_SHAPE(j >= 0 && j < batch_size, "preprocess_targets: image index ", j, " outside batch of ",
                   batch_size);
    ++count[j];
  }
  const int64_t M = N == 0 ? 0 : *std::max_element(count.begin(), count.end());
  // Tensor::from_vector rejects empty shapes (engine: an empty tensor is not "contiguous").
  if (M == 0) return Tensor::zeros({batch_size, 0, 5}, dt);
  // Float arithmetic in the target dtype, in the official order: scale, then xywh2xyxy.
  auto fill = [&](auto zero) {
    using T = decltype(zero);
    std::vector<T> out(static_cast<size_t>(batch_size * M * 5), T(0));
    std::vector<int64_t> row(static_cast<size_t>(batch_size), 0);
    for (int64_t i = 0; i < N; ++i) {
      const int64_t j = static_cast<int64_t>(t[i * 6]);
      T* o = out.data() + (j * M + row[j]++) * 5;
      const T cx = static_cast<T>(t[i * 6 + 2]) * static_cast<T>(img_w);
      const T cy = static_cast<T>(t[i * 6 + 3]) * static_cast<T>(img_h);
      const T w = static_cast<T>(t[i * 6 + 4]) * static_cast<T>(img_w);
      const T h = static_cast<T>(t[i * 6 + 5]) * static_cast<T>(img_h);
      o[0] = static_cast<T>(t[i * 6 + 1]);
      o[1] = cx - w / T(2);
      o[2] = cy - h / T(2);
      o[3] = cx + w / T(2);
      o[4] = cy + h / T(2);
    }
    return Tensor::from_vector(out, {batch_size, M, 5});
  };
  return dt == DType::F64 ? fill(double(0)) : fill(float(0));
}

Tensor bbox2dist(const Tensor& anchor_points, const Tensor& bbox, double reg_max) {
  Y9_CHECK_SHAPE(anchor_points.dim() == 2 && anchor_points.size(1) == 2 && bbox.dim() >= 2 && bbox.size(-1) == 4 &&
                     bbox.size(-2) == anchor_points.size(0),
                 "bbox2dist: anchor_points [A, 2] and bbox [..., A, 4] expected, got ",
                 engine::shape_str(anchor_points.shape()), " and ", engine::shape_str(bbox.shape()));
  const int64_t A = anchor_points.size(0), rows = bbox.numel() / 4;
  std::vector<double> ap = anchor_points.to_vector<double>();  // tiny constant grid
  engine::autograd::NoGradGuard ng;
  Tensor bb = bbox.detach().to(DType::F64).contiguous();
  Tensor out = Tensor::empty(bbox.shape(), DType::F64);
  const double* pb = bb.data<double>();
  double* po = out.data<double>();
  for (int64_t r = 0; r < rows; ++r)
    kernels::bbox2dist_one<double>(ap[(r % A) * 2], ap[(r % A) * 2 + 1], pb + r * 4, reg_max, po + r * 4);
  return out.to(bbox.dtype());
}

Tensor dist2bbox(const Tensor& distance, const Tensor& anchor_points) {
  Y9_CHECK_SHAPE(anchor_points.dim() == 2 && anchor_points.size(1) == 2 && distance.dim() >= 2 &&
                     distance.size(-1) == 4 && distance.size(-2) == anchor_points.size(0),
                 "dist2bbox: distance [..., A, 4] and anchor_points [A, 2] expected, got ",
                 engine::shape_str(distance.shape()), " and ", engine::shape_str(anchor_points.shape()));
  const int64_t A = anchor_points.size(0), rows = distance.numel() / 4;
  std::vector<double> ap = anchor_points.to_vector<double>();
  engine::autograd::NoGradGuard ng;
  Tensor d = distance.detach().to(DType::F64).contiguous();
  Tensor out = Tensor::empty(distance.shape(), DType::F64);
  const double* pd = d.data<double>();
  double* po = out.data<double>();
  for (int64_t r = 0; r < rows; ++r) {
    const double ax = ap[(r % A) * 2], ay = ap[(r % A) * 2 + 1];
    po[r * 4 + 0] = ax - pd[r * 4 + 0];
    po[r * 4 + 1] = ay - pd[r * 4 + 1];
    po[r * 4 + 2] = ax + pd[r * 4 + 2];
    po[r * 4 + 3] = ay + pd[r * 4 + 3];
  }
  return out.to(distance.dtype());
}

}  // namespace ops
