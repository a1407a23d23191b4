// Augmentation pipeline (official utils/augmentations.py + LoadImagesAndLabels.__getitem__).
#include "io/augment.h"
#include "io/warp.h"

#include <opencv2/imgproc.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "engine/error.h"
#include "engine/philox.h"
#include "io/image.h"

namespace io {

// ---------------------------------------------------------------------------------------------
// Rng: the engine's Philox4x32-10 (engine/philox.h) with the sampler's counter layout

namespace {
std::array<uint32_t, 4> philox(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  const engine::Philox4x32 r = engine::philox4x32_10({{c[0], c[1], c[2], c[3]}}, k[0], k[1]);
  return {r.v[0], r.v[1], r.v[2], r.v[3]};
}
// Quadrant placement of official load_mosaic: canvas rect `a` and tile rect `b` of tile k.
void mosaic_rects(int k, int h, int w, int xc, int yc, int S, cv::Rect& a, cv::Rect& b) {
  int ax1, ay1, ax2, ay2, bx1, by1, bx2, by2;
  if (k == 0) {
    ax1 = std::max(xc - w, 0); ay1 = std::max(yc - h, 0); ax2 = xc; ay2 = yc;
    bx1 = w - (ax2 - ax1); by1 = h - (ay2 - ay1); bx2 = w; by2 = h;
  } else if (k == 1) {
    ax1 = xc; ay1 = std::max(yc - h, 0); ax2 = std::min(xc + w, S); ay2 = yc;
    bx1 = 0; by1 = h - (ay2 - ay1); bx2 = std::min(w, ax2 - ax1); by2 = h;
  } else if (k == 2) {
    ax1 = std::max(xc - w, 0); ay1 = yc; ax2 = xc; ay2 = std::min(S, yc + h);
    bx1 = w - (ax2 - ax1); by1 = 0; bx2 = w; by2 = std::min(ay2 - ay1, h);
  } else {
    ax1 = xc; ay1 = yc; ax2 = std::min(xc + w, S); ay2 = std::min(S, yc + h);
    bx1 = 0; by1 = 0; bx2 = std::min(w, ax2 - ax1); by2 = std::min(ay2 - ay1, h);
  }
  a = cv::Rect(ax1, ay1, ax2 - ax1, ay2 - ay1);
  b = cv::Rect(bx1, by1, bx2 - bx1, by2 - by1);
}
}  // namespace

Rng::Rng(uint64_t seed, uint64_t epoch, uint64_t index, uint32_t stream)
    : key_{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32) ^ (stream * 0x85EBCA6Bu)},
      ctr_{0u, static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32) ^ stream,
           static_cast<uint32_t>(epoch)} {}

uint32_t Rng::next_u32() {
  if (used_ == 4) {
    buf_ = philox(ctr_, key_);
    ctr_[0]++;
    used_ = 0;
  }
  return buf_[used_++];
}

double Rng::random() {
  uint64_t a = next_u32() >> 5, b = next_u32() >> 6;  // Python's 53-bit recipe
  return (static_cast<double>(a) * 67108864.0 + static_cast<double>(b)) * (1.0 / 9007199254740992.0);
}

int64_t Rng::randint(int64_t lo, int64_t hi) {
  const uint64_t n = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int64_t>(std::min<uint64_t>(static_cast<uint64_t>(random() * static_cast<double>(n)), n - 1));
}

double Rng::normal() {
  double u1 = random(), u2 = random();
  return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * M_PI * u2);
}

double Rng::gamma(double a) {  // Marsaglia & Tsang (2000), a >= 1
  const double d = a - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = normal();
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    double u = random();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

double Rng::beta(double a, double b) {
  Y9_CHECK(a >= 1 && b >= 1, "Rng::beta: shapes must be >= 1, got ", a, ", ", b);
  double x = gamma(a), y = gamma(b);
  return x / (x + y);
}

// ---------------------------------------------------------------------------------------------
// Resize, letterbox, rect

namespace {
// load_image's output size for a w0 x h0 image: int(w0 * r) x int(h0 * r) with r = img_size /
// max(h0, w0) (int() as officially, but at least 1 px: a 10000x50 image at 64 px would be 0 px
// high), the image itself when r == 1.
cv::Size load_image_size(int w0, int h0, int img_size) {
  const double r = static_cast<double>(img_size) / std::max(h0, w0);
  if (r == 1.0) return {w0, h0};
  return {std::max(1, static_cast<int>(w0 * r)), std::max(1, static_cast<int>(h0 * r))};
}
}  // namespace

LoadedImage load_image(const std::string& path, int img_size, bool augment) {
  LoadedImage li;
  cv::Mat im = read_image_bgr(path);
  li.h0 = im.rows;
  li.w0 = im.cols;
  const double r = static_cast<double>(img_size) / std::max(li.h0, li.w0);
  if (r != 1.0) {
    const int interp = (augment || r > 1) ? cv::INTER_LINEAR : cv::INTER_AREA;
    cv::resize(im, li.img, load_image_size(li.w0, li.h0, img_size), 0, 0, interp);
  } else {
    li.img = im;
  }
  return li;
}

void check_loaded_size(const std::string& path, cv::Size got, cv::Size want, int scanned_w, int scanned_h,
                       int img_size) {
  Y9_CHECK_T(engine::IoError, got == want, "image ", path, " changed since the scan: at --img ", img_size,
             " it loads as ", got.width, "x", got.height, ", not the ", want.width, "x", want.height,
             " of its scanned size ", scanned_w, "x", scanned_h);
}

RectBatches rect_batches(const std::vector<ImageRecord>& records, int batch_size, int img_size, int stride,
                         double pad) {
  Y9_CHECK(batch_size > 0, "rect_batches: batch_size must be > 0");
  RectBatches rb;
  const size_t n = records.size();
  std::vector<double> ar(n);
  for (size_t i = 0; i < n; ++i) ar[i] = static_cast<double>(records[i].height) / records[i].width;
  rb.order.resize(n);
  std::iota(rb.order.begin(), rb.order.end(), 0);
  std::stable_sort(rb.order.begin(), rb.order.end(), [&](int64_t a, int64_t b) { return ar[a] < ar[b]; });
  const size_t nb = (n + batch_size - 1) / batch_size;
  for (size_t b = 0; b < nb; ++b) {
    double mn = 1e300, mx = -1e300;
    for (size_t i = b * batch_size; i < std::min(n, (b + 1) * batch_size); ++i) {
      mn = std::min(mn, ar[rb.order[i]]);
      mx = std::max(mx, ar[rb.order[i]]);
    }
    double fh = 1, fw = 1;
    if (mx < 1) fh = mx;
    else if (mn > 1) fw = 1 / mn;
    rb.shapes.push_back({static_cast<int>(std::ceil(fh * img_size / stride + pad)) * stride,
                         static_cast<int>(std::ceil(fw * img_size / stride + pad)) * stride});
  }
  return rb;
}

// ---------------------------------------------------------------------------------------------
// Perspective

PerspectiveParams draw_perspective(Rng& rng, const Hyp& hyp) {
  PerspectiveParams p;
  p.px = rng.uniform(-hyp.perspective, hyp.perspective);
  p.py = rng.uniform(-hyp.perspective, hyp.perspective);
  p.angle_deg = rng.uniform(-hyp.degrees, hyp.degrees);
  p.scale = rng.uniform(1 - hyp.scale, 1 + hyp.scale);
  p.shear_x_deg = rng.uniform(-hyp.shear, hyp.shear);
  p.shear_y_deg = rng.uniform(-hyp.shear, hyp.shear);
  p.tx_frac = rng.uniform(0.5 - hyp.translate, 0.5 + hyp.translate);
  p.ty_frac = rng.uniform(0.5 - hyp.translate, 0.5 + hyp.translate);
  return p;
}

cv::Matx33d perspective_matrix(const PerspectiveParams& p, int in_w, int in_h, int out_w, int out_h) {
  cv::Matx33d C = cv::Matx33d::eye(), P = cv::Matx33d::eye(), R = cv::Matx33d::eye(), S = cv::Matx33d::eye(),
              T = cv::Matx33d::eye();
  C(0, 2) = -in_w / 2.0;
  C(1, 2) = -in_h / 2.0;
  P(2, 0) = p.px;
  P(2, 1) = p.py;
  // cv2.getRotationMatrix2D(center=(0,0), angle, scale)
  const double a = p.angle_deg * M_PI / 180.0;
  const double al = p.scale * std::cos(a), be = p.scale * std::sin(a);
  R(0, 0) = al; R(0, 1) = be;
  R(1, 0) = -be; R(1, 1) = al;
  S(0, 1) = std::tan(p.shear_x_deg * M_PI / 180.0);
  S(1, 0) = std::tan(p.shear_y_deg * M_PI / 180.0);
  T(0, 2) = p.tx_frac * out_w;
  T(1, 2) = p.ty_frac * out_h;
  return T * S * R * P * C;
}

bool box_candidate(const std::array<float, 4>& b1, const std::array<float, 4>& b2, double wh_thr, double ar_thr,
                   double area_thr, double eps) {
  const double w1 = b1[2] - b1[0], h1 = b1[3] - b1[1];
  const double w2 = b2[2] - b2[0], h2 = b2[3] - b2[1];
  const double ar = std::max(w2 / (h2 + eps), h2 / (w2 + eps));
  return w2 > wh_thr && h2 > wh_thr && w2 * h2 / (w1 * h1 + eps) > area_thr && ar < ar_thr;
}

void apply_perspective(cv::Mat& img, PixelBoxes& boxes, const cv::Matx33d& M, double scale, bool use_perspective,
                       int out_w, int out_h) {
  const bool identity = M == cv::Matx33d::eye();
  if (out_w != img.cols || out_h != img.rows || !identity) {
    cv::Mat dst;
    if (use_perspective)
      cv::warpPerspective(img, dst, M, cv::Size(out_w, out_h), cv::INTER_LINEAR, cv::BORDER_CONSTANT,
                          cv::Scalar(114, 114, 114));
    else {
      const cv::Matx23d A(M(0, 0), M(0, 1), M(0, 2), M(1, 0), M(1, 1), M(1, 2));
      // Scale + translation (the default hyp): io::warp_affine_axis_aligned, bitwise equal and
      // several times faster; anything else (or a failed self-check) goes to OpenCV.
      if (!warp_affine_axis_aligned(img, dst, A, cv::Size(out_w, out_h), 114))
        cv::warpAffine(img, dst, A, cv::Size(out_w, out_h), cv::INTER_LINEAR, cv::BORDER_CONSTANT,
                       cv::Scalar(114, 114, 114));
    }
    img = dst;
  }
  transform_boxes(boxes, M, scale, use_perspective, out_w, out_h);
}

void transform_boxes(PixelBoxes& boxes, const cv::Matx33d& M, double scale, bool use_perspective, int out_w,
                     int out_h) {
  PixelBoxes kept;
  for (const auto& b : boxes) {
    const double xs[4] = {b[1], b[3], b[1], b[3]}, ys[4] = {b[2], b[4], b[4], b[2]};  // official corner order
    double x0 = 1e300, y0 = 1e300, x1 = -1e300, y1 = -1e300;
    for (int k = 0; k < 4; ++k) {
      double X = M(0, 0) * xs[k] + M(0, 1) * ys[k] + M(0, 2);
      double Y = M(1, 0) * xs[k] + M(1, 1) * ys[k] + M(1, 2);
      if (use_perspective) {
        const double Z = M(2, 0) * xs[k] + M(2, 1) * ys[k] + M(2, 2);
        X /= Z;
        Y /= Z;
      }
      x0 = std::min(x0, X); x1 = std::max(x1, X);
      y0 = std::min(y0, Y); y1 = std::max(y1, Y);
    }
    // official: new boxes are float64 clipped to the output, then written into float32 labels
    std::array<float, 4> nb = {static_cast<float>(std::clamp(x0, 0.0, static_cast<double>(out_w))),
                               static_cast<float>(std::clamp(y0, 0.0, static_cast<double>(out_h))),
                               static_cast<float>(std::clamp(x1, 0.0, static_cast<double>(out_w))),
                               static_cast<float>(std::clamp(y1, 0.0, static_cast<double>(out_h)))};
    std::array<float, 4> ob = {static_cast<float>(b[1] * scale), static_cast<float>(b[2] * scale),
                               static_cast<float>(b[3] * scale), static_cast<float>(b[4] * scale)};
    if (box_candidate(ob, nb)) kept.push_back({b[0], nb[0], nb[1], nb[2], nb[3]});
  }
  boxes.swap(kept);
}

// ---------------------------------------------------------------------------------------------
// Mosaic, HSV

void build_mosaic(const std::array<Tile, 4>& tiles, int xc, int yc, int s, cv::Mat& canvas, PixelBoxes& boxes) {
  const int S = 2 * s;
  canvas = cv::Mat(S, S, CV_8UC3, cv::Scalar(114, 114, 114));
  boxes.clear();
  for (int k = 0; k < 4; ++k) {
    const cv::Mat& im = tiles[k].img;
    const int h = im.rows, w = im.cols;
    cv::Rect a, b;
    mosaic_rects(k, h, w, xc, yc, S, a, b);
    if (a.width > 0 && a.height > 0) im(b).copyTo(canvas(a));
    const float padw = static_cast<float>(a.x - b.x), padh = static_cast<float>(a.y - b.y);
    for (const auto& l : tiles[k].labels) {
      auto clip = [&](float v) { return std::clamp(v, 0.0f, static_cast<float>(S)); };
      boxes.push_back({l[0], clip(w * (l[1] - l[3] / 2) + padw), clip(h * (l[2] - l[4] / 2) + padh),
                       clip(w * (l[1] + l[3] / 2) + padw), clip(h * (l[2] + l[4] / 2) + padh)});
    }
  }
}

void apply_hsv(cv::Mat& img, double gh, double gs, double gv) {
  thread_local cv::Mat hsv;  // reused: no per-sample allocation (cvtColor/LUT write it in place)
  cv::cvtColor(img, hsv, cv::COLOR_BGR2HSV);
  cv::Mat lut(1, 256, CV_8UC3);
  for (int x = 0; x < 256; ++x) {
    auto& px = lut.at<cv::Vec3b>(0, x);
    px[0] = static_cast<uint8_t>(std::fmod(x * gh, 180.0));
    px[1] = static_cast<uint8_t>(std::clamp(x * gs, 0.0, 255.0));
    px[2] = static_cast<uint8_t>(std::clamp(x * gv, 0.0, 255.0));
  }
  cv::LUT(hsv, lut, hsv);
  cv::cvtColor(hsv, img, cv::COLOR_HSV2BGR);  // same size/type: written into img's buffer
}

// ---------------------------------------------------------------------------------------------
// AugmentedDataset

AugmentedDataset::AugmentedDataset(std::vector<ImageRecord> records, AugmentOptions opts)
    : records_(std::move(records)), opts_(opts) {
  Y9_CHECK(!records_.empty(), "AugmentedDataset: no records");
  Y9_CHECK(opts_.img_size > 0 && opts_.img_size % opts_.stride == 0, "AugmentedDataset: img_size ", opts_.img_size,
           " must be a positive multiple of stride ", opts_.stride);
  if (opts_.rect) {
    // official: the dataset itself is re-ordered by aspect ratio, batch i = images [i*B, (i+1)*B)
    rect_ = rect_batches(records_, opts_.batch_size, opts_.img_size, opts_.stride, opts_.rect_pad);
    std::vector<ImageRecord> sorted;
    sorted.reserve(records_.size());
    for (int64_t i : rect_.order) sorted.push_back(std::move(records_[i]));
    records_.swap(sorted);
  }
}

bool AugmentedDataset::mosaic_on(int epoch) const {
  if (!opts_.augment || opts_.rect) return false;
  if (opts_.close_mosaic > 0 && opts_.epochs > 0 && epoch >= opts_.epochs - opts_.close_mosaic) return false;
  return true;
}

std::array<int, 2> AugmentedDataset::rect_shape(int64_t index) const {
  Y9_CHECK(opts_.rect, "rect_shape: dataset is not in rect mode");
  return rect_.shapes[index / opts_.batch_size];
}

Tile AugmentedDataset::load_tile(int64_t index) const {
  const ImageRecord& r = records_[index];
  Tile t;
  t.img = load_image(r.image_path, opts_.img_size, opts_.augment).img;
  if (r.width > 0 && r.height > 0)  // as the GPU path, which plans from the scanned size
    check_loaded_size(r.image_path, t.img.size(), load_image_size(r.width, r.height, opts_.img_size), r.width,
                      r.height, opts_.img_size);
  t.labels = r.labels;
  return t;
}

// Official mixup: (im * r + im2 * (1 - r)).astype(np.uint8) (float64 blend, truncation),
// written into `img`. Compiled without FMA contraction so each product is rounded as numpy does.
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("-ffp-contract=off")))
#endif
void mixup_blend(cv::Mat& img, const cv::Mat& img2, double r) {
  Y9_CHECK_SHAPE(img.size() == img2.size() && img.type() == CV_8UC3 && img2.type() == CV_8UC3, "mixup: images ",
                 img.cols, "x", img.rows, " and ", img2.cols, "x", img2.rows, " differ");
  if (!img.isContinuous()) img = img.clone();
  const cv::Mat b8 = img2.isContinuous() ? img2 : img2.clone();
  const size_t n = img.total() * img.channels();
  uint8_t* o = img.ptr<uint8_t>();
  const uint8_t* q = b8.ptr<uint8_t>();
  const double r2 = 1 - r;
  // numpy: im * r and im2 * (1 - r) are float64 products, their float64 sum is truncated by
  // astype(np.uint8) (values lie in [0, 255]). Two roundings, no FMA: exactly those operations.
  for (size_t i = 0; i < n; ++i) {
    const double a = static_cast<double>(o[i]) * r;
    const double b = static_cast<double>(q[i]) * r2;
    o[i] = static_cast<uint8_t>(static_cast<int>(a + b));
  }
}

cv::Rect warp_source_roi(const cv::Matx33d& M, int in_w, int in_h, int out_w, int out_h) {
  cv::Matx23d A(M(0, 0), M(0, 1), M(0, 2), M(1, 0), M(1, 1), M(1, 2)), Ai;
  cv::invertAffineTransform(A, Ai);
  double x0 = 1e300, y0 = 1e300, x1 = -1e300, y1 = -1e300;
  for (double y : {0.0, out_h - 1.0})
    for (double x : {0.0, out_w - 1.0}) {
      const double X = Ai(0, 0) * x + Ai(0, 1) * y + Ai(0, 2), Y = Ai(1, 0) * x + Ai(1, 1) * y + Ai(1, 2);
      x0 = std::min(x0, X); x1 = std::max(x1, X);
      y0 = std::min(y0, Y); y1 = std::max(y1, Y);
    }
  const double lim = 1e6;  // guards the int casts for degenerate (tiny-scale) matrices
  const int rx0 = static_cast<int>(std::floor(std::clamp(x0, -lim, lim))) - 3;
  const int ry0 = static_cast<int>(std::floor(std::clamp(y0, -lim, lim))) - 3;
  const int rx1 = static_cast<int>(std::ceil(std::clamp(x1, -lim, lim))) + 4;
  const int ry1 = static_cast<int>(std::ceil(std::clamp(y1, -lim, lim))) + 4;
  return cv::Rect(rx0, ry0, rx1 - rx0, ry1 - ry0) & cv::Rect(0, 0, in_w, in_h);
}

void AugmentedDataset::decode_tile_region(int64_t index, int w, int h, const cv::Rect& bv, cv::Mat dst) const {
  const ImageRecord& r = records_[index];
  const int s = opts_.img_size;
  // Unresized tiles (the usual case for 640 images): decode only the part the canvas uses.
  thread_local cv::Mat rows;
  const bool unresized = w == r.width && h == r.height;
  bool got = false;
  bool placed = false;  // decoded straight into the canvas
  if (unresized) {
    got = placed = read_jpeg_region_bgr(r.image_path, w, h, bv, dst);
  } else if (opts_.augment || w > r.width) {
    // Resized tile (official INTER_LINEAR here): bilinear output pixels read a 2x2 source
    // neighbourhood (2x2 blocks on the exact-2x area shortcut), so decoding only the source
    // rows/columns under bv plus a margin and resizing the whole buffer gives bitwise the
    // same pixels inside bv; the undecoded rest of `src` only feeds pixels outside bv.
    thread_local cv::Mat src;
    const double fy = static_cast<double>(r.height) / h, fx = static_cast<double>(r.width) / w;
    const int my = 4 + static_cast<int>(std::ceil(fy)), mx = 4 + static_cast<int>(std::ceil(fx));
    const int sy0 = std::max(0, static_cast<int>(std::floor(bv.y * fy)) - my);
    const int sy1 = std::min(r.height, static_cast<int>(std::ceil((bv.y + bv.height) * fy)) + my);
    const int sx0 = std::max(0, static_cast<int>(std::floor(bv.x * fx)) - mx);
    const int sx1 = std::min(r.width, static_cast<int>(std::ceil((bv.x + bv.width) * fx)) + mx);
    if (read_jpeg_rows_bgr(r.image_path, r.width, r.height, sy0, sy1, sx0, sx1, src)) {
      cv::resize(src, rows, cv::Size(w, h), 0, 0, cv::INTER_LINEAR);
      got = true;
    }
  }
  if (!got) {
    rows = load_image(r.image_path, s, opts_.augment).img;
    check_loaded_size(r.image_path, rows.size(), cv::Size(w, h), r.width, r.height, s);
  }
  if (!placed) rows(bv).copyTo(dst);
}

void AugmentedDataset::load_mosaic(int64_t index, Rng& rng, cv::Mat& img, PixelBoxes& boxes, MosaicPlan* plan,
                                   bool pixels) const {
  const int s = opts_.img_size, S = 2 * s;
  const int yc = static_cast<int>(rng.uniform(s / 2.0, 1.5 * s));
  const int xc = static_cast<int>(rng.uniform(s / 2.0, 1.5 * s));
  std::array<int64_t, 4> idx = {index, 0, 0, 0};
  for (int k = 1; k < 4; ++k) idx[k] = static_cast<int64_t>(rng.random() * size());  // random.choices
  for (int i = 3; i > 0; --i) std::swap(idx[i], idx[rng.randint(0, i)]);           // random.shuffle
  // The perspective draws follow the placement draws and do not depend on pixels, so they are
  // drawn first here: the warp then says which canvas pixels are ever read.
  // TODO(data issue): copy_paste needs polygon labels; not implemented (no-op for box datasets).
  const PerspectiveParams p = draw_perspective(rng, opts_.hyp);
  const bool use_persp = opts_.hyp.perspective != 0;
  const cv::Matx33d M = perspective_matrix(p, S, S, s, s);

  // Tile sizes from the scanned records (official load_image rule), when known.
  std::array<cv::Size, 4> sizes;
  bool sizes_known = !use_persp;
  for (int k = 0; k < 4 && sizes_known; ++k) {
    const ImageRecord& r = records_[idx[k]];
    if (r.width <= 0 || r.height <= 0) {
      sizes_known = false;
      break;
    }
    sizes[k] = load_image_size(r.width, r.height, s);
  }
  if (plan) {
    plan->index = idx;
    plan->canvas = S;
    plan->M = M;
    plan->perspective = use_persp;
  }
  // The plan's tile k from its resized size: canvas rectangle and offset (load_mosaic's a, b).
  auto record_tile = [&](int k, int h, int w) {
    if (!plan) return;
    cv::Rect a, b;
    mosaic_rects(k, h, w, xc, yc, S, a, b);
    plan->h[k] = h;
    plan->w[k] = w;
    plan->dst[k] = a;
    plan->padw[k] = a.x - b.x;
    plan->padh[k] = a.y - b.y;
  };
  if (!pixels) {
    // Boxes only: tile sizes from the scan (load_image's rule), or from a decode when unknown.
    boxes.clear();
    for (int k = 0; k < 4; ++k) {
      const ImageRecord& r = records_[idx[k]];
      int h, w;
      if (r.width > 0 && r.height > 0) {
        const cv::Size sz = load_image_size(r.width, r.height, s);
        w = sz.width;
        h = sz.height;
      } else {
        const cv::Mat im = load_image(r.image_path, s, opts_.augment).img;
        h = im.rows;
        w = im.cols;
      }
      record_tile(k, h, w);
      cv::Rect a, b;
      mosaic_rects(k, h, w, xc, yc, S, a, b);
      const float padw = static_cast<float>(a.x - b.x), padh = static_cast<float>(a.y - b.y);
      for (const auto& l : r.labels) {
        auto clip = [&](float v) { return std::clamp(v, 0.0f, static_cast<float>(S)); };
        boxes.push_back({l[0], clip(w * (l[1] - l[3] / 2) + padw), clip(h * (l[2] - l[4] / 2) + padh),
                         clip(w * (l[1] + l[3] / 2) + padw), clip(h * (l[2] + l[4] / 2) + padh)});
      }
    }
    transform_boxes(boxes, M, p.scale, use_persp, s, s);
    img = cv::Mat();
    return;
  }
  if (!sizes_known) {  // reference path: every tile decoded, full canvas
    std::array<Tile, 4> tiles;
    for (int k = 0; k < 4; ++k) {
      tiles[k] = load_tile(idx[k]);
      record_tile(k, tiles[k].img.rows, tiles[k].img.cols);
    }
    cv::Mat canvas;
    build_mosaic(tiles, xc, yc, s, canvas, boxes);
    apply_perspective(canvas, boxes, M, p.scale, use_persp, s, s);
    img = canvas;
    return;
  }

  // Fast path, bitwise equal to the reference path: only the canvas region the affine warp can
  // sample (`roi`) is filled (114 + tile pixels); a tile outside it is not decoded at all. The
  // rest of the reused canvas buffer is never read by warpAffine.
  thread_local cv::Mat canvas;
  canvas.create(S, S, CV_8UC3);
  const cv::Rect roi = warp_source_roi(M, S, S, s, s);
  if (!roi.empty()) canvas(roi).setTo(cv::Scalar(114, 114, 114));
  boxes.clear();
  for (int k = 0; k < 4; ++k) {
    const int h = sizes[k].height, w = sizes[k].width;
    record_tile(k, h, w);
    cv::Rect a, b;
    mosaic_rects(k, h, w, xc, yc, S, a, b);
    const cv::Rect av = a & roi;
    if (a.width > 0 && a.height > 0 && !av.empty()) {
      const cv::Rect bv(b.x + (av.x - a.x), b.y + (av.y - a.y), av.width, av.height);
      decode_tile_region(idx[k], w, h, bv, canvas(av));
    }
    const float padw = static_cast<float>(a.x - b.x), padh = static_cast<float>(a.y - b.y);
    for (const auto& l : records_[idx[k]].labels) {
      auto clip = [&](float v) { return std::clamp(v, 0.0f, static_cast<float>(S)); };
      boxes.push_back({l[0], clip(w * (l[1] - l[3] / 2) + padw), clip(h * (l[2] - l[4] / 2) + padh),
                       clip(w * (l[1] + l[3] / 2) + padw), clip(h * (l[2] + l[4] / 2) + padh)});
    }
  }
  cv::Mat warped = canvas;  // header only; apply_perspective allocates the s x s output
  apply_perspective(warped, boxes, M, p.scale, use_persp, s, s);
  img = warped;
}

Sample AugmentedDataset::get(int64_t index, int epoch) const {
  PixelOps ops;
  Sample out = get(index, epoch, &ops);
  if (ops.hsv) apply_hsv(out.img, ops.gh, ops.gs, ops.gv);
  if (ops.flipud) cv::flip(out.img, out.img, 0);
  if (ops.fliplr) cv::flip(out.img, out.img, 1);
  return out;
}

Sample AugmentedDataset::get(int64_t index, int epoch, PixelOps* deferred) const {
  return get(index, epoch, deferred, nullptr, true);
}

Sample AugmentedDataset::get(int64_t index, int epoch, PixelOps* deferred, SamplePlan* plan, bool pixels) const {
  Y9_CHECK(deferred != nullptr, "AugmentedDataset::get: null PixelOps");
  SamplePlan local;
  SamplePlan& pl = plan ? *plan : local;
  pl = SamplePlan{};
  pl.index = index;
  Y9_CHECK(index >= 0 && index < size(), "AugmentedDataset::get: index ", index, " out of range [0, ", size(), ")");
  Rng rng(opts_.seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index));
  const Hyp& hyp = opts_.hyp;
  Sample out;
  out.index = index;
  PixelBoxes boxes;
  cv::Mat img;
  if (mosaic_on(epoch) && rng.random() < hyp.mosaic) {
    pl.mosaic = true;
    pl.nmosaic = 1;
    load_mosaic(index, rng, img, boxes, &pl.m[0], pixels);
    if (rng.random() < hyp.mixup) {
      cv::Mat img2;
      PixelBoxes boxes2;
      load_mosaic(rng.randint(0, size() - 1), rng, img2, boxes2, &pl.m[1], pixels);
      const double r = rng.beta(32.0, 32.0);
      pl.nmosaic = 2;
      pl.mixup_r = r;
      if (pixels) mixup_blend(img, img2, r);
      boxes.insert(boxes.end(), boxes2.begin(), boxes2.end());
    }
  } else {
    const ImageRecord& r = records_[index];
    // The letterbox geometry needs only load_image's output size: from the decode, or (boxes only,
    // the GPU path) from the scan, so that no pixel is touched here.
    LoadedImage li;
    cv::Size sz;
    if (pixels || r.width <= 0 || r.height <= 0) {
      li = load_image(r.image_path, opts_.img_size, opts_.augment);
      sz = li.img.size();
      // As the GPU path, which plans from the scanned size: a file changed since the scan is an
      // error here too (training replaces the sample, validation stops naming the file).
      if (r.width > 0 && r.height > 0)
        check_loaded_size(r.image_path, sz, load_image_size(r.width, r.height, opts_.img_size), r.width, r.height,
                          opts_.img_size);
    } else {
      li.h0 = r.height;
      li.w0 = r.width;
      sz = load_image_size(r.width, r.height, opts_.img_size);
    }
    std::array<int, 2> shape = opts_.rect ? rect_shape(index) : std::array<int, 2>{opts_.img_size, opts_.img_size};
    const LetterboxGeometry lb = letterbox_geometry(sz.height, sz.width, shape[0], shape[1], false, false, opts_.augment);
    if (pixels) img = letterbox(li.img, shape[0], shape[1], false, false, opts_.augment).img;
    pl.img_h = sz.height;
    pl.img_w = sz.width;
    pl.lb_h = lb.out_h;
    pl.lb_w = lb.out_w;
    pl.top = lb.top;
    pl.left = lb.left;
    pl.nh = lb.nh;
    pl.nw = lb.nw;
    out.h0 = li.h0;
    out.w0 = li.w0;
    out.ratio_h = static_cast<double>(sz.height) / li.h0;
    out.ratio_w = static_cast<double>(sz.width) / li.w0;
    out.dw = lb.dw;
    out.dh = lb.dh;
    const double w = lb.ratio_w * sz.width, h = lb.ratio_h * sz.height;
    for (const auto& l : r.labels)
      boxes.push_back({l[0], static_cast<float>(w * (l[1] - l[3] / 2) + lb.dw),
                       static_cast<float>(h * (l[2] - l[4] / 2) + lb.dh),
                       static_cast<float>(w * (l[1] + l[3] / 2) + lb.dw),
                       static_cast<float>(h * (l[2] + l[4] / 2) + lb.dh)});
    if (opts_.augment) {
      const PerspectiveParams p = draw_perspective(rng, hyp);
      const cv::Matx33d M = perspective_matrix(p, lb.out_w, lb.out_h, lb.out_w, lb.out_h);
      pl.warp = true;
      pl.M = M;
      pl.perspective = hyp.perspective != 0;
      if (pixels) apply_perspective(img, boxes, M, p.scale, hyp.perspective != 0, lb.out_w, lb.out_h);
      else transform_boxes(boxes, M, p.scale, hyp.perspective != 0, lb.out_w, lb.out_h);
    }
    pl.out_h = lb.out_h;
    pl.out_w = lb.out_w;
  }
  if (pl.mosaic) pl.out_h = pl.out_w = opts_.img_size;
  // xyxy2xywhn(clip=True, eps=1e-3)
  const float W = static_cast<float>(pl.out_w), H = static_cast<float>(pl.out_h);
  for (const auto& b : boxes) {
    const float x1 = std::clamp(b[1], 0.0f, W - 1e-3f), x2 = std::clamp(b[3], 0.0f, W - 1e-3f);
    const float y1 = std::clamp(b[2], 0.0f, H - 1e-3f), y2 = std::clamp(b[4], 0.0f, H - 1e-3f);
    out.labels.push_back({b[0], (x1 + x2) / 2 / W, (y1 + y2) / 2 / H, (x2 - x1) / W, (y2 - y1) / H});
  }
  PixelOps ops;
  if (opts_.augment) {
    // Albumentations (official step 4) is optional/version-dependent and not reproduced.
    if (hyp.hsv_h != 0 || hyp.hsv_s != 0 || hyp.hsv_v != 0) {
      ops.hsv = true;
      ops.gh = rng.uniform(-1, 1) * hyp.hsv_h + 1;
      ops.gs = rng.uniform(-1, 1) * hyp.hsv_s + 1;
      ops.gv = rng.uniform(-1, 1) * hyp.hsv_v + 1;
    }
    if (rng.random() < hyp.flipud) {
      ops.flipud = true;
      for (auto& l : out.labels) l[2] = 1 - l[2];
    }
    if (rng.random() < hyp.fliplr) {
      ops.fliplr = true;
      for (auto& l : out.labels) l[1] = 1 - l[1];
    }
  }
  *deferred = ops;
  pl.ops = ops;
  out.img = img;
  return out;
}

}  // namespace io
