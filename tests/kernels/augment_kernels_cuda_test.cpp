// CUDA augment_warp / letterbox entries (kernels/cuda/augment.cu) against their CPU twin
// (kernels/cpu/augment.cpp) on synthetic tiles and random parameters: byte-for-byte equal for every
// layout and output dtype, with odd sizes, 1-4 tiles, rotation/shear, perspective, mixup, HSV (two
// rounding models), flips; letterbox up, down, exact-2x and copy. No OpenCV and no dataset, so it
// also runs from the GPU kit (tests/io/augment_cuda_test.cpp checks the twin against the OpenCV
// pipeline on coco128). Label gpu: skips without a device (fails with Y9_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/backend.h"
#include "engine/tensor.h"
#include "kernels/common/augment.h"
#include "tests/testutil.h"

using engine::Device;
using engine::DType;
using engine::Tensor;

namespace {

Tensor bytes_on(const void* p, size_t n, Device d) {
  std::vector<uint8_t> v(std::max<size_t>(n, 1), 0);
  if (n) std::memcpy(v.data(), p, n);
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, d);
}

/// 3x3 inverse by the adjugate (any inverse will do: both backends get the same one).
void invert3(const double m[9], double out[9]) {
  const double a = m[0], b = m[1], c = m[2], d = m[3], e = m[4], f = m[5], g = m[6], h = m[7], i = m[8];
  const double det = a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g);
  const double adj[9] = {e * i - f * h, c * h - b * i, b * f - c * e, f * g - d * i, a * i - c * g,
                         c * d - a * f, d * h - e * g, b * g - a * h, a * e - b * d};
  for (int k = 0; k < 9; ++k) out[k] = adj[k] / det;
}

struct Case {
  std::vector<uint8_t> arena;
  std::vector<kernels::AugSample> samples;
  std::vector<kernels::LetterboxSample> lb;
  int out_h = 0, out_w = 0;
};

Case make_case(uint32_t seed, int n, int out_h, int out_w) {
  std::mt19937 g(seed);
  auto uni = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(g); };
  auto irand = [&](int a, int b) { return std::uniform_int_distribution<int>(a, b)(g); };
  Case c;
  c.out_h = out_h, c.out_w = out_w;
  auto add_image = [&](int h, int w, int64_t& off, int64_t& step) {
    off = static_cast<int64_t>(c.arena.size());
    step = 3 * int64_t{w} + irand(0, 2) * 3;  // padded rows too
    for (int64_t k = 0; k < step * h; ++k) c.arena.push_back(static_cast<uint8_t>(irand(0, 255)));
  };
  for (int s = 0; s < n; ++s) {
    kernels::AugSample a{};
    a.nwarp = irand(1, 2);
    for (int wi = 0; wi < a.nwarp; ++wi) {
      kernels::AugWarp& w = a.warp[wi];
      w.src_w = irand(20, 70), w.src_h = irand(20, 70);
      w.ntiles = irand(1, 4);
      for (int k = 0; k < w.ntiles; ++k) {
        kernels::AugTile& t = w.tile[k];
        // tile k in column k % 2, row k / 2 of a 2x2 split at (cx, cy): disjoint rectangles
        const int cx = w.src_w / 2, cy = w.src_h / 2;
        const int x0 = k % 2 ? cx : 0, x1 = k % 2 ? w.src_w : cx, y0 = k / 2 ? cy : 0, y1 = k / 2 ? w.src_h : cy;
        t.ax = irand(x0, x1 - 1), t.ay = irand(y0, y1 - 1);
        t.aw = irand(1, x1 - t.ax), t.ah = irand(1, y1 - t.ay);
        t.w = t.aw + irand(0, 5), t.h = t.ah + irand(0, 5);
        t.padw = t.ax - irand(0, t.w - t.aw), t.padh = t.ay - irand(0, t.h - t.ah);
        add_image(t.h, t.w, t.offset, t.step);
      }
      const double ang = uni(-0.4, 0.4), sc = uni(0.3, 1.8), sh = uni(-0.1, 0.1);
      const double fwd[9] = {sc * std::cos(ang), sc * std::sin(ang) + sh, uni(-20, 40),
                             -sc * std::sin(ang), sc * std::cos(ang), uni(-20, 40),
                             0, 0, 1};
      w.perspective = irand(0, 3) == 0;
      if (w.perspective) {
        double m[9];
        std::memcpy(m, fwd, sizeof m);
        m[6] = uni(-1e-3, 1e-3), m[7] = uni(-1e-3, 1e-3);
        invert3(m, w.inv);
      } else {
        kernels::invert_affine_like_opencv(fwd, w.inv);
        w.inv[6] = 0, w.inv[7] = 0, w.inv[8] = 1;
      }
    }
    a.mix_r = uni(0.3, 0.7), a.mix_r2 = 1 - a.mix_r;
    a.hsv = irand(0, 3) != 0;
    a.gh = 1 + uni(-1, 1) * 0.015, a.gs = 1 + uni(-1, 1) * 0.7, a.gv = 1 + uni(-1, 1) * 0.4;
    a.flipud = irand(0, 1), a.fliplr = irand(0, 1);
    c.samples.push_back(a);
    // letterbox: up, down, exact 2x, copy
    kernels::LetterboxSample l{};
    const int mode = s % 4;
    l.h = irand(2, 60), l.w = irand(2, 60);
    if (mode == 2) l.h = 2 * irand(1, 12), l.w = 2 * irand(1, 12);
    add_image(l.h, l.w, l.offset, l.step);
    if (mode == 0) l.nh = std::min(out_h, l.h + irand(1, 20)), l.nw = std::min(out_w, l.w + irand(1, 20));
    else if (mode == 1) l.nh = std::max(1, std::min(out_h, l.h - irand(1, 10))), l.nw = std::max(1, std::min(out_w, l.w - irand(1, 10)));
    else if (mode == 2) l.nh = l.h / 2, l.nw = l.w / 2;
    else l.nh = std::min(out_h, l.h), l.nw = std::min(out_w, l.w);
    l.nh = std::min(l.nh, out_h), l.nw = std::min(l.nw, out_w);
    l.top = irand(0, out_h - l.nh), l.left = irand(0, out_w - l.nw);
    c.lb.push_back(l);
  }
  return c;
}

/// Raw output bytes of one entry on `dev`.
std::vector<uint8_t> run(const Case& c, Device dev, bool letterbox, DType dt, kernels::AugLayout layout,
                         const kernels::AugHsvModel& model) {
  Tensor arena = bytes_on(c.arena.data(), c.arena.size(), dev);
  const int64_t n = static_cast<int64_t>(c.samples.size());
  Tensor out = layout == kernels::AugLayout::HwcBgrU8 ? Tensor::empty({n, c.out_h, c.out_w, 3}, dt, dev)
                                                      : Tensor::empty({n, 3, c.out_h, c.out_w}, dt, dev);
  if (letterbox) {
    Tensor p = bytes_on(c.lb.data(), c.lb.size() * sizeof(kernels::LetterboxSample), dev);
    auto k = engine::kernel(kernels::kLetterbox, dt, dev);
    k.fn(k.ctx, dt, static_cast<const uint8_t*>(arena.data_ptr()),
         static_cast<const kernels::LetterboxSample*>(p.data_ptr()), n, c.out_h, c.out_w, layout, out.data_ptr());
  } else {
    Tensor p = bytes_on(c.samples.data(), c.samples.size() * sizeof(kernels::AugSample), dev);
    auto k = engine::kernel(kernels::kAugmentWarp, dt, dev);
    k.fn(k.ctx, dt, static_cast<const uint8_t*>(arena.data_ptr()), static_cast<const kernels::AugSample*>(p.data_ptr()),
         n, c.out_h, c.out_w, model, layout, out.data_ptr());
  }
  Tensor host = out.to(Device::cpu());
  std::vector<uint8_t> bytes(static_cast<size_t>(host.numel()) * engine::dtype_size(dt));
  std::memcpy(bytes.data(), host.data_ptr(), bytes.size());
  return bytes;
}

}  // namespace

TEST(AugmentKernelsCuda, MatchCpuTwinBytewise) {
  Y9_SKIP_WITHOUT_GPU();
  kernels::AugHsvModel other;
  other.simd_block = 16;
  other.simd_trunc = 0, other.simd_fma2 = 0, other.simd_fma3 = 1;
  other.tail_trunc = 1, other.tail_fma2 = 0, other.tail_fma3 = 0;
  const struct {
    uint32_t seed;
    int n, h, w;
  } shapes[] = {{1, 7, 23, 31}, {2, 3, 1, 1}, {3, 4, 40, 17}, {4, 5, 33, 64}};
  for (const auto& sh : shapes) {
    const Case c = make_case(sh.seed, sh.n, sh.h, sh.w);
    for (bool letterbox : {false, true})
      for (const kernels::AugHsvModel& model : {kernels::AugHsvModel{}, other}) {
        if (letterbox && model.simd_block == 16) continue;  // letterbox has no HSV
        const struct {
          DType dt;
          kernels::AugLayout layout;
        } outs[] = {{DType::U8, kernels::AugLayout::HwcBgrU8}, {DType::U8, kernels::AugLayout::ChwRgb},
                    {DType::F32, kernels::AugLayout::ChwRgb}, {DType::F16, kernels::AugLayout::ChwRgb},
                    {DType::BF16, kernels::AugLayout::ChwRgb}};
        for (const auto& o : outs) {
          SCOPED_TRACE(::testing::Message() << "seed " << sh.seed << " " << sh.h << "x" << sh.w << " letterbox "
                                            << letterbox << " simd_block " << model.simd_block << " "
                                            << engine::dtype_name(o.dt) << " layout " << int(o.layout));
          EXPECT_EQ(run(c, Device::cuda(0), letterbox, o.dt, o.layout, model),
                    run(c, Device::cpu(), letterbox, o.dt, o.layout, model));
        }
      }
  }
}

TEST(AugmentKernelsCuda, RejectsBadArguments) {
  Y9_SKIP_WITHOUT_GPU();
  for (Device dev : {Device::cuda(0), Device::cpu()}) {
    auto k = engine::kernel(kernels::kAugmentWarp, DType::F32, dev);
    EXPECT_THROW(k.fn(k.ctx, DType::F32, nullptr, nullptr, 1, 4, 4, kernels::AugHsvModel{},
                      kernels::AugLayout::HwcBgrU8, nullptr),
                 engine::ShapeError);
    EXPECT_THROW(k.fn(k.ctx, DType::F32, nullptr, nullptr, 1, 0, 4, kernels::AugHsvModel{},
                      kernels::AugLayout::ChwRgb, nullptr),
                 engine::ShapeError);
    EXPECT_FALSE(engine::backend(dev.type).supports(kernels::kLetterbox, DType::F64));
  }
}
