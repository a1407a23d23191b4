// Inference on images and videos (official detect_dual.py / detect.py run(), WongKinYiu/yolov9
// 5b1ea9a; shared/spec/eval.md section 6): source listing (file, folder, glob, .txt list, video),
// stride-padded letterbox, NMS, boxes mapped back and rounded, annotation, YOLO txt labels, crops.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#ifdef Y9_HAVE_OPENCV
#include <opencv2/core.hpp>
#endif

#include "apps/training/predictor.h"
#include "io/image_u8.h"
#include "io/planes.h"
#include "ops/nms.h"

namespace training {

/// One input file of a detect source.
struct SourceFile {
  std::string path;
  bool video = false;
};

/// Official LoadImages source listing: `source` is a file, a folder (its files "*.*", sorted), a
/// glob pattern (sorted matches) or a .txt file listing any of those, one per line
/// (io::read_list_file: relative entries against the list's folder, blanks and CR stripped,
/// blank lines skipped). Files are kept when their extension is an image (bmp dng jpeg jpg mpo
/// png tif tiff webp pfm) or video format (asf avi gif m4v mkv mov mp4 mpeg mpg ts wmv),
/// case-insensitive. A list entry that does not exist is skipped with a message
/// "<list>:<line>: <entry> does not exist (<path>); skipped", appended to `skipped` (printed to
/// stderr when null). Throws engine::IoError naming the path when `source` itself does not
/// exist or nothing usable is found.
std::vector<SourceFile> list_sources(const std::string& source, std::vector<std::string>* skipped = nullptr);

/// Options of run_detect (official detect_dual.py run() arguments).
struct DetectOptions {
  int imgsz = 640;            ///< letterbox target (square), multiple of 32
  double conf_thres = 0.25;
  double iou_thres = 0.45;
  int64_t max_det = 1000;
  std::vector<int64_t> classes;  ///< class filter (empty = all)
  bool agnostic_nms = false;
  bool save_txt = false, save_conf = false, save_crop = false, nosave = false;
  int line_thickness = 3;
  bool hide_labels = false, hide_conf = false;
  int vid_stride = 1;
  std::string save_dir;       ///< run folder (created); labels/ and crops/ below it
  std::vector<std::string> names;  ///< class names (index = class); missing names print the index
  bool print = true;          ///< per-image lines and the speed line on stdout
  engine::Device device = engine::Device::cpu();
};

/// What run_detect did.
struct DetectSummary {
  int64_t images = 0;         ///< images and video frames processed
  int64_t detections = 0;     ///< boxes over all of them
  int64_t failed = 0;         ///< unreadable files or frames (each reported on stderr with its path)
  std::vector<std::string> errors;   ///< one message per failure, naming the path
  std::vector<std::string> outputs;  ///< annotated images / videos written
  double pre_ms = 0, inf_ms = 0, nms_ms = 0;  ///< per image
};

/// Official colors(i, bgr=True): the 20-entry palette (FF3838, FF9D97, ...) cycled by class index,
/// as {B, G, R}.
std::array<uint8_t, 3> class_color_bgr3(int64_t c);

#ifdef Y9_HAVE_OPENCV
/// Draws one box the official Annotator.box_label way (cv2 branch): rectangle of `color` (BGR)
/// with line width lw, and when `label` is non-empty a filled label box above the box (below
/// when it does not fit) with white text, font scale lw / 3, thickness max(lw - 1, 1).
void box_label(cv::Mat& im, float x1, float y1, float x2, float y2, const std::string& label, const cv::Scalar& color,
               int lw);

/// class_color_bgr3 as a cv::Scalar (B, G, R).
cv::Scalar class_color_bgr(int64_t c);
#endif

/// What detect_image found in one image.
struct ImageDetections {
  engine::Tensor det;  ///< [n, 6] F32 CPU contiguous: x1, y1, x2, y2 in original-image pixels
                       ///< (official scale_boxes, then rounded to whole pixels), conf, class
  int h = 0, w = 0;    ///< letterboxed input size in pixels (stride-padded, multiples of 32)
  double pre_s = 0, inf_s = 0, nms_s = 0;  ///< seconds in pre-processing, the model and NMS
};

#ifdef Y9_HAVE_OPENCV
/// One image through the official detect pipeline (detect_dual.py): letterbox to `imgsz` with
/// stride padding (auto), BGR -> RGB planes / 255 on `device`, `predictor`, NMS with `nms`, boxes
/// mapped back to im0 (H0 x W0 x 3 uint8 BGR) and rounded. On CUDA only im0's pixels go up: the
/// letterbox (kernels::kLetterbox, the CPU path's bytes), NMS and the box mapping
/// (ops::scale_boxes_round_) run on the device and only the kept rows come back; the rows equal
/// the CPU path's for equal predictions. `path` only labels the batch. Used by run_detect and by
/// the embedded API (apps/infer/yolov9/detector.h). Throws engine::IoError on an empty or
/// non-CV_8UC3 image, engine::Error from letterbox, the predictor or NMS. Deterministic for a
/// deterministic predictor. On the CPU the planes are written in one pass into `planes` when given
/// (io::bgr_to_rgb_planes_f32: no allocation for same-sized inputs in a loop).
ImageDetections detect_image(const Predictor& predictor, const cv::Mat& im0, const ops::NmsOptions& nms, int imgsz,
                             engine::Device device, const std::string& path = "", io::PlanesBuffer* planes = nullptr);
#else
/// detect_image of the build without OpenCV (Y9_WITH_OPENCV=OFF, apps/training/detect_nocv.cpp):
/// the same pipeline with io::letterbox_u8 (OpenCV's INTER_LINEAR repeated, see io/image_u8.h) on
/// im0, an H0 x W0 x 3 uint8 BGR io::ImageU8. Same result, same errors.
ImageDetections detect_image(const Predictor& predictor, const io::ImageU8& im0, const ops::NmsOptions& nms, int imgsz,
                             engine::Device device, const std::string& path = "", io::PlanesBuffer* planes = nullptr);
#endif

/// The official detect loop over list_sources(source). Without OpenCV (Y9_WITH_OPENCV=OFF) only
/// JPEG and PNG images are read (io::read_image_u8); a video file, or an image of another format,
/// is reported as an error naming it ("needs the OpenCV build") and skipped; annotated images are
/// written as JPEG/PNG (by their source's extension, as are crops) with box outlines and no label
/// text. A missing list entry, an unreadable image
/// or video, a frame that fails to decode, or an image the model cannot process is reported
/// (stderr and DetectSummary::errors, naming the path) and skipped; the rest is still processed. Throws engine::IoError from list_sources or when an
/// output cannot be written; engine::Error from the predictor or NMS.
DetectSummary run_detect(const Predictor& predictor, const std::string& source, const DetectOptions& opts);

}  // namespace training
