// Augmentation: fixed-parameter mosaic + affine against the closed-form official transform,
// boxes inside the image, letterbox/load_image rules, rect shapes, seeding, close_mosaic.
#include <gtest/gtest.h>

#include <opencv2/imgproc.hpp>

#include <cmath>

#include "engine/error.h"
#include "io/augment.h"
#include "tests/io/tiny_dataset.h"

namespace {

io::Tile solid_tile(int w, int h, uint8_t v, std::vector<std::array<float, 5>> labels) {
  io::Tile t;
  t.img = cv::Mat(h, w, CV_8UC3, cv::Scalar(v, v, v));
  t.labels = std::move(labels);
  return t;
}

}  // namespace

TEST(Mosaic, FixedParametersMatchClosedForm) {
  const int s = 64;
  // Tile sizes and labels chosen so every quadrant is partly cut by the canvas or the centre.
  std::array<io::Tile, 4> tiles = {solid_tile(50, 40, 10, {{1, 0.5f, 0.5f, 0.4f, 0.5f}}),
                                   solid_tile(64, 30, 20, {{2, 0.25f, 0.5f, 0.3f, 0.6f}}),
                                   solid_tile(30, 64, 30, {{3, 0.5f, 0.25f, 0.8f, 0.3f}}),
                                   solid_tile(64, 64, 40, {{4, 0.9f, 0.9f, 0.4f, 0.4f}})};
  const int xc = 70, yc = 50;
  cv::Mat canvas;
  io::PixelBoxes boxes;
  io::build_mosaic(tiles, xc, yc, s, canvas, boxes);
  ASSERT_EQ(canvas.rows, 2 * s);
  // Placement: tile k's top-left pixel offset (padw, padh) from the official formulas.
  const double padw[4] = {xc - 50.0, xc, xc - 30.0, xc}, padh[4] = {yc - 40.0, yc - 30.0, yc, yc};
  const int tw[4] = {50, 64, 30, 64}, th[4] = {40, 30, 64, 64};
  EXPECT_EQ(canvas.at<cv::Vec3b>(yc - 1, xc - 1)[0], 10);
  EXPECT_EQ(canvas.at<cv::Vec3b>(yc - 1, xc)[0], 20);
  EXPECT_EQ(canvas.at<cv::Vec3b>(yc, xc - 1)[0], 30);
  EXPECT_EQ(canvas.at<cv::Vec3b>(yc, xc)[0], 40);
  EXPECT_EQ(canvas.at<cv::Vec3b>(0, 0)[0], 114);                 // outside tile 0 (starts at x=20, y=10)
  EXPECT_EQ(canvas.at<cv::Vec3b>(2 * s - 1, xc - 1)[0], 114);    // below tile 2 (ends at y=114)
  ASSERT_EQ(boxes.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    const auto& l = tiles[k].labels[0];
    const double x1 = std::clamp(tw[k] * (l[1] - l[3] / 2) + padw[k], 0.0, 2.0 * s);
    const double y1 = std::clamp(th[k] * (l[2] - l[4] / 2) + padh[k], 0.0, 2.0 * s);
    const double x2 = std::clamp(tw[k] * (l[1] + l[3] / 2) + padw[k], 0.0, 2.0 * s);
    const double y2 = std::clamp(th[k] * (l[2] + l[4] / 2) + padh[k], 0.0, 2.0 * s);
    EXPECT_EQ(boxes[k][0], l[0]);
    EXPECT_NEAR(boxes[k][1], x1, 1e-4);
    EXPECT_NEAR(boxes[k][2], y1, 1e-4);
    EXPECT_NEAR(boxes[k][3], x2, 1e-4);
    EXPECT_NEAR(boxes[k][4], y2, 1e-4);
  }
  // Default-hyp affine: x' = sc*(x - W/2) + tx, y' = sc*(y - H/2) + ty, clip to [0, s], then
  // box_candidates against the original box scaled by sc.
  io::PerspectiveParams p;
  p.scale = 0.75;
  p.tx_frac = 0.45;
  p.ty_frac = 0.55;
  const cv::Matx33d M = io::perspective_matrix(p, 2 * s, 2 * s, s, s);
  io::PixelBoxes warped = boxes;
  cv::Mat img = canvas.clone();
  io::apply_perspective(img, warped, M, p.scale, false, s, s);
  ASSERT_EQ(img.rows, s);
  ASSERT_EQ(img.cols, s);
  const double tx = 0.45 * s, ty = 0.55 * s;
  size_t j = 0;
  for (const auto& b : boxes) {
    const double nx1 = std::clamp(0.75 * (b[1] - s) + tx, 0.0, 1.0 * s), nx2 = std::clamp(0.75 * (b[3] - s) + tx, 0.0, 1.0 * s);
    const double ny1 = std::clamp(0.75 * (b[2] - s) + ty, 0.0, 1.0 * s), ny2 = std::clamp(0.75 * (b[4] - s) + ty, 0.0, 1.0 * s);
    const double w1 = 0.75 * (b[3] - b[1]), h1 = 0.75 * (b[4] - b[2]);
    const double w2 = nx2 - nx1, h2 = ny2 - ny1;
    const bool keep = w2 > 2 && h2 > 2 && w2 * h2 / (w1 * h1 + 1e-16) > 0.1 &&
                      std::max(w2 / (h2 + 1e-16), h2 / (w2 + 1e-16)) < 100;
    if (!keep) continue;
    ASSERT_LT(j, warped.size());
    EXPECT_EQ(warped[j][0], b[0]);
    EXPECT_NEAR(warped[j][1], nx1, 1e-4);
    EXPECT_NEAR(warped[j][2], ny1, 1e-4);
    EXPECT_NEAR(warped[j][3], nx2, 1e-4);
    EXPECT_NEAR(warped[j][4], ny2, 1e-4);
    ++j;
  }
  EXPECT_EQ(j, warped.size());
  EXPECT_GT(j, 0u);
  // Pixel check: output pixel (u, v) samples the canvas at ((u - tx)/sc + s, (v - ty)/sc + s).
  const int u = 30, v = 40;
  const double sx = (u - tx) / 0.75 + s, sy = (v - ty) / 0.75 + s;
  if (std::abs(sx - xc) > 2 && std::abs(sy - yc) > 2)
    EXPECT_NEAR(img.at<cv::Vec3b>(v, u)[0], canvas.at<cv::Vec3b>(static_cast<int>(sy), static_cast<int>(sx))[0], 1);
}

TEST(Perspective, BoxCandidatesRule) {
  EXPECT_TRUE(io::box_candidate({0, 0, 10, 10}, {0, 0, 10, 10}));
  EXPECT_FALSE(io::box_candidate({0, 0, 10, 10}, {0, 0, 2, 10}));   // w2 <= 2
  EXPECT_FALSE(io::box_candidate({0, 0, 100, 100}, {0, 0, 9, 9}));  // area ratio 0.0081
  EXPECT_FALSE(io::box_candidate({0, 0, 1000, 10}, {0, 0, 500, 3}, 2, 100, 0.0001));  // aspect 166
}

TEST(Letterbox, RoundingAndOddPadding) {
  cv::Mat im(37, 50, CV_8UC3, cv::Scalar(1, 2, 3));
  auto r = io::letterbox(im, 64, 64);
  // r = 1.28; new size round(64, 47.36) = (64, 47); dh = 17 -> 8.5: top 8, bottom 9
  EXPECT_EQ(r.img.rows, 64);
  EXPECT_EQ(r.img.cols, 64);
  EXPECT_DOUBLE_EQ(r.dh, 8.5);
  EXPECT_EQ(r.img.at<cv::Vec3b>(7, 10)[0], 114);
  EXPECT_NE(r.img.at<cv::Vec3b>(8, 10)[0], 114);
  EXPECT_NE(r.img.at<cv::Vec3b>(54, 10)[0], 114);
  EXPECT_EQ(r.img.at<cv::Vec3b>(55, 10)[0], 114);
  auto a = io::letterbox(im, 64, 64, /*auto*/ true);  // minimal padding to a multiple of 32
  EXPECT_EQ(a.img.rows, 64);  // dh = 17 mod 32 = 17
  EXPECT_EQ(a.img.cols, 64);
}

TEST(LoadImage, ResizeRuleAndInterpolation) {
  tiny::TempDir d("load");
  cv::Mat src = tiny::make_image(100, 50, 7);
  tiny::write_image(d.path / "a.png", src);
  auto li = io::load_image((d.path / "a.png").string(), 64, false);
  EXPECT_EQ(li.h0, 50);
  EXPECT_EQ(li.w0, 100);
  EXPECT_EQ(li.img.cols, 64);
  EXPECT_EQ(li.img.rows, 32);
  cv::Mat area, lin;
  cv::resize(src, area, cv::Size(64, 32), 0, 0, cv::INTER_AREA);
  cv::resize(src, lin, cv::Size(64, 32), 0, 0, cv::INTER_LINEAR);
  EXPECT_EQ(cv::norm(li.img, area, cv::NORM_INF), 0);  // validation shrink: INTER_AREA
  auto la = io::load_image((d.path / "a.png").string(), 64, true);
  EXPECT_EQ(cv::norm(la.img, lin, cv::NORM_INF), 0);  // training: INTER_LINEAR
  auto up = io::load_image((d.path / "a.png").string(), 130, false);
  EXPECT_EQ(up.img.cols, 130);
  EXPECT_EQ(up.img.rows, 65);
}

TEST(Rect, OfficialBatchShapes) {
  std::vector<io::ImageRecord> recs(3);
  recs[0].width = 640; recs[0].height = 480;
  recs[1].width = 480; recs[1].height = 640;
  recs[2].width = 640; recs[2].height = 480;
  auto rb = io::rect_batches(recs, 2, 640, 32, 0.5);
  ASSERT_EQ(rb.shapes.size(), 2u);
  EXPECT_EQ(rb.order[0], 0);
  EXPECT_EQ(rb.order[1], 2);
  EXPECT_EQ(rb.order[2], 1);
  EXPECT_EQ(rb.shapes[0][0], 512);  // 480/640*20 + 0.5 = 15.5 -> 16
  EXPECT_EQ(rb.shapes[0][1], 672);  // 20.5 -> 21
  EXPECT_EQ(rb.shapes[1][0], 672);
  EXPECT_EQ(rb.shapes[1][1], static_cast<int>(std::ceil(640.0 * 480 / 640 / 32 + 0.5)) * 32);
}

TEST(Rng, CounterBasedAndInRange) {
  io::Rng a(42, 1, 7), b(42, 1, 7), c(42, 1, 8);
  bool differ = false;
  for (int i = 0; i < 100; ++i) {
    double x = a.random(), y = b.random(), z = c.random();
    EXPECT_EQ(x, y);
    EXPECT_GE(x, 0.0);
    EXPECT_LT(x, 1.0);
    differ |= x != z;
  }
  EXPECT_TRUE(differ);
  double mean = 0;
  for (int i = 0; i < 2000; ++i) mean += a.beta(32, 32);
  EXPECT_NEAR(mean / 2000, 0.5, 0.01);
  for (int i = 0; i < 1000; ++i) {
    auto k = a.randint(2, 5);
    EXPECT_GE(k, 2);
    EXPECT_LE(k, 5);
  }
}

namespace {
std::vector<io::ImageRecord> make_records(const tiny::TempDir& d, int n) {
  std::vector<io::ImageRecord> recs;
  for (int i = 0; i < n; ++i) {
    io::ImageRecord r;
    r.image_path = (d.path / ("i" + std::to_string(i) + ".png")).string();
    const int w = 40 + 13 * i, h = 90 - 7 * i;
    tiny::write_image(r.image_path, tiny::make_image(w, h, i));
    r.width = w;
    r.height = h;
    r.labels = {{static_cast<float>(i % 3), 0.5f, 0.5f, 0.5f, 0.4f}, {1, 0.2f, 0.3f, 0.2f, 0.2f}};
    recs.push_back(r);
  }
  return recs;
}
}  // namespace

TEST(AugmentedDataset, SeededMosaicBoxesInsideAndCloseMosaic) {
  tiny::TempDir d("aug");
  io::AugmentOptions o;
  o.img_size = 64;
  o.seed = 3;
  o.epochs = 10;
  o.close_mosaic = 2;
  o.hyp.mixup = 0.5;
  o.hyp.degrees = 10;
  o.hyp.shear = 2;
  io::AugmentedDataset ds(make_records(d, 5), o);
  int total = 0;
  for (int e = 0; e < 3; ++e)
    for (int64_t i = 0; i < ds.size(); ++i) {
      auto a = ds.get(i, e), b = ds.get(i, e);
      ASSERT_EQ(a.img.rows, 64);
      ASSERT_EQ(a.img.cols, 64);
      EXPECT_EQ(cv::norm(a.img, b.img, cv::NORM_INF), 0);  // same (seed, epoch, index) -> same sample
      ASSERT_EQ(a.labels.size(), b.labels.size());
      for (const auto& l : a.labels) {
        ++total;
        EXPECT_GE(l[1] - l[3] / 2, -1e-5);
        EXPECT_LE(l[1] + l[3] / 2, 1 + 1e-5);
        EXPECT_GE(l[2] - l[4] / 2, -1e-5);
        EXPECT_LE(l[2] + l[4] / 2, 1 + 1e-5);
        EXPECT_GT(l[3] * 64, 2 - 1e-3);
      }
    }
  EXPECT_GT(total, 0);
  EXPECT_TRUE(ds.mosaic_on(7));
  EXPECT_FALSE(ds.mosaic_on(8));
  auto late = ds.get(0, 9);  // no mosaic: letterboxed single image
  EXPECT_GT(late.h0, 0);
  EXPECT_EQ(late.img.rows, 64);
}

TEST(AugmentedDataset, ValidationRectLetterbox) {
  tiny::TempDir d("val");
  io::AugmentOptions o;
  o.img_size = 64;
  o.augment = false;
  o.rect = true;
  o.batch_size = 2;
  o.rect_pad = 0.5;
  io::AugmentedDataset ds(make_records(d, 4), o);
  for (int64_t i = 0; i < ds.size(); ++i) {
    auto s = ds.get(i, 0);
    auto shape = ds.rect_shape(i);
    EXPECT_EQ(s.img.rows, shape[0]);
    EXPECT_EQ(s.img.cols, shape[1]);
    ASSERT_EQ(s.labels.size(), 2u);
    // box centre 0.5,0.5 of the original image lands at the padded centre
    const double cx = (s.labels[0][1] * s.img.cols - s.dw) / (s.ratio_w * s.w0);
    EXPECT_NEAR(cx, 0.5, 1e-4);
  }
}

// The mosaic fast path (scanned tile sizes known: partial JPEG decode of only the region the
// warp reads, also for tiles that are resized) must give bitwise the samples of the reference
// path (sizes unknown: every tile fully decoded and resized, full canvas).
TEST(AugmentedDataset, MosaicFastPathBitwiseEqualsReferencePath) {
  tiny::TempDir d("augfast");
  const int sizes[][2] = {{200, 150}, {256, 256}, {128, 96}, {90, 60}, {300, 120}, {96, 128}, {517, 389}};
  std::vector<io::ImageRecord> fast, ref;
  int n = 0;
  for (const auto& wh : sizes) {
    cv::Mat im = tiny::make_image(wh[0], wh[1], ++n);
    cv::GaussianBlur(im, im, cv::Size(5, 5), 0);  // smooth content: upsampling/IDCT errors show
    io::ImageRecord r;
    r.image_path = (d.path / ("im" + std::to_string(n) + ".jpg")).string();
    tiny::write_image(r.image_path, im);
    r.labels = {{0, 0.5f, 0.5f, 0.4f, 0.3f}, {1, 0.3f, 0.6f, 0.2f, 0.5f}};
    r.width = wh[0];
    r.height = wh[1];
    fast.push_back(r);
    r.width = r.height = 0;
    ref.push_back(r);
  }
  for (int img_size : {128, 96}) {
    io::AugmentOptions o;
    o.img_size = img_size;
    o.seed = 7;
    o.hyp.mixup = 0.5;
    o.hyp.degrees = 10;
    o.hyp.shear = 2;
    io::AugmentedDataset a(fast, o), b(ref, o);
    for (int e = 0; e < 4; ++e)
      for (int64_t i = 0; i < a.size(); ++i) {
        auto sa = a.get(i, e), sb = b.get(i, e);
        ASSERT_EQ(sa.img.size(), sb.img.size());
        EXPECT_EQ(cv::norm(sa.img, sb.img, cv::NORM_INF), 0) << "img_size " << img_size << " epoch " << e << " index " << i;
        EXPECT_EQ(sa.labels, sb.labels);
      }
  }
}

// Official mixup: (im * r + im2 * (1 - r)).astype(np.uint8), float64 products rounded one by one
// (volatile stops any fused multiply-add in the reference), then truncated.
TEST(Mixup, Float64BlendTruncates) {
  cv::Mat a(37, 53, CV_8UC3), b(37, 53, CV_8UC3);
  cv::RNG rng(3);
  rng.fill(a, cv::RNG::UNIFORM, 0, 256);
  rng.fill(b, cv::RNG::UNIFORM, 0, 256);
  for (double r : {0.5, 0.4137, 0.61803398875, 1e-9, 1 - 1e-12}) {
    cv::Mat out = a.clone();
    io::mixup_blend(out, b, r);
    const uint8_t* pa = a.ptr<uint8_t>();
    const uint8_t* pb = b.ptr<uint8_t>();
    const uint8_t* po = out.ptr<uint8_t>();
    for (size_t i = 0; i < a.total() * 3; ++i) {
      volatile double x = pa[i] * r;
      volatile double y = pb[i] * (1 - r);
      volatile double s = x + y;
      ASSERT_EQ(po[i], static_cast<uint8_t>(static_cast<int>(s))) << "r " << r << " element " << i;
    }
  }
  cv::Mat out = a.clone(), small(5, 5, CV_8UC3);
  EXPECT_THROW(io::mixup_blend(out, small, 0.5), engine::ShapeError);
}
