// The embedded inference API (libyolov9_infer.a, CMake preset `inference`): a YOLOv9 / GELAN
// detector loaded from a weights file, detecting objects in one image at a time. The header needs
// nothing but the C++ standard library; OpenCV stays an implementation detail.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace yolov9 {

/// One detection, in the pixels of the image given to Detector::detect.
struct Box {
  float x1 = 0, y1 = 0, x2 = 0, y2 = 0;  ///< xyxy in original-image pixels, clipped to the image, rounded
  float score = 0;                       ///< confidence (sigmoid class score) in (conf_thres, 1]
  int class_id = 0;                      ///< class index, 0 .. num_classes() - 1
};

/// Options of a Detector (the official detect_dual.py arguments of the same names).
struct DetectorOptions {
  int img_size = 640;        ///< letterbox target in pixels (square, rounded up to a multiple of 32)
  float conf_thres = 0.25f;  ///< keep detections with score > conf_thres
  float iou_thres = 0.45f;   ///< NMS IoU threshold
  int max_det = 1000;        ///< detections kept per image
  std::vector<int> classes;  ///< class filter; empty = every class
  bool agnostic = false;     ///< class-agnostic NMS
  std::string cfg;           ///< model YAML; empty = the one the weights file carries
};

/// A detector: the model of a weights file (our safetensors, as written by `yolov9 train` or
/// `yolov9 export`, re-parameterised / fused or not) in eval mode on the CPU, no gradient recorded.
/// detect() runs the official pipeline of `yolov9 detect` (letterbox with stride padding, forward,
/// NMS, boxes mapped back and rounded), so its boxes are exactly those of the program's
/// `--save-txt --save-conf` labels. Deterministic: the same image gives the same boxes bitwise.
/// Not thread-safe: use one Detector per thread.
/// Memory: while a Detector lives, the CPU blocks its passes free are kept for the next passes
/// (the inference arena of engine/cpu_cache.h: about 100 MiB for yolov9-s at 640 px, at most
/// 512 MiB), so steady-state detect() allocates nothing from the system; they are released when
/// the last Detector is destroyed.
/// Errors: every failure throws std::runtime_error (engine::Error) with a message naming the file
/// or value at fault: a missing or corrupt weights file, no model YAML, a weights/YAML mismatch,
/// an unreadable image.
class Detector {
 public:
  explicit Detector(const std::string& weights, const DetectorOptions& options = {});
  ~Detector();
  Detector(Detector&&) noexcept;
  Detector& operator=(Detector&&) noexcept;

  /// Detects objects in an image file (any format the build reads: JPEG, PNG, BMP, ...).
  std::vector<Box> detect(const std::string& image_path) const;
  /// Detects objects in an interleaved 8-bit BGR image (OpenCV's layout): `height` rows of
  /// `width` pixels, `row_stride_bytes` apart (0 = 3 * width). The pixels are not modified.
  std::vector<Box> detect(const uint8_t* bgr, int height, int width, int64_t row_stride_bytes = 0) const;

  int num_classes() const;
  /// Class names from the weights file's metadata ("class<i>" where it has none).
  const std::vector<std::string>& names() const;
  const DetectorOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace yolov9
