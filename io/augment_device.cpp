// Plans of io::AugmentedDataset -> parameter records of the batched augmentation kernels.
#include "io/augment_device.h"

#include <opencv2/core.hpp>

#include "engine/error.h"
#include "io/color_internal.h"

namespace io {

kernels::AugHsvModel aug_hsv_model() {
  const kernels::cpu::HsvModel m = color_detail::verified_model();
  kernels::AugHsvModel a;
  a.simd_block = m.simd_block;
  a.simd_trunc = m.simd.trunc, a.simd_fma2 = m.simd.fma2, a.simd_fma3 = m.simd.fma3;
  a.tail_trunc = m.tail.trunc, a.tail_fma2 = m.tail.fma2, a.tail_fma3 = m.tail.fma3;
  return a;
}

namespace {
/// The inverse map the CPU warp uses: cv::warpAffine's own inversion of M's top rows, or
/// cv::warpPerspective's cv::invert (LU) of M.
void set_inverse(kernels::AugWarp& w, const cv::Matx33d& M, bool perspective) {
  w.perspective = perspective ? 1 : 0;
  if (perspective) {
    const cv::Matx33d Mi = M.inv(cv::DECOMP_LU);
    for (int i = 0; i < 9; ++i) w.inv[i] = Mi.val[i];
  } else {
    const double fwd[6] = {M(0, 0), M(0, 1), M(0, 2), M(1, 0), M(1, 1), M(1, 2)};
    kernels::invert_affine_like_opencv(fwd, w.inv);
    w.inv[6] = 0, w.inv[7] = 0, w.inv[8] = 1;
  }
}
}  // namespace

kernels::AugWarp mosaic_warp(const MosaicPlan& m, const std::array<int64_t, 4>& off,
                             const std::array<int64_t, 4>& step) {
  kernels::AugWarp w{};
  w.src_w = w.src_h = m.canvas;
  for (int k = 0; k < 4; ++k) {
    const cv::Rect& a = m.dst[k];
    if (a.width <= 0 || a.height <= 0) continue;
    kernels::AugTile& t = w.tile[w.ntiles++];
    t.offset = off[k];
    t.step = step[k];
    t.h = m.h[k];
    t.w = m.w[k];
    t.ax = a.x, t.ay = a.y, t.aw = a.width, t.ah = a.height;
    t.padw = m.padw[k];
    t.padh = m.padh[k];
  }
  set_inverse(w, m.M, m.perspective);
  return w;
}

kernels::AugWarp image_warp(const SamplePlan& p, int64_t off, int64_t step) {
  Y9_CHECK(!p.mosaic, "image_warp: a mosaic plan");
  kernels::AugWarp w{};
  w.src_w = p.lb_w;
  w.src_h = p.lb_h;
  w.ntiles = 1;
  kernels::AugTile& t = w.tile[0];
  t.offset = off;
  t.step = step;
  t.h = p.lb_h, t.w = p.lb_w;
  t.ax = 0, t.ay = 0, t.aw = p.lb_w, t.ah = p.lb_h;
  t.padw = t.padh = 0;
  // warp == false: the identity map, whose affine fixed point copies every pixel exactly.
  set_inverse(w, p.warp ? p.M : cv::Matx33d::eye(), p.warp && p.perspective);
  return w;
}

kernels::LetterboxSample letterbox_sample(const SamplePlan& p, int64_t off, int64_t step) {
  LetterboxGeometry g;
  g.nw = p.nw, g.nh = p.nh;
  g.top = p.top, g.left = p.left;
  return letterbox_sample(g, p.img_h, p.img_w, off, step);
}

kernels::AugSample aug_sample(const SamplePlan& p, const kernels::AugWarp& w0, const kernels::AugWarp* w1) {
  kernels::AugSample s{};
  s.warp[0] = w0;
  s.nwarp = 1;
  if (w1) {
    s.warp[1] = *w1;
    s.nwarp = 2;
    s.mix_r = p.mixup_r;
    s.mix_r2 = 1 - p.mixup_r;  // mixup_blend's r2
  }
  s.hsv = p.ops.hsv ? 1 : 0;
  s.gh = p.ops.gh, s.gs = p.ops.gs, s.gv = p.ops.gv;
  s.flipud = p.ops.flipud ? 1 : 0;
  s.fliplr = p.ops.fliplr ? 1 : 0;
  return s;
}

}  // namespace io
