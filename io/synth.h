// A small synthetic detection dataset for smoke tests and training demos: filled rectangles,
// ellipses, triangles (and optionally crosses), one class per shape, on textured backgrounds,
// written in the YOLO layout (images/{train,val}/*.jpg, labels/{train,val}/*.txt, data.yaml).
// Every image is a pure function of (seed, split, index) through the Philox generator.
#pragma once
#include <opencv2/core.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace io {

/// Options of `yolov9 synth`.
struct SynthOptions {
  std::string out_dir;  ///< dataset root (created if missing)
  int64_t n_train = 256;
  int64_t n_val = 64;
  int img_size = 320;   ///< square images, px (>= 32)
  uint64_t seed = 0;
  int classes = 3;      ///< 1..4: rectangle, ellipse, triangle, cross (the first `classes` of them)
};

/// One labelled object: class and tight box of the whole drawn shape, normalised to [0, 1].
struct SynthObject {
  int cls = 0;
  double cx = 0, cy = 0, w = 0, h = 0;  ///< YOLO xywh, normalised by the image size
  cv::Scalar color;                     ///< BGR fill colour
};

/// One generated image: pixels (8-bit BGR, img_size x img_size), its objects in drawing order,
/// and `owner`, a CV_32S map giving for each pixel 1 + the index of the object visible there
/// (0 = background). Objects keep at least 40% of their own pixels visible after occlusion.
struct SynthImage {
  cv::Mat bgr;
  std::vector<SynthObject> objects;
  cv::Mat owner;
};

/// Class names in label order for `classes` (1..4): rectangle, ellipse, triangle, cross.
/// Throws engine::ConfigError outside 1..4.
std::vector<std::string> synth_class_names(int classes);

/// Draws image `index` of `split` (0 = train, 1 = val): a background of a two-colour linear
/// gradient, uniform noise (amplitude 4..24) and 3..10 random lines; then 1..6 objects of random
/// class, size (8%..40% of the image side), aspect ratio (0.5..2), rotation and saturated colour,
/// later ones possibly overlapping earlier ones. Random draws come from engine::Generator(seed,
/// stream = split << 40 | index), so the result is bitwise reproducible and independent of any
/// other image. Throws engine::ConfigError on img_size < 32 or classes outside 1..4.
SynthImage synth_image(int img_size, int classes, uint64_t seed, int split, int64_t index);

/// Summary of write_synth_dataset.
struct SynthSummary {
  int64_t train_images = 0, val_images = 0, objects = 0;
};

/// Writes the dataset: DIR/images/{train,val}/NNNNNN.jpg (JPEG quality 95), DIR/labels/{train,
/// val}/NNNNNN.txt (one "cls cx cy w h" line per object, normalised, 6 decimals) and
/// DIR/data.yaml (path: ., train: images/train, val: images/val, nc, names). Stale *.jpg/*.txt
/// in those four folders and labels/*.cache files from an earlier run are removed. Throws
/// engine::ConfigError on bad options (n < 0, sizes as synth_image), engine::IoError naming the
/// path on any file-system failure. Deterministic for a seed.
SynthSummary write_synth_dataset(const SynthOptions& opt);

}  // namespace io
