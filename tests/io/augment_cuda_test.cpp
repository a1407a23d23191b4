// Device augmentation (kernels/cuda/augment.cu, issue 12 item 1) against the CPU path on coco128 at
// 320 px (label gpu; skips without a device, fails with Y9_REQUIRE_GPU=1; runs under the emulator;
// without the coco128 folder, e.g. in the GPU kit, on a synthetic dataset instead):
// 100 seeded samples over three hyp sets (default; rotation + shear + mixup + flipud + non-mosaic
// samples; perspective) rendered from the host plans by augment_warp (and letterbox for the
// non-mosaic samples) match AugmentedDataset::get + io::finish_to_planes within 1 grey level, the
// plan-only labels equal the full call's, the CPU twin equals the CUDA kernel byte for byte, the
// float outputs are u8 / 255; letterbox of validation images matches io::letterbox; 1x1 and
// 10000x50 images pass through letterbox and mosaic; images unreadable after the scan are replaced
// in GPU-augmented batches as on the CPU path.
#include <gtest/gtest.h>

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "engine/backend.h"
#include "engine/half.h"
#include "engine/tensor.h"
#include "io/augment.h"
#include "io/augment_device.h"
#include "io/color.h"
#include "io/data_yaml.h"
#include "io/dataset.h"
#include "io/image.h"
#include "io/loader.h"
#include "io/synth.h"
#include "tests/io/tiny_dataset.h"
#include "tests/testutil.h"

using engine::Device;
using engine::DType;
using engine::Tensor;

namespace {

/// coco128's training records; where the folder is absent (the GPU kit carries no dataset), a
/// synthetic dataset of 48 images of 400 px (io::write_synth_dataset) in a temporary folder that
/// lives as long as the process.
const std::vector<io::ImageRecord>& coco128() {
  static tiny::TempDir synth_dir("augment_cuda_synth");
  static const std::vector<io::ImageRecord> recs = [] {
    std::string yaml;
    const std::string dir = testutil::coco128_dir();
    if (!dir.empty()) {
      yaml = dir + "/coco128.yaml";
    } else {
      io::SynthOptions so;
      so.out_dir = synth_dir.str();
      so.n_train = 48;
      so.n_val = 0;
      so.img_size = 400;
      so.seed = 12;
      io::write_synth_dataset(so);
      yaml = so.out_dir + "/data.yaml";
      std::printf("coco128 not found: a synthetic dataset of 48 images in %s\n", so.out_dir.c_str());
    }
    auto cfg = io::load_data_yaml(yaml);
    io::ScanOptions o;
    o.nc = cfg.nc;
    o.use_cache = false;
    return io::scan_dataset(cfg.train, o).records;
  }();
  return recs;
}

Tensor bytes_on(const void* p, size_t n, Device d) {
  std::vector<uint8_t> v(std::max<size_t>(n, 1), 0);
  if (n) std::memcpy(v.data(), p, n);
  return Tensor::from_vector(v, {static_cast<int64_t>(std::max<size_t>(n, 1))}, d);
}

void append(std::vector<uint8_t>& arena, const cv::Mat& img, int64_t& off, int64_t& step) {
  const cv::Mat c = img.isContinuous() ? img : img.clone();
  off = static_cast<int64_t>(arena.size());
  step = 3 * static_cast<int64_t>(c.cols);
  arena.insert(arena.end(), c.data, c.data + c.total() * 3);
}

/// One rendered batch and what the CPU path gave for it.
struct Batch {
  std::vector<uint8_t> arena;                  // tiles, then the letterbox slots
  std::vector<kernels::LetterboxSample> lb;    // non-mosaic samples: letterbox into the arena
  int64_t lb_out = 0;                          // arena offset of the letterbox outputs
  int lb_h = 0, lb_w = 0;
  std::vector<kernels::AugSample> samples;
  std::vector<std::vector<uint8_t>> expected;  // CPU planes (R, G, B), per sample
  int h = 0, w = 0;
};

/// Plans samples `idx` of `ds` in `epoch`, renders them through the CPU path (get + finish), and
/// builds the device records; checks the plan-only labels against the full call.
Batch plan_batch(const io::AugmentedDataset& ds, const std::vector<int64_t>& idx, int epoch) {
  Batch b;
  std::vector<io::SamplePlan> plans;
  for (int64_t i : idx) {
    io::PixelOps ops, ops2;
    io::SamplePlan plan, plan2;
    const io::Sample full = ds.get(i, epoch, &ops, &plan, true);
    const io::Sample lite = ds.get(i, epoch, &ops2, &plan2, false);
    EXPECT_TRUE(lite.img.empty());
    EXPECT_EQ(full.labels.size(), lite.labels.size()) << "sample " << i;
    for (size_t k = 0; k < std::min(full.labels.size(), lite.labels.size()); ++k)
      for (int c = 0; c < 5; ++c) EXPECT_NEAR(full.labels[k][c], lite.labels[k][c], 1e-4) << "sample " << i;
    EXPECT_EQ(plan.mosaic, plan2.mosaic);
    EXPECT_EQ(plan.nmosaic, plan2.nmosaic);
    EXPECT_EQ(plan.M, plan2.M);
    for (int m = 0; m < plan.nmosaic; ++m) {
      EXPECT_EQ(plan.m[m].index, plan2.m[m].index);
      EXPECT_EQ(plan.m[m].M, plan2.m[m].M);
      for (int k = 0; k < 4; ++k) EXPECT_EQ(plan.m[m].dst[k], plan2.m[m].dst[k]);
    }
    b.h = full.img.rows, b.w = full.img.cols;
    std::vector<uint8_t> planes(3 * static_cast<size_t>(b.h) * b.w);
    const size_t n = static_cast<size_t>(b.h) * b.w;
    io::finish_to_planes(full.img, ops, planes.data(), planes.data() + n, planes.data() + 2 * n);
    b.expected.push_back(std::move(planes));
    plans.push_back(plan2);  // the device renders the plan-only call's parameters
  }
  // Tiles (load_image, as the CPU decode gives them), then letterbox slots.
  std::vector<std::array<kernels::AugWarp, 2>> warps(plans.size());
  std::vector<size_t> nonmosaic;
  for (size_t s = 0; s < plans.size(); ++s) {
    const io::SamplePlan& p = plans[s];
    if (!p.mosaic) {
      nonmosaic.push_back(s);
      continue;
    }
    for (int m = 0; m < p.nmosaic; ++m) {
      std::array<int64_t, 4> off{}, step{};
      for (int k = 0; k < 4; ++k) {
        if (p.m[m].dst[k].empty()) continue;
        const cv::Mat t = io::load_image(ds.records()[p.m[m].index[k]].image_path, ds.options().img_size, true).img;
        EXPECT_EQ(t.rows, p.m[m].h[k]);
        EXPECT_EQ(t.cols, p.m[m].w[k]);
        append(b.arena, t, off[k], step[k]);
      }
      warps[s][m] = io::mosaic_warp(p.m[m], off, step);
    }
  }
  for (size_t s : nonmosaic) {
    int64_t off, step;
    const cv::Mat im = io::load_image(ds.records()[plans[s].index].image_path, ds.options().img_size, true).img;
    append(b.arena, im, off, step);
    b.lb.push_back(io::letterbox_sample(plans[s], off, step));
    b.lb_h = plans[s].lb_h, b.lb_w = plans[s].lb_w;
  }
  b.lb_out = static_cast<int64_t>(b.arena.size());
  b.arena.resize(b.arena.size() + b.lb.size() * 3 * static_cast<size_t>(b.lb_h) * b.lb_w, 0);
  for (size_t j = 0; j < nonmosaic.size(); ++j) {
    const size_t s = nonmosaic[j];
    const int64_t step = 3 * static_cast<int64_t>(b.lb_w);
    warps[s][0] = io::image_warp(plans[s], b.lb_out + static_cast<int64_t>(j) * b.lb_h * step, step);
  }
  for (size_t s = 0; s < plans.size(); ++s)
    b.samples.push_back(io::aug_sample(plans[s], warps[s][0], plans[s].nmosaic == 2 ? &warps[s][1] : nullptr));
  return b;
}

/// Runs letterbox (non-mosaic samples) and augment_warp on `dev`; returns the output tensor
/// [n, 3, h, w] of `dt` on the CPU.
Tensor render(const Batch& b, Device dev, DType dt, const kernels::AugHsvModel& model) {
  Tensor arena = bytes_on(b.arena.data(), b.arena.size(), dev);
  Tensor lbs = bytes_on(b.lb.data(), b.lb.size() * sizeof(kernels::LetterboxSample), dev);
  Tensor smp = bytes_on(b.samples.data(), b.samples.size() * sizeof(kernels::AugSample), dev);
  uint8_t* base = static_cast<uint8_t*>(arena.data_ptr());
  if (!b.lb.empty()) {
    auto k = engine::kernel(kernels::kLetterbox, DType::U8, dev);
    k.fn(k.ctx, DType::U8, base, static_cast<const kernels::LetterboxSample*>(lbs.data_ptr()),
         static_cast<int64_t>(b.lb.size()), b.lb_h, b.lb_w, kernels::AugLayout::HwcBgrU8, base + b.lb_out);
  }
  const int64_t n = static_cast<int64_t>(b.samples.size());
  Tensor out = Tensor::empty({n, 3, b.h, b.w}, dt, dev);
  auto k = engine::kernel(kernels::kAugmentWarp, dt, dev);
  k.fn(k.ctx, dt, base, static_cast<const kernels::AugSample*>(smp.data_ptr()), n, b.h, b.w, model,
       kernels::AugLayout::ChwRgb, out.data_ptr());
  return out.to(Device::cpu());
}

/// Bytes compared and bytes that differed (by 1) over the whole test, for the report.
size_t g_compared = 0, g_differ = 0;

/// Max |gpu - cpu| over a batch, with the count of differing bytes.
void expect_close(const Batch& b, const std::vector<uint8_t>& got, const std::string& what) {
  const size_t per = 3 * static_cast<size_t>(b.h) * b.w;
  ASSERT_EQ(got.size(), per * b.expected.size());
  for (size_t s = 0; s < b.expected.size(); ++s) {
    int worst = 0;
    size_t diff = 0;
    for (size_t i = 0; i < per; ++i) {
      const int d = std::abs(int(got[s * per + i]) - int(b.expected[s][i]));
      worst = std::max(worst, d);
      diff += d != 0;
    }
    EXPECT_LE(worst, 1) << what << " sample " << s << ": " << diff << " bytes differ";
    g_compared += per;
    g_differ += diff;
  }
}

struct HypSet {
  const char* name;
  io::Hyp hyp;
  int count;
};

std::vector<HypSet> hyp_sets() {
  std::vector<HypSet> v;
  v.push_back({"default", io::Hyp{}, 50});
  io::Hyp h;
  h.degrees = 10;
  h.shear = 3;
  h.mosaic = 0.6;
  h.mixup = 0.5;
  h.flipud = 0.5;
  v.push_back({"rotate-shear-mixup-flipud", h, 40});
  io::Hyp p;
  p.perspective = 0.0005;
  p.mixup = 0.3;
  v.push_back({"perspective", p, 10});
  return v;
}

}  // namespace

TEST(AugmentCuda, MatchesCpuPathOnCoco128) {
  Y9_SKIP_WITHOUT_GPU();
  const auto& recs = coco128();
  ASSERT_GE(recs.size(), 24u);
  const kernels::AugHsvModel model = io::aug_hsv_model();
  int total = 0, nonmosaic = 0, mixups = 0;
  for (const HypSet& hs : hyp_sets()) {
    io::AugmentOptions o;
    o.img_size = 320;
    o.seed = 12;
    o.hyp = hs.hyp;
    o.hyp.copy_paste = 0;
    io::AugmentedDataset ds(recs, o);
    constexpr int kPerLaunch = 5;
    for (int first = 0; first < hs.count; first += kPerLaunch) {
      std::vector<int64_t> idx;
      for (int j = first; j < std::min(hs.count, first + kPerLaunch); ++j) idx.push_back((j * 37 + 5) % ds.size());
      SCOPED_TRACE(std::string(hs.name) + " samples from " + std::to_string(first));
      const Batch b = plan_batch(ds, idx, /*epoch=*/first % 3);
      for (const auto& s : b.samples) mixups += s.nwarp == 2;
      nonmosaic += static_cast<int>(b.lb.size());
      total += static_cast<int>(idx.size());
      const std::vector<uint8_t> gpu = render(b, Device::cuda(0), DType::U8, model).to_vector<uint8_t>();
      expect_close(b, gpu, "cuda u8");
      // The CPU twin computes the same bytes.
      EXPECT_EQ(render(b, Device::cpu(), DType::U8, model).to_vector<uint8_t>(), gpu);
      if (first == 0) {
        // The float layouts are u8 / 255 (then rounded to F16 / BF16).
        const std::vector<float> f32 = render(b, Device::cuda(0), DType::F32, model).to_vector<float>();
        const std::vector<float> f16 = render(b, Device::cuda(0), DType::F16, model).to(DType::F32).to_vector<float>();
        const std::vector<float> bf16 = render(b, Device::cuda(0), DType::BF16, model).to(DType::F32).to_vector<float>();
        for (size_t i = 0; i < gpu.size(); ++i) {
          const float u = static_cast<float>(gpu[i]) / 255.0f;
          ASSERT_EQ(f32[i], u) << i;
          ASSERT_EQ(f16[i], engine::f16_to_f32(engine::f32_to_f16(u))) << i;
          ASSERT_EQ(bf16[i], engine::bf16_to_f32(engine::f32_to_bf16(u))) << i;
        }
      }
    }
  }
  std::printf("augment_warp vs CPU path: %d samples (%d non-mosaic, %d mixup), %zu of %zu bytes differ by 1\n",
              total, nonmosaic, mixups, g_differ, g_compared);
  EXPECT_EQ(total, 100);
  EXPECT_GT(nonmosaic, 0);
  EXPECT_GT(mixups, 0);
}

TEST(AugmentCuda, LetterboxMatchesCpu) {
  Y9_SKIP_WITHOUT_GPU();
  const auto& recs = coco128();
  ASSERT_GE(recs.size(), 24u);
  // Validation letterbox (scaleup False) to 320 x 320 from the decoded image (resize: the general
  // INTER_LINEAR path and the exact-2x area shortcut), plus an up-scale (scaleup True).
  for (bool scaleup : {false, true}) {
    std::vector<uint8_t> arena;
    std::vector<kernels::LetterboxSample> lbs;
    std::vector<cv::Mat> expected;
    for (int j = 0; j < 6; ++j) {
      cv::Mat im = io::load_image(recs[(j * 21 + 3) % recs.size()].image_path, 640, false).img;
      if (scaleup) cv::resize(im, im, cv::Size(im.cols / 3, im.rows / 3), 0, 0, cv::INTER_AREA);
      const io::LetterboxResult lb = io::letterbox(im, 320, 320, false, false, scaleup);
      expected.push_back(lb.img);
      int64_t off, step;
      append(arena, im, off, step);
      kernels::LetterboxSample s{};
      s.offset = off, s.step = step, s.h = im.rows, s.w = im.cols;
      s.top = static_cast<int>(std::nearbyint(lb.dh - 0.1));
      s.left = static_cast<int>(std::nearbyint(lb.dw - 0.1));
      s.nh = 320 - s.top - static_cast<int>(std::nearbyint(lb.dh + 0.1));
      s.nw = 320 - s.left - static_cast<int>(std::nearbyint(lb.dw + 0.1));
      lbs.push_back(s);
    }
    for (Device dev : {Device::cuda(0), Device::cpu()}) {
      Tensor a = bytes_on(arena.data(), arena.size(), dev);
      Tensor s = bytes_on(lbs.data(), lbs.size() * sizeof(kernels::LetterboxSample), dev);
      Tensor out = Tensor::empty({static_cast<int64_t>(lbs.size()), 320, 320, 3}, DType::U8, dev);
      auto k = engine::kernel(kernels::kLetterbox, DType::U8, dev);
      k.fn(k.ctx, DType::U8, static_cast<const uint8_t*>(a.data_ptr()),
           static_cast<const kernels::LetterboxSample*>(s.data_ptr()), static_cast<int64_t>(lbs.size()), 320, 320,
           kernels::AugLayout::HwcBgrU8, out.data_ptr());
      const std::vector<uint8_t> got = out.to(Device::cpu()).to_vector<uint8_t>();
      const size_t per = 320 * 320 * 3;
      size_t differ = 0;
      for (size_t j = 0; j < expected.size(); ++j) {
        int worst = 0;
        for (size_t i = 0; i < per; ++i) {
          const int d = std::abs(int(got[j * per + i]) - int(expected[j].data[i]));
          worst = std::max(worst, d);
          differ += d != 0;
        }
        EXPECT_LE(worst, 1) << "scaleup " << scaleup << " image " << j << " on " << dev.str();
      }
      std::printf("letterbox (scaleup %d) on %s vs io::letterbox: %zu of %zu bytes differ by 1\n", int(scaleup),
                  dev.str().c_str(), differ, per * expected.size());
    }
  }
}

TEST(AugmentCuda, TinyAndElongatedImages) {
  Y9_SKIP_WITHOUT_GPU();
  // 1x1 and 10000x50 (h x w) images: letterbox to 320 and a mosaic of them, no crash, and the
  // letterbox within 1 grey level of io::letterbox.
  cv::Mat tiny(1, 1, CV_8UC3, cv::Scalar(10, 200, 30));
  cv::Mat tall(10000, 50, CV_8UC3);
  cv::randu(tall, 0, 256);
  for (const cv::Mat& src : {tiny, tall}) {
    const int s = 320;
    // load_image's resize (augment: INTER_LINEAR), at least 1 px a side
    const double r = static_cast<double>(s) / std::max(src.rows, src.cols);
    cv::Mat im;
    cv::resize(src, im, cv::Size(std::max(1, int(src.cols * r)), std::max(1, int(src.rows * r))), 0, 0,
               cv::INTER_LINEAR);
    const io::LetterboxResult lb = io::letterbox(im, s, s, false, false, true);
    std::vector<uint8_t> arena;
    int64_t off, step;
    append(arena, im, off, step);
    kernels::LetterboxSample ls{};
    ls.offset = off, ls.step = step, ls.h = im.rows, ls.w = im.cols;
    ls.top = static_cast<int>(std::nearbyint(lb.dh - 0.1));
    ls.left = static_cast<int>(std::nearbyint(lb.dw - 0.1));
    ls.nh = s - ls.top - static_cast<int>(std::nearbyint(lb.dh + 0.1));
    ls.nw = s - ls.left - static_cast<int>(std::nearbyint(lb.dw + 0.1));
    // a mosaic of four copies of the image around the canvas centre, scale 1, no translation
    io::MosaicPlan m;
    m.canvas = 2 * s;
    const int xc = s, yc = s;
    for (int k = 0; k < 4; ++k) {
      const int h = im.rows, w = im.cols;
      int ax1, ay1, ax2, ay2, bx1, by1;
      if (k == 0) { ax1 = std::max(xc - w, 0); ay1 = std::max(yc - h, 0); ax2 = xc; ay2 = yc; bx1 = w - (ax2 - ax1); by1 = h - (ay2 - ay1); }
      else if (k == 1) { ax1 = xc; ay1 = std::max(yc - h, 0); ax2 = std::min(xc + w, 2 * s); ay2 = yc; bx1 = 0; by1 = h - (ay2 - ay1); }
      else if (k == 2) { ax1 = std::max(xc - w, 0); ay1 = yc; ax2 = xc; ay2 = std::min(2 * s, yc + h); bx1 = w - (ax2 - ax1); by1 = 0; }
      else { ax1 = xc; ay1 = yc; ax2 = std::min(xc + w, 2 * s); ay2 = std::min(2 * s, yc + h); bx1 = 0; by1 = 0; }
      m.h[k] = h, m.w[k] = w;
      m.dst[k] = cv::Rect(ax1, ay1, ax2 - ax1, ay2 - ay1);
      m.padw[k] = ax1 - bx1, m.padh[k] = ay1 - by1;
    }
    m.M = cv::Matx33d(0.5, 0, 0, 0, 0.5, 0, 0, 0, 1);
    const kernels::AugWarp w = io::mosaic_warp(m, {off, off, off, off}, {step, step, step, step});
    io::SamplePlan p;
    p.ops.hsv = true, p.ops.gh = 1.01, p.ops.gs = 0.8, p.ops.gv = 1.2, p.ops.fliplr = true;
    const kernels::AugSample as = io::aug_sample(p, w);
    // CPU reference of the mosaic: canvas + warpAffine + finish
    cv::Mat canvas(2 * s, 2 * s, CV_8UC3, cv::Scalar::all(114));
    for (int k = 0; k < 4; ++k)
      if (!m.dst[k].empty())
        im(cv::Rect(m.dst[k].x - m.padw[k], m.dst[k].y - m.padh[k], m.dst[k].width, m.dst[k].height))
            .copyTo(canvas(m.dst[k]));
    cv::Mat warped;
    cv::warpAffine(canvas, warped, cv::Matx23d(0.5, 0, 0, 0, 0.5, 0), cv::Size(s, s), cv::INTER_LINEAR,
                   cv::BORDER_CONSTANT, cv::Scalar::all(114));
    std::vector<uint8_t> ref(3 * s * s);
    io::finish_to_planes(warped, p.ops, ref.data(), ref.data() + s * s, ref.data() + 2 * s * s);
    for (Device dev : {Device::cuda(0), Device::cpu()}) {
      Tensor a = bytes_on(arena.data(), arena.size(), dev);
      Tensor ts = bytes_on(&ls, sizeof ls, dev);
      Tensor out = Tensor::empty({1, s, s, 3}, DType::U8, dev);
      auto k = engine::kernel(kernels::kLetterbox, DType::U8, dev);
      k.fn(k.ctx, DType::U8, static_cast<const uint8_t*>(a.data_ptr()),
           static_cast<const kernels::LetterboxSample*>(ts.data_ptr()), 1, s, s, kernels::AugLayout::HwcBgrU8,
           out.data_ptr());
      const std::vector<uint8_t> got = out.to(Device::cpu()).to_vector<uint8_t>();
      int worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(int(got[i]) - int(lb.img.data[i])));
      EXPECT_LE(worst, 1) << src.rows << "x" << src.cols << " letterbox on " << dev.str();

      Tensor sm = bytes_on(&as, sizeof as, dev);
      Tensor mo = Tensor::empty({1, 3, s, s}, DType::U8, dev);
      auto kw = engine::kernel(kernels::kAugmentWarp, DType::U8, dev);
      kw.fn(kw.ctx, DType::U8, static_cast<const uint8_t*>(a.data_ptr()),
            static_cast<const kernels::AugSample*>(sm.data_ptr()), 1, s, s, io::aug_hsv_model(),
            kernels::AugLayout::ChwRgb, mo.data_ptr());
      const std::vector<uint8_t> mg = mo.to(Device::cpu()).to_vector<uint8_t>();
      worst = 0;
      for (size_t i = 0; i < mg.size(); ++i) worst = std::max(worst, std::abs(int(mg[i]) - int(ref[i])));
      EXPECT_LE(worst, 1) << src.rows << "x" << src.cols << " mosaic on " << dev.str();
    }
  }
}

TEST(AugmentCuda, LoaderGpuAugmentationEqualsCpu) {
  Y9_SKIP_WITHOUT_GPU();
  const auto& recs = coco128();
  ASSERT_GE(recs.size(), 24u);
  // DataLoader with --augment-device gpu: the same batches (images within 1 grey level, here
  // bitwise; targets equal) as the CPU path, on the device; mosaic, mixup and non-mosaic samples.
  // 160 px: resized tiles (row-limited decode + resize); 640 px (first batch only): the
  // unresized tiles' region-limited decode.
  std::vector<io::ImageRecord> sub(recs.begin(), recs.begin() + 24);
  for (int workers : {0, 2}) {
    const int img_size = workers == 0 ? 160 : 640;
    io::AugmentOptions o;
    o.img_size = img_size;
    o.seed = 7;
    o.hyp.mosaic = 0.7;
    o.hyp.mixup = 0.4;
    o.hyp.copy_paste = 0;
    auto ds = std::make_shared<io::AugmentedDataset>(sub, o);
    io::LoaderOptions lo;
    lo.batch_size = 4;
    lo.seed = 3;
    lo.workers = workers;
    lo.epochs = 1;
    io::DataLoader cpu(ds, lo);
    lo.augment_device = io::LoaderOptions::AugmentDevice::Gpu;
    lo.device = Device::cuda(0);
    io::DataLoader gpu(ds, lo);
    cpu.start_epoch(0);
    gpu.start_epoch(0);
    io::Batch a, b;
    int batches = 0;
    while (cpu.next(a)) {
      ASSERT_TRUE(gpu.next(b));
      EXPECT_TRUE(b.images.device().is_cuda());
      EXPECT_EQ(b.images.shape(), a.images.shape());
      const std::vector<uint8_t> ga = a.images.to_vector<uint8_t>(), gb = b.images.to(Device::cpu()).to_vector<uint8_t>();
      ASSERT_EQ(ga.size(), gb.size());
      int worst = 0;
      for (size_t i = 0; i < ga.size(); ++i) worst = std::max(worst, std::abs(int(ga[i]) - int(gb[i])));
      EXPECT_LE(worst, 1) << "batch " << batches << " workers " << workers;
      EXPECT_EQ(a.targets.to_vector<float>(), b.targets.to_vector<float>());
      EXPECT_EQ(a.indices, b.indices);
      EXPECT_EQ(a.paths, b.paths);
      ++batches;
      if (img_size == 640) break;  // the emulator renders 640 px slowly
    }
    if (img_size == 640) continue;
    EXPECT_FALSE(gpu.next(b));
    EXPECT_EQ(batches, 6);
  }
}

TEST(AugmentCuda, UnreadableImagesInAGpuAugmentedBatchAreReplacedAsOnTheCpu) {
  Y9_SKIP_WITHOUT_GPU();
  // Issue 12, bad input: JPEGs emptied or cut inside their header after the scan, inside GPU-augmented
  // batches (mosaic, mixup, non-mosaic samples): the same warning naming each file and the same
  // replacement sample as on the CPU path, so the batches stay full and equal (pixels within 1
  // grey level, targets, indices and paths equal).
  tiny::TempDir d("augment_cuda_unreadable");
  std::vector<io::ImageRecord> recs;
  cv::RNG rng(3);
  for (int i = 0; i < 16; ++i) {
    cv::Mat im(48 + 8 * (i % 5), 64 - 4 * (i % 3), CV_8UC3);
    rng.fill(im, cv::RNG::UNIFORM, 0, 256);
    io::ImageRecord r;
    r.image_path = (d.path / ("im" + std::to_string(i) + ".jpg")).string();
    io::write_image_bgr(r.image_path, im);
    r.height = im.rows, r.width = im.cols;
    r.labels.push_back({static_cast<float>(i % 3), 0.5f, 0.5f, 0.4f, 0.3f});
    recs.push_back(r);
  }
  {
    const std::vector<unsigned char> bytes = tiny::read_bytes(recs[5].image_path);
    // cut inside the header
    tiny::write_bytes(recs[5].image_path, std::vector<unsigned char>(bytes.begin(), bytes.begin() + 20));
    tiny::write_bytes(recs[11].image_path, {});
  }
  io::AugmentOptions o;
  o.img_size = 64;
  o.seed = 4;
  o.hyp.mosaic = 0.7;
  o.hyp.mixup = 0.3;
  o.hyp.copy_paste = 0;
  auto ds = std::make_shared<io::AugmentedDataset>(recs, o);
  io::LoaderOptions lo;
  lo.batch_size = 4;
  lo.seed = 2;
  lo.workers = 0;
  lo.epochs = 1;
  std::string out[2];
  std::vector<io::Batch> batches[2];
  for (int g = 0; g < 2; ++g) {
    if (g == 1) {
      lo.augment_device = io::LoaderOptions::AugmentDevice::Gpu;
      lo.device = Device::cuda(0);
    }
    io::DataLoader dl(ds, lo);
    testing::internal::CaptureStdout();
    dl.start_epoch(0);
    io::Batch b;
    try {
      while (dl.next(b)) batches[g].push_back(b);
    } catch (...) {
      testing::internal::GetCapturedStdout();
      throw;
    }
    out[g] = testing::internal::GetCapturedStdout();
  }
  for (const char* f : {"im5.jpg", "im11.jpg"}) EXPECT_NE(out[0].find(f), std::string::npos) << out[0];
  EXPECT_NE(out[0].find("sample replaced by"), std::string::npos) << out[0];
  EXPECT_EQ(out[0], out[1]);
  ASSERT_EQ(batches[0].size(), 4u);
  ASSERT_EQ(batches[1].size(), 4u);
  for (size_t k = 0; k < 4; ++k) {
    const io::Batch &a = batches[0][k], &b = batches[1][k];
    EXPECT_EQ(a.indices.size(), 4u);
    EXPECT_EQ(a.indices, b.indices);
    EXPECT_EQ(a.paths, b.paths);
    EXPECT_EQ(a.targets.to_vector<float>(), b.targets.to_vector<float>());
    ASSERT_EQ(a.images.shape(), b.images.shape());
    const std::vector<uint8_t> ga = a.images.to_vector<uint8_t>(), gb = b.images.to(Device::cpu()).to_vector<uint8_t>();
    int worst = 0;
    for (size_t i = 0; i < ga.size(); ++i) worst = std::max(worst, std::abs(int(ga[i]) - int(gb[i])));
    EXPECT_LE(worst, 1) << "batch " << k;
  }
}

TEST(AugmentCuda, DegenerateImagesThroughTheDatasetPath) {
  Y9_SKIP_WITHOUT_GPU();
  // 1x1, 10000x50 and 50x10000 JPEGs (with a box each) in a dataset at 64 px: mosaic (with mixup)
  // and non-mosaic samples planned, rendered on the device and compared with the CPU path.
  tiny::TempDir d("augment_cuda_degenerate");
  std::vector<io::ImageRecord> recs;
  const int sizes[][2] = {{1, 1}, {10000, 50}, {50, 10000}, {480, 640}};
  cv::RNG rng(5);
  for (int i = 0; i < 4; ++i) {
    cv::Mat im(sizes[i][0], sizes[i][1], CV_8UC3);
    rng.fill(im, cv::RNG::UNIFORM, 0, 256);
    io::ImageRecord r;
    r.image_path = (d.path / ("im" + std::to_string(i) + ".jpg")).string();
    io::write_image_bgr(r.image_path, im);  // cv::imwrite, or libjpeg-turbo in the GPU kit
    r.height = sizes[i][0], r.width = sizes[i][1];
    r.labels.push_back({static_cast<float>(i), 0.5f, 0.5f, 0.4f, 0.3f});
    recs.push_back(r);
  }
  io::AugmentOptions o;
  o.img_size = 64;
  o.seed = 9;
  o.hyp.mosaic = 0.6;
  o.hyp.mixup = 0.5;
  o.hyp.copy_paste = 0;
  io::AugmentedDataset ds(recs, o);
  const kernels::AugHsvModel model = io::aug_hsv_model();
  for (int epoch = 0; epoch < 4; ++epoch) {
    SCOPED_TRACE("epoch " + std::to_string(epoch));
    const Batch b = plan_batch(ds, {0, 1, 2, 3}, epoch);
    const std::vector<uint8_t> gpu = render(b, Device::cuda(0), DType::U8, model).to_vector<uint8_t>();
    expect_close(b, gpu, "degenerate");
    EXPECT_EQ(render(b, Device::cpu(), DType::U8, model).to_vector<uint8_t>(), gpu);
  }
}
