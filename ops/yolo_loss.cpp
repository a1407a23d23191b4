// yolo_loss op (ops/yolo_loss.h): level gathering, per-branch decode + assigner + fused loss
// kernels, one autograd node for all branches.
#include "ops/yolo_loss.h"

#include <algorithm>

#include "engine/autograd.h"
#include "kernels/common/yolo_loss.h"
#include "ops/ops.h"

namespace ops {

using engine::DType;
using engine::Shape;
using engine::Tensor;

namespace {

struct BranchState {
  Tensor pred;      // [B, A, no] gathered logits (detached copy)
  Tensor box_grid;  // [B, A, 4]
  TalResult tal;
  Tensor tss;       // [1] of the maps' dtype, a view of the op's [K] target_scores_sum
};

// Decode, assign (or take the fixed assignment) and the branch's raw loss sums into `sums` (4 F64
// on the device).
void run_forward(BranchState& s, const Tensor& anc, const Tensor& stride, const Tensor& gl, const Tensor& gb,
                 const Tensor& mg, const YoloLossConfig& cfg, const TalResult* fixed, double* sums) {
  const int64_t B = s.pred.size(0), A = s.pred.size(1), nc = cfg.nc;
  const int reg = static_cast<int>(cfg.reg_max);
  const DType dt = s.pred.dtype();
  const engine::Device dev = s.pred.device();
  Tensor scores = Tensor::empty({B, A, nc}, dt, dev);
  Tensor box_px = Tensor::empty({B, A, 4}, dt, dev);
  s.box_grid = Tensor::empty({B, A, 4}, dt, dev);
  auto kd = engine::kernel(kernels::kYoloDecode, dt, dev);
  kd.fn(kd.ctx, dt, s.pred.data_ptr(), anc.data_ptr(), stride.data_ptr(), B, A, nc, reg, scores.data_ptr(),
        s.box_grid.data_ptr(), box_px.data_ptr());
  const Tensor anc_px = ops::mul(anc, stride.reshape({A, 1}));  // grid units -> px
  if (fixed) {
    s.tal = *fixed;
    Y9_CHECK_SHAPE(s.tal.target_scores.defined() && s.tal.target_scores.shape() == Shape({B, A, nc}) &&
                       s.tal.target_scores.dtype() == s.pred.dtype() &&
                       s.tal.target_bboxes.shape() == Shape({B, A, 4}) && s.tal.fg_mask.shape() == Shape({B, A}),
                   "yolo_loss: fixed_assign does not fit [B, A, nc] = [", B, ", ", A, ", ", nc, "]");
    s.tal.target_scores = s.tal.target_scores.contiguous();
    s.tal.target_bboxes = s.tal.target_bboxes.contiguous();
    s.tal.fg_mask = s.tal.fg_mask.contiguous();
  } else {
    TalConfig tc = cfg.tal;
    tc.num_classes = nc;
    s.tal = tal_assign(scores, box_px, anc_px, gl, gb, mg, tc);
  }
  auto kf = engine::kernel(kernels::kYoloBranchLossForward, dt, dev);
  kf.fn(kf.ctx, dt, s.pred.data_ptr(), s.box_grid.data_ptr(), anc.data_ptr(), stride.data_ptr(),
        s.tal.target_bboxes.data_ptr(), s.tal.target_scores.data_ptr(), s.tal.fg_mask.data<bool>(), B, A, nc, reg,
        sums);
}

}  // namespace

YoloLossResult yolo_loss(const std::vector<std::vector<Tensor>>& branches, const Tensor& targets,
                         const YoloLossConfig& cfg) {
  const char* op = "yolo_loss";
  const size_t K = branches.size();
  Y9_CHECK_SHAPE(K > 0 && K == cfg.branch_weights.size(), op, ": ", K, " branches but ",
                 cfg.branch_weights.size(), " branch weights");
  Y9_CHECK_SHAPE(cfg.fixed_assign.empty() || cfg.fixed_assign.size() == K, op, ": ", cfg.fixed_assign.size(),
                 " fixed assignments for ", K, " branches");
  const size_t L = cfg.strides.size();
  const int64_t no = 4 * cfg.reg_max + cfg.nc;
  Y9_CHECK_SHAPE(branches[0].size() == L && L > 0, op, ": ", branches[0].size(), " levels but ", L, " strides");
  const Tensor& f0 = branches[0][0];
  Y9_CHECK_SHAPE(f0.defined() && f0.dim() == 4, op, ": level maps must be [B, no, H, W], got ",
                 f0.defined() ? f0.str() : "undefined");
  const DType dt = f0.dtype();
  const engine::Device dev = f0.device();
  const int64_t B = f0.size(0);
  std::vector<std::pair<int64_t, int64_t>> hw;
  for (size_t l = 0; l < L; ++l) hw.emplace_back(branches[0][l].size(2), branches[0][l].size(3));
  std::vector<Tensor> inputs;
  for (const auto& br : branches) {
    Y9_CHECK_SHAPE(br.size() == L, op, ": every branch needs ", L, " levels");
    for (size_t l = 0; l < L; ++l) {
      const Tensor& t = br[l];
      Y9_CHECK_SHAPE(t.defined() && t.dtype() == dt && t.device() == dev &&
                         t.shape() == Shape({B, no, hw[l].first, hw[l].second}),
                     op, ": level ", l, " must be [", B, ", ", no, ", ", hw[l].first, ", ", hw[l].second, "] ",
                     engine::dtype_name(dt), " ", dev.str(), ", got ", t.defined() ? t.str() : "undefined");
      inputs.push_back(t);
    }
  }
  int64_t A = 0;
  for (auto& p : hw) A += p.first * p.second;
  Y9_CHECK_SHAPE(cfg.loss_batch >= 0, op, ": loss_batch ", cfg.loss_batch, " must be >= 0");
  const int64_t LB = cfg.loss_batch > 0 ? cfg.loss_batch : B;

  std::vector<BranchState> st(K);
  Tensor out;
  Anchors anc;
  Tensor stride;
  {
    engine::autograd::NoGradGuard ng;
    anc = make_anchors(hw, cfg.strides, dt, 0.5, dev);
    stride = anc.strides.reshape({A});
    // Targets -> padded gt tensors (official preprocess, imgsz = P3 map size * stride[0]).
    Tensor pre = preprocess_targets(targets, B, static_cast<double>(hw[0].first) * cfg.strides[0],
                                    static_cast<double>(hw[0].second) * cfg.strides[0])
                     .to(dt);
    const int64_t M = pre.size(1);
    Tensor gl = pre.narrow(2, 0, 1).contiguous(), gb = pre.narrow(2, 1, 4).contiguous();
    Tensor mg = Tensor::zeros({B, M, 1}, dt);
    if (B * M > 0) {
      // mask_gt = (x1 + y1 + x2 + y2 > 0), from the host-side targets just built.
      std::vector<double> p = gb.to_vector<double>(), m(static_cast<size_t>(B * M));
      for (int64_t i = 0; i < B * M; ++i) m[i] = (p[i * 4] + p[i * 4 + 1] + p[i * 4 + 2] + p[i * 4 + 3]) > 0 ? 1 : 0;
      mg = Tensor::from_vector(m, {B, M, 1}).to(dt);
    }
    gl = gl.to(dev), gb = gb.to(dev), mg = mg.to(dev);
    Tensor sums = Tensor::empty({static_cast<int64_t>(K), 4}, DType::F64, dev);
    for (size_t k = 0; k < K; ++k) {
      st[k].pred = Tensor::empty({B, A, no}, dt, dev);
      int64_t a0 = 0;
      for (size_t l = 0; l < L; ++l) {
        const int64_t n = hw[l].first * hw[l].second;
        st[k].pred.narrow(1, a0, n).copy_(branches[k][l].detach().reshape({B, no, n}).permute({0, 2, 1}));
        a0 += n;
      }
      run_forward(st[k], anc.points, stride, gl, gb, mg, cfg, cfg.fixed_assign.empty() ? nullptr : &cfg.fixed_assign[k],
                  sums.data<double>() + 4 * k);
    }
    if (cfg.reduce_sums) cfg.reduce_sums(sums);
    // L_k = sum_k / tss, tss = max(sum target_scores, 1), and the weighted items: on the sums'
    // device (kernels/common/yolo_loss.h yolo_loss_finish_one), so CUDA never waits for the host.
    Tensor tss = Tensor::empty({static_cast<int64_t>(K)}, dt, dev);
    out = Tensor::empty({4}, dt, dev);
    const double gains[3] = {cfg.box_gain, cfg.cls_gain, cfg.dfl_gain};
    auto kfin = engine::kernel(kernels::kYoloLossFinish, dt, dev);
    kfin.fn(kfin.ctx, dt, sums.data<double>(), static_cast<int64_t>(K), cfg.branch_weights.data(), gains, LB,
            tss.data_ptr(), out.data_ptr());
    for (size_t k = 0; k < K; ++k) st[k].tss = tss.narrow(0, static_cast<int64_t>(k), 1);
  }

  YoloLossResult res;
  res.items = out.narrow(0, 0, 3).clone();
  for (auto& s : st) {
    res.assign.push_back(s.tal);
    res.target_scores_sum.push_back(s.tss.reshape({}));
  }
  const std::vector<double> bw = cfg.branch_weights;
  const double gains[3] = {cfg.box_gain, cfg.cls_gain, cfg.dfl_gain};
  const double g0 = gains[0], g1 = gains[1], g2 = gains[2];
  const int64_t nc = cfg.nc;
  const int reg = static_cast<int>(cfg.reg_max);
  Tensor anc_pts = anc.points;
  engine::autograd::record_fn(
      "YoloLossBackward", inputs, {out},
      [st, bw, g0, g1, g2, B, LB, A, no, nc, reg, hw, anc_pts, stride, dt](const std::vector<Tensor>& g) {
        // d out / d L_k,i = w_k * gain_i * (g[i] + LB * g[3]) (out[i] = gain_i * sum_k w_k L_k,i for
        // i < 3, out[3] = LB * (out[0] + out[1] + out[2])): the kernel reads g on the device.
        const Tensor go = g[0].to(dt).contiguous();
        const double gains[3] = {g0, g1, g2};
        std::vector<Tensor> grads;
        for (size_t k = 0; k < st.size(); ++k) {
          const BranchState& s = st[k];
          Tensor gp = Tensor::empty({B, A, no}, dt, s.pred.device());
          auto kb = engine::kernel(kernels::kYoloBranchLossBackward, dt, s.pred.device());
          kb.fn(kb.ctx, dt, s.pred.data_ptr(), s.box_grid.data_ptr(), anc_pts.data_ptr(), stride.data_ptr(),
                s.tal.target_bboxes.data_ptr(), s.tal.target_scores.data_ptr(), s.tal.fg_mask.data<bool>(),
                s.tss.data_ptr(), B, A, nc, reg, go.data_ptr(), bw[k], gains, LB, gp.data_ptr());
          int64_t a0 = 0;
          for (const auto& [h, w] : hw) {
            grads.push_back(gp.narrow(1, a0, h * w).permute({0, 2, 1}).contiguous().reshape({B, no, h, w}));
            a0 += h * w;
          }
        }
        return grads;
      });
  res.total = out.select(0, 3);
  return res;
}

}  // namespace ops
