// `yolov9 train`: the command-line driver of training (official train_dual.py / train.py,
// WongKinYiu/yolov9 5b1ea9a; shared/spec/train.md). Set-up order, optimizer groups, warm-up,
// accumulation, clipping, EMA, validation on the EMA, fitness, early stopping, run directory and
// checkpoints follow the spec section by section; deviations are marked "Deviation:".
#include "apps/config_paths.h"
#include "apps/strfmt.h"
#include "apps/train.h"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "apps/commands.h"
#include "apps/evaluator.h"
#include "apps/train_val.h"
#include "engine/allocator.h"
#include "engine/autograd.h"
#include "engine/clip.h"
#include "engine/ema.h"
#include "engine/error.h"
#include "engine/flat_params.h"
#include "engine/optim.h"
#include "engine/schedule.h"
#include "graph/model.h"
#include "graph/param_groups.h"
#include "io/augment.h"
#include "io/checkpoint.h"
#include "io/data_yaml.h"
#include "io/dataset.h"
#include "io/loader.h"
#include "io/plots.h"
#include "ops/yolo_loss.h"

namespace fs = std::filesystem;
using engine::Tensor;

namespace apps {

// ---------------------------------------------------------------------------------------------
// Options (names as train_dual.py's argparse destinations, so opt.yaml reads like the official)

struct TrainOptions {
  std::string weights;
  std::string cfg = "yolo.yaml";
  std::string data = "data/coco.yaml";
  std::string hyp = "hyp.scratch-high.yaml";
  int64_t epochs = 100;
  int64_t batch_size = 16;
  int64_t imgsz = 640;
  bool rect = false;
  std::string resume;  // path given to --resume ("" with the flag alone = latest run)
  bool nosave = false, noval = false, noautoanchor = false, noplots = false;
  int64_t evolve = 0;  // 0 = off
  std::string bucket;
  std::string cache;
  bool image_weights = false;
  std::string device;
  bool multi_scale = false, single_cls = false;
  std::string optimizer = "SGD";
  bool sync_bn = false;
  int64_t workers = 8;
  std::string project = "runs/train";
  std::string name = "exp";
  bool exist_ok = false, quad = false, cos_lr = false, flat_cos_lr = false, fixed_lr = false;
  double label_smoothing = 0.0;
  int64_t patience = 100;
  std::vector<int64_t> freeze{0};
  int64_t save_period = -1;
  int64_t seed = 0;
  int64_t local_rank = -1;
  int64_t min_items = 0;
  int64_t close_mosaic = 0;
  std::string entity;
  std::string upload_dataset;
  int64_t bbox_interval = -1;
  std::string artifact_alias = "latest";
  // Ours.
  bool deterministic = false;
  bool fp32_init = false;
  int64_t nbs = 64;  // nominal batch size (official constant 64)
  int64_t stop_after_batches = 0;  // hidden, tests: behave as if interrupted after N iterations
  std::string save_dir;
};

#define Y9_TRAIN_FIELDS(X)                                                                              \
  X(weights) X(cfg) X(data) X(hyp) X(epochs) X(batch_size) X(imgsz) X(rect) X(resume) X(nosave) X(noval) \
  X(noautoanchor) X(noplots) X(evolve) X(bucket) X(cache) X(image_weights) X(device) X(multi_scale)       \
  X(single_cls) X(optimizer) X(sync_bn) X(workers) X(project) X(name) X(exist_ok) X(quad) X(cos_lr)      \
  X(flat_cos_lr) X(fixed_lr) X(label_smoothing) X(patience) X(freeze) X(save_period) X(seed)              \
  X(local_rank) X(min_items) X(close_mosaic) X(entity) X(upload_dataset) X(bbox_interval)                 \
  X(artifact_alias) X(deterministic) X(fp32_init) X(nbs) X(save_dir)

static nlohmann::ordered_json options_to_json(const TrainOptions& o) {
  nlohmann::ordered_json j;
#define Y9_W(f) j[#f] = o.f;
  Y9_TRAIN_FIELDS(Y9_W)
#undef Y9_W
  return j;
}

static TrainOptions options_from_json(const nlohmann::json& j) {
  TrainOptions o;
#define Y9_R(f) \
  if (j.contains(#f)) j.at(#f).get_to(o.f);
  Y9_TRAIN_FIELDS(Y9_R)
#undef Y9_R
  return o;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Small helpers

using Hyp = std::vector<std::pair<std::string, double>>;  // file order

volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_stop_signal(int sig) {
  if (g_signal != 0) std::signal(sig, SIG_DFL);  // a second Ctrl-C kills at once
  g_signal = sig;
}

Hyp load_full_hyp(const std::string& path) {
  YAML::Node y;
  try {
    y = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    Y9_THROW(engine::IoError, path, ": not valid YAML: ", e.what());
  }
  Y9_CHECK_T(engine::ConfigError, y.IsMap(), path, ": a hyp file must be a mapping of key: number");
  Hyp h;
  for (const auto& kv : y) {
    const std::string k = kv.first.as<std::string>();
    try {
      h.emplace_back(k, kv.second.as<double>());
    } catch (const YAML::Exception&) {
      Y9_THROW(engine::ConfigError, path, ": hyp '", k, "' must be a number");
    }
  }
  // Keys the official script reads (KeyError there when missing).
  static constexpr const char* kRequired[] = {"lr0",   "lrf",        "momentum",  "weight_decay", "warmup_epochs",
                                              "warmup_momentum", "warmup_bias_lr", "hsv_h", "hsv_s", "hsv_v",
                                              "degrees", "translate", "scale",     "shear",        "perspective",
                                              "flipud", "fliplr",     "mosaic",    "mixup",        "copy_paste"};
  for (const char* k : kRequired) {
    bool found = false;
    for (const auto& kv : h) found = found || kv.first == k;
    Y9_CHECK_T(engine::ConfigError, found, path, ": hyp key '", k, "' is missing (see configs/hyps/hyp.scratch-high.yaml)");
  }
  return h;
}

double hget(const Hyp& h, const std::string& k) {
  for (const auto& kv : h)
    if (kv.first == k) return kv.second;
  Y9_THROW(engine::ConfigError, "hyp key '", k, "' is missing");
}
double hget_or(const Hyp& h, const std::string& k, double def) {
  for (const auto& kv : h)
    if (kv.first == k) return kv.second;
  return def;
}
void hset(Hyp& h, const std::string& k, double v) {
  for (auto& kv : h)
    if (kv.first == k) {
      kv.second = v;
      return;
    }
  h.emplace_back(k, v);
}

nlohmann::ordered_json hyp_json(const Hyp& h) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [k, v] : h) j[k] = v;
  return j;
}

void emit_json(YAML::Emitter& e, const nlohmann::ordered_json& j) {
  if (j.is_object()) {
    e << YAML::BeginMap;
    for (auto it = j.begin(); it != j.end(); ++it) {
      e << YAML::Key << it.key() << YAML::Value;
      emit_json(e, it.value());
    }
    e << YAML::EndMap;
  } else if (j.is_array()) {
    e << YAML::Flow << YAML::BeginSeq;
    for (const auto& v : j) emit_json(e, v);
    e << YAML::EndSeq;
  } else if (j.is_string()) {
    e << j.get<std::string>();
  } else if (j.is_boolean()) {
    e << j.get<bool>();
  } else if (j.is_number_integer()) {
    e << j.get<int64_t>();
  } else if (j.is_number()) {
    e << j.get<double>();
  } else {
    e << YAML::Null;
  }
}

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream f(p);
  f << s;
  f.flush();
  Y9_CHECK_T(engine::IoError, f.good(), "cannot write ", p.string(), ": ", std::strerror(errno));
}

void write_yaml(const fs::path& p, const nlohmann::ordered_json& j) {
  YAML::Emitter e;
  e.SetDoublePrecision(17);
  emit_json(e, j);
  write_text(p, std::string(e.c_str()) + "\n");
}

/// Official increment_path(project/name, exist_ok, sep=''): exp, exp2, exp3, ...
fs::path increment_path(const fs::path& p, bool exist_ok) {
  if (exist_ok || !fs::exists(p)) return p;
  for (int n = 2;; ++n) {
    fs::path c = p.string() + std::to_string(n);
    if (!fs::exists(c)) return c;
  }
}

/// Newest last.safetensors under `root` (official get_latest_run: the most recent last*.pt).
std::string latest_run(const std::string& root) {
  std::string best;
  fs::file_time_type best_t{};
  std::error_code ec;
  if (fs::is_directory(root, ec))
    for (auto it = fs::recursive_directory_iterator(root, ec); it != fs::recursive_directory_iterator(); ++it)
      if (it->path().filename() == "last.safetensors") {
        auto t = fs::last_write_time(it->path(), ec);
        if (best.empty() || t > best_t) best = it->path().string(), best_t = t;
      }
  Y9_CHECK_T(engine::IoError, !best.empty(), "--resume: no weights/last.safetensors found under '", root,
             "'; pass the checkpoint path: --resume runs/train/exp/weights/last.safetensors");
  return best;
}

std::string iso_now() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", std::localtime(&t));
  return buf;
}


std::string hms(double s) {
  const int64_t t = static_cast<int64_t>(s);
  if (t >= 3600) return fmt("%lld:%02lld:%02lld", (long long)(t / 3600), (long long)(t / 60 % 60), (long long)(t % 60));
  return fmt("%02lld:%02lld", (long long)(t / 60), (long long)(t % 60));
}

// uint8 [B,3,H,W] -> float32 / 255 (official imgs.float() / 255: an FP32 division per element).
Tensor to_unit_float(const Tensor& u8) {
  Tensor x = Tensor::empty(u8.shape(), engine::DType::F32);
  const Tensor c = u8.contiguous();
  const uint8_t* s = c.data<uint8_t>();
  float* d = x.data<float>();
  const int64_t n = u8.numel();
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(s[i]) / 255.0f;
  return x;
}

/// Official utils/torch_utils.py EarlyStopping.
struct EarlyStopping {
  double best_fitness = 0.0;
  int64_t best_epoch = 0;
  int64_t patience = 100;  // 0 -> never
  bool possible_stop = false;
  bool operator()(int64_t epoch, double fitness) {
    if (fitness >= best_fitness) {
      best_epoch = epoch;
      best_fitness = fitness;
    }
    const int64_t delta = epoch - best_epoch;
    const int64_t pat = patience > 0 ? patience : INT64_MAX / 4;
    possible_stop = delta >= pat - 1;
    const bool stop = delta >= pat;
    if (stop)
      std::printf("Stopping training early as no improvement observed in last %lld epochs. Best results observed at "
                  "epoch %lld, best model saved as best.safetensors.\n",
                  (long long)pat, (long long)best_epoch);
    return stop;
  }
};

std::map<std::string, Tensor> to_map(const std::vector<std::pair<std::string, Tensor>>& v) {
  return std::map<std::string, Tensor>(v.begin(), v.end());
}

// ---------------------------------------------------------------------------------------------
// The run

int run_train(TrainOptions o, bool resume_flag) {
  const auto t_start = std::chrono::steady_clock::now();
  // --- resume: reload the options of the run (official: opt.yaml / ckpt['opt']) -------------------
  io::Checkpoint rck;
  std::string resume_path;
  fs::path save_dir;
  if (resume_flag) {
    resume_path = o.resume.empty() ? latest_run(fs::path(o.project).parent_path().empty() ? std::string("runs")
                                                                                          : fs::path(o.project).parent_path().string())
                                   : o.resume;
    if (fs::is_directory(resume_path)) resume_path = (fs::path(resume_path) / "weights" / "last.safetensors").string();
    rck = io::load_checkpoint(resume_path);
    Y9_CHECK_T(engine::ConfigError, rck.meta.count("opt") && !rck.optim.empty(), resume_path,
               ": not a resumable training checkpoint (no options or optimizer state)");
    Y9_CHECK_T(engine::ConfigError, rck.meta["finished"] != "1", resume_path, ": training of this run is complete (",
               std::stoll(rck.meta["epoch"]) + 1, " epochs); nothing to resume. Start a new run with --weights ", resume_path,
               " to fine-tune.");
    TrainOptions saved = options_from_json(nlohmann::json::parse(rck.meta.at("opt")));
    saved.stop_after_batches = o.stop_after_batches;
    saved.resume = resume_path;
    o = saved;
    save_dir = fs::path(resume_path).parent_path().parent_path();
    std::printf("Resuming training from %s\n", resume_path.c_str());
  }

  // --- notices for flags that do nothing here -----------------------------------------------------
  auto notice = [](const char* flag, const char* why) { std::printf("notice: %s %s\n", flag, why); };
  if (o.noautoanchor) notice("--noautoanchor", "has no effect (anchor-free heads; same as the official code)");
  if (o.evolve) notice("--evolve", "hyper-parameter evolution is not implemented; training once with the given hyp");
  if (!o.bucket.empty()) notice("--bucket", "ignored (cloud storage is not supported)");
  if (!o.cache.empty()) notice("--cache", "ignored (images are decoded on the fly by the loader threads)");
  if (o.image_weights) notice("--image-weights", "is not supported; uniform sampling is used");
  if (o.multi_scale) notice("--multi-scale", "is not supported yet; training at a fixed --img");
  if (o.sync_bn) notice("--sync-bn", "ignored (single-process training)");
  if (o.quad) notice("--quad", "is not supported; ordinary collate is used");
  if (o.local_rank != -1) notice("--local_rank", "ignored (single-process training)");
  if (!o.entity.empty() || !o.upload_dataset.empty() || o.bbox_interval != -1 || o.artifact_alias != "latest")
    notice("--entity/--upload_dataset/--bbox_interval/--artifact_alias", "ignored (no W&B logger)");
  if (o.label_smoothing != 0.0) notice("--label-smoothing", "has no effect with the TAL loss (as officially)");
  if (!o.device.empty() && o.device != "cpu")
    notice("--device", "CUDA training is not wired into `yolov9 train` yet; training on the CPU");
  Y9_CHECK_T(engine::ConfigError, o.epochs > 0, "--epochs must be > 0 (got ", o.epochs, ")");
  Y9_CHECK_T(engine::ConfigError, o.batch_size > 0, "--batch-size must be > 0 (AutoBatch -1 needs CUDA; got ",
             o.batch_size, ")");
  Y9_CHECK_T(engine::ConfigError, int(o.cos_lr) + int(o.flat_cos_lr) + int(o.fixed_lr) <= 1,
             "choose at most one of --cos-lr, --flat-cos-lr, --fixed-lr");
  const engine::OptimizerKind opt_kind = engine::parse_optimizer_kind(o.optimizer);

  // --- paths ---------------------------------------------------------------------------------------
  o.cfg = resolve_config(o.cfg, "models", "model config (--cfg)");
  if (!resume_flag) o.hyp = resolve_config(o.hyp, "hyps", "hyp file (--hyp)");
  o.data = fs::is_regular_file(o.data) ? fs::absolute(o.data).lexically_normal().string()
                                       : resolve_config(o.data, "data", "dataset YAML (--data)");
  if (!resume_flag) {
    std::string name = o.name == "cfg" ? fs::path(o.cfg).stem().string() : o.name;
    save_dir = increment_path(fs::path(o.project) / name, o.exist_ok);
  }
  o.save_dir = save_dir.string();
  const fs::path wdir = save_dir / "weights";
  {
    std::error_code ec;
    fs::create_directories(wdir, ec);
    Y9_CHECK_T(engine::IoError, !ec, "cannot create the run directory ", wdir.string(), ": ", ec.message());
    const fs::path probe = wdir / ".write_test";
    std::ofstream f(probe);
    Y9_CHECK_T(engine::IoError, f.good(), "run directory ", save_dir.string(), " is not writable: ",
               std::strerror(errno));
    f.close();
    fs::remove(probe, ec);
  }

  // --- hyp ------------------------------------------------------------------------------------------
  Hyp hyp;
  if (resume_flag) {
    auto hj = nlohmann::ordered_json::parse(rck.meta.at("hyp"));
    for (auto it = hj.begin(); it != hj.end(); ++it) hyp.emplace_back(it.key(), it.value().get<double>());
  } else {
    hyp = load_full_hyp(o.hyp);
  }
  hset(hyp, "anchor_t", 5.0);
  if (hget_or(hyp, "fl_gamma", 0.0) != 0.0 || hget_or(hyp, "cls_pw", 1.0) != 1.0)
    notice("hyp fl_gamma/cls_pw", "are not supported by the fused loss; using fl_gamma 0, cls_pw 1");
  {
    std::string line = "hyperparameters: ";
    for (size_t i = 0; i < hyp.size(); ++i) line += fmt("%s%s=%g", i ? ", " : "", hyp[i].first.c_str(), hyp[i].second);
    std::printf("%s\n", line.c_str());
  }
  if (!resume_flag) {
    write_yaml(save_dir / "hyp.yaml", hyp_json(hyp));
    nlohmann::ordered_json oj = options_to_json(o);
    oj["hyp"] = hyp_json(hyp);
    write_yaml(save_dir / "opt.yaml", oj);
  }
  std::printf("train: options: %s\n", options_to_json(o).dump().c_str());

  // --- data -----------------------------------------------------------------------------------------
  const io::DataConfig dcfg = io::load_data_yaml(o.data);
  const int64_t nc = o.single_cls ? 1 : dcfg.nc;
  const std::vector<std::string> names = o.single_cls ? std::vector<std::string>{"item"} : dcfg.names;
  io::ScanOptions so;
  so.nc = dcfg.nc;
  so.min_items = static_cast<int>(o.min_items);
  so.single_cls = o.single_cls;
  so.prefix = "train: ";
  io::ScanResult train_scan = io::scan_dataset(dcfg.train, so);
  std::fputs(train_scan.findings_text(so.prefix).c_str(), stdout);
  std::printf("%s%s\n", so.prefix.c_str(), train_scan.summary_line().c_str());
  {
    std::string why;
    Y9_CHECK_T(engine::ConfigError, train_scan.trainable(&why), "train: ", why);
  }
  const bool have_val = !dcfg.val.empty();
  io::ScanResult val_scan;
  if (have_val) {
    so.prefix = "val: ";
    so.min_items = 0;
    val_scan = io::scan_dataset(dcfg.val, so);
    std::fputs(val_scan.findings_text(so.prefix).c_str(), stdout);
    std::printf("%s%s\n", so.prefix.c_str(), val_scan.summary_line().c_str());
  } else {
    notice("data.yaml", "has no val split; validation is skipped (metrics are 0)");
  }

  // --- model ----------------------------------------------------------------------------------------
  graph::BuildOptions bo;
  bo.seed = static_cast<uint64_t>(o.seed);
  auto model = graph::Model::from_yaml(o.cfg, nc, bo);
  // Image size: a multiple of the grid stride, at least 2 grids (official check_img_size(imgsz, gs, gs * 2)).
  const int64_t gs = model->grid_stride();
  const int64_t imgsz = check_img_size(static_cast<int>(o.imgsz), static_cast<int>(gs), static_cast<int>(2 * gs));
  std::printf("%s\n", model->summary(fs::path(o.cfg).stem().string(), imgsz).c_str());
  const int branches = model->head()->branches;
  Y9_CHECK_T(engine::ConfigError, branches == 1 || branches == 2, o.cfg, ": heads with ", branches,
             " branches are not supported by the training loss (DDetect and DualDDetect are)");
  ops::YoloLossConfig loss_cfg = branches == 2 ? ops::YoloLossConfig::dual(nc) : ops::YoloLossConfig::single(nc);
  loss_cfg.strides = model->strides();
  loss_cfg.reg_max = model->head()->reg_max;

  if (!resume_flag && !o.weights.empty()) {
    engine::autograd::NoGradGuard ng;
    io::Checkpoint wck = io::load_checkpoint(o.weights);
    const auto& src = io::inference_weights(wck, o.weights);
    const std::string head_prefix = "model." + std::to_string(model->num_layers() - 1) + ".";
    int64_t n = 0, total = 0;
    for (auto& [k, t] : model->state_dict()) {
      ++total;
      auto it = src.find(k);
      if (it == src.end()) continue;
      if (it->second.shape() != t.shape()) {
        // Only the detection head may differ (another class count): official transfer learning.
        Y9_CHECK_T(engine::ConfigError, k.rfind(head_prefix, 0) == 0, o.weights, ": tensor '", k, "' has shape ",
                   engine::shape_str(it->second.shape()), " in the weights but ", engine::shape_str(t.shape()),
                   " in ", fs::path(o.cfg).filename().string(), " (weights from another model config?)");
        continue;
      }
      Tensor d = t;
      d.copy_(it->second);
      ++n;
    }
    Y9_CHECK_T(engine::ConfigError, n > 0, o.weights, ": no tensor matches ", o.cfg, " (weights from another model?)");
    std::printf("Transferred %lld/%lld items from %s\n", (long long)n, (long long)total, o.weights.c_str());
  }
  {
    const auto frozen = graph::apply_freeze(model->named_parameters(), graph::freeze_prefixes(o.freeze));
    for (const auto& f : frozen) std::printf("freezing %s\n", f.c_str());
  }

  // --- optimizer, schedule, EMA ----------------------------------------------------------------------
  const int64_t nbs = o.nbs;
  Y9_CHECK_T(engine::ConfigError, nbs > 0, "--nbs must be > 0 (got ", nbs, ")");
  int64_t accumulate = engine::official_accumulate(o.batch_size, nbs);
  const double decay = engine::official_weight_decay(hget(hyp, "weight_decay"), o.batch_size, accumulate, nbs);
  const engine::OfficialParamSplit split = graph::official_param_split(*model);
  engine::NamedTensors packed;
  for (const auto* g : {&split.bias, &split.decay, &split.norm}) packed.insert(packed.end(), g->begin(), g->end());
  engine::FlatBuffer flat_params = engine::pack_flat(packed);
  engine::FlatBuffer flat_grads = engine::attach_flat_grads(packed);
  auto opt = engine::make_official_optimizer(opt_kind, split, hget(hyp, "lr0"), hget(hyp, "momentum"), decay);
  std::printf("optimizer: %s(lr=%g) with parameter groups %zu weight(decay=0.0), %zu weight(decay=%g), %zu bias\n",
              engine::optimizer_kind_name(opt_kind), hget(hyp, "lr0"), split.norm.size(), split.decay.size(), decay,
              split.bias.size());
  const engine::LrScheduleKind sk = o.cos_lr        ? engine::LrScheduleKind::Cosine
                                    : o.flat_cos_lr ? engine::LrScheduleKind::FlatCosine
                                    : o.fixed_lr    ? engine::LrScheduleKind::Fixed
                                                    : engine::LrScheduleKind::Linear;
  engine::LambdaLR sched(*opt, engine::make_lr_lambda(sk, hget(hyp, "lrf"), o.epochs));
  engine::ModelEMA ema(model->state_dict());

  int64_t start_epoch = 0, skip_batches = 0, last_opt_step = -1;
  double best_fitness = 0.0;
  std::array<double, 3> mloss_resume{0, 0, 0};
  EarlyStopping stopper;
  stopper.patience = o.patience;
  if (resume_flag) {
    engine::autograd::NoGradGuard ng;
    io::load_state_into(model->state_dict(), rck.model, resume_path + " (model)");
    io::load_state_into(ema.state(), rck.ema, resume_path + " (ema)");
    ema.set_updates(std::stoll(rck.meta.at("updates")));
    opt->load_state_dict(rck.optim);
    start_epoch = std::stoll(rck.meta.at("epoch")) + 1;
    skip_batches = std::stoll(rck.meta.at("next_batch"));
    best_fitness = std::stod(rck.meta.at("best_fitness"));
    last_opt_step = std::stoll(rck.meta.at("last_opt_step"));
    accumulate = std::stoll(rck.meta.at("accumulate"));
    stopper.best_fitness = std::stod(rck.meta.at("es_best_fitness"));
    stopper.best_epoch = std::stoll(rck.meta.at("es_best_epoch"));
    stopper.possible_stop = rck.meta.at("es_possible_stop") == "1";
    const auto ml = nlohmann::json::parse(rck.meta.at("mloss"));
    for (int k = 0; k < 3; ++k) mloss_resume[static_cast<size_t>(k)] = ml.at(static_cast<size_t>(k)).get<double>();
    for (const auto& [n, p] : packed)
      if (p.requires_grad()) {
        auto it = rck.grad.find(n);
        if (it != rck.grad.end()) Tensor(p.grad()).copy_(it->second);
      }
    std::printf("Resuming at epoch %lld%s, best fitness %.5g, %lld EMA updates\n", (long long)start_epoch,
                skip_batches ? fmt(" batch %lld", (long long)skip_batches).c_str() : "", best_fitness,
                (long long)ema.updates());
  }
  sched.set_last_epoch(start_epoch - 1);

  // --- loaders --------------------------------------------------------------------------------------
  io::Hyp aug;
  aug.hsv_h = hget(hyp, "hsv_h"), aug.hsv_s = hget(hyp, "hsv_s"), aug.hsv_v = hget(hyp, "hsv_v");
  aug.degrees = hget(hyp, "degrees"), aug.translate = hget(hyp, "translate"), aug.scale = hget(hyp, "scale");
  aug.shear = hget(hyp, "shear"), aug.perspective = hget(hyp, "perspective");
  aug.flipud = hget(hyp, "flipud"), aug.fliplr = hget(hyp, "fliplr");
  aug.mosaic = hget(hyp, "mosaic"), aug.mixup = hget(hyp, "mixup"), aug.copy_paste = hget(hyp, "copy_paste");
  const int workers = static_cast<int>(std::clamp<int64_t>(
      o.workers, 0, std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()))));
  io::AugmentOptions ta;
  ta.img_size = static_cast<int>(imgsz);
  ta.augment = true;
  ta.rect = o.rect;
  ta.batch_size = static_cast<int>(o.batch_size);
  ta.stride = static_cast<int>(gs);
  ta.epochs = static_cast<int>(o.epochs);
  ta.close_mosaic = static_cast<int>(o.close_mosaic);
  ta.seed = static_cast<uint64_t>(o.seed);
  ta.hyp = aug;
  auto train_ds = std::make_shared<const io::AugmentedDataset>(train_scan.records, ta);
  io::LoaderOptions tl;
  tl.batch_size = static_cast<int>(o.batch_size);
  tl.workers = workers;
  tl.shuffle = !o.rect;
  tl.seed = static_cast<uint64_t>(o.seed);
  tl.epochs = static_cast<int>(o.epochs);  // workers prefetch across epochs, never past the last
  io::DataLoader train_loader(train_ds, tl);
  std::shared_ptr<const io::AugmentedDataset> val_ds;
  ValOptions vo;
  if (have_val) {
    io::AugmentOptions va = ta;
    va.augment = false;
    va.rect = true;
    va.batch_size = static_cast<int>(o.batch_size * 2);
    va.rect_pad = 0.5;
    val_ds = std::make_shared<const io::AugmentedDataset>(val_scan.records, va);
    vo.batch_size = va.batch_size;
    vo.workers = workers;
    vo.single_cls = o.single_cls;
    vo.training = true;
    vo.plots = false;
    vo.names = names;
  }
  train_loader.start_epoch(static_cast<int>(start_epoch));  // num_batches() needs an epoch's order
  const int64_t nb = train_loader.num_batches();
  const int64_t nw = engine::warmup_iterations(hget(hyp, "warmup_epochs"), nb);
  engine::WarmupHyp wh;
  wh.warmup_epochs = hget(hyp, "warmup_epochs");
  wh.warmup_momentum = hget(hyp, "warmup_momentum");
  wh.warmup_bias_lr = hget(hyp, "warmup_bias_lr");
  wh.momentum = hget(hyp, "momentum");
  wh.nbs = nbs;

  // Official step 13: round the training model through FP16 once (the EMA keeps FP32 values).
  if (!resume_flag && !o.fp32_init) engine::round_through_fp16_(model->state_dict());
  if (!resume_flag && !o.noplots) {
    std::vector<float> cls, box;
    for (const auto& r : train_scan.records)
      for (const auto& l : r.labels) {
        cls.push_back(l[0]);
        box.insert(box.end(), {l[1], l[2], l[3], l[4]});
      }
    const int64_t n = static_cast<int64_t>(cls.size());
    io::plot_labels(Tensor::from_vector(cls, {n}), Tensor::from_vector(box, {n, 4}), names,
                    (save_dir / "labels.jpg").string());
  }

  // The EMA copy that validation runs (shape-only build, values copied from the EMA each time).
  graph::BuildOptions eb;
  eb.init = false;
  auto ema_model = graph::Model::from_yaml(o.cfg, nc, eb);

  // --- checkpoints ----------------------------------------------------------------------------------
  const std::string cfg_text = [&] {
    std::ifstream f(o.cfg);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }();
  auto make_ckpt = [&](int64_t epoch_done, int64_t next_batch, const std::array<double, 3>& ml, bool finished) {
    io::Checkpoint ck;
    ck.model = to_map(model->state_dict());
    ck.ema = to_map(ema.state());
    ck.optim = opt->state_dict();
    if (next_batch > 0)
      for (const auto& [n, p] : packed)
        if (p.requires_grad()) ck.grad.emplace(n, p.grad());
    auto& m = ck.meta;
    m["epoch"] = std::to_string(epoch_done);
    m["next_batch"] = std::to_string(next_batch);
    m["best_fitness"] = fmt("%.17g", best_fitness);
    m["updates"] = std::to_string(ema.updates());
    m["last_opt_step"] = std::to_string(last_opt_step);
    m["accumulate"] = std::to_string(accumulate);
    m["es_best_fitness"] = fmt("%.17g", stopper.best_fitness);
    m["es_best_epoch"] = std::to_string(stopper.best_epoch);
    m["es_possible_stop"] = stopper.possible_stop ? "1" : "0";
    m["mloss"] = nlohmann::json(std::vector<double>(ml.begin(), ml.end())).dump();
    m["cfg"] = o.cfg;
    m["cfg_yaml"] = cfg_text;
    m["nc"] = std::to_string(nc);
    m["names"] = nlohmann::json(names).dump();
    m["opt"] = options_to_json(o).dump();
    m["hyp"] = hyp_json(hyp).dump();
    m["date"] = iso_now();
    m["finished"] = finished ? "1" : "0";
    return ck;
  };

  // --- results.csv (official utils/loggers: %20s header, %20.5g values) ---------------------------
  const fs::path csv = save_dir / "results.csv";
  auto log_csv = [&](int64_t epoch, const std::vector<double>& vals) {
    static const char* keys[] = {"epoch", "train/box_loss", "train/cls_loss", "train/dfl_loss",
                                 "metrics/precision", "metrics/recall", "metrics/mAP_0.5", "metrics/mAP_0.5:0.95",
                                 "val/box_loss", "val/cls_loss", "val/dfl_loss", "x/lr0", "x/lr1", "x/lr2"};
    std::string s;
    if (!fs::exists(csv)) {
      for (size_t i = 0; i < 14; ++i) s += fmt("%20s,", keys[i]);
      s.back() = '\n';
    }
    s += fmt("%20.5g,", static_cast<double>(epoch));
    for (double v : vals) s += fmt("%20.5g,", v);
    s.back() = '\n';
    std::ofstream f(csv, std::ios::app);
    f << s;
    Y9_CHECK_T(engine::IoError, f.good(), "cannot append to ", csv.string());
  };

  // --- the epoch loop ------------------------------------------------------------------------------
  const bool tty = isatty(fileno(stdout)) != 0;
  const char* mem_label = "CPU_mem";
  std::printf("Image sizes %lld train, %lld val\nUsing %d dataloader workers\nLogging results to %s\n"
              "Starting training for %lld epochs... (%lld batches/epoch, warm-up %lld iterations, accumulate %lld)%s\n",
              (long long)imgsz, (long long)imgsz, workers, save_dir.string().c_str(), (long long)o.epochs,
              (long long)nb, (long long)nw, (long long)accumulate,
              o.deterministic ? "\ndeterministic: fixed-order CPU reductions, Philox data order (bitwise reproducible "
                                "for a fixed thread count)"
                              : "");
  std::fflush(stdout);
  g_signal = 0;
  auto prev_int = std::signal(SIGINT, on_stop_signal);
  auto prev_term = std::signal(SIGTERM, on_stop_signal);
  struct Restore {
    decltype(prev_int) a, b;
    ~Restore() {
      std::signal(SIGINT, a);
      std::signal(SIGTERM, b);
    }
  } restore{prev_int, prev_term};

  TrainValResult vr;
  int64_t epoch = start_epoch;
  std::array<double, 3> last_finite{0, 0, 0};
  int64_t last_finite_ni = -1;
  for (; epoch < o.epochs; ++epoch) {
    const auto t_epoch = std::chrono::steady_clock::now();
    model->train();
    if (o.close_mosaic > 0 && epoch == o.epochs - o.close_mosaic) std::printf("Closing dataloader mosaic\n");
    train_loader.start_epoch(static_cast<int>(epoch));
    const int64_t skip = epoch == start_epoch ? skip_batches : 0;
    std::array<double, 3> mloss = skip ? mloss_resume : std::array<double, 3>{0, 0, 0};
    if (skip == 0) opt->zero_grad();
    std::printf("\n%11s%11s%11s%11s%11s%11s%11s\n", "Epoch", mem_label, "box_loss", "cls_loss", "dfl_loss",
                "Instances", "Size");
    std::fflush(stdout);
    io::Batch batch;
    int64_t i = -1, images_seen = 0;
    double t_train = 0;
    double tp[5] = {0, 0, 0, 0, 0};  // data wait, forward, loss, backward, optimizer+EMA (s)
    auto lap = [](std::chrono::steady_clock::time_point& t) {
      const auto n = std::chrono::steady_clock::now();
      const double d = std::chrono::duration<double>(n - t).count();
      t = n;
      return d;
    };
    bool interrupted = false;
    auto tw = std::chrono::steady_clock::now();
    while (train_loader.next(batch)) {
      ++i;
      if (i < skip) continue;
      const auto t0 = std::chrono::steady_clock::now();
      auto tl = t0;
      tp[0] += std::chrono::duration<double>(t0 - tw).count();
      const int64_t ni = i + nb * epoch;
      const Tensor x = to_unit_float(batch.images);
      if (ni <= nw) accumulate = engine::apply_warmup(*opt, ni, nw, sched.lf(epoch), wh, o.batch_size);
      graph::ModelOutput out = model->forward(x);
      tp[1] += lap(tl);
      ops::YoloLossResult L = ops::yolo_loss(out.raw, batch.targets, loss_cfg);
      const auto items = L.items.to_vector<double>();
      const double total = L.total.item<double>();
      if (!std::isfinite(items[0]) || !std::isfinite(items[1]) || !std::isfinite(items[2]) || !std::isfinite(total)) {
        std::printf("\n");
        Y9_THROW(engine::Error, "loss is not finite (box ", items[0], ", cls ", items[1], ", dfl ", items[2],
                 ") at epoch ", epoch, " batch ", i, " (iteration ", ni, "); last finite loss: ",
                 last_finite_ni < 0 ? std::string("none")
                                    : fmt("box %.4g cls %.4g dfl %.4g at iteration %lld", last_finite[0],
                                          last_finite[1], last_finite[2], (long long)last_finite_ni),
                 ". Training diverged: lower the learning rate (hyp lr0 = ", hget(hyp, "lr0"), " in ", o.hyp,
                 ") or check the labels.");
      }
      last_finite = {items[0], items[1], items[2]};
      last_finite_ni = ni;
      tp[2] += lap(tl);
      L.total.backward();
      tp[3] += lap(tl);
      if (ni - last_opt_step >= accumulate) {
        engine::clip_grad_norm_(packed, 10.0);
        opt->step();
        opt->zero_grad();
        ema.update(model->state_dict());
        last_opt_step = ni;
      }
      tp[4] += lap(tl);
      for (int k = 0; k < 3; ++k)
        mloss[static_cast<size_t>(k)] =
            (mloss[static_cast<size_t>(k)] * static_cast<double>(i) + items[static_cast<size_t>(k)]) /
            static_cast<double>(i + 1);
      const int64_t B = batch.images.size(0);
      images_seen += B;
      t_train += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // Progress (official tqdm description + images/s).
      const double mem_g = static_cast<double>(engine::cpu_allocator()->stats().peak_bytes) / 1e9;
      const double ips = t_train > 0 ? static_cast<double>(images_seen) / t_train : 0.0;
      const int64_t done = i + 1 - skip, todo = nb - i - 1;
      const double eta = done > 0 ? t_train / static_cast<double>(done) * static_cast<double>(todo) : 0.0;
      const std::string line =
          fmt("%11s%11s%11.4g%11.4g%11.4g%11lld%11lld: %3lld%% %lld/%lld [%s<%s, %.1f img/s]",
              fmt("%lld/%lld", (long long)epoch, (long long)(o.epochs - 1)).c_str(), fmt("%.3gG", mem_g).c_str(),
              mloss[0], mloss[1], mloss[2], (long long)batch.targets.size(0), (long long)x.size(3),
              (long long)((i + 1) * 100 / nb), (long long)(i + 1), (long long)nb, hms(t_train).c_str(),
              hms(eta).c_str(), ips);
      if (tty) {
        std::printf("\r%s\033[K", line.c_str());
        if (i + 1 == nb) std::printf("\n");
      } else if ((i + 1) % std::max<int64_t>(1, nb / 10) == 0 || i + 1 == nb) {
        std::printf("%s\n", line.c_str());
      }
      std::fflush(stdout);
      if (!o.noplots && ni < 3)
        io::plot_images(batch.images, batch.targets, names, (save_dir / fmt("train_batch%lld.jpg", (long long)ni)).string(),
                        Tensor(), batch.paths);
      if (g_signal != 0 || (o.stop_after_batches > 0 && ni + 1 >= o.stop_after_batches && i + 1 < nb)) {
        io::save_checkpoint((wdir / "last.safetensors").string(), make_ckpt(epoch - 1, i + 1, mloss, false));
        std::printf("%s%s at epoch %lld batch %lld: saved %s; continue with: yolov9 train --resume %s\n", tty ? "\n" : "",
                    g_signal == SIGINT    ? "Interrupted (SIGINT)"
                    : g_signal == SIGTERM ? "Terminated (SIGTERM)"
                                          : "Stopped (--stop-after-batches)",
                    (long long)epoch, (long long)i, (wdir / "last.safetensors").string().c_str(),
                    (wdir / "last.safetensors").string().c_str());
        interrupted = true;
        break;
      }
      tw = std::chrono::steady_clock::now();
    }
    if (interrupted) {
      if (!o.noplots && fs::exists(csv)) io::plot_results(csv.string(), (save_dir / "results.png").string());
      std::fflush(stdout);
      return g_signal != 0 ? 128 + static_cast<int>(g_signal) : 0;
    }

    // --- end of epoch: lrs, scheduler, validation, fitness, checkpoints ----------------------------
    std::vector<double> lrs;
    for (const auto& g : opt->param_groups()) lrs.push_back(g.lr);
    sched.step();
    const bool final_epoch = epoch + 1 == o.epochs || stopper.possible_stop;
    vr = TrainValResult{};
    if (val_ds && (!o.noval || final_epoch)) {
      engine::autograd::NoGradGuard ng;
      const auto ms = ema_model->state_dict();
      const auto& es = ema.state();
      for (size_t k = 0; k < ms.size(); ++k) Tensor(ms[k].second).copy_(es[k].second);
      vr = validate_model(*ema_model, val_ds, loss_cfg, vo);  // prints the official table
    }
    const double fi = vr.fitness();
    const bool stop = stopper(epoch, fi);
    if (fi > best_fitness) best_fitness = fi;
    log_csv(epoch, {mloss[0], mloss[1], mloss[2], vr.p, vr.r, vr.map50, vr.map, vr.box, vr.cls, vr.dfl, lrs[0],
                    lrs[1], lrs[2]});
    const bool finished = final_epoch && (epoch + 1 == o.epochs || stop);
    if (!o.nosave || final_epoch || stop) {
      const io::Checkpoint ck = make_ckpt(epoch, 0, mloss, finished || stop);
      io::save_checkpoint((wdir / "last.safetensors").string(), ck);
      if (best_fitness == fi) io::save_checkpoint((wdir / "best.safetensors").string(), ck);
      if (o.save_period > 0 && epoch % o.save_period == 0)
        io::save_checkpoint((wdir / fmt("epoch%lld.safetensors", (long long)epoch)).string(), ck);
    }
    const double t_ep = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_epoch).count();
    std::printf("epoch %lld/%lld: train box %.4g cls %.4g dfl %.4g | val box %.4g cls %.4g dfl %.4g | P %.3g R %.3g "
                "mAP50 %.3g mAP50-95 %.3g | fitness %.4g (best %.4g) | lr %.3g | %.1fs, %.1f img/s\n",
                (long long)epoch, (long long)(o.epochs - 1), mloss[0], mloss[1], mloss[2], vr.box, vr.cls, vr.dfl, vr.p,
                vr.r, vr.map50, vr.map, fi, best_fitness, lrs[1], t_ep,
                t_train > 0 ? static_cast<double>(images_seen) / t_train : 0.0);
    const double nbd = static_cast<double>(std::max<int64_t>(1, i + 1 - skip));
    std::printf("  time per batch: data wait %.0f ms, forward %.0f ms, loss %.0f ms, backward %.0f ms, "
                "optimizer+EMA %.0f ms\n", 1e3 * tp[0] / nbd, 1e3 * tp[1] / nbd, 1e3 * tp[2] / nbd,
                1e3 * tp[3] / nbd, 1e3 * tp[4] / nbd);
    std::fflush(stdout);
    if (stop) {
      ++epoch;
      break;
    }
    if (g_signal != 0 || (o.stop_after_batches > 0 && nb * (epoch + 1) >= o.stop_after_batches && epoch + 1 < o.epochs)) {
      if (o.nosave) io::save_checkpoint((wdir / "last.safetensors").string(), make_ckpt(epoch, 0, mloss, false));
      if (!o.noplots) io::plot_results(csv.string(), (save_dir / "results.png").string());
      std::printf("%s after epoch %lld: saved %s; continue with: yolov9 train --resume %s\n",
                  g_signal == SIGINT    ? "Interrupted (SIGINT)"
                  : g_signal == SIGTERM ? "Terminated (SIGTERM)"
                                        : "Stopped (--stop-after-batches)",
                  (long long)epoch, (wdir / "last.safetensors").string().c_str(),
                  (wdir / "last.safetensors").string().c_str());
      std::fflush(stdout);
      return g_signal != 0 ? 128 + static_cast<int>(g_signal) : 0;
    }
  }

  if (!o.noplots && fs::exists(csv)) io::plot_results(csv.string(), (save_dir / "results.png").string());
  const double hours = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count() / 3600.0;
  std::printf("\n%lld epochs completed in %.3f hours.\nResults saved to %s\n  weights: %s, %s\n",
              (long long)(epoch - start_epoch), hours, save_dir.string().c_str(),
              (wdir / "last.safetensors").string().c_str(), (wdir / "best.safetensors").string().c_str());
  (void)flat_params;
  (void)flat_grads;
  return 0;
}

}  // namespace

void register_train(CLI::App& app) {
  static TrainOptions o;  // CLI11 binds options to storage that outlives parsing
  static CLI::App* sub_ptr = nullptr;
  static std::string evolve_s, cache_s, upload_s;
  add_command(
      app, "train", "train a model (official train_dual.py flags)",
      [](CLI::App& sub) {
        sub_ptr = &sub;
        sub.add_option("--weights", o.weights, "initial weights (.safetensors checkpoint); empty = from scratch");
        sub.add_option("--cfg", o.cfg, "model YAML (path or name under configs/models)")->capture_default_str();
        sub.add_option("--data", o.data, "dataset YAML")->capture_default_str();
        sub.add_option("--hyp", o.hyp, "hyper-parameter YAML (path or name under configs/hyps)")->capture_default_str();
        sub.add_option("--epochs", o.epochs, "total training epochs")->capture_default_str();
        sub.add_option("--batch-size,--batch", o.batch_size, "total batch size")->capture_default_str();
        sub.add_option("--imgsz,--img,--img-size", o.imgsz, "train, val image size (pixels)")->capture_default_str();
        sub.add_flag("--rect", o.rect, "rectangular training");
        sub.add_option("--resume", o.resume, "resume most recent training (or the given last.safetensors)")
            ->expected(0, 1);
        sub.add_flag("--nosave", o.nosave, "only save final checkpoint");
        sub.add_flag("--noval", o.noval, "only validate final epoch");
        sub.add_flag("--noautoanchor", o.noautoanchor, "no effect (anchor-free)");
        sub.add_flag("--noplots", o.noplots, "save no plot files");
        sub.add_option("--evolve", evolve_s, "evolve hyperparameters for x generations (not implemented)")
            ->expected(0, 1);
        sub.add_option("--bucket", o.bucket, "gsutil bucket (ignored)");
        sub.add_option("--cache", cache_s, "image --cache ram/disk (ignored)")->expected(0, 1);
        sub.add_flag("--image-weights", o.image_weights, "weighted image selection (not supported)");
        sub.add_option("--device", o.device, "cuda device, i.e. 0 or 0,1,2,3 or cpu");
        sub.add_flag("--multi-scale", o.multi_scale, "vary img-size +/- 50% (not supported yet)");
        sub.add_flag("--single-cls", o.single_cls, "train multi-class data as single-class");
        sub.add_option("--optimizer", o.optimizer, "optimizer: SGD, Adam, AdamW, LION")->capture_default_str();
        sub.add_flag("--sync-bn", o.sync_bn, "SyncBatchNorm (DDP only; ignored)");
        sub.add_option("--workers", o.workers, "max dataloader workers")->capture_default_str();
        sub.add_option("--project", o.project, "save to project/name")->capture_default_str();
        sub.add_option("--name", o.name, "save to project/name ('cfg' = model YAML stem)")->capture_default_str();
        sub.add_flag("--exist-ok", o.exist_ok, "existing project/name ok, do not increment");
        sub.add_flag("--quad", o.quad, "quad dataloader (not supported)");
        sub.add_flag("--cos-lr", o.cos_lr, "cosine LR scheduler");
        sub.add_flag("--flat-cos-lr", o.flat_cos_lr, "flat cosine LR scheduler");
        sub.add_flag("--fixed-lr", o.fixed_lr, "fixed LR scheduler");
        sub.add_option("--label-smoothing", o.label_smoothing, "label smoothing epsilon (no effect with TAL)");
        sub.add_option("--patience", o.patience, "EarlyStopping patience (epochs without improvement)")
            ->capture_default_str();
        sub.add_option("--freeze", o.freeze, "freeze layers: backbone=10, first3=0 1 2")->expected(1, -1);
        sub.add_option("--save-period", o.save_period, "save checkpoint every x epochs (disabled if < 1)");
        sub.add_option("--seed", o.seed, "global training seed")->capture_default_str();
        sub.add_option("--local_rank", o.local_rank, "automatic DDP multi-GPU argument (ignored)");
        sub.add_option("--min-items", o.min_items, "drop images with fewer labels");
        sub.add_option("--close-mosaic", o.close_mosaic, "disable mosaic for the final N epochs");
        sub.add_option("--entity", o.entity, "W&B entity (ignored)");
        sub.add_option("--upload_dataset", upload_s, "W&B upload (ignored)")->expected(0, 1);
        sub.add_option("--bbox_interval", o.bbox_interval, "W&B bbox interval (ignored)");
        sub.add_option("--artifact_alias", o.artifact_alias, "W&B artifact alias (ignored)");
        sub.add_flag("--deterministic", o.deterministic,
                     "bitwise reproducible run (fixed-order reductions; also needed for exact --resume)");
        sub.add_option("--nbs", o.nbs,
                       "nominal batch size: gradients are accumulated over ~nbs images per optimizer step and "
                       "weight decay is scaled by batch*accumulate/nbs (official constant 64)")
            ->capture_default_str();
        sub.add_flag("--fp32-init", o.fp32_init, "skip the official FP16 rounding of the initial weights");
        sub.add_option("--stop-after-batches", o.stop_after_batches,
                       "testing: behave as if interrupted after N iterations (saves last, exits 0)")
            ->group("");
      },
      []() {
        if (sub_ptr->count("--evolve")) o.evolve = evolve_s.empty() ? 300 : std::stoll(evolve_s);
        if (sub_ptr->count("--cache")) o.cache = cache_s.empty() ? "ram" : cache_s;
        if (sub_ptr->count("--upload_dataset")) o.upload_dataset = upload_s.empty() ? "True" : upload_s;
        return run_train(o, sub_ptr->count("--resume") > 0);
      });
}

}  // namespace apps
