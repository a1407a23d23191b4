// `yolov9 export --weights W [--cfg C] [--reparam [--gelan-cfg G]] [--fuse] [--nc N] --out FILE`.
// Loads W (safetensors, official state_dict names) into the model of C (default: the YAML W
// carries), optionally removes the PGI auxiliary branch (C must have a multi-branch head; the
// single-branch config defaults to C's file name with "yolov9-" replaced by "gelan-"), optionally
// fuses Conv+BN and RepConvN, and writes the state_dict to FILE (metadata: cfg, cfg_yaml, nc,
// reparam, fused), which val and detect load and `train --weights` fine-tunes (unless fused).
// `--format onnx` writes the re-parameterised (multi-branch heads), fused inference graph as ONNX
// instead (apps/onnx/onnx_export.h): [--opset 17] [--dynamic] [--half] [--nms] [--simplify].
#include "apps/export.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "apps/commands.h"
#include "engine/error.h"
#include "graph/fuse.h"
#include "graph/model.h"
#include "graph/state.h"
#include "apps/training/config_paths.h"
#include "apps/training/weights.h"
#include "io/checkpoint.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "engine/build_info.h"
#if Y9_WITH_ONNX
#include "apps/onnx/onnx_export.h"
#endif

namespace apps {

using namespace training;  // the library layer behind the commands

namespace {

struct ExportOptions {
  std::string weights, cfg, gelan_cfg, out;
  bool reparam = false, fuse = false;
  int64_t nc = -1;
  // --format and the ONNX flags (official export.py names where it has them).
  std::string format = "safetensors";
  int64_t opset = 17, batch = 1, topk_all = 100;
  std::vector<int64_t> imgsz{640, 640};
  bool dynamic = false, half = false, nms = false, simplify = false;
  double iou_thres = 0.45, conf_thres = 0.25;
};

// Writes the ONNX file of the fused inference model (apps/onnx/onnx_export.h).
int write_onnx(const graph::Model& model, const ExportOptions& o, const std::string& what) {
#if Y9_WITH_ONNX
  onnx_export::OnnxOptions oo;
  oo.opset = o.opset;
  oo.batch = o.batch;
  oo.img_h = o.imgsz.at(0);
  oo.img_w = o.imgsz.size() > 1 ? o.imgsz[1] : o.imgsz[0];
  oo.dynamic = o.dynamic;
  oo.half = o.half;
  oo.nms = o.nms;
  oo.topk_all = o.topk_all;
  oo.iou_thres = o.iou_thres;
  oo.conf_thres = o.conf_thres;
  oo.producer_version = Y9_VERSION_STRING;
  const onnx_export::OnnxModelBytes r = onnx_export::export_onnx(model, oo);
  if (o.simplify)
    std::printf("export: --simplify: nothing to do, the graph is written folded (BN fused, RepConvN merged, shapes and "
                "anchors as constants%s)\n", o.dynamic ? "; --dynamic keeps the anchor grid computation" : "");
  io::write_file_atomic(o.out, r.bytes);
  std::printf("export: %s -> %s (ONNX opset %lld, %s; %lld nodes, %lld initializers)\n", o.weights.c_str(), o.out.c_str(),
              static_cast<long long>(o.opset), what.c_str(), static_cast<long long>(r.nodes),
              static_cast<long long>(r.initializers));
  for (const auto& v : r.inputs) std::printf("  input  %s\n", onnx_export::describe(v).c_str());
  for (const auto& v : r.outputs) std::printf("  output %s\n", onnx_export::describe(v).c_str());
  return 0;
#else
  Y9_THROW(engine::ConfigError, "export --format onnx: this build has no ONNX support (install libonnx-dev and "
           "libprotobuf-dev, then rebuild)");
#endif
}

// gelan-X.yaml for yolov9-X.yaml (a bare name: resolve_config finds it beside the shipped configs).
std::string default_gelan_cfg(const std::string& cfg) {
  const std::string name = std::filesystem::path(cfg).filename().string();
  Y9_CHECK_T(engine::ConfigError, name.rfind("yolov9-", 0) == 0, "export --reparam: cannot derive the gelan config from '",
             cfg, "' (expected yolov9-X.yaml); give --gelan-cfg");
  return "gelan-" + name.substr(7);
}

int run_export(const ExportOptions& o) {
  Y9_CHECK_T(engine::ConfigError, o.format == "safetensors" || o.format == "onnx", "export: --format '", o.format,
             "' is not supported (safetensors, onnx)");
  // ONNX is the inference graph: PGI branch removed (multi-branch heads) and everything fused.
  const bool onnx = o.format == "onnx";
  // Class count: --nc, else the weights file's metadata, else the YAML.
  const auto meta = io::load_weights_file(o.weights).metadata;  // safetensors or an official .pt
  int64_t nc = o.nc > 0 ? o.nc : weights_meta_nc(meta, o.weights);
  // A `yolov9 train` checkpoint (io/checkpoint.h) keeps the inference weights under "ema.".
  const bool train_ckpt = meta.count("format") && meta.at("format") == io::kCkptFormat;
  // --cfg: a path or a bare name (resolve_config, as every command); without it the YAML the
  // weights carry.
  ModelYaml yaml = weights_model_yaml(meta, o.weights, o.cfg);
  graph::BuildOptions bo;
  bo.init = false;
  auto model = std::make_shared<graph::Model>(graph::parse_model_config(yaml.text, yaml.name, nc), bo);
  if (train_ckpt) {
    graph::LoadOptions lo;
    lo.prefix = io::kCkptEma;
    training::load_weights(*model, o.weights, lo);
  } else {
    training::load_weights(*model, o.weights);
  }
  model->eval();
  std::string cfg_used = meta.count("cfg") && o.cfg.empty() ? meta.at("cfg") : yaml.name;
  const bool reparam = o.reparam || (onnx && model->head()->branches > 1);
  if (reparam) {
    Y9_CHECK_T(engine::ConfigError, model->head()->branches > 1, "export --reparam: ", yaml.name,
               " has a single-branch ", model->head()->type_name(), " head; nothing to re-parameterise");
    const std::string gelan = o.gelan_cfg.empty() ? default_gelan_cfg(yaml.stem + ".yaml") : o.gelan_cfg;
    yaml.name = resolve_config(gelan, "models", "single-branch model config (--gelan-cfg)");
    yaml.stem = std::filesystem::path(yaml.name).stem().string();
    std::ifstream f(yaml.name, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    yaml.text = ss.str();
    cfg_used = yaml.name;
    model = graph::reparameterize(*model, graph::parse_model_config(yaml.text, yaml.name, model->nc()));
  }
  int fused = 0;
  if (o.fuse || onnx) fused = graph::fuse(*model);
  if (onnx)
    return write_onnx(*model, o,
                      yaml.stem + (reparam ? ", PGI branch removed, " : ", ") + std::to_string(fused) + " modules fused");
  training::save_weights(*model, o.out,
                         {{"format", "yolov9-cpp state_dict"},
                          {"cfg", cfg_used},
                          {"cfg_yaml", yaml.text},
                          {"nc", std::to_string(model->nc())},
                          {"reparam", o.reparam ? "1" : "0"},
                          {"fused", o.fuse ? "1" : "0"}});
  std::printf("export: %s -> %s (%s%s; %lld parameters%s)\n", o.weights.c_str(), o.out.c_str(), yaml.stem.c_str(),
              o.reparam ? ", PGI branch removed" : "", static_cast<long long>(model->num_parameters()),
              o.fuse ? (", " + std::to_string(fused) + " modules fused").c_str() : "");
  return 0;
}

}  // namespace

void register_export(CLI::App& app) {
  static ExportOptions o;  // CLI11 binds options to storage that outlives parsing
  add_command(
      app, "export",
      "export a model (--reparam removes the PGI branch, --fuse folds Conv+BN and RepConvN; --format onnx writes the "
      "fused inference graph as ONNX)",
      [](CLI::App& sub) {
        sub.add_option("--weights", o.weights, "input weights (safetensors, official state_dict names)")->required();
        sub.add_option("--cfg", o.cfg,
                       "model YAML the weights belong to: a path or a name such as yolov9-s.yaml (default: the YAML "
                       "the weights carry)");
        sub.add_flag("--reparam", o.reparam, "remove the PGI auxiliary branch: yolov9-X -> gelan-X");
        sub.add_option("--gelan-cfg", o.gelan_cfg, "single-branch YAML for --reparam (default: gelan-X for yolov9-X)");
        sub.add_flag("--fuse", o.fuse, "fold BatchNorm into convs and RepConvN into one 3x3 conv (inference only)");
        sub.add_option("--nc", o.nc, "class count (default: the weights' metadata, else the YAML)");
        sub.add_option("--out", o.out, "output file (safetensors, or .onnx with --format onnx)")->required();
        sub.add_option("--format", o.format,
                       "safetensors (default) or onnx: the re-parameterised, fused inference graph, input \"images\" "
                       "[B, 3, H, W] RGB 0..1, output \"output0\" [B, 4 + nc, A] (cx, cy, w, h px, class scores)")
            ->check(CLI::IsMember({"safetensors", "onnx"}));
        sub.add_option("--opset", o.opset, "onnx: ai.onnx opset version, 13..19")->check(CLI::Range(13, 19));
        sub.add_option("--imgsz,--img,--img-size", o.imgsz, "onnx: image size h [w] of the static graph (default 640)")
            ->expected(1, 2);
        sub.add_option("--batch-size,--batch", o.batch, "onnx: batch size of the static graph (default 1)");
        sub.add_flag("--dynamic", o.dynamic, "onnx: dynamic batch, height and width (anchors computed in the graph)");
        sub.add_flag("--half", o.half, "onnx: FP16 weights, input and float outputs");
        sub.add_flag("--nms", o.nms,
                     "onnx: NMS inside (ONNX NonMaxSuppression, best class per box as the official detect); outputs "
                     "num_dets [B,1] int32, boxes [B,K,4] xyxy px, scores [B,K], classes [B,K] int32; rows past "
                     "num_dets are 0 (OpenCV DNN cannot run NonMaxSuppression: use onnxruntime or TensorRT)");
        sub.add_option("--topk-all", o.topk_all, "onnx --nms: detections kept per image K (default 100)");
        sub.add_option("--iou-thres", o.iou_thres, "onnx --nms: NMS IoU threshold (default 0.45)")->check(CLI::Range(0.0, 1.0));
        sub.add_option("--conf-thres", o.conf_thres, "onnx --nms: confidence threshold (default 0.25)")->check(CLI::Range(0.0, 1.0));
        sub.add_flag("--simplify", o.simplify,
                     "onnx: accepted for compatibility; a no-op (the graph is already written folded: BN fused, "
                     "constant shapes and anchors; no onnx-simplifier pass is run)");
      },
      []() { return run_export(o); });
}

}  // namespace apps
