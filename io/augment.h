// Training/validation image pipeline: load-and-resize, letterbox, rectangular batch shapes,
// 4-image mosaic, random perspective with the official box transform and candidate filter, HSV
// jitter, flips, mixup, and a counter-based RNG so that samples depend only on (seed, epoch,
// index). Formulas follow utils/augmentations.py and utils/dataloaders.py (WongKinYiu/yolov9
// 5b1ea9a; shared/spec/data.md sections 3-11).
#pragma once

#include <opencv2/core.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/color.h"
#include "io/dataset.h"
#include "io/hyp.h"
#include "io/letterbox.h"

namespace io {

// ---------------------------------------------------------------------------------------------
// Random numbers

/// Counter-based generator (Philox4x32-10, Salmon et al., "Parallel Random Numbers: As Easy as
/// 1, 2, 3", SC 2011) keyed by (seed, stream) and counted by (epoch, index). Two generators with
/// the same key and counter produce the same sequence on any thread: bitwise reproducible.
class Rng {
 public:
  Rng(uint64_t seed, uint64_t epoch, uint64_t index, uint32_t stream = 0);
  uint32_t next_u32();
  /// Uniform double in [0, 1) (53 bits), like Python's random.random().
  double random();
  /// Uniform in [a, b).
  double uniform(double a, double b) { return a + (b - a) * random(); }
  /// Integer uniform in [lo, hi] inclusive (random.randint).
  int64_t randint(int64_t lo, int64_t hi);
  /// Beta(a, b) via two Marsaglia-Tsang gamma draws (numpy.random.beta's distribution).
  double beta(double a, double b);
  double normal();

 private:
  double gamma(double shape);
  std::array<uint32_t, 2> key_;
  std::array<uint32_t, 4> ctr_;
  std::array<uint32_t, 4> buf_{};
  int used_ = 4;
};

/// Label rows in pixels: [class, x1, y1, x2, y2].
using PixelBoxes = std::vector<std::array<float, 5>>;

// ---------------------------------------------------------------------------------------------
// Resize (letterbox is in io/letterbox.h)

struct LoadedImage {
  cv::Mat img;      ///< resized H x W x 3 uint8 BGR
  int h0 = 0, w0 = 0;  ///< original size (after EXIF orientation)
};

/// Official load_image: r = img_size / max(h0, w0); if r != 1 resize to (int(w0*r), int(h0*r))
/// with INTER_LINEAR when `augment` or r > 1, else INTER_AREA. Throws engine::IoError.
LoadedImage load_image(const std::string& path, int img_size, bool augment);

/// Throws engine::IoError naming `path` when load_image's output size `got` differs from `want`,
/// the size load_image gives for the scanned size scanned_w x scanned_h at `img_size`: the file
/// changed since the scan (its size and mtime kept, so the label cache was trusted).
void check_loaded_size(const std::string& path, cv::Size got, cv::Size want, int scanned_w, int scanned_h,
                       int img_size);

/// Rectangular batches (official `--rect`): sorts images by h/w ascending and gives each batch
/// the shape ceil(factor * img_size / stride + pad) * stride (pad 0 train, 0.5 val).
/// `order[i]` = dataset index of the i-th image, `shapes[b]` = {h, w} of batch b.
struct RectBatches {
  std::vector<int64_t> order;
  std::vector<std::array<int, 2>> shapes;
};
RectBatches rect_batches(const std::vector<ImageRecord>& records, int batch_size, int img_size, int stride, double pad);

// ---------------------------------------------------------------------------------------------
// Geometric pieces, exposed with explicit parameters for tests

/// The eight random_perspective draws (in the official order) and the derived matrix.
struct PerspectiveParams {
  double px = 0, py = 0;          ///< P[2,0], P[2,1]
  double angle_deg = 0, scale = 1;
  double shear_x_deg = 0, shear_y_deg = 0;
  double tx_frac = 0.5, ty_frac = 0.5;  ///< T = frac * output size
};
PerspectiveParams draw_perspective(Rng& rng, const Hyp& hyp);
/// M = T @ S @ R @ P @ C for an input of in_w x in_h and an output of out_w x out_h (3x3).
cv::Matx33d perspective_matrix(const PerspectiveParams& p, int in_w, int in_h, int out_w, int out_h);

/// Applies M (warpPerspective if `use_perspective`, else warpAffine; bilinear, border 114) to
/// `img`, giving out_w x out_h, then transforms boxes (4 corners, min/max, clip to the output)
/// and keeps those passing box_candidates(original * scale, new; wh_thr 2, ar_thr 100,
/// area_thr 0.10). The warp is skipped when the sizes match and M is the identity.
void apply_perspective(cv::Mat& img, PixelBoxes& boxes, const cv::Matx33d& M, double scale, bool use_perspective,
                       int out_w, int out_h);

/// The box part of apply_perspective alone: transforms `boxes` by M (corners, min/max, clip to
/// out_w x out_h) and keeps the candidates, exactly as apply_perspective does; no pixels.
void transform_boxes(PixelBoxes& boxes, const cv::Matx33d& M, double scale, bool use_perspective, int out_w,
                     int out_h);

/// Official box_candidates: keep if w2 > wh_thr, h2 > wh_thr, w2*h2/(w1*h1+eps) > area_thr and
/// max aspect < ar_thr. Boxes xyxy pixels.
bool box_candidate(const std::array<float, 4>& before, const std::array<float, 4>& after, double wh_thr = 2,
                   double ar_thr = 100, double area_thr = 0.1, double eps = 1e-16);

/// Canvas pixels that warpAffine(M, out_w x out_h, bilinear) can read for an in_w x in_h canvas:
/// the inverse image of the output pixel grid (an affine map, so its corners bound it) widened by
/// 3 pixels for the 2x2 footprint and OpenCV's 1/32-pixel fixed-point rounding, clipped to the
/// canvas. Affine maps only (M's last row is ignored).
cv::Rect warp_source_roi(const cv::Matx33d& M, int in_w, int in_h, int out_w, int out_h);

/// One mosaic tile: a resized image and its labels (normalised cx, cy, w, h with class).
struct Tile {
  cv::Mat img;
  std::vector<std::array<float, 5>> labels;
};

/// Official load_mosaic placement: 2s x 2s canvas filled with 114, tile k in quadrant k around
/// the centre (xc, yc), labels converted to pixel xyxy and clipped to [0, 2s]. No random draws.
void build_mosaic(const std::array<Tile, 4>& tiles, int xc, int yc, int s, cv::Mat& canvas, PixelBoxes& boxes);

/// Official mixup blend (utils/augmentations.py mixup): img = uint8(img * r + img2 * (1 - r))
/// with float64 products and sum, truncated, in place. Both H x W x 3 uint8 of the same size;
/// throws engine::ShapeError otherwise.
void mixup_blend(cv::Mat& img, const cv::Mat& img2, double r);

/// Official augment_hsv with gains g = 1 + (gh, gs, gv) already drawn (LUTs over 0..255).
void apply_hsv(cv::Mat& img, double gh, double gs, double gv);

// ---------------------------------------------------------------------------------------------
// Dataset with augmentation

struct AugmentOptions {
  int img_size = 640;
  bool augment = true;     ///< training augmentation (mosaic, perspective, HSV, flips, mixup)
  bool rect = false;       ///< rectangular batches (disables mosaic)
  int batch_size = 16;     ///< used for rect shapes
  int stride = 32;
  double rect_pad = 0.0;   ///< 0 for training, 0.5 for validation
  int epochs = 0;          ///< total epochs, for close_mosaic
  int close_mosaic = 0;    ///< mosaic off for the last N epochs
  uint64_t seed = 0;
  Hyp hyp;
};

/// The pixel work of one mosaic (official load_mosaic + random_perspective), without pixels: the
/// tiles (dataset index, resized size, canvas rectangle and offset), the canvas size and the
/// perspective matrix. Filled by AugmentedDataset::get with the values its own pixels and boxes
/// used, so a device renderer (kernels/common/augment.h) draws nothing itself.
struct MosaicPlan {
  std::array<int64_t, 4> index{};  ///< dataset index of tile k (quadrant k of load_mosaic)
  std::array<int, 4> h{}, w{};     ///< resized tile size (load_image)
  std::array<cv::Rect, 4> dst{};   ///< canvas rectangle `a` of tile k (may be empty)
  std::array<int, 4> padw{}, padh{};  ///< canvas = tile shifted by (padw, padh)
  int canvas = 0;                  ///< canvas side 2s
  cv::Matx33d M = cv::Matx33d::eye();  ///< forward map canvas px -> output px
  bool perspective = false;        ///< warpPerspective (else warpAffine with M's top rows)
};

/// Everything a renderer needs to produce the pixels of AugmentedDataset::get(index, epoch):
/// mosaic samples list one or two MosaicPlans (two: mixup, blended with mixup_r); other samples
/// are load_image(index) letterboxed (nw x nh placed at (left, top) on lb_w x lb_h, 114 border)
/// and, when `warp`, warped by M to out_w x out_h. `ops` are the deferred per-pixel ops.
struct SamplePlan {
  bool mosaic = false;
  int nmosaic = 0;
  std::array<MosaicPlan, 2> m{};
  double mixup_r = 0;
  int64_t index = 0;
  int img_h = 0, img_w = 0;        ///< load_image size (non-mosaic)
  int lb_h = 0, lb_w = 0, nw = 0, nh = 0, top = 0, left = 0;
  bool warp = false;
  cv::Matx33d M = cv::Matx33d::eye();
  bool perspective = false;
  int out_h = 0, out_w = 0;
  PixelOps ops;
};

/// One produced sample.
struct Sample {
  cv::Mat img;                               ///< H x W x 3 uint8 BGR
  std::vector<std::array<float, 5>> labels;  ///< [class, cx, cy, w, h] normalised to img
  int64_t index = 0;
  int h0 = 0, w0 = 0;                        ///< original size (0 for mosaic samples)
  double ratio_h = 1, ratio_w = 1, dw = 0, dh = 0;
};

/// The official LoadImagesAndLabels.__getitem__ on scanned records. Thread-safe const access.
class AugmentedDataset {
 public:
  AugmentedDataset(std::vector<ImageRecord> records, AugmentOptions opts);
  int64_t size() const { return static_cast<int64_t>(records_.size()); }
  const std::vector<ImageRecord>& records() const { return records_; }
  const AugmentOptions& options() const { return opts_; }
  /// Whether mosaic is on in `epoch` (0-based): augment, not rect, epoch < epochs - close_mosaic.
  bool mosaic_on(int epoch) const;
  /// Sample `index` in `epoch`: random draws come from Rng(seed, epoch, index) only.
  /// Throws engine::IoError if an image cannot be read.
  Sample get(int64_t index, int epoch) const;
  /// The same sample with its per-pixel finishing ops (augment_hsv, flipud, fliplr) not applied
  /// to `img` but returned in `*deferred` (labels are final, flips included), so the loader can
  /// apply them while writing the batch planes (io::finish_to_planes). get(i, e) equals this
  /// followed by those ops. Throws as get(); engine::Error for a null `deferred`.
  Sample get(int64_t index, int epoch, PixelOps* deferred) const;
  /// As get(index, epoch, deferred), also describing the pixel work in `*plan`. With
  /// pixels = false no image is decoded, warped or blended (Sample::img stays empty): labels,
  /// deferred ops and plan are those of the full call (tile sizes come from the scanned records;
  /// an image without a scanned size is decoded to learn it). Throws as get().
  Sample get(int64_t index, int epoch, PixelOps* deferred, SamplePlan* plan, bool pixels = true) const;
  /// Pixels `bv` (within the w x h load_image size, w x h from the scan) of image `index` resized
  /// as load_image does, written into `dst` (bv.height x bv.width CV_8UC3, may be a view): the
  /// mosaic fast path's region-limited decode (only the JPEG rows/columns under bv, bitwise equal
  /// to cropping load_image), falling back to load_image. Throws engine::IoError when the image
  /// cannot be read or no longer has its scanned size.
  void decode_tile_region(int64_t index, int w, int h, const cv::Rect& bv, cv::Mat dst) const;
  /// Batch shape {h, w} of a rect batch (rect mode only), for sample `index`.
  std::array<int, 2> rect_shape(int64_t index) const;
  const RectBatches& rect() const { return rect_; }

 private:
  Tile load_tile(int64_t index) const;
  void load_mosaic(int64_t index, Rng& rng, cv::Mat& img, PixelBoxes& boxes, MosaicPlan* plan = nullptr,
                   bool pixels = true) const;
  std::vector<ImageRecord> records_;
  AugmentOptions opts_;
  RectBatches rect_;
  std::vector<int> batch_of_;  ///< rect: batch index per dataset index
};

}  // namespace io
