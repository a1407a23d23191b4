// `yolov9 export --weights W [--cfg C] [--reparam [--gelan-cfg G]] [--fuse] [--nc N] --out FILE`.
// Loads W (safetensors, official state_dict names) into the model of C (default: the YAML W
// carries), optionally removes the PGI auxiliary branch (C must have a multi-branch head; the
// single-branch config defaults to C's file name with "yolov9-" replaced by "gelan-"), optionally
// fuses Conv+BN and RepConvN, and writes the state_dict to FILE (metadata: cfg, cfg_yaml, nc,
// reparam, fused), which val and detect load and `train --weights` fine-tunes (unless fused).
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
#include "io/safetensors.h"

namespace apps {

using namespace training;  // the library layer behind the commands

namespace {

struct ExportOptions {
  std::string weights, cfg, gelan_cfg, out;
  bool reparam = false, fuse = false;
  int64_t nc = -1;
};

// gelan-X.yaml for yolov9-X.yaml (a bare name: resolve_config finds it beside the shipped configs).
std::string default_gelan_cfg(const std::string& cfg) {
  const std::string name = std::filesystem::path(cfg).filename().string();
  Y9_CHECK_T(engine::ConfigError, name.rfind("yolov9-", 0) == 0, "export --reparam: cannot derive the gelan config from '",
             cfg, "' (expected yolov9-X.yaml); give --gelan-cfg");
  return "gelan-" + name.substr(7);
}

int run_export(const ExportOptions& o) {
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
  if (o.reparam) {
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
  if (o.fuse) fused = graph::fuse(*model);
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
      app, "export", "export a model (--reparam removes the PGI branch, --fuse folds Conv+BN and RepConvN)",
      [](CLI::App& sub) {
        sub.add_option("--weights", o.weights, "input weights (safetensors, official state_dict names)")->required();
        sub.add_option("--cfg", o.cfg,
                       "model YAML the weights belong to: a path or a name such as yolov9-s.yaml (default: the YAML "
                       "the weights carry)");
        sub.add_flag("--reparam", o.reparam, "remove the PGI auxiliary branch: yolov9-X -> gelan-X");
        sub.add_option("--gelan-cfg", o.gelan_cfg, "single-branch YAML for --reparam (default: gelan-X for yolov9-X)");
        sub.add_flag("--fuse", o.fuse, "fold BatchNorm into convs and RepConvN into one 3x3 conv (inference only)");
        sub.add_option("--nc", o.nc, "class count (default: the weights' metadata, else the YAML)");
        sub.add_option("--out", o.out, "output safetensors file")->required();
      },
      []() { return run_export(o); });
}

}  // namespace apps
