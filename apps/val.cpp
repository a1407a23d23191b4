// `yolov9 val`: the official val_dual.py command line (WongKinYiu/yolov9 5b1ea9a; shared/spec/
// eval.md section 5): loads a checkpoint, builds the validation split of --data with rect batches
// (pad 0.5; --task speed: square, pad 0, conf 0.25, iou 0.45) and runs apps::run_validation.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "apps/val.h"

#include "apps/commands.h"
#include "io/paths.h"
#include "apps/training/config_paths.h"
#include "apps/training/evaluator.h"
#include "apps/training/option_checks.h"
#include "apps/training/weights.h"
#include "engine/device.h"
#include "engine/error.h"
#include "io/data_yaml.h"

namespace fs = std::filesystem;

namespace apps {

using namespace training;  // the library layer behind the commands

namespace {

struct ValArgs {
  std::string data = "data/coco.yaml";
  std::vector<std::string> weights{"yolo.pt"};
  std::string cfg;
  int batch_size = 32;
  int imgsz = 640;
  double conf_thres = 0.001, iou_thres = 0.7;
  int64_t max_det = 300;
  std::string task = "val", device;
  int workers = 8;
  bool single_cls = false, augment = false, verbose = false, save_txt = false, save_hybrid = false,
       save_conf = false, save_json = false, exist_ok = false, half = false, dnn = false, no_plots = false;
  std::string project = "runs/val", name = "exp";
  int min_items = 0;
};

// Official select_device: '' is cuda:0 when a CUDA device is usable, else the CPU.
engine::Device select_device(const std::string& given) { return selected_device(check_device_option(given)); }

int run_val(ValArgs a) {
  if (a.augment) std::printf("val: NOTICE --augment (test-time augmentation) is not supported by these heads; ignored\n");
  if (a.dnn) std::printf("val: NOTICE --dnn (OpenCV DNN for ONNX) does not apply to safetensors weights; ignored\n");
  if (a.task == "study") {
    std::fprintf(stderr, "val: --task study is not supported\n");
    return 2;
  }
  if (a.weights.size() > 1)
    std::printf("val: NOTICE model ensembles are not supported; using %s\n", a.weights[0].c_str());
  if (a.conf_thres > 0.001 && a.task != "speed")
    std::printf("WARNING ⚠️ confidence threshold %g > 0.001 produces invalid results\n", a.conf_thres);
  if (a.save_hybrid)
    std::printf("WARNING ⚠️ --save-hybrid will return high mAP from hybrid labels, not from predictions alone\n");
  bool rect = true;
  double pad = 0.5;
  if (a.task == "speed") {
    a.conf_thres = 0.25;
    a.iou_thres = 0.45;
    a.save_json = false;
    rect = false;
    pad = 0.0;
  }
  a.save_txt = a.save_txt || a.save_hybrid;
  if (a.data.size() >= 9 && a.data.compare(a.data.size() - 9, 9, "coco.yaml") == 0 && a.task != "speed")
    a.save_json = true;

  const std::string& w = a.weights[0];
  const engine::Device device = select_device(a.device);
  // --data as train takes it: a path, else a name under configs/data.
  io::DataConfig data = io::load_data_yaml(fs::is_regular_file(a.data)
                                               ? a.data
                                               : resolve_config(a.data, "data", "dataset YAML (--data)"));
  LoadedModel lm = load_model(w, a.cfg, a.single_cls ? 1 : data.nc, /*fuse=*/true);  // as official stand-alone
  if (device.is_cuda()) lm.model->to(device);
  const int64_t nc = a.single_cls ? 1 : data.nc;
  Y9_CHECK_T(engine::ConfigError, lm.model->nc() == nc, w, " (", lm.model->nc(),
             " classes) trained on different --data than what you passed (", nc, " classes)");
  const int imgsz = check_img_size(a.imgsz, 32);
  const std::string split = (a.task == "train" || a.task == "val" || a.task == "test") ? a.task : "val";
  const std::vector<std::string>& entries = split == "train" ? data.train : split == "test" ? data.test : data.val;
  Y9_CHECK_T(engine::ConfigError, !entries.empty(), a.data, ": no '", split, "' split");

  ValOptions o;
  o.batch_size = a.batch_size;
  o.workers = a.workers;
  o.conf_thres = a.conf_thres;
  o.iou_thres = a.iou_thres;
  o.max_det = a.max_det;
  o.single_cls = a.single_cls;
  o.verbose = a.verbose;
  o.save_txt = a.save_txt;
  o.save_hybrid = a.save_hybrid;
  o.save_conf = a.save_conf;
  o.save_json = a.save_json;
  o.plots = !a.no_plots;
  o.names = data.names;
  o.is_coco = is_coco_val(data.val);
  // official: anno_json = <data path or ../coco>/annotations/instances_val2017.json
  o.anno_json = (fs::path(data.root.empty() ? "../coco" : data.root) / "annotations" / "instances_val2017.json").string();
  o.json_stem = fs::path(w).stem().string();
  o.task = split;
  o.device = device;
  // --half: FP16 on CUDA (official half &= device.type != 'cpu'); the CPU stays FP32.
  if (a.half && device.is_cuda()) o.autocast = engine::DType::F16;
  if (a.half && !device.is_cuda()) std::printf("val: NOTICE --half: FP16 inference runs only on CUDA (as officially); using FP32\n");
  o.save_dir = io::increment_path((std::filesystem::path(a.project) / a.name).string(), a.exist_ok, /*mkdir=*/true);

  auto ds = make_val_dataset(entries, imgsz, a.batch_size, rect, pad, data.nc, a.single_cls, a.min_items, split + ": ");
  std::printf("val: %s (%s%s, %lld parameters), %lld images\n", w.c_str(), lm.stem.c_str(),
              lm.ema ? ", EMA" : "", static_cast<long long>(lm.model->num_parameters()),
              static_cast<long long>(ds->size()));
  ValResult r = run_validation(*lm.model, ds, o);
  std::printf("Results saved to %s\n", o.save_dir.c_str());
  if (o.save_txt)
    std::printf("%lld labels saved to %s\n", static_cast<long long>(r.label_files),
                (fs::path(o.save_dir) / "labels").string().c_str());
  return 0;
}

}  // namespace

void register_val(CLI::App& app) {
  static ValArgs a;  // CLI11 binds options to storage that outlives parsing
  add_command(
      app, "val", "validate a model (official val_dual.py flags)",
      [](CLI::App& s) {
        s.add_option("--data", a.data, "dataset.yaml path")->capture_default_str();
        s.add_option("--weights", a.weights, "model weights (safetensors)")->capture_default_str();
        s.add_option("--cfg", a.cfg, "model YAML (default: the checkpoint's metadata)");
        s.add_option("--batch-size,--batch", a.batch_size, "batch size")
            ->check(CLI::Range(1, static_cast<int>(training::kMaxBatchSize)))
            ->capture_default_str();
        s.add_option("--imgsz,--img,--img-size", a.imgsz, "inference size (pixels)")
            ->check(CLI::Range(1, static_cast<int>(training::kMaxImgSize)))
            ->capture_default_str();
        s.add_option("--conf-thres,--conf", a.conf_thres, "confidence threshold")->capture_default_str()->check(CLI::Range(0.0, 1.0));
        s.add_option("--iou-thres,--iou", a.iou_thres, "NMS IoU threshold")->capture_default_str()->check(CLI::Range(0.0, 1.0));
        s.add_option("--max-det", a.max_det, "maximum detections per image")
            ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
            ->capture_default_str();
        s.add_option("--task", a.task, "train, val, test or speed")
            ->check(CLI::IsMember({"train", "val", "test", "speed", "study"}))
            ->capture_default_str();
        s.add_option("--device", a.device, "cuda device, i.e. 0 or 0,1,2,3 or cpu");
        s.add_option("--workers", a.workers, "max dataloader workers")->capture_default_str();
        s.add_flag("--single-cls", a.single_cls, "treat as single-class dataset");
        s.add_flag("--augment", a.augment, "augmented inference (not supported: notice)");
        s.add_flag("--verbose", a.verbose, "report mAP by class");
        s.add_flag("--save-txt", a.save_txt, "save results to *.txt");
        s.add_flag("--save-hybrid", a.save_hybrid, "save label+prediction hybrid results to *.txt");
        s.add_flag("--save-conf", a.save_conf, "save confidences in --save-txt labels");
        s.add_flag("--save-json", a.save_json, "save a COCO-JSON results file");
        s.add_option("--project", a.project, "save to project/name")->capture_default_str();
        s.add_option("--name", a.name, "save to project/name")->capture_default_str();
        s.add_flag("--exist-ok", a.exist_ok, "existing project/name ok, do not increment");
        s.add_flag("--half", a.half, "use FP16 half-precision inference");
        s.add_flag("--dnn", a.dnn, "use OpenCV DNN for ONNX inference (notice)");
        s.add_option("--min-items", a.min_items, "drop images with fewer labels")->capture_default_str();
        s.add_flag("--no-plots", a.no_plots, "do not write plots (extension)");
      },
      []() { return run_val(a); });
}

}  // namespace apps
