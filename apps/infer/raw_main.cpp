// yolov9_infer_raw: the model and NMS on a stored input tensor, for checking a cross build (the
// aarch64 binary under qemu) against the host on the very same letterboxed image.
//   yolov9_infer_raw input WEIGHTS IMAGE IMGSZ OUT.safetensors   (OpenCV or io/image_u8.h)
//       writes the [1, 3, H, W] F32 tensor `yolov9 detect` feeds the model for IMAGE ("images")
//   yolov9_infer_raw predict WEIGHTS IN.safetensors [CONF [PRED.safetensors]]
//       prints "class score x1 y1 x2 y2" per NMS box (letterboxed-input pixels, detect's NMS) and
//       writes the NMS input [1, 4 + nc, A] ("pred") to PRED when given: scores tied to float
//       rounding can change NMS picks between machines, the prediction compares with a tolerance
#include <cstdio>
#include <exception>
#include <map>
#include <string>

#include "apps/training/weights.h"
#include "engine/autograd.h"
#include "engine/error.h"
#include "graph/model.h"
#include "io/safetensors.h"
#include "ops/nms.h"
#include "ops/ops.h"
#include "apps/training/detector.h"
#ifdef Y9_HAVE_OPENCV
#include "io/image.h"
#endif

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "predict" && argc >= 4 && argc <= 6) {
      training::LoadedModel lm = training::load_model(argv[2]);
      lm.model->eval();
      const engine::Tensor x = io::load_safetensors(argv[3]).tensors.at("images");
      // model_predictor's forward (apps/training/predictor.cpp), which this OpenCV-free build
      // cannot compile: its header pulls the loader's OpenCV types.
      engine::autograd::NoGradGuard ng;
      const graph::ModelOutput out = lm.model->forward(x);
      const engine::Tensor& pred =
          out.decoded.size() <= 2 ? ops::nms_input(out.decoded, out.decoded.size() > 1) : out.decoded.back();
      ops::NmsOptions nms;  // detect's: conf 0.25, iou 0.45, best class, max_det 1000
      nms.max_det = 1000;
      if (argc >= 5) nms.conf_thres = std::stod(argv[4]);
      if (argc == 6) io::save_safetensors(argv[5], {{"pred", pred}}, {});
      const engine::Tensor det = ops::non_max_suppression(pred, nms)[0].to(engine::DType::F32).contiguous();
      const float* d = det.data<float>();
      for (int64_t i = 0; i < det.size(0); ++i)
        std::printf("%d %.6f %.4f %.4f %.4f %.4f\n", static_cast<int>(d[6 * i + 5]), d[6 * i + 4], d[6 * i],
                    d[6 * i + 1], d[6 * i + 2], d[6 * i + 3]);
      return 0;
    }
    if (mode == "input" && argc == 6) {
      training::LoadedModel lm = training::load_model(argv[2]);
      engine::Tensor captured;
      const training::Predictor capture = [&](const engine::Tensor& x, const io::Batch&) {
        captured = x.contiguous().clone();
        // the boxes do not matter here: an empty prediction of the right rank
        return engine::Tensor::zeros({x.size(0), 4 + lm.model->nc(), 1});
      };
#ifdef Y9_HAVE_OPENCV
      const cv::Mat image = io::read_image_bgr(argv[3]);
#else
      const io::ImageU8 image = io::read_image_u8(argv[3]);
#endif
      training::detect_image(capture, image, ops::NmsOptions{}, std::stoi(argv[4]),
                             engine::Device::cpu());
      io::save_safetensors(argv[5], {{"images", captured}}, {});
      return 0;
    }
    std::fprintf(stderr, "usage: %s input WEIGHTS IMAGE IMGSZ OUT | predict WEIGHTS IN [CONF]\n", argv[0]);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
