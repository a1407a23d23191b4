// yolov9::Detector (apps/infer/yolov9/detector.h): a thin shell over the code `yolov9 detect`
// runs (training::load_model, model_predictor, detect_image), so the API and the program cannot
// drift apart.
#include "yolov9/detector.h"

#ifdef Y9_HAVE_OPENCV
#include <opencv2/core.hpp>
#endif
#include <cstring>
#include <string>
#include <utility>

#include "apps/training/detector.h"
#include "apps/training/predictor.h"
#include "apps/training/option_checks.h"
#include "apps/training/weights.h"
#include "engine/autograd.h"
#include "engine/error.h"
#include "graph/model.h"
#ifdef Y9_HAVE_OPENCV
#include "io/image.h"
#else
#include "io/image_u8.h"
#endif

namespace yolov9 {

struct Detector::Impl {
  DetectorOptions options;
  training::LoadedModel model;
  training::Predictor predictor;
  ops::NmsOptions nms;
  std::vector<std::string> names;
  mutable io::PlanesBuffer planes;  ///< reused model input (a Detector is not thread-safe)

#ifdef Y9_HAVE_OPENCV
  using Image = cv::Mat;
#else
  using Image = io::ImageU8;  // the build without OpenCV (Y9_WITH_OPENCV=OFF)
#endif
  std::vector<Box> run(const Image& bgr) const {
    const training::ImageDetections r =
        training::detect_image(predictor, bgr, nms, options.img_size, engine::Device::cpu(), "", &planes);
    const int64_t n = r.det.size(0);
    const float* d = r.det.data<float>();
    std::vector<Box> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const float* row = d + 6 * i;
      out[i] = Box{row[0], row[1], row[2], row[3], row[4], static_cast<int>(row[5])};
    }
    return out;
  }
};

Detector::Detector(const std::string& weights, const DetectorOptions& options) : impl_(std::make_unique<Impl>()) {
  Y9_CHECK_T(engine::ConfigError, options.img_size > 0 && options.img_size <= training::kMaxImgSize,
             "yolov9::Detector: img_size must be in 1..", training::kMaxImgSize, ", got ", options.img_size);
  Y9_CHECK_T(engine::ConfigError, options.max_det > 0, "yolov9::Detector: max_det must be positive, got ",
             options.max_det);
  impl_->options = options;
  impl_->options.img_size = training::check_img_size(options.img_size, 32);
  impl_->model = training::load_model(weights, options.cfg, -1, /*fuse=*/true);
  impl_->predictor = training::model_predictor(*impl_->model.model);  // eval mode, NoGradGuard inside
  impl_->nms.conf_thres = options.conf_thres;
  impl_->nms.iou_thres = options.iou_thres;
  impl_->nms.agnostic = options.agnostic;
  impl_->nms.multi_label = false;
  impl_->nms.max_det = options.max_det;
  for (int c : options.classes) impl_->nms.classes.push_back(c);
  const int64_t nc = impl_->model.model->nc();
  impl_->names = impl_->model.names;
  if (static_cast<int64_t>(impl_->names.size()) != nc) {
    impl_->names.clear();
    for (int64_t c = 0; c < nc; ++c) impl_->names.push_back("class" + std::to_string(c));
  }
}

Detector::~Detector() = default;
Detector::Detector(Detector&&) noexcept = default;
Detector& Detector::operator=(Detector&&) noexcept = default;

std::vector<Box> Detector::detect(const std::string& image_path) const {
#ifdef Y9_HAVE_OPENCV
  return impl_->run(io::read_image_bgr(image_path));
#else
  return impl_->run(io::read_image_u8(image_path));
#endif
}

std::vector<Box> Detector::detect(const uint8_t* bgr, int height, int width, int64_t row_stride_bytes) const {
  Y9_CHECK(bgr != nullptr && height > 0 && width > 0, "yolov9::Detector::detect: empty image (", height, "x", width,
           ")");
  const size_t step = row_stride_bytes > 0 ? static_cast<size_t>(row_stride_bytes) : static_cast<size_t>(width) * 3;
  Y9_CHECK(step >= static_cast<size_t>(width) * 3, "yolov9::Detector::detect: row stride ", row_stride_bytes,
           " bytes is less than 3 * width = ", 3 * width);
#ifdef Y9_HAVE_OPENCV
  const cv::Mat im(height, width, CV_8UC3, const_cast<uint8_t*>(bgr), step);  // read only: letterbox copies
#else
  io::ImageU8 im;
  im.height = height;
  im.width = width;
  im.data.resize(static_cast<size_t>(height) * width * 3);
  for (int y = 0; y < height; ++y) std::memcpy(im.row(y), bgr + step * static_cast<size_t>(y), static_cast<size_t>(width) * 3);
#endif
  return impl_->run(im);
}

int Detector::num_classes() const { return static_cast<int>(impl_->model.model->nc()); }
const std::vector<std::string>& Detector::names() const { return impl_->names; }
const DetectorOptions& Detector::options() const { return impl_->options; }

}  // namespace yolov9
