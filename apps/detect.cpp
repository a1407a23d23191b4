// `yolov9 detect`: the official detect_dual.py command line (WongKinYiu/yolov9 5b1ea9a;
// shared/spec/eval.md section 6.1) driving apps::run_detect; outputs in runs/detect/NAME.
#include "apps/detect.h"

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "io/paths.h"
#include "apps/training/config_paths.h"
#include "apps/training/detector.h"
#ifndef Y9_INFERENCE_ONLY
#include "apps/training/features.h"  // --visualize: plots, not in the inference build
#endif
#include "apps/training/option_checks.h"
#include "apps/training/weights.h"
#include "engine/error.h"
#include "io/data_yaml.h"

namespace fs = std::filesystem;

namespace apps {

using namespace training;  // the library layer behind the commands

// ---------------------------------------------------------------------------------------------
// The command line

namespace {

struct DetectArgs {
  std::vector<std::string> weights{"yolo.pt"};
  std::string source = "data/images", data = "data/coco128.yaml", cfg, device;
  std::vector<int> imgsz{640};
  double conf_thres = 0.25, iou_thres = 0.45;
  int64_t max_det = 1000;
  bool view_img = false, save_txt = false, save_conf = false, save_crop = false, nosave = false, agnostic_nms = false,
       augment = false, visualize = false, update = false, exist_ok = false, hide_labels = false, hide_conf = false,
       half = false, dnn = false;
  std::vector<int64_t> classes;
  std::string project = "runs/detect", name = "exp";
  int line_thickness = 3, vid_stride = 1;
};

int run_detect_cli(const DetectArgs& a) {
  if (a.view_img) std::printf("detect: NOTICE --view-img: no display in this build (headless); images are saved instead\n");
  if (a.augment) std::printf("detect: NOTICE --augment (test-time augmentation) is not supported by these heads; ignored\n");
  if (a.update) std::printf("detect: NOTICE --update does not apply to safetensors weights; ignored\n");
  if (a.dnn) std::printf("detect: NOTICE --dnn (OpenCV DNN for ONNX) does not apply to safetensors weights; ignored\n");
  const engine::Device device = selected_device(check_device_option(a.device));  // '' -> cuda:0 when usable
  // --half: FP16 on CUDA (official half &= device.type != 'cpu'); the CPU stays FP32.
  const engine::DType autocast = a.half && device.is_cuda() ? engine::DType::F16 : engine::DType::F32;
  if (a.half && !device.is_cuda()) std::printf("detect: NOTICE --half: FP16 inference runs only on CUDA (as officially); using FP32\n");
  if (a.weights.size() > 1) std::printf("detect: NOTICE model ensembles are not supported; using %s\n", a.weights[0].c_str());
  const std::string& w = a.weights[0];
  LoadedModel lm = load_model(w, a.cfg, -1, /*fuse=*/true);  // official DetectMultiBackend fuses
  if (device.is_cuda()) lm.model->to(device);
  std::vector<std::string> names = lm.names;
  if (names.empty()) {
    try {  // optional: class names only (a path, else a name under configs/data, as train takes it)
      names = io::load_data_yaml(fs::is_regular_file(a.data) ? a.data
                                                            : resolve_config(a.data, "data", "dataset YAML (--data)"))
                  .names;
    } catch (const engine::Error&) {
    }
  }
  if (static_cast<int64_t>(names.size()) != lm.model->nc()) {
    names.clear();
    for (int64_t c = 0; c < lm.model->nc(); ++c) names.push_back("class" + std::to_string(c));
  }
  DetectOptions o;
  o.device = device;
  int img = a.imgsz.empty() ? 640 : a.imgsz[0];
  if (a.imgsz.size() > 1 && a.imgsz[1] != img)
    std::printf("detect: NOTICE rectangular --imgsz is not supported; using %d x %d\n", img, img);
  o.imgsz = check_img_size(img, 32);
  o.conf_thres = a.conf_thres;
  o.iou_thres = a.iou_thres;
  o.max_det = a.max_det;
  o.classes = a.classes;
  o.agnostic_nms = a.agnostic_nms;
  o.save_txt = a.save_txt;
  o.save_conf = a.save_conf;
  o.save_crop = a.save_crop;
  o.nosave = a.nosave;
  o.line_thickness = a.line_thickness;
  o.hide_labels = a.hide_labels;
  o.hide_conf = a.hide_conf;
  o.vid_stride = a.vid_stride;
  o.names = names;
  o.save_dir = io::increment_path((std::filesystem::path(a.project) / a.name).string(), a.exist_ok, /*mkdir=*/true);
  // --visualize: the feature grids of every stage go to <run>/<image stem>/ (official layout).
#ifdef Y9_INFERENCE_ONLY
  if (a.visualize) std::printf("detect: NOTICE --visualize is not in the inference build; ignored\n");
  const Predictor predictor = model_predictor(*lm.model, autocast);
#else
  const Predictor predictor =
      a.visualize ? visualizing_predictor(*lm.model, o.save_dir) : model_predictor(*lm.model, autocast);
#endif
  DetectSummary s = run_detect(predictor, a.source, o);
  if (o.save_txt || !o.nosave) {
    std::string extra;
    if (o.save_txt) {
      int64_t k = 0;
      for (const auto& e : fs::directory_iterator(fs::path(o.save_dir) / "labels"))
        if (e.path().extension() == ".txt") ++k;
      extra = "\n" + std::to_string(k) + " labels saved to " + (fs::path(o.save_dir) / "labels").string();
    }
    std::printf("Results saved to %s%s\n", o.save_dir.c_str(), extra.c_str());
  }
  if (s.failed) {
    std::fprintf(stderr, "detect: %lld input(s) could not be read:\n", static_cast<long long>(s.failed));
    for (const auto& e : s.errors) std::fprintf(stderr, "  %s\n", e.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

void register_detect(CLI::App& app) {
  static DetectArgs a;  // CLI11 binds options to storage that outlives parsing
  add_command(
      app, "detect", "run detection on images or video (official detect_dual.py flags)",
      [](CLI::App& s) {
        s.add_option("--weights", a.weights, "model weights (safetensors)")->capture_default_str();
        s.add_option("--source", a.source, "file, folder, glob, .txt list or video")->capture_default_str();
        s.add_option("--data", a.data, "dataset.yaml for class names (optional)")->capture_default_str();
        s.add_option("--cfg", a.cfg, "model YAML (default: the checkpoint's metadata)");
        s.add_option("--imgsz,--img,--img-size", a.imgsz, "inference size h,w")
            ->check(CLI::Range(1, static_cast<int>(training::kMaxImgSize)))
            ->capture_default_str();
        s.add_option("--conf-thres,--conf", a.conf_thres, "confidence threshold")->capture_default_str()->check(CLI::Range(0.0, 1.0));
        s.add_option("--iou-thres,--iou", a.iou_thres, "NMS IoU threshold")->capture_default_str()->check(CLI::Range(0.0, 1.0));
        s.add_option("--max-det", a.max_det, "maximum detections per image")
            ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
            ->capture_default_str();
        s.add_option("--device", a.device, "cuda device, i.e. 0 or 0,1,2,3 or cpu");
        s.add_flag("--view-img", a.view_img, "show results (notice: headless)");
        s.add_flag("--save-txt", a.save_txt, "save results to *.txt");
        s.add_flag("--save-conf", a.save_conf, "save confidences in --save-txt labels");
        s.add_flag("--save-crop", a.save_crop, "save cropped prediction boxes");
        s.add_flag("--nosave", a.nosave, "do not save images/videos");
        s.add_option("--classes", a.classes, "filter by class: --classes 0, or --classes 0 2 3");
        s.add_flag("--agnostic-nms", a.agnostic_nms, "class-agnostic NMS");
        s.add_flag("--augment", a.augment, "augmented inference (not supported: notice)");
        s.add_flag("--visualize", a.visualize, "visualize features: stage<i>_<module>_features.png per image");
        s.add_flag("--update", a.update, "update all models (notice)");
        s.add_option("--project", a.project, "save results to project/name")->capture_default_str();
        s.add_option("--name", a.name, "save results to project/name")->capture_default_str();
        s.add_flag("--exist-ok", a.exist_ok, "existing project/name ok, do not increment");
        s.add_option("--line-thickness", a.line_thickness, "bounding box thickness (pixels)")->capture_default_str();
        s.add_flag("--hide-labels", a.hide_labels, "hide labels");
        s.add_flag("--hide-conf", a.hide_conf, "hide confidences");
        s.add_flag("--half", a.half, "use FP16 half-precision inference");
        s.add_flag("--dnn", a.dnn, "use OpenCV DNN for ONNX inference (notice)");
        s.add_option("--vid-stride", a.vid_stride, "video frame-rate stride")
            ->check(CLI::Range(1, 1 << 20))
            ->capture_default_str();
      },
      []() { return run_detect_cli(a); });
}

}  // namespace apps
