// The Trainer (apps/training/trainer.h): official train_dual.py / train.py, WongKinYiu/yolov9
// 5b1ea9a (shared/spec/train.md). Set-up order, optimizer groups, warm-up, accumulation,
// clipping, EMA, validation on the EMA, fitness, early stopping, run directory and checkpoints
// follow the spec section by section; deviations are marked "Deviation:".
#include "apps/training/trainer.h"

#include "apps/training/autobatch.h"
#include "apps/training/pt_resume.h"

#include <unistd.h>
#include <omp.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "apps/training/clip.h"
#include "apps/training/config_paths.h"
#include "apps/training/dist/allreduce.h"
#include "apps/training/evaluator.h"
#include "apps/training/features.h"
#include "apps/training/param_groups.h"
#include "apps/training/strfmt.h"
#include "apps/training/weights.h"
#include "engine/allocator.h"
#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/cpu_cache.h"
#include "engine/error.h"
#include "engine/tensor.h"
#include "io/atomic_file.h"
#include "io/data_yaml.h"
#include "io/grad_norm_log.h"
#include "io/paths.h"
#include "io/plots.h"
#include "ops/autocast.h"
#include "ops/ops.h"

namespace fs = std::filesystem;
using engine::Tensor;

namespace training {

// --- options <-> JSON -----------------------------------------------------------------------------

#define Y9_TRAIN_FIELDS(X)                                                                              \
  X(weights) X(cfg) X(data) X(hyp) X(epochs) X(batch_size) X(imgsz) X(rect) X(resume) X(nosave) X(noval) \
  X(noautoanchor) X(noplots) X(evolve) X(bucket) X(cache) X(image_weights) X(device) X(multi_scale)       \
  X(single_cls) X(optimizer) X(sync_bn) X(workers) X(project) X(name) X(exist_ok) X(quad) X(cos_lr)      \
  X(flat_cos_lr) X(fixed_lr) X(label_smoothing) X(patience) X(freeze) X(save_period) X(seed)              \
  X(local_rank) X(min_items) X(close_mosaic) X(entity) X(upload_dataset) X(bbox_interval)                 \
  X(artifact_alias) X(deterministic) X(fp32_init) X(nbs) X(plot_features) X(save_dir) X(accumulate) X(allreduce)  \
  X(bucket_mb) X(grad_dtype) X(master_port) X(val_distributed) X(trace) X(amp) X(val_batch)     \
  X(cpu_threads)

nlohmann::ordered_json options_to_json(const TrainOptions& o) {
  nlohmann::ordered_json j;
#define Y9_W(f) j[#f] = o.f;
  Y9_TRAIN_FIELDS(Y9_W)
#undef Y9_W
  return j;
}

TrainOptions options_from_json(const nlohmann::json& j) {
  Y9_CHECK_T(engine::ConfigError, j.is_object(), "training options: expected a JSON object, got ", j.type_name());
  TrainOptions o;
#define Y9_R(f)                                                                                              \
  if (j.contains(#f)) {                                                                                      \
    try {                                                                                                    \
      j.at(#f).get_to(o.f);                                                                                  \
    } catch (const nlohmann::json::exception&) {                                                             \
      Y9_THROW(engine::ConfigError, "training option '", #f, "' has the wrong type (", j.at(#f).type_name(), \
               " ", j.at(#f).dump().substr(0, 40), ")");                                                     \
    }                                                                                                        \
  }
  Y9_TRAIN_FIELDS(Y9_R)
#undef Y9_R
  return o;
}

bool EarlyStopping::operator()(int64_t epoch, double fitness) {
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

namespace {

constexpr double kClipMaxNorm = 10.0;  // train_dual.py: clip_grad_norm_(model.parameters(), max_norm=10.0)

// --- small helpers -----------------------------------------------------------------------------------

volatile std::sig_atomic_t g_signal = 0;
// How the handler speaks (set once in setup_distributed, before any handler is installed): the
// ranks other than 0 of a data-parallel run say nothing (rank 0 speaks for the run); under mpirun
// the message says what mpirun does to a Ctrl-C.
bool g_stop_quiet = false;
bool g_stop_under_mpirun = false;
// The first SIGINT/SIGTERM/SIGUSR1 asks for a clean stop (checkpoint, then exit 128 + signal); a
// second one kills at once: back to the default action and re-raised (both async-signal-safe).
// The signal stays blocked until the handler returns, then the default action ends the process.
// SIGUSR1 is the stop that survives mpirun: mpirun forwards it to every rank, while a Ctrl-C makes
// it send SIGTERM and, 1 s later (odls_base_sigkill_timeout), SIGKILL.
extern "C" void on_stop_signal(int sig) {
  if (g_signal != 0) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_signal = sig;
  if (g_stop_quiet) return;
  static const char kMsg[] = "\nyolov9: stopping after this batch, saving weights/last.safetensors (press Ctrl-C "
                             "again to kill at once)\n";
  static const char kMsgMpirun[] =
      "\nyolov9: stopping after this batch, saving weights/last.safetensors. Under mpirun a Ctrl-C gives the ranks "
      "about 1 s before SIGKILL (mpirun --mca odls_base_sigkill_timeout): if the batch and the save do not fit in it, "
      "--resume continues from the last checkpoint. To stop an mpirun run with a checkpoint of this batch, send "
      "SIGUSR1 to mpirun (kill -USR1 <mpirun pid>): it forwards it to every rank\n";
  const bool mpirun_kill = g_stop_under_mpirun && sig != SIGUSR1;
  const ssize_t n = mpirun_kill ? ::write(STDERR_FILENO, kMsgMpirun, sizeof kMsgMpirun - 1)
                                : ::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);  // write(2) is async-signal-safe
  (void)n;
}

// Installed instead of the previous handlers when training ends by an exception: the signal is
// recorded and otherwise ignored. A data-parallel rank that fails (a peer died: CommError) is
// sent SIGTERM by the launcher at about the same time; with the default action back, that signal
// could end the rank before its error is printed (seen under load: the run then named no cause).
extern "C" void on_signal_while_failing(int sig) {
  if (g_signal == 0) g_signal = sig;
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

/// The whole text of `p`. Errors: engine::IoError naming `what` and the path.
std::string read_text(const fs::path& p, const char* what) {
  std::ifstream f(p, std::ios::binary);
  Y9_CHECK_T(engine::IoError, f.good(), what, " ", p.string(), ": cannot read: ", std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_text(const fs::path& p, const std::string& s) { io::write_file_atomic(p.string(), s); }

void write_yaml(const fs::path& p, const nlohmann::ordered_json& j) {
  YAML::Emitter e;
  e.SetDoublePrecision(17);
  emit_json(e, j);
  write_text(p, std::string(e.c_str()) + "\n");
}

/// The run bare `--resume` continues: the newest run folder under `root` (a folder holding
/// opt.yaml; its age is the newest of opt.yaml, weights/last.safetensors, weights/last.pt and
/// results.csv), and its last.safetensors, else the last.pt of an official run.
/// Deviation: the official get_latest_run takes the newest last*.pt anywhere, so a run killed
/// before its first checkpoint silently resumes an older run; we refuse and say so.
std::string latest_run(const std::string& root) {
  fs::path best;
  fs::file_time_type best_t{};
  std::error_code ec;
  if (fs::is_directory(root, ec))
    for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      if (it->path().filename() != "opt.yaml") continue;
      const fs::path dir = it->path().parent_path();
      fs::file_time_type t = fs::last_write_time(it->path(), ec);
      for (const fs::path& f : {dir / "weights" / "last.safetensors", dir / "weights" / "last.pt", dir / "results.csv"}) {
        std::error_code e2;
        const auto tf = fs::last_write_time(f, e2);
        if (!e2 && tf > t) t = tf;
      }
      if (best.empty() || t > best_t) best = dir, best_t = t;
    }
  Y9_CHECK_T(engine::IoError, !best.empty(), "--resume: no training run (a folder with opt.yaml) found under '", root,
             "'; pass the checkpoint path: --resume runs/train/exp/weights/last.safetensors");
  fs::path last = best / "weights" / "last.safetensors";
  // An official train_dual.py run (weights/last.pt) until ours has written its own checkpoint.
  if (!fs::is_regular_file(last, ec) && fs::is_regular_file(best / "weights" / "last.pt", ec))
    last = best / "weights" / "last.pt";
  Y9_CHECK_T(engine::ConfigError, fs::is_regular_file(last, ec), "--resume: the newest run ", best.string(),
             " has no checkpoint (", last.string(),
             " is missing: it stopped before its first save), so there is nothing to resume. Start it again, or "
             "name the run to resume: --resume <run>/weights/last.safetensors");
  std::printf("--resume: the newest run is %s\n", best.string().c_str());
  return last.string();
}

/// Checkpoint metadata `key` parsed as JSON. Errors: engine::ConfigError naming the file and key.
nlohmann::json meta_json(const io::Checkpoint& ck, const std::string& key, const std::string& path) {
  const std::string& text = io::meta_str(ck, key, path);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  Y9_CHECK_T(engine::ConfigError, !j.is_discarded(), path, ": checkpoint metadata '", key, "' is not valid JSON ('",
             text.substr(0, 40), "')");
  return j;
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

/// uint8 [B,3,H,W] -> float32 / 255 (official imgs.float() / 255: an FP32 division per element),
/// on the images' device.
Tensor to_unit_float(const Tensor& u8) {
  engine::autograd::NoGradGuard ng;
  return ops::div(u8.to(engine::DType::F32), Tensor::full({}, 255.0, engine::DType::F32, u8.device()));
}

std::map<std::string, Tensor> to_map(const std::vector<std::pair<std::string, Tensor>>& v) {
  return std::map<std::string, Tensor>(v.begin(), v.end());
}

/// The cap of CPU training's block cache in MiB: Y9_CPU_TRAIN_CACHE_MB (a non-negative integer; 0
/// turns the cache off), default 1024. Throws ConfigError naming the variable for another value.
size_t cpu_train_cache_mib() {
  const char* e = std::getenv("Y9_CPU_TRAIN_CACHE_MB");
  if (!e) return 1024;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(e, &end, 10);
  Y9_CHECK_T(engine::ConfigError, *e && *end == 0 && e[0] != '-' && errno == 0 && v <= (size_t(1) << 30),
             "Y9_CPU_TRAIN_CACHE_MB must be a number of MiB (0 turns the cache off), got '", e, "'");
  return static_cast<size_t>(v);
}

/// Whether training freezes the flat parameters through each accumulation window of several
/// batches, so that the CPU convolutions keep each weight in their primitives' layouts
/// (engine::Storage::freeze; Trainer::step), and the EMA model's through each validation:
/// Y9_CPU_WEIGHT_CACHE, 1 or 0 (the default: reorder on every call; the results are bit-identical
/// either way). Off by default: the kept layouts cost more memory than the reorders they save take
/// time (yolov9-s 640 px batch 8, --accumulate 2: peak RSS +0.16 GB, the memory bound; gelan-t
/// 128 px batch 16, --accumulate 4: 20 ms of reorders saved in 11 steps of ~400 ms).
/// Throws ConfigError naming the variable for another value.
bool cpu_weight_cache() {
  const char* e = std::getenv("Y9_CPU_WEIGHT_CACHE");
  if (!e) return false;
  const std::string v = e;
  Y9_CHECK_T(engine::ConfigError, v == "0" || v == "1", "Y9_CPU_WEIGHT_CACHE must be 1 or 0 (the default), got '", v,
             "'");
  return v == "1";
}

void notice(const char* flag, const char* why) { std::printf("notice: %s %s\n", flag, why); }

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

// --- set-up ----------------------------------------------------------------------------------------

namespace {

// The autocast dtype of the training forward: F16/BF16 with AMP on CUDA (official train_dual.py
// `torch.cuda.amp.autocast(amp)`), BF16 with --amp bf16 on a CPU with native BF16 (its
// convolutions in BF16 math: ops::cpu_bf16_conv), none otherwise.
std::optional<engine::DType> training_autocast(engine::Device device, AmpMode amp) {
  if (amp == AmpMode::Off) return std::nullopt;
  if (!device.is_cuda()) {  // CPU: BF16 only (resolve_amp_mode), the convolutions in BF16 math
    if (amp == AmpMode::BF16) return engine::DType::BF16;
    return std::nullopt;
  }
  return amp == AmpMode::BF16 ? engine::DType::BF16 : engine::DType::F16;
}

}  // namespace

Trainer::Trainer(TrainOptions o, bool resume) : o_(std::move(o)), resume_(resume) {
  setup_distributed();
  try {
    setup_resume();
    setup_notices();
    setup_run_dir();
    setup_hyp();
    setup_data();
    setup_model();
    setup_autobatch();
    setup_optimizer();
    setup_resume_state();
    setup_loaders();
    setup_last();
  } catch (const std::exception& e) {
    end_world_on_error(e);
    throw;
  }
}

// A fatal error on one rank of a data-parallel run ends every rank at once (the others may be
// waiting in a collective): the message names this rank, then the world is aborted.
void Trainer::end_world_on_error(const std::exception& e) {
  if (!dp_ || dp_->world_size() == 1) return;
  std::fflush(stdout);
  // As apps/main.cpp: what is wrong with which input; the check and its source location only with
  // Y9_DEBUG=1.
  const auto* ee = dynamic_cast<const engine::Error*>(&e);
  std::fprintf(stderr, "yolov9: rank %d/%d: error: %s\n", dp_->rank(), dp_->world_size(),
               ee && !engine::debug_messages() ? ee->message().c_str() : e.what());
  std::fflush(stderr);
  dp_->abort(1);
}

Trainer::~Trainer() = default;

// The world of this process (official: LOCAL_RANK/RANK/WORLD_SIZE from torch.distributed.launch).
// Only rank 0 logs: the other ranks' stdout goes to /dev/null (errors still reach stderr).
void Trainer::setup_distributed() {
  dp_ = dist::DataParallel::from_launcher();
  if (!dp_) return;
  main_ = dp_->is_main();
  g_stop_quiet = !main_;
  g_stop_under_mpirun = std::string(dp_->comm().backend()) == "mpi";
  if (!main_) {
    std::fflush(stdout);
    if (!std::freopen("/dev/null", "w", stdout)) std::fprintf(stderr, "rank %d: cannot silence stdout\n", dp_->rank());
  }
  std::printf("data-parallel: world size %d (%s), rank %d, local rank %d\n", dp_->world_size(),
              dp_->comm().backend(), dp_->rank(), dp_->local_rank());
}

// Official: resume reloads the options of the run (opt.yaml / ckpt['opt']).
void Trainer::setup_resume() {
  if (!resume_) return;
  resume_path_ = o_.resume.empty() ? latest_run(fs::path(o_.project).parent_path().empty()
                                                    ? std::string("runs")
                                                    : fs::path(o_.project).parent_path().string())
                                   : o_.resume;
  if (fs::is_directory(resume_path_)) {
    // <run> of ours, or of an official run (weights/last.pt only)
    const fs::path d(resume_path_);
    resume_path_ = (d / "weights" / "last.safetensors").string();
    std::error_code e0;
    if (!fs::exists(resume_path_, e0) && fs::is_regular_file(d / "weights" / "last.pt", e0))
      resume_path_ = (d / "weights" / "last.pt").string();
  }
  if (io::is_torch_pt_file(resume_path_)) {
    setup_resume_pt(o_);
  } else {
    rck_ = io::load_checkpoint(resume_path_);
  }
  Y9_CHECK_T(engine::ConfigError, rck_.meta.count("opt") && (pt_resume_ || !rck_.optim.empty()), resume_path_,
             ": not a resumable training checkpoint (no options or optimizer state)");
  const int64_t done = io::meta_int(rck_, "epoch", resume_path_, -1, kMaxEpochs);
  const bool finished = io::meta_str(rck_, "finished", resume_path_) == "1";
  TrainOptions saved;
  const nlohmann::json oj = meta_json(rck_, "opt", resume_path_);
  try {
    saved = options_from_json(oj);
  } catch (const engine::ConfigError& e) {
    Y9_THROW(engine::ConfigError, resume_path_, ": checkpoint metadata 'opt': ", e.message());
  }
  saved.stop_after_batches = o_.stop_after_batches;
  saved.resume = resume_path_;
  o_ = saved;
  // The run folder recorded in the checkpoint (opt save_dir), wherever the checkpoint file now is
  // (--resume loose/ck.safetensors continues the run it came from). When that folder is gone (the
  // run was moved), the folder around <run>/weights/last.safetensors is taken.
  const fs::path ck_dir = fs::absolute(resume_path_).parent_path();
  const fs::path around = ck_dir.filename() == "weights" ? ck_dir.parent_path() : fs::path();
  std::error_code ec;
  // A relative run folder (runs/train/exp) recorded by a run started elsewhere is the folder
  // around the checkpoint when that folder's path ends with it: no notice then.
  const auto ends_with = [](const fs::path& full, const fs::path& tail) {
    std::vector<fs::path> a(full.begin(), full.end()), b(tail.begin(), tail.end());
    return !b.empty() && b.size() <= a.size() && std::equal(b.rbegin(), b.rend(), a.rbegin());
  };
  const bool same_as_around = !around.empty() && !o_.save_dir.empty() && fs::path(o_.save_dir).is_relative() &&
                              ends_with(around.lexically_normal(), fs::path(o_.save_dir).lexically_normal());
  if (!o_.save_dir.empty() && !same_as_around && fs::is_directory(o_.save_dir, ec)) {
    save_dir_ = o_.save_dir;
  } else if (!around.empty()) {
    if (!o_.save_dir.empty() && !same_as_around)
      std::printf("notice: the run folder recorded in the checkpoint (%s) no longer exists; continuing in %s\n",
                  o_.save_dir.c_str(), around.string().c_str());
    save_dir_ = around;
  } else {
    Y9_CHECK_T(engine::ConfigError, !o_.save_dir.empty(), resume_path_,
               ": the checkpoint records no run folder (opt save_dir); put it at <run>/weights/last.safetensors");
    save_dir_ = o_.save_dir;
  }
  if (finished) {
    // A crash after the final checkpoint may have cost results.csv its last row: put it back.
    auto csv = rck_.meta.find("results_csv");
    const fs::path file = save_dir_ / "results.csv";
    std::error_code e2;
    if (main_ && csv != rck_.meta.end() && fs::is_directory(save_dir_, e2) &&
        (!fs::is_regular_file(file, e2) || read_text(file, "results file") != csv->second)) {
      io::write_file_atomic(file.string(), csv->second);
      std::printf("%s: restored from %s\n", file.string().c_str(), resume_path_.c_str());
    }
    // A kill during the final plots leaves their temporaries: this refusal is the next run.
    if (main_ && fs::is_directory(save_dir_, e2))
      for (const fs::path& d : {save_dir_ / "weights", save_dir_})
        for (const std::string& t : io::remove_stale_temporaries(d.string()))
          std::printf("removed %s (left by an interrupted save)\n", t.c_str());
    Y9_THROW(engine::ConfigError, resume_path_, ": training of this run is complete (", done + 1,
             " epochs); nothing to resume. Start a new run with --weights ", resume_path_, " to fine-tune.");
  }
  // Resuming from another checkpoint of a run that has finished (best.safetensors, epochN) would
  // train again over its final weights and results: the official code strips best.pt at the end,
  // so it refuses; so do we.
  const fs::path run_last = save_dir_ / "weights" / "last.safetensors";
  if (fs::is_regular_file(run_last, ec) && !fs::equivalent(run_last, resume_path_, ec)) {
    bool run_finished = false;
    try {
      const io::Checkpoint last = io::load_checkpoint(run_last.string());
      auto it = last.meta.find("finished");
      run_finished = it != last.meta.end() && it->second == "1";
    } catch (const engine::Error&) {
      // A damaged last.safetensors: the checkpoint given is the way back; go on.
    }
    Y9_CHECK_T(engine::ConfigError, !run_finished, resume_path_, ": the run it belongs to (", save_dir_.string(),
               ") is complete, and resuming from this checkpoint (epoch ", done,
               ") would overwrite its final weights and results.csv. Start a new run with --weights ", resume_path_,
               " to fine-tune.");
  }
  std::printf("Resuming training from %s in run folder %s\n", resume_path_.c_str(), save_dir_.string().c_str());
}

// Official train_dual.py --resume of a last.pt: opt = opt.yaml of the run folder
// (<run>/weights/last.pt -> <run>/opt.yaml) when it is a file, else ckpt['opt'] (train_dual.py
// main); weights, EMA and updates from the file; start epoch ckpt['epoch'] + 1; best_fitness and
// the optimizer state only with ckpt['optimizer'] (smart_resume). The counters our own checkpoints
// add are those of a fresh official train(): the epoch starts at batch 0 with zero mean losses,
// last_opt_step -1, the nominal-batch accumulation, a fresh EarlyStopping.
void Trainer::setup_resume_pt(const TrainOptions& cli) {
  const std::string& p = resume_path_;
  std::printf("Reading the official checkpoint %s\n", p.c_str());
  const io::TorchPt pt = io::load_torch_pt(p);
  rck_ = io::torch_pt_checkpoint(pt);
  Y9_CHECK_T(engine::ConfigError, !rck_.model.empty() || !rck_.ema.empty(), p, ": no model weights");
  pt_optim_ = io::pt_optimizer_state(pt);  // errors for a stripped file
  pt_resume_ = true;
  auto ep = rck_.meta.find("epoch");
  Y9_CHECK_T(engine::ConfigError, ep != rck_.meta.end(), p, ": ckpt['epoch'] is not an integer");
  // Official smart_resume asserts start_epoch > 0 ('training to N epochs is finished').
  Y9_CHECK_T(engine::ConfigError, ep->second != "-1", p, ": training of this run is finished (epoch -1); nothing to "
             "resume. Start a new run with --weights ", p, " to fine-tune.");
  const fs::path opt_yaml = fs::absolute(p).parent_path().parent_path() / "opt.yaml";
  nlohmann::json official;
  std::string source;
  std::error_code ec;
  if (fs::is_regular_file(opt_yaml, ec)) {
    source = opt_yaml.string();
    official = yaml_text_to_json(read_text(opt_yaml, "options file"), source);
  } else {
    source = p + " (ckpt['opt'])";
    const io::PtNode* root = pt.root;
    official = nlohmann::json(io::pt_to_json(root ? root->get("opt") : nullptr));
    Y9_CHECK_T(engine::ConfigError, official.is_object(), p, ": no training options: neither ", opt_yaml.string(),
               " nor ckpt['opt'] (got ", official.type_name(), ")");
  }
  std::printf("--resume: options from %s\n", source.c_str());
  nlohmann::json hyp;
  TrainOptions saved;
  try {
    saved = options_from_official(official, hyp, source);
  } catch (const engine::ConfigError& e) {
    Y9_THROW(engine::ConfigError, source, ": ", e.message());
  }
  Y9_CHECK_T(engine::ConfigError, hyp.is_object(), source, ": no 'hyp' dict among the options");
  // The dataset YAML as the official run named it, relative to the folder it was started in.
  // Deviation: an explicit --data replaces it (the official resume keeps the recorded one).
  const TrainOptions defaults;
  if (cli.data != defaults.data) {
    std::printf("--resume: dataset %s (--data; the run recorded %s)\n", cli.data.c_str(), saved.data.c_str());
    saved.data = cli.data;
  } else {
    Y9_CHECK_T(engine::ConfigError, fs::is_regular_file(saved.data, ec), source, ": the dataset YAML of the run, '",
               saved.data, "', does not exist (from ", fs::current_path(ec).string(),
               "). A relative path is relative to the folder the official run was started in (its checkout): run "
               "from there, or name the file: yolov9 train --resume ", p, " --data path/to/data.yaml");
  }
  saved.weights = p;
  saved.cfg = saved.cfg.empty() ? std::string("yolo.yaml") : saved.cfg;
  const int64_t done = std::strtoll(ep->second.c_str(), nullptr, 10);
  // Official smart_resume: fewer epochs than already trained fine-tunes that many more. Deviation:
  // exactly as many (the run is complete) is refused, as for our own checkpoints (the official
  // loop runs no epoch and then fails on its unset epoch variable).
  Y9_CHECK_T(engine::ConfigError, saved.epochs != done + 1, p, ": training of this run is complete (", done + 1,
             " epochs); nothing to resume. Start a new run with --weights ", p, " to fine-tune.");
  if (saved.epochs < done + 1) {
    std::printf("%s has been trained for %lld epochs. Fine-tuning for %lld more epochs.\n", p.c_str(),
                (long long)done, (long long)saved.epochs);
    saved.epochs += done;
  }
  // (any bytes of the file's strings: invalid UTF-8 is replaced, not an exception)
  rck_.meta["opt"] = options_to_json(saved).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  rck_.meta["hyp"] = hyp.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  rck_.meta["finished"] = "0";
  rck_.meta["next_batch"] = "0";
  rck_.meta["last_opt_step"] = "-1";
  // 0: a run started with --batch-size -1 (AutoBatch chooses again, as official): setup_resume_state
  rck_.meta["accumulate"] =
      std::to_string(saved.batch_size == -1 ? int64_t(0) : official_accumulate(saved.batch_size, saved.nbs));
  rck_.meta["mloss"] = "[0,0,0]";
  rck_.meta["es_best_fitness"] = "0";
  rck_.meta["es_best_epoch"] = "0";
  rck_.meta["es_possible_stop"] = "0";
  if (!rck_.meta.count("updates")) rck_.meta["updates"] = "0";
  if (!rck_.meta.count("best_fitness")) rck_.meta["best_fitness"] = "0";
  if (rck_.ema.empty()) rck_.ema = rck_.model;  // official: the EMA made from the loaded model
  if (rck_.model.empty()) rck_.model = rck_.ema;
}

// Flags that do nothing here, and option checks.
void Trainer::setup_notices() {
  o_.device = check_device_option(o_.device);
  Y9_CHECK_T(engine::ConfigError, o_.benchmark >= 0 && o_.benchmark <= 1000000, "--benchmark must be in 0..1000000 (got ",
             o_.benchmark, ")");
  Y9_CHECK_T(engine::ConfigError, o_.benchmark_data == "real" || o_.benchmark_data == "synthetic",
             "--benchmark-data must be real or synthetic (got '", o_.benchmark_data, "')");
  cpu_train_cache_mib();  // the environment's settings checked before any work
  weight_cache_ = cpu_weight_cache();
  if (o_.benchmark > 0) {
    // A measurement, not a run: no validation, checkpoints or plots; enough epochs for the steps
    // (the schedule stays near its start).
    o_.noval = o_.nosave = o_.noplots = true;
    o_.epochs = std::max<int64_t>(o_.epochs, 1000);
  }
  const TrainOptions& o = o_;
  if (o.noautoanchor) notice("--noautoanchor", "has no effect (anchor-free heads; same as the official code)");
  if (o.evolve) notice("--evolve", "hyper-parameter evolution is not implemented; training once with the given hyp");
  if (!o.bucket.empty()) notice("--bucket", "ignored (cloud storage is not supported)");
  if (!o.cache.empty()) notice("--cache", "ignored (images are decoded on the fly by the loader threads)");
  if (o.image_weights) notice("--image-weights", "is not supported; uniform sampling is used");
  if (o.multi_scale) notice("--multi-scale", "is not supported yet; training at a fixed --img");
  const int world = dp_ ? dp_->world_size() : 1;
  if (o.sync_bn && world == 1) notice("--sync-bn", "ignored (single-process training)");
  if (o.quad) notice("--quad", "is not supported; ordinary collate is used");
  if (o.local_rank != -1) notice("--local_rank", "ignored (the rank comes from the launcher's environment)");
  if (!o.entity.empty() || !o.upload_dataset.empty() || o.bbox_interval != -1 || o.artifact_alias != "latest")
    notice("--entity/--upload_dataset/--bbox_interval/--artifact_alias", "ignored (no W&B logger)");
  if (o.label_smoothing != 0.0) notice("--label-smoothing", "has no effect with the TAL loss (as officially)");
  // check_device_option has verified every listed index; '' is cuda:0 when usable (official).
  // One process trains on its device; data-parallel ranks on CUDA devices are not wired yet.
  device_ = selected_device(o.device);
  if (world > 1 && device_.is_cuda()) {
    notice("--device", "data-parallel training on CUDA devices is not wired yet; the ranks train on the CPU");
    device_ = engine::Device::cpu();
  }
  if (device_.is_cuda()) std::printf("device: %s\n", device_.str().c_str());
  check_cpu_threads_option(o.cpu_threads, o.deterministic);
  if (!o.cpu_threads.empty() && o.cpu_threads != "auto") {
    omp_set_num_threads(std::atoi(o.cpu_threads.c_str()));
  } else if (o.cpu_threads == "auto") {
    if (device_.is_cuda())
      notice("--cpu-threads auto", "applies to training on the CPU only; the CPU keeps OpenMP's thread count");
    else
      cpu_threads_ = std::make_unique<CpuThreadGovernor>(omp_get_max_threads(),
                                                         static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN))));
  }
  {
    // Official: amp = check_amp(model) on CUDA, off on the CPU.
    std::string why;
    amp_mode_ = resolve_amp_mode(o.amp, /*cuda_training=*/device_.is_cuda(), &why,
                                 /*cpu_bf16=*/ops::cpu_bf16_convolutions(device_));
    if (!why.empty()) notice(("--amp " + o.amp).c_str(), why.c_str());
  }
  Y9_CHECK_T(engine::ConfigError, o.epochs > 0 && o.epochs <= kMaxEpochs, "--epochs must be in 1..", kMaxEpochs,
             " (got ", o.epochs, ")");
  check_batch_size(o.batch_size, kMaxBatchSize, world);  // -1: AutoBatch (setup_autobatch), one process only
  Y9_CHECK_T(engine::ConfigError, o.imgsz > 0 && o.imgsz <= kMaxImgSize, "--img must be in 1..", kMaxImgSize,
             " pixels (got ", o.imgsz, ")");
  Y9_CHECK_T(engine::ConfigError, o.close_mosaic >= 0 && o.close_mosaic <= kMaxEpochs,
             "--close-mosaic must be in 0..", kMaxEpochs, " (got ", o.close_mosaic, ")");
  Y9_CHECK_T(engine::ConfigError, o.nbs > 0 && o.nbs <= kMaxBatchSize * 1024, "--nbs must be in 1..",
             kMaxBatchSize * 1024, " (got ", o.nbs, ")");
  Y9_CHECK_T(engine::ConfigError, int(o.cos_lr) + int(o.flat_cos_lr) + int(o.fixed_lr) <= 1,
             "choose at most one of --cos-lr, --flat-cos-lr, --fixed-lr");
  Y9_CHECK_T(engine::ConfigError, o.accumulate >= 0, "--accumulate must be >= 0 (0: the nominal-batch rule), got ",
             o.accumulate);
  // --batch is the global batch (official DDP: batch_size // WORLD_SIZE per process).
  batch_rank_ = o.batch_size == -1 ? -1 : dist::per_rank_batch(o.batch_size, world);
  // The data-parallel options are checked on one process too: a typo must not wait for the day
  // the command runs under a launcher.
  (void)dist::parse_allreduce_algo(o.allreduce);
  Y9_CHECK_T(engine::ConfigError, o.grad_dtype == "fp32" || o.grad_dtype == "fp16" || o.grad_dtype == "bf16",
             "--grad-dtype ", o.grad_dtype, ": expected fp32, fp16 or bf16");
  Y9_CHECK_T(engine::ConfigError, o.bucket_mb > 0 && o.bucket_mb <= 1024 * 1024,
             "--bucket-mb must be in (0, 1048576] MiB, got ", o.bucket_mb);
  if (!o.trace.empty()) {
    // Checked before any work: the trace is written after a few iterations.
    const fs::path dir = fs::absolute(fs::path(o.trace)).parent_path();
    std::error_code ec;
    Y9_CHECK_T(engine::IoError, fs::is_directory(dir, ec), "--trace ", o.trace, ": the folder ", dir.string(),
               " does not exist");
    Y9_CHECK_T(engine::IoError, ::access(dir.c_str(), W_OK) == 0, "--trace ", o.trace, ": the folder ", dir.string(),
               " is not writable");
  }
  if (world > 1) {
    std::printf("data-parallel: global batch %lld = %d ranks x %lld, all-reduce %s, buckets %g MiB (first 1 MiB), "
                "gradients on the wire %s%s\n",
                (long long)o.batch_size, world, (long long)batch_rank_, o.allreduce.c_str(), o.bucket_mb,
                o.grad_dtype.c_str(), o.sync_bn ? ", SyncBatchNorm" : "");
  }
}

// Paths, the run folder (official increment_path) and a write probe.
void Trainer::setup_run_dir() {
  opt_kind_ = parse_optimizer_kind(o_.optimizer);
  // The model YAML: on resume the text saved in the checkpoint (the file may have moved or
  // changed since), else the --cfg file.
  auto embedded = rck_.meta.find("cfg_yaml");
  if (resume_ && embedded != rck_.meta.end() && !embedded->second.empty()) {
    cfg_text_ = embedded->second;
  } else if (!resume_ && !o_.weights.empty() && (o_.cfg.empty() || o_.cfg == "yolo.yaml")) {
    // No --cfg: the YAML the weights carry (official train_dual.py: Model(cfg or
    // ckpt['model'].yaml)), for a .pt as for our own files; the same rule as val/detect/export.
    const auto meta = io::load_weights_file(o_.weights).metadata;
    const ModelYaml y = weights_model_yaml(meta, o_.weights, "");
    cfg_text_ = y.text;
    o_.cfg = fs::is_regular_file(y.name) ? y.name
             : meta.count("cfg")        ? meta.at("cfg")
                                        : fs::path(o_.weights).stem().string() + ".yaml";
  } else {
    o_.cfg = resolve_config(o_.cfg, "models", "model config (--cfg)");
    cfg_text_ = read_text(o_.cfg, "model config (--cfg)");
  }
  if (!resume_) o_.hyp = resolve_config(o_.hyp, "hyps", "hyp file (--hyp)");
  o_.data = fs::is_regular_file(o_.data) ? fs::absolute(o_.data).lexically_normal().string()
                                         : resolve_config(o_.data, "data", "dataset YAML (--data)");
  if (!resume_) {
    const std::string name = o_.name == "cfg" ? fs::path(o_.cfg).stem().string() : o_.name;
    if (main_) save_dir_ = io::increment_path((fs::path(o_.project) / name).string(), o_.exist_ok);
    if (dp_) save_dir_ = dp_->broadcast_string(save_dir_.string());  // rank 0's choice
  }
  o_.save_dir = save_dir_.string();
  wdir_ = save_dir_ / "weights";
  csv_ = save_dir_ / "results.csv";
  if (!main_) return;  // only rank 0 writes the run folder
  std::error_code ec;
  fs::create_directories(wdir_, ec);
  Y9_CHECK_T(engine::IoError, !ec, "cannot create the run directory ", wdir_.string(), ": ", ec.message());
  // A save killed mid-write (kill -9, power loss) leaves last.safetensors.tmp.<pid> (or
  // results.csv.tmp.<pid>, a plot's) behind.
  for (const fs::path& d : {wdir_, save_dir_})
    for (const std::string& t : io::remove_stale_temporaries(d.string()))
      std::printf("removed %s (left by an interrupted save)\n", t.c_str());
  const fs::path probe = wdir_ / ".write_test";
  std::ofstream f(probe);
  Y9_CHECK_T(engine::IoError, f.good(), "run directory ", save_dir_.string(), " is not writable: ", std::strerror(errno));
  f.close();
  fs::remove(probe, ec);
  setup_csv();
}

void Trainer::setup_hyp() {
  if (resume_) {
    const nlohmann::json hj = meta_json(rck_, "hyp", resume_path_);
    try {
      hyp_ = io::Hyp::from_json(hj);
    } catch (const engine::ConfigError& e) {
      Y9_THROW(engine::ConfigError, resume_path_, ": checkpoint metadata 'hyp': ", e.message());
    }
  } else {
    hyp_ = io::Hyp::load(o_.hyp);
  }
  hyp_.set("anchor_t", 5.0);
  if (hyp_.fl_gamma != 0.0 || hyp_.cls_pw != 1.0)
    notice("hyp fl_gamma/cls_pw", "are not supported by the fused loss; using fl_gamma 0, cls_pw 1");
  std::printf("hyperparameters: %s\n", hyp_.summary().c_str());
  if (!resume_ && main_) {
    write_yaml(save_dir_ / "hyp.yaml", hyp_.to_json());
    nlohmann::ordered_json oj = options_to_json(o_);
    oj["hyp"] = hyp_.to_json();
    write_yaml(save_dir_ / "opt.yaml", oj);
  }
  std::printf("train: options: %s\n", options_to_json(o_).dump().c_str());
}

// data.yaml, and the label scans of both splits (official create_dataloader's cache step).
void Trainer::setup_data() {
  dcfg_ = io::load_data_yaml(o_.data);
  nc_ = o_.single_cls ? 1 : dcfg_.nc;
  names_ = o_.single_cls ? std::vector<std::string>{"item"} : dcfg_.names;
  io::ScanOptions so;
  so.nc = dcfg_.nc;
  so.min_items = static_cast<int>(o_.min_items);
  so.single_cls = o_.single_cls;
  so.prefix = "train: ";
  train_scan_ = io::scan_dataset(dcfg_.train, so);
  std::fputs(train_scan_.findings_text(so.prefix).c_str(), stdout);
  std::printf("%s%s\n", so.prefix.c_str(), train_scan_.summary_line().c_str());
  std::string why;
  Y9_CHECK_T(engine::ConfigError, train_scan_.trainable(&why), "train: ", why);
  have_val_ = !dcfg_.val.empty();
  if (have_val_) {
    so.prefix = "val: ";
    so.min_items = 0;
    so.min_image_px = 0;  // Deviation: validation keeps images under 10 px (letterbox handles them)
    val_scan_ = io::scan_dataset(dcfg_.val, so);
    std::fputs(val_scan_.findings_text(so.prefix).c_str(), stdout);
    std::printf("%s%s\n", so.prefix.c_str(), val_scan_.summary_line().c_str());
  } else {
    notice("data.yaml", "has no val split; validation is skipped (metrics are 0)");
  }
}

// The model, the loss settings, transferred weights (--weights) and --freeze.
void Trainer::setup_model() {
  graph::BuildOptions bo;
  // Official init_seeds(opt.seed + 1 + RANK), RANK = -1 alone; rank 0's weights are broadcast.
  bo.seed = static_cast<uint64_t>(o_.seed + (dp_ ? 1 + dp_->rank() : 0));
  model_ = std::make_shared<graph::Model>(graph::parse_model_config(cfg_text_, o_.cfg, nc_), bo);
  // Image size: a multiple of the grid stride, at least 2 grids (official check_img_size(imgsz, gs, gs * 2)).
  gs_ = model_->grid_stride();
  imgsz_ = check_img_size(static_cast<int>(o_.imgsz), static_cast<int>(gs_), static_cast<int>(2 * gs_));
  std::printf("%s\n", model_->summary(fs::path(o_.cfg).stem().string(), imgsz_).c_str());
  const int branches = model_->head()->branches;
  Y9_CHECK_T(engine::ConfigError, branches == 1 || branches == 2, o_.cfg, ": heads with ", branches,
             " branches are not supported by the training loss (DDetect and DualDDetect are)");
  loss_cfg_ = branches == 2 ? ops::YoloLossConfig::dual(nc_) : ops::YoloLossConfig::single(nc_);
  loss_cfg_.strides = model_->strides();
  loss_cfg_.reg_max = model_->head()->reg_max;
  val_loss_cfg_ = loss_cfg_;
  const int world = dp_ ? dp_->world_size() : 1;
  const bool sync_bn = o_.sync_bn && world > 1;
  const int64_t n_bn = model_->set_batchnorm_sync(sync_bn ? dp_->batchnorm_sync() : nullptr);
  Y9_CHECK_T(engine::ConfigError, world == 1 || batch_rank_ >= 2 || n_bn == 0 || sync_bn, "--batch ", o_.batch_size,
             " gives each of the ", world, " ranks a batch of ", batch_rank_, ", below 2, and ", o_.cfg, " has ", n_bn,
             " BatchNorm layers in training (a per-rank batch below 2 is the official 'Expected more than 1 value per "
             "channel' trap); use --batch ", 2 * world, " or more, or --sync-bn");
  if (world > 1) {
    // Deviation (official DDP normalises each rank's loss by its own target_scores_sum and
    // averages the gradients): the loss is normalised by the global target_scores_sum and scaled
    // by the global batch, and the gradients are summed, so N ranks x b equal 1 process x N*b.
    loss_cfg_.reduce_sums = dp_->loss_reduce();
    loss_cfg_.loss_batch = o_.batch_size;
  }

  if (!resume_ && !o_.weights.empty()) {
    engine::autograd::NoGradGuard ng;
    io::Checkpoint wck = io::load_checkpoint(o_.weights);
    auto fused = wck.meta.find("fused");
    Y9_CHECK_T(engine::ConfigError, fused == wck.meta.end() || fused->second != "1", o_.weights,
               " was exported with --fuse (BatchNorm folded into the convolutions, RepConvN merged): it runs in val "
               "and detect but cannot be trained. Export it again without --fuse to fine-tune.");
    const auto& src = io::inference_weights(wck, o_.weights);
    const std::string head_prefix = "model." + std::to_string(model_->num_layers() - 1) + ".";
    int64_t n = 0, total = 0;
    for (auto& [k, t] : model_->state_dict()) {
      ++total;
      auto it = src.find(k);
      if (it == src.end()) continue;
      if (it->second.shape() != t.shape()) {
        // Only the detection head may differ (another class count): official transfer learning.
        Y9_CHECK_T(engine::ConfigError, k.rfind(head_prefix, 0) == 0, o_.weights, ": tensor '", k, "' has shape ",
                   engine::shape_str(it->second.shape()), " in the weights but ", engine::shape_str(t.shape()),
                   " in ", fs::path(o_.cfg).filename().string(), " (weights from another model config?)");
        continue;
      }
      Tensor d = t;
      d.copy_(it->second);
      ++n;
    }
    Y9_CHECK_T(engine::ConfigError, n > 0, o_.weights, ": no tensor matches ", o_.cfg, " (weights from another model?)");
    std::printf("Transferred %lld/%lld items from %s\n", (long long)n, (long long)total, o_.weights.c_str());
  }
  const auto params = model_->named_parameters();
  const auto frozen = apply_freeze(params, freeze_prefixes(o_.freeze));
  for (const auto& f : frozen) std::printf("freezing %s\n", f.c_str());
  if (!params.empty() && frozen.size() == params.size()) {
    std::string v;
    for (int64_t f : o_.freeze) {
      v += ' ';  // not " " + to_string: GCC 12 warns falsely (-Wrestrict) on that form
      v += std::to_string(f);
    }
    Y9_THROW(engine::ConfigError, "--freeze", v, " freezes every parameter of ", fs::path(o_.cfg).filename().string(),
             " (its layers are model.0 .. model.", model_->num_layers() - 1,
             "): nothing is left to train. Freeze fewer layers (--freeze 10 freezes the backbone of the official "
             "models).");
  }
  // The model on the training device before the flat parameter store, the optimizer and the EMA
  // are built over its tensors.
  if (device_.is_cuda()) model_->to(device_);
}

// --batch -1: official batch_size = check_train_batch_size(model, imgsz, amp) (single process),
// after the model, before the optimizer (accumulation and weight decay use the batch size).
void Trainer::setup_autobatch() {
  if (o_.batch_size != -1) return;
  // Official: profiled under torch.cuda.amp.autocast(amp), as the training forward runs.
  const std::optional<engine::DType> autocast = training_autocast(device_, amp_mode_);
  std::optional<ops::AutocastGuard> ac;
  if (autocast) ac.emplace(*autocast);
  o_.batch_size = autobatch(*model_, parameters_device(*model_), imgsz_).batch;
  batch_rank_ = o_.batch_size;
}

// The flat parameter store, the three official parameter groups, the schedule and the EMA.
void Trainer::setup_optimizer() {
  const int64_t nbs = o_.nbs;
  Y9_CHECK_T(engine::ConfigError, nbs > 0, "--nbs must be > 0 (got ", nbs, ")");
  accumulate_ = o_.accumulate > 0 ? o_.accumulate : official_accumulate(o_.batch_size, nbs);
  const double decay = official_weight_decay(hyp_.weight_decay, o_.batch_size, accumulate_, nbs);
  const OfficialParamSplit split = official_param_split(*model_);
  // Parameters and gradients live in flat buffers for the whole run (registration order); the
  // BatchNorm statistics in a flat buffer of their own, so the EMA blends two buffers per step.
  store_ = std::make_unique<ParamStore>(model_->named_parameters());
  NamedTensors float_buffers;
  for (const auto& nb : model_->named_buffers())
    if (engine::is_floating(nb.second.dtype())) float_buffers.push_back(nb);
  if (!float_buffers.empty()) flat_buffers_ = engine::pack_flat(float_buffers);
  if (dp_) {
    // Every rank starts from rank 0's weights and statistics (official DDP broadcasts them).
    Tensor p = store_->params().flat;
    dp_->broadcast(p);
    if (flat_buffers_.flat.defined()) dp_->broadcast(flat_buffers_.flat);
    if (!o_.trace.empty()) tracer_ = std::make_unique<Tracer>(dp_->rank());
    dist::ReducerOptions ro;
    ro.bucket_mb = o_.bucket_mb;
    ro.algo = dist::parse_allreduce_algo(o_.allreduce);
    ro.grad_dtype = o_.grad_dtype == "fp16" ? engine::DType::F16 : o_.grad_dtype == "bf16" ? engine::DType::BF16
                                                                                          : engine::DType::F32;
    dp_->attach_reducer(*store_, ro, tracer_.get());
    if (dp_->reducer())
      std::printf("data-parallel: %zu gradient buckets (%.1f MiB of gradients)\n", dp_->reducer()->buckets().size(),
                  static_cast<double>(store_->grads().flat.numel()) * 4 / 1048576.0);
  }
  if (!o_.trace.empty() && !tracer_) tracer_ = std::make_unique<Tracer>(0);
  if (tracer_)
    for (size_t k = 0; k < store_->size(); ++k) {
      if (!store_->trainable(k)) continue;
      const std::string& nm = store_->name(k);  // model.<layer>.
      const int layer = nm.rfind("model.", 0) == 0 ? std::atoi(nm.c_str() + 6) : -1;
      store_->param(k).register_grad_ready_hook([this, layer](const Tensor&) { trace_grad_ready(layer); });
    }
  opt_ = make_official_optimizer(opt_kind_, *store_, split, hyp_.lr0, hyp_.momentum, decay);
  std::printf("optimizer: %s(lr=%g) with parameter groups %zu weight(decay=0.0), %zu weight(decay=%g), %zu bias\n",
              optimizer_kind_name(opt_kind_), hyp_.lr0, split.norm.size(), split.decay.size(), decay,
              split.bias.size());
  const LrScheduleKind sk = o_.cos_lr        ? LrScheduleKind::Cosine
                            : o_.flat_cos_lr ? LrScheduleKind::FlatCosine
                            : o_.fixed_lr    ? LrScheduleKind::Fixed
                                             : LrScheduleKind::Linear;
  sched_ = std::make_unique<LambdaLR>(*opt_, make_lr_lambda(sk, hyp_.lrf, o_.epochs));
  std::vector<engine::FlatBuffer> flats{store_->params()};
  if (flat_buffers_.flat.defined()) flats.push_back(flat_buffers_);
  ema_ = std::make_unique<ModelEMA>(flats, model_->state_dict());
  GradScalerOptions so;  // PyTorch defaults, as official GradScaler(enabled=amp)
  so.enabled = amp_mode_ == AmpMode::FP16;
  scaler_ = std::make_unique<GradScaler>(store_->grads().flat.device(), so);
  stopper_.patience = o_.patience;
}

// Resume: model, EMA, optimizer, counters and (mid-epoch) the accumulated gradients.
void Trainer::setup_resume_state() {
  if (resume_) {
    engine::autograd::NoGradGuard ng;
    const std::string& p = resume_path_;
    io::load_state_into(model_->state_dict(), rck_.model, p + " (model)");
    io::load_state_into(ema_->state(), rck_.ema, p + " (ema)");
    ema_->set_updates(io::meta_int(rck_, "updates", p, 0, INT64_MAX / 4));
    try {
      opt_->load_state_dict(pt_resume_ ? torch_optimizer_state_dict(pt_optim_, *opt_, p) : rck_.optim);
    } catch (const engine::ConfigError&) {
      throw;  // names the file and the parameter already
    } catch (const engine::Error& e) {
      Y9_THROW(engine::ConfigError, p, ": the optimizer state does not fit this model and --optimizer ", o_.optimizer,
               ": ", e.message());
    }
    start_epoch_ = io::meta_int(rck_, "epoch", p, -1, o_.epochs - 1) + 1;
    skip_batches_ = io::meta_int(rck_, "next_batch", p, 0, INT64_MAX / 4);  // < batches per epoch: setup_loaders
    best_fitness_ = io::meta_double(rck_, "best_fitness", p);
    last_opt_step_ = io::meta_int(rck_, "last_opt_step", p, -1, INT64_MAX / 4);
    accumulate_ = io::meta_int(rck_, "accumulate", p, pt_resume_ ? 0 : 1, kMaxBatchSize * 1024);
    if (accumulate_ == 0) accumulate_ = official_accumulate(o_.batch_size, o_.nbs);  // after AutoBatch
    stopper_.best_fitness = io::meta_double(rck_, "es_best_fitness", p);
    stopper_.best_epoch = io::meta_int(rck_, "es_best_epoch", p, 0, kMaxEpochs);
    stopper_.possible_stop = io::meta_str(rck_, "es_possible_stop", p) == "1";
    const nlohmann::json ml = meta_json(rck_, "mloss", p);
    Y9_CHECK_T(engine::ConfigError, ml.is_array() && ml.size() == 3 && ml[0].is_number() && ml[1].is_number() &&
                   ml[2].is_number(), p, ": checkpoint metadata 'mloss' must be a list of 3 numbers, got ",
               ml.dump().substr(0, 60));
    for (size_t k = 0; k < 3; ++k) mloss_resume_[k] = ml[k].get<double>();
    // Mid-epoch gradients: rank 0's by parameter; other ranks' as flat buffers "dp.rank<r>". The
    // same world size resumes each rank's own; another one (or a single process) puts their sum
    // on rank 0 and zeros elsewhere: the same total after the next all-reduce.
    const int world = dp_ ? dp_->world_size() : 1, rank = dp_ ? dp_->rank() : 0;
    const bool same_world = rck_.meta.count("world_size") &&
                            io::meta_int(rck_, "world_size", p, 1, 1 << 20) == static_cast<int64_t>(world);
    if (rank == 0) {
      for (size_t i = 0; i < store_->size(); ++i)
        if (store_->trainable(i)) {
          auto it = rck_.grad.find(store_->name(i));
          if (it == rck_.grad.end()) continue;
          Tensor dst = store_->grad_segment(i);
          Y9_CHECK_T(engine::ConfigError, it->second.shape() == dst.shape(), p, ": accumulated gradient '",
                     store_->name(i), "' has shape ", engine::shape_str(it->second.shape()), " but the parameter has ",
                     engine::shape_str(dst.shape()));
          dst.copy_(it->second);
        }
    }
    Tensor gflat = store_->grads().flat;
    for (const auto& [name, t] : rck_.grad) {
      if (name.rfind("dp.rank", 0) != 0) continue;
      Y9_CHECK_T(engine::ConfigError, t.numel() == gflat.numel(), p, ": ", name, " has ", t.numel(),
                 " gradient elements, the model ", gflat.numel());
      if (same_world && name == fmt("dp.rank%d", rank)) gflat.copy_(t.reshape(gflat.shape()));
      else if (!same_world && rank == 0) gflat.add_(t.reshape(gflat.shape()));
    }
    // The label-cache hash of the training split at save time: a changed dataset changes the
    // image order of the interrupted epoch, so the resumed run is no longer the same run.
    auto h = rck_.meta.find("train_hash");
    if (h != rck_.meta.end() && h->second != train_scan_.hash)
      std::printf("WARNING ⚠️ the training data changed since %s was written (label-cache hash %s, now %s)%s\n",
                  p.c_str(), h->second.c_str(), train_scan_.hash.c_str(),
                  skip_batches_ > 0
                      ? fmt(": the interrupted epoch %lld continues at batch %lld over a different image list and "
                            "order, so the resumed run is not the run that was interrupted",
                            (long long)start_epoch_, (long long)skip_batches_)
                            .c_str()
                      : ": training continues on the changed data");
    std::printf("Resuming at epoch %lld%s, best fitness %.5g, %lld EMA updates\n", (long long)start_epoch_,
                skip_batches_ ? fmt(" batch %lld", (long long)skip_batches_).c_str() : "", best_fitness_,
                (long long)ema_->updates());
  }
  sched_->set_last_epoch(start_epoch_ - 1);
}

// The training loader (mosaic augmentation, persistent workers) and the validation dataset.
void Trainer::setup_loaders() {
  workers_ = static_cast<int>(std::clamp<int64_t>(
      o_.workers, 0, std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()))));
  io::AugmentOptions ta;
  ta.img_size = static_cast<int>(imgsz_);
  ta.augment = true;
  ta.rect = o_.rect;
  ta.batch_size = static_cast<int>(batch_rank_);
  ta.stride = static_cast<int>(gs_);
  ta.epochs = static_cast<int>(o_.epochs);
  ta.close_mosaic = static_cast<int>(o_.close_mosaic);
  ta.seed = static_cast<uint64_t>(o_.seed);
  ta.hyp = hyp_;
  train_ds_ = std::make_shared<const io::AugmentedDataset>(train_scan_.records, ta);
  io::LoaderOptions tl;
  tl.batch_size = static_cast<int>(batch_rank_);
  tl.workers = workers_;
  if (dp_) {
    // The official DistributedSampler: a fresh (seed, epoch) shuffle shared by the ranks, every
    // world_size-th image from the rank. Deviation: augmentation draws depend on (seed, epoch,
    // image) only, not on the rank, so N ranks x b see exactly the images of 1 process x N*b.
    tl.rank = dp_->rank();
    tl.world_size = dp_->world_size();
  }
  tl.shuffle = !o_.rect;
  tl.seed = static_cast<uint64_t>(o_.seed);
  tl.epochs = static_cast<int>(o_.epochs);  // workers prefetch across epochs, never past the last
  // --augment-device: the pixels of a training batch rendered on the training device (the
  // workers only plan and decode), GPU by default when training on CUDA.
  const bool gpu_augment = o_.augment_device == "gpu" || (o_.augment_device.empty() && device_.is_cuda());
  if (gpu_augment && !device_.is_cuda()) {
    notice("--augment-device gpu", "needs training on a CUDA device; augmenting on the CPU");
  } else if (gpu_augment) {
    tl.augment_device = io::LoaderOptions::AugmentDevice::Gpu;
    tl.device = device_;
    if (main_) std::printf("augment: on %s (--augment-device gpu)\n", device_.str().c_str());
  }
  train_loader_ = std::make_unique<io::DataLoader>(train_ds_, tl);
  if (have_val_ && (main_ || o_.val_distributed)) {
    io::AugmentOptions va = ta;
    va.augment = false;
    va.rect = true;
    va.batch_size = static_cast<int>(o_.val_batch > 0 ? o_.val_batch : batch_rank_ * 2);
    va.rect_pad = 0.5;
    val_aug_ = va;
    val_ds_ = std::make_shared<const io::AugmentedDataset>(val_scan_.records, va);
    if (o_.val_distributed && dp_ && dp_->world_size() > 1) {
      // --val-distributed: rank r validates a consecutive run of whole rect batches (the same
      // batches and shapes as one process), and the shards' statistics are merged in order.
      const int64_t n = static_cast<int64_t>(val_ds_->records().size()), B = va.batch_size;
      const int64_t nbv = (n + B - 1) / B, W = dp_->world_size(), r = dp_->rank();
      if (nbv < W) {
        notice("--val-distributed", "has fewer validation batches than ranks; validating on rank 0");
        if (!main_) val_ds_.reset();
      } else {
        const int64_t b0 = r * nbv / W, b1 = (r + 1) * nbv / W;
        const auto& all = val_ds_->records();
        std::vector<io::ImageRecord> part(all.begin() + b0 * B, all.begin() + std::min(n, b1 * B));
        val_ds_ = std::make_shared<const io::AugmentedDataset>(std::move(part), va);
        val_sharded_ = true;
      }
    }
    vo_.batch_size = va.batch_size;
    vo_.workers = workers_;
    vo_.single_cls = o_.single_cls;
    vo_.training = true;
    vo_.plots = false;
    vo_.names = names_;
  }
  train_loader_->start_epoch(static_cast<int>(start_epoch_));  // num_batches() needs an epoch's order
  nb_ = train_loader_->num_batches();
  // next_batch == nb_: every batch was trained, the end of the epoch (validation, row) is pending.
  Y9_CHECK_T(engine::ConfigError, skip_batches_ <= nb_, resume_path_, ": checkpoint metadata 'next_batch' is ",
             skip_batches_, " but an epoch has only ", nb_, " batches (batch size ", o_.batch_size, ", ",
             train_scan_.records.size(), " images): the checkpoint is damaged or the dataset shrank");
  nw_ = warmup_iterations(hyp_.warmup_epochs, nb_);
  warmup_.warmup_epochs = hyp_.warmup_epochs;
  warmup_.warmup_momentum = hyp_.warmup_momentum;
  warmup_.warmup_bias_lr = hyp_.warmup_bias_lr;
  warmup_.momentum = hyp_.momentum;
  warmup_.nbs = o_.nbs;
}

// FP16 rounding of the initial weights, label plots, the EMA model for validation, and the
// "Starting training" banner.
void Trainer::setup_last() {
  // Official step 13: round the training model through FP16 once (the EMA keeps FP32 values).
  if (!resume_ && !o_.fp32_init) round_through_fp16_(model_->state_dict());
  if (!resume_ && !o_.noplots && main_) {
    std::vector<float> cls, box;
    for (const auto& r : train_scan_.records)
      for (const auto& l : r.labels) {
        cls.push_back(l[0]);
        box.insert(box.end(), {l[1], l[2], l[3], l[4]});
      }
    const int64_t n = static_cast<int64_t>(cls.size());
    io::plot_labels(Tensor::from_vector(cls, {n}), Tensor::from_vector(box, {n, 4}), names_,
                    (save_dir_ / "labels.jpg").string());
  }
  // grad_norm.csv: a resumed run re-runs the steps after its checkpoint, so their rows go; the
  // rows of the epoch it resumes in give that epoch's mean so far.
  grad_norm_csv_ = save_dir_ / "grad_norm.csv";
  if (resume_ && main_) {
    for (const auto& r : io::truncate_grad_norms(grad_norm_csv_.string(), start_epoch_ * nb_ + skip_batches_))
      if (r.epoch == start_epoch_ && skip_batches_ > 0) {
        grad_norm_sum_ += r.norm;
        ++grad_norm_steps_;
      }
  }
  if (o_.plot_features > 0) {
    feature_image_ = !val_scan_.records.empty()     ? val_scan_.records.front().image_path
                     : !train_scan_.records.empty() ? train_scan_.records.front().image_path
                                                    : std::string();
    if (!feature_image_.empty())
      std::printf("Feature maps of %s every %lld epochs -> %s\n", feature_image_.c_str(), (long long)o_.plot_features,
                  (save_dir_ / "features").string().c_str());
  }
  // The EMA copy that validation runs (shape-only build, values copied from the EMA each time).
  graph::BuildOptions eb;
  eb.init = false;
  ema_model_ = std::make_shared<graph::Model>(graph::parse_model_config(cfg_text_, o_.cfg, nc_), eb);
  if (device_.is_cuda()) ema_model_->to(device_);
  vo_.device = device_;
  // Official val during training runs with half=amp: here the forward under the same autocast.
  // On the CPU (--amp bf16) validation stays F32: the exact mAP, as the official CPU run's.
  vo_.autocast = device_.is_cuda() ? training_autocast(device_, amp_mode_).value_or(engine::DType::F32)
                                   : engine::DType::F32;
  tty_ = isatty(fileno(stdout)) != 0;
  std::printf("Image sizes %lld train, %lld val\nUsing %d dataloader workers\nLogging results to %s\n"
              "Starting training for %lld epochs... (%lld batches/epoch, warm-up %lld iterations, accumulate %lld)%s\n",
              (long long)imgsz_, (long long)imgsz_, workers_, save_dir_.string().c_str(), (long long)o_.epochs,
              (long long)nb_, (long long)nw_, (long long)accumulate_,
              o_.deterministic ? "\ndeterministic: fixed-order CPU reductions, Philox data order (bitwise reproducible "
                                 "for a fixed thread count)"
                               : "");
  std::fflush(stdout);
}

// --- checkpoints and results.csv -----------------------------------------------------------------------

io::Checkpoint Trainer::make_checkpoint(int64_t epoch_done, int64_t next_batch, const std::array<double, 3>& ml,
                                        bool finished) const {
  io::Checkpoint ck;
  ck.model = to_map(model_->state_dict());
  ck.ema = to_map(ema_->state());
  ck.optim = opt_->state_dict();
  if (next_batch > 0) {
    for (size_t i = 0; i < store_->size(); ++i)
      if (store_->trainable(i)) ck.grad.emplace(store_->name(i), store_->grad_segment(i));
    // Data-parallel: the other ranks' accumulated gradients (flat buffers), "dp.rank<r>".
    for (size_t r = 1; r < rank_grads_.size(); ++r) ck.grad.emplace(fmt("dp.rank%zu", r), rank_grads_[r]);
  }
  if (dp_) ck.meta["world_size"] = std::to_string(dp_->world_size());
  auto& m = ck.meta;
  m["epoch"] = std::to_string(epoch_done);
  m["next_batch"] = std::to_string(next_batch);
  m["best_fitness"] = fmt("%.17g", best_fitness_);
  m["updates"] = std::to_string(ema_->updates());
  m["last_opt_step"] = std::to_string(last_opt_step_);
  m["accumulate"] = std::to_string(accumulate_);
  m["es_best_fitness"] = fmt("%.17g", stopper_.best_fitness);
  m["es_best_epoch"] = std::to_string(stopper_.best_epoch);
  m["es_possible_stop"] = stopper_.possible_stop ? "1" : "0";
  m["mloss"] = nlohmann::json(std::vector<double>(ml.begin(), ml.end())).dump();
  m["cfg"] = o_.cfg;
  m["cfg_yaml"] = cfg_text_;
  m["nc"] = std::to_string(nc_);
  m["names"] = nlohmann::json(names_).dump();
  m["opt"] = options_to_json(o_).dump();
  m["hyp"] = hyp_.to_json().dump();
  m["date"] = iso_now();
  m["finished"] = finished ? "1" : "0";
  m["train_hash"] = train_scan_.hash;
  m["results_csv"] = csv_text_;  // results.csv through epoch_done: resume restores it from here
  return ck;
}

void Trainer::gather_rank_grads() {
  const Tensor& g = store_->grads().flat;
  const int W = dp_->world_size();
  Tensor all = Tensor::empty({W, g.numel()}, g.dtype(), g.device());
  dp_->comm().all_gather(g.data_ptr(), static_cast<size_t>(g.numel()) * engine::dtype_size(g.dtype()), all.data_ptr());
  rank_grads_.clear();
  for (int r = 0; r < W; ++r) rank_grads_.push_back(all.select(0, r));
}

void Trainer::save_last(int64_t epoch_done, int64_t next_batch, const std::array<double, 3>& ml) const {
  io::save_checkpoint((wdir_ / "last.safetensors").string(), make_checkpoint(epoch_done, next_batch, ml, false));
}

// results.csv as the official utils/loggers write it: %20s header, %20.5g values. The row goes to
// csv_text_ only; write_csv() puts the file on disk after the checkpoint that holds the same text.
void Trainer::log_csv(int64_t epoch, const std::vector<double>& vals) {
  static const char* keys[] = {"epoch", "train/box_loss", "train/cls_loss", "train/dfl_loss",
                               "metrics/precision", "metrics/recall", "metrics/mAP_0.5", "metrics/mAP_0.5:0.95",
                               "val/box_loss", "val/cls_loss", "val/dfl_loss", "x/lr0", "x/lr1", "x/lr2",
                               "grad_norm"};  // ours, after the official columns (epoch mean before clipping)
  std::string s;
  size_t n = vals.size();
  if (csv_text_.empty()) {
    for (const char* k : keys) s += fmt("%20s,", k);
    s.back() = '\n';
  } else {
    // A run started by a build without the grad_norm column keeps its 14 columns on resume.
    const std::string header = csv_text_.substr(0, csv_text_.find('\n'));
    if (header.find("grad_norm") == std::string::npos) n = std::min<size_t>(n, 13);
  }
  s += fmt("%20.5g,", static_cast<double>(epoch));
  for (size_t k = 0; k < n; ++k) s += fmt("%20.5g,", vals[k]);
  s.back() = '\n';
  csv_text_ += s;
}

// Deviation: the official logger appends each row. We replace the file atomically, so a kill or a
// full disk never leaves a torn row, and the checkpoint's copy decides what a resume keeps.
void Trainer::write_csv() const { io::write_file_atomic(csv_.string(), csv_text_); }

// results.csv at set-up. A new run keeps what the folder already holds (--exist-ok, as the official
// logger appends). A resumed run gets exactly the rows of the epochs its checkpoint holds: the
// checkpoint's copy, or for checkpoints without one the file's complete rows up to its epoch. So
// a crash between a row and its checkpoint can never repeat an epoch in the file.
void Trainer::setup_csv() {
  std::error_code ec;
  const std::string on_disk = fs::is_regular_file(csv_, ec) ? read_text(csv_, "results file") : std::string();
  if (!resume_) {
    csv_text_ = on_disk;
    return;
  }
  auto it = rck_.meta.find("results_csv");
  if (it != rck_.meta.end()) {
    csv_text_ = it->second;
  } else {
    const int64_t done = io::meta_int(rck_, "epoch", resume_path_, -1, kMaxEpochs);
    size_t pos = 0;
    csv_text_.clear();
    for (bool first = true; pos < on_disk.size(); first = false) {
      const size_t nl = on_disk.find('\n', pos);
      if (nl == std::string::npos) break;  // a torn last row
      const std::string line = on_disk.substr(pos, nl + 1 - pos);
      pos = nl + 1;
      char* end = nullptr;
      const long long e = std::strtoll(line.c_str(), &end, 10);
      const bool numeric = end != line.c_str() && *end == ',';
      if (first && !numeric) {
        csv_text_ += line;  // the header
        continue;
      }
      if (!numeric || e > done) break;
      csv_text_ += line;
    }
  }
  if (csv_text_ != on_disk) {
    write_csv();
    std::printf("%s: restored to the epochs that %s holds (the rows after it belong to work it does not hold)\n",
                csv_.string().c_str(), resume_path_.c_str());
  }
}

int Trainer::interrupted_exit(const char* when, int64_t epoch, int64_t batch) const {
  const std::string last = (wdir_ / "last.safetensors").string();
  const char* what = g_signal == SIGINT    ? "Interrupted (SIGINT)"
                     : g_signal == SIGTERM ? "Terminated (SIGTERM)"
                     : g_signal == SIGUSR1 ? "Stopped (SIGUSR1)"
                                           : "Stopped (--stop-after-batches)";
  if (batch >= 0)
    std::printf("%s%s at epoch %lld batch %lld: saved %s; continue with: yolov9 train --resume %s\n", tty_ ? "\n" : "",
                what, (long long)epoch, (long long)batch, last.c_str(), last.c_str());
  else
    std::printf("%s %s %lld: saved %s; continue with: yolov9 train --resume %s\n", what, when, (long long)epoch,
                last.c_str(), last.c_str());
  if (!o_.noplots && main_ && fs::exists(csv_)) io::plot_results(csv_.string(), (save_dir_ / "results.png").string());
  if (!o_.noplots && main_ && fs::exists(grad_norm_csv_))
    io::plot_grad_norm(grad_norm_csv_.string(), (save_dir_ / "grad_norm.png").string(), kClipMaxNorm);
  std::fflush(stdout);
  if (dp_) dp_->barrier();  // rank 0's checkpoint is complete before any rank exits
  return g_signal != 0 ? 128 + static_cast<int>(g_signal) : 0;
}

void Trainer::record_grad_norm(int64_t epoch, int64_t i, int64_t ni, double norm) {
  io::GradNormRow r;
  r.epoch = epoch;
  r.iteration = ni;
  r.x = static_cast<double>(epoch) + static_cast<double>(i + 1) / static_cast<double>(nb_);
  r.norm = norm;
  if (main_) io::append_grad_norm(grad_norm_csv_.string(), r);  // the same norm on every rank
  grad_norm_sum_ += norm;
  ++grad_norm_steps_;
}

void Trainer::plot_features(int64_t epoch) {
  if (feature_image_.empty()) return;
  {
    engine::autograd::NoGradGuard ng;
    const auto ms = ema_model_->state_dict();
    const auto& es = ema_->state();
    for (size_t k = 0; k < ms.size(); ++k) Tensor(ms[k].second).copy_(es[k].second);
  }
  ema_model_->eval();
  const fs::path dir = save_dir_ / "features" / fmt("epoch%lld", (long long)epoch);
  const auto files = save_feature_maps(
      *ema_model_, letterboxed_input(feature_image_, static_cast<int>(imgsz_)).to(device_), dir.string());
  std::printf("  feature maps: %zu stages -> %s\n", files.size(), dir.string().c_str());
}

// --- the run -------------------------------------------------------------------------------------------

void Trainer::print_benchmark(double t_train, const double* times, int64_t images, int64_t batch,
                              int64_t imgsz) const {
  const double steps = static_cast<double>(o_.benchmark);
  auto ms = [&](double s) { return 1e3 * s / steps; };
  // Peak memory: the tensors' allocator (device memory on CUDA) and the process (VmHWM).
  int64_t vm_hwm_kb = 0;
  {
    std::ifstream st("/proc/self/status");
    std::string line;
    while (std::getline(st, line))
      if (line.rfind("VmHWM:", 0) == 0) vm_hwm_kb = std::strtoll(line.c_str() + 6, nullptr, 10);
  }
  const double tensors_gb = static_cast<double>(engine::allocator_for(device_)->stats().peak_bytes) / 1e9;
  std::printf("\nbenchmark: %lld steps (after 3 warm-up steps) of batch %lld at %lld px on %s%s, %s data%s: "
              "%.1f img/s, %.1f ms per step\n",
              (long long)o_.benchmark, (long long)batch, (long long)imgsz, device_.str().c_str(),
              device_.is_cuda() ? (amp_mode_ == AmpMode::Off ? " (FP32)" : amp_mode_ == AmpMode::BF16 ? " (AMP BF16)" : " (AMP FP16)")
                                : (amp_mode_ == AmpMode::BF16 ? " (BF16 convolutions)" : ""),
              o_.benchmark_data.c_str(),
              dp_ && dp_->world_size() > 1 ? fmt(", rank %d of %d", dp_->rank(), dp_->world_size()).c_str() : "",
              t_train > 0 ? static_cast<double>(images) / t_train : 0.0, ms(t_train));
  std::printf("  ms per step: data wait %.1f, forward %.1f, loss %.1f, backward %.1f, optimizer + EMA %.1f\n",
              ms(times[0]), ms(times[1]), ms(times[2]), ms(times[3]), ms(times[4]));
  std::printf("  peak memory: tensors %.3f GB (%s allocator), process %.3f GB (VmHWM)\n", tensors_gb,
              device_.is_cuda() ? "device" : "host", static_cast<double>(vm_hwm_kb) / 1e6);
  std::fflush(stdout);
}

int Trainer::run() {
  try {
    return run_epochs();
  } catch (const engine::OutOfMemoryError& e) {
    // A device out of memory: add the --batch that the measured peak suggests.
    const engine::OutOfMemoryError more = with_batch_advice(e, parameters_device(*model_), batch_rank_);
    end_world_on_error(more);
    throw more;
  } catch (const std::exception& e) {
    end_world_on_error(e);
    throw;
  }
}

int Trainer::run_epochs() {
  const auto t_start = std::chrono::steady_clock::now();
  // CPU training keeps freed blocks for the next step (engine/cpu_cache.h): every step allocates
  // the same activations, and each block that went back to the system costs its page faults again
  // (measured: gelan-t 128 px batch 16 steps 146 -> 141 ms, yolov9-s 640 px batch 8 5.98 -> 5.63 s,
  // peak RSS 4.95 -> 5.11 GB). The cap: Y9_CPU_TRAIN_CACHE_MB (MiB; 0 turns it off), default 1 GiB.
  std::optional<engine::CpuCacheScope> cpu_cache;
  if (device_.is_cpu()) {
    const size_t mib = cpu_train_cache_mib();
    if (mib > 0) cpu_cache.emplace(mib << 20);
  }
  g_signal = 0;
  auto prev_int = std::signal(SIGINT, on_stop_signal);
  auto prev_term = std::signal(SIGTERM, on_stop_signal);
  auto prev_usr1 = std::signal(SIGUSR1, on_stop_signal);
  struct Restore {
    decltype(prev_int) a, b, c;
    ~Restore() {
      const bool failing = std::uncaught_exceptions() > 0;  // the error is yet to be printed
      std::signal(SIGINT, failing ? on_signal_while_failing : a);
      std::signal(SIGTERM, failing ? on_signal_while_failing : b);
      std::signal(SIGUSR1, failing ? on_signal_while_failing : c);
    }
  } restore{prev_int, prev_term, prev_usr1};

  int64_t epoch = start_epoch_;
  for (; epoch < o_.epochs; ++epoch) {
    const EpochEnd end = run_epoch(epoch);
    if (end == EpochEnd::Interrupted) return g_signal != 0 ? 128 + static_cast<int>(g_signal) : 0;
    if (end == EpochEnd::BenchmarkDone) return 0;
    if (end == EpochEnd::EarlyStop) {
      ++epoch;
      break;
    }
    // As at every step: the ranks agree on the stop (a signal may reach them at different times).
    bool stop_now = g_signal != 0;
    if (dp_ && dp_->world_size() > 1) stop_now = dp_->any(stop_now);
    if (stop_now && g_signal == 0) g_signal = SIGINT;
    if (stop_now ||
        (o_.stop_after_batches > 0 && nb_ * (epoch + 1) >= o_.stop_after_batches && epoch + 1 < o_.epochs)) {
      if (o_.nosave && main_) save_last(epoch, 0, epoch_mloss_);
      return interrupted_exit("after epoch", epoch, -1);
    }
  }
  if (!o_.noplots && main_ && fs::exists(csv_)) io::plot_results(csv_.string(), (save_dir_ / "results.png").string());
  if (!o_.noplots && main_ && fs::exists(grad_norm_csv_))
    io::plot_grad_norm(grad_norm_csv_.string(), (save_dir_ / "grad_norm.png").string(), kClipMaxNorm);
  if (dp_) dp_->barrier();  // every rank ends together (rank 0 wrote the plots)
  const double hours = seconds_since(t_start) / 3600.0;
  std::printf("\n%lld epochs completed in %.3f hours.\nResults saved to %s\n  weights: %s, %s\n",
              (long long)(epoch - start_epoch_), hours, save_dir_.string().c_str(),
              (wdir_ / "last.safetensors").string().c_str(), (wdir_ / "best.safetensors").string().c_str());
  return 0;
}

Trainer::EpochEnd Trainer::run_epoch(int64_t epoch) {
  const auto t_epoch = std::chrono::steady_clock::now();
  model_->train();
  if (o_.close_mosaic > 0 && epoch == o_.epochs - o_.close_mosaic) std::printf("Closing dataloader mosaic\n");
  train_loader_->start_epoch(static_cast<int>(epoch));
  const int64_t skip = epoch == start_epoch_ ? skip_batches_ : 0;
  std::array<double, 3> mloss = skip ? mloss_resume_ : std::array<double, 3>{0, 0, 0};
  if (skip == 0) {
    opt_->zero_grad();
    grad_norm_sum_ = 0;
    grad_norm_steps_ = 0;
  }
  amp_skipped_epoch_ = 0;
  const engine::Device mem_device = parameters_device(*model_);
  std::printf("\n%11s%11s%11s%11s%11s%11s%11s\n", "Epoch", progress_mem_column(mem_device).header, "box_loss",
              "cls_loss", "dfl_loss", "Instances", "Size");
  std::fflush(stdout);
  io::Batch batch;
  int64_t i = -1, images_seen = 0;
  double t_train = 0;
  double times[5] = {0, 0, 0, 0, 0};  // data wait, forward, loss, backward, optimizer+EMA (s)
  auto tw = std::chrono::steady_clock::now();
  int64_t done = skip;  // batches of this epoch trained, by this process or the interrupted one
  for (;;) {
    std::string data_error;
    try {
      if (o_.benchmark > 0 && o_.benchmark_data == "synthetic" && bench_batch_.images.defined()) {
        batch = bench_batch_;  // --benchmark-data synthetic: the first batch again, no data wait
      } else {
        if (!train_loader_->next(batch)) break;
        if (o_.benchmark > 0 && o_.benchmark_data == "synthetic") bench_batch_ = batch;
      }
    } catch (const engine::Error& e) {
      data_error = e.message();
    } catch (const std::exception& e) {  // OpenCV inside a loader worker
      data_error = e.what();
    }
    if (!data_error.empty()) {
      // A data error (an image deleted or damaged after the scan): keep the batches done, as
      // SIGINT does, so that the run continues once the data is fixed. Data-parallel: the other
      // ranks cannot join a collective save from here, so the error ends the run (every rank) and
      // --resume continues from the last checkpoint.
      if (dp_ && dp_->world_size() > 1)
        Y9_THROW(engine::IoError, data_error, "\nData error at epoch ", epoch, " batch ", done, " on rank ",
                 dp_->rank(), "; fix the data, then continue with --resume (from the last epoch checkpoint)");
      save_last(epoch - 1, done, mloss);
      const std::string last = (wdir_ / "last.safetensors").string();
      std::printf("\n");
      Y9_THROW(engine::IoError, data_error, "\nData error at epoch ", epoch, " batch ", done, ": saved ", last, " (",
               done, " of ", nb_, " batches of this epoch done); fix the data, then continue with: yolov9 train "
               "--resume ", last);
    }
    ++i;
    if (i < skip) continue;
    double times_before[5];
    std::copy(times, times + 5, times_before);
    const auto t0 = std::chrono::steady_clock::now();
    times[0] += std::chrono::duration<double>(t0 - tw).count();
    const int64_t ni = i + nb_ * epoch;
    if (tracer_ && tracer_->active()) {
      const int64_t dw = static_cast<int64_t>(std::chrono::duration<double>(t0 - tw).count() * 1e6);
      tracer_->complete("data wait", "data", tracer_->now_us() - dw, dw);
    }
    step(batch, epoch, i, ni, mloss, times);
    done = i + 1;
    const int64_t B = batch.images.size(0);
    images_seen += B;
    t_train += seconds_since(t0);
    if (o_.benchmark > 0) {
      // --benchmark: the steps after the warm-up, wall clock from the end of the previous step
      // (data wait included) to the end of this one.
      constexpr int64_t kWarmup = 3;
      if (++bench_steps_ > kWarmup) {
        bench_t0_ += seconds_since(tw);
        for (int k = 0; k < 5; ++k) bench_times0_[k] += times[k] - times_before[k];
        bench_images0_ += B;
      }
      if (bench_steps_ == kWarmup + o_.benchmark) {
        print_benchmark(bench_t0_, bench_times0_, bench_images0_, B, batch.images.size(3));
        return EpochEnd::BenchmarkDone;
      }
    }
    // Progress (official tqdm description + images/s).
    const double ips = t_train > 0 ? static_cast<double>(images_seen) / t_train : 0.0;
    const int64_t done = i + 1 - skip, todo = nb_ - i - 1;
    const double eta = done > 0 ? t_train / static_cast<double>(done) * static_cast<double>(todo) : 0.0;
    const std::string line =
        fmt("%11s%11s%11.4g%11.4g%11.4g%11lld%11lld: %3lld%% %lld/%lld [%s<%s, %.1f img/s]",
            fmt("%lld/%lld", (long long)epoch, (long long)(o_.epochs - 1)).c_str(),
            progress_mem_column(mem_device).value.c_str(),
            mloss[0], mloss[1], mloss[2], (long long)batch.targets.size(0), (long long)batch.images.size(3),
            (long long)((i + 1) * 100 / nb_), (long long)(i + 1), (long long)nb_, hms(t_train).c_str(),
            hms(eta).c_str(), ips);
    if (tty_) {
      std::printf("\r%s\033[K", line.c_str());
      if (i + 1 == nb_) std::printf("\n");
    } else if ((i + 1) % std::max<int64_t>(1, nb_ / 10) == 0 || i + 1 == nb_) {
      std::printf("%s\n", line.c_str());
    }
    std::fflush(stdout);
    if (!o_.noplots && ni < 3 && main_)
      io::plot_images(batch.images.to(engine::Device::cpu()), batch.targets, names_,
                      (save_dir_ / fmt("train_batch%lld.jpg", (long long)ni)).string(), Tensor(), batch.paths);
    // Every rank stops at the same step: a signal that reached some ranks stops all of them. The
    // decision is the agreed value, never a second read of g_signal: a signal landing on one rank
    // just after the agreement must wait for the next step's, or that rank alone would stop.
    bool stop_now = g_signal != 0;
    if (dp_ && dp_->world_size() > 1) stop_now = dp_->any(stop_now);
    if (stop_now && g_signal == 0) g_signal = SIGINT;
    if (stop_now || (o_.stop_after_batches > 0 && ni + 1 >= o_.stop_after_batches && i + 1 < nb_)) {
      // Mid-accumulation gradients are per rank: rank 0's checkpoint holds every rank's.
      if (dp_ && dp_->world_size() > 1) gather_rank_grads();
      if (main_) save_last(epoch - 1, i + 1, mloss);
      interrupted_exit("", epoch, i);
      return EpochEnd::Interrupted;
    }
    tw = std::chrono::steady_clock::now();
  }
  epoch_mloss_ = mloss;
  const bool stop =
      end_epoch(epoch, mloss, t_train, images_seen, seconds_since(t_epoch), std::max<int64_t>(1, i + 1 - skip), times);
  return stop ? EpochEnd::EarlyStop : EpochEnd::Next;
}

void Trainer::step(const io::Batch& batch, int64_t epoch, int64_t i, int64_t ni, std::array<double, 3>& mloss,
                   double* times) {
  auto tl = std::chrono::steady_clock::now();
  // --benchmark on CUDA: the phases queue work asynchronously, so each lap waits for the device
  // first (the split is then the device time of each phase; the synchronisations cost a little
  // throughput, which the printed img/s includes). Training itself never synchronises here.
  engine::DeviceContext* sync_ctx =
      o_.benchmark > 0 && device_.is_cuda() ? &engine::backend(device_.type).context(device_) : nullptr;
  auto lap = [&tl, sync_ctx]() {
    if (sync_ctx) sync_ctx->synchronize();
    const auto n = std::chrono::steady_clock::now();
    const double d = std::chrono::duration<double>(n - tl).count();
    tl = n;
    return d;
  };
  trace_step(ni);
  if (cpu_threads_) cpu_threads_->update();  // --cpu-threads auto: follow the other processes' load
  if (dp_) {
    // Test aid for the failure tests: Y9_FAULT_KILL=<rank>:<iteration> makes that rank SIGKILL
    // itself at the start of that iteration (a rank dying mid-run).
    static const char* fault = std::getenv("Y9_FAULT_KILL");
    if (fault && *fault) {
      int fr = -1;
      long long fi = -1;
      if (std::sscanf(fault, "%d:%lld", &fr, &fi) == 2 && fr == dp_->rank() && fi == ni) std::raise(SIGKILL);
    }
  }
  Tracer* tr = tracer_ && tracer_->active() ? tracer_.get() : nullptr;
  const int64_t t_fwd = tr ? tr->now_us() : 0;
  Tensor images = batch.images;
  if (device_.is_cuda()) {
    // Host -> device on the copy stream; the compute stream waits for it through an event. The
    // previous batch's copy finished long ago (its loss was read on the host): its pinned memory
    // may go back to the loader now.
    auto& ctx = engine::backend(engine::DeviceType::CUDA).context(device_);
    if (inflight_batch_.images.defined()) ctx.synchronize(inflight_done_);
    inflight_batch_ = batch;
    // --augment-device gpu: the loader rendered the batch on the device already.
    if (!batch.images.device().is_cuda()) images = engine::upload_async(batch.images, device_, inflight_done_);
  }
  const Tensor x = to_unit_float(images);
  if (ni <= nw_) {
    const int64_t acc = apply_warmup(*opt_, ni, nw_, sched_->lf(epoch), warmup_, o_.batch_size);
    if (o_.accumulate <= 0) accumulate_ = acc;  // --accumulate fixes it
  }
  // AMP on CUDA: the forward under autocast (official train_dual.py `with
  // torch.cuda.amp.autocast(amp)`): convolutions in FP16/BF16 with FP32 accumulation, BatchNorm
  // statistics in FP32, FP32 master weights receiving FP32 gradients through the casts. The head
  // outputs are cast to FP32 (differentiable) so that the loss runs in FP32 (official computes
  // the loss inside autocast from FP16 head outputs, with its softmax/BCE promoted to FP32 and the
  // DFL expectation matmul in FP16, spec loss.md section 8; all-FP32 here is the more accurate
  // side of that). CPU: only with --amp bf16 on a CPU with native BF16 (an extension; official
  // CPU training is FP32): the same autocast scope makes the F32 convolutions compute in BF16
  // (ops::cpu_bf16_conv, forward and backward), nothing is cast and the outputs stay F32.
  const std::optional<engine::DType> autocast = training_autocast(device_, amp_mode_);
  // The parameters stay constant until the next optimizer step (the accumulation window): frozen,
  // the CPU convolutions keep each weight in their primitives' layouts (forward and backward data)
  // instead of reordering it on every call (engine::Storage::freeze; Optimizer::step thaws them).
  // Only for windows of several batches: with a step after every batch (accumulate 1, the start
  // of the warm-up) each kept layout would serve one call, for its memory (yolov9-s: about 150 MB).
  if (weight_cache_ && accumulate_ > 1) store_->params().flat.storage()->freeze();
  graph::ModelOutput out;
  {
    std::optional<ops::AutocastGuard> ac;
    if (autocast) ac.emplace(*autocast);
    out = model_->forward(x);
  }
  if (autocast)
    for (auto& branch : out.raw)
      for (auto& level : branch) level = level.to(engine::DType::F32);
  if (dp_ && dp_->world_size() > 1 && !o_.sync_bn && flat_buffers_.flat.defined()) {
    // Official DDP broadcast_buffers: the ranks keep rank 0's BatchNorm running statistics (only
    // the running statistics: training-mode BatchNorm normalises with the batch's own), so every
    // rank's EMA and checkpoint equal rank 0's. --sync-bn computes them from the global batch on
    // every rank instead.
    Tensor b = flat_buffers_.flat;
    dp_->broadcast(b);
  }
  times[1] += lap();
  if (tr) tr->complete("forward", "compute", t_fwd, tr->now_us() - t_fwd);
  const int64_t t_loss = tr ? tr->now_us() : 0;
  ops::YoloLossResult L = ops::yolo_loss(out.raw, batch.targets, loss_cfg_);
  const auto items = L.items.to_vector<double>();
  const double total = L.total.item<double>();
  if (tr) tr->complete("loss", "compute", t_loss, tr->now_us() - t_loss);
  const bool finite = std::isfinite(items[0]) && std::isfinite(items[1]) && std::isfinite(items[2]) && std::isfinite(total);
  if (!finite && dp_ && dp_->world_size() > 1) {
    // The loss sums are all-reduced, so every rank sees this same non-finite loss: all skip the
    // step together (no backward, so no gradient collective is started anywhere).
    ++nonfinite_run_;
    std::printf("\nwarning: non-finite loss (box %g, cls %g, dfl %g) at epoch %lld batch %lld: every rank skips this "
                "step (%lld in a row)\n", items[0], items[1], items[2], (long long)epoch, (long long)i,
                (long long)nonfinite_run_);
    Y9_CHECK(nonfinite_run_ < 10, "the loss was not finite for 10 steps in a row (epoch ", epoch, " batch ", i,
             "): training diverged; lower the learning rate (hyp lr0 = ", hyp_.lr0, ") or check the labels");
    return;
  }
  nonfinite_run_ = 0;
  if (!finite) {
    std::printf("\n");
    Y9_THROW(engine::Error, "loss is not finite (box ", items[0], ", cls ", items[1], ", dfl ", items[2], ") at epoch ",
             epoch, " batch ", i, " (iteration ", ni, "); last finite loss: ",
             last_finite_ni_ < 0 ? std::string("none")
                                 : fmt("box %.4g cls %.4g dfl %.4g at iteration %lld", last_finite_[0], last_finite_[1],
                                       last_finite_[2], (long long)last_finite_ni_),
             ". Training diverged: lower the learning rate (hyp lr0 = ", hyp_.lr0, " in ", o_.hyp,
             ") or check the labels.");
  }
  last_finite_ = {items[0], items[1], items[2]};
  last_finite_ni_ = ni;
  times[2] += lap();
  const bool update = ni - last_opt_step_ >= accumulate_;
  dist::GradReducer* red = dp_ ? dp_->reducer() : nullptr;
  if (red) red->begin_backward(update);  // gradients are all-reduced only on the step that updates
  const int64_t t_bwd = tr ? tr->now_us() : 0;
  if (tr) trace_span_t0_ = trace_last_hook_ = t_bwd, trace_layer_ = -1;
  scaler_->scale(L.total).backward();  // the loss itself when AMP is off
  if (tr) trace_backward_end();
  if (red && update) {
    const int64_t t_wait = tr ? tr->now_us() : 0;
    red->finish_backward();
    if (tr) tr->complete("wait for all-reduces", "compute", t_wait, tr->now_us() - t_wait);
  }
  times[3] += lap();
  if (update) {
    const int64_t t_opt = tr ? tr->now_us() : 0;
    // Official: scaler.unscale_; clip_grad_norm_(10.0); scaler.step; scaler.update; zero_grad;
    // ema.update (also after a step the scaler skipped for inf/NaN gradients).
    const ScaledStepResult sr = scaled_optimizer_step(*scaler_, *opt_, *ema_, kClipMaxNorm);
    if (sr.stepped) {
      record_grad_norm(epoch, i, ni, sr.grad_norm);
    } else {
      ++amp_skipped_epoch_;
      std::printf("\nnotice: AMP skipped the optimizer step at epoch %lld batch %lld (inf/NaN gradients); loss "
                  "scale now %g\n", (long long)epoch, (long long)i, scaler_->get_scale());
    }
    last_opt_step_ = ni;
    if (tr) tr->complete("optimizer + EMA", "compute", t_opt, tr->now_us() - t_opt);
  }
  times[4] += lap();
  for (int k = 0; k < 3; ++k)
    mloss[static_cast<size_t>(k)] =
        (mloss[static_cast<size_t>(k)] * static_cast<double>(i) + items[static_cast<size_t>(k)]) /
        static_cast<double>(i + 1);
}

TrainValResult Trainer::validate() {
  engine::autograd::NoGradGuard ng;
  const auto ms = ema_model_->state_dict();
  const auto& es = ema_->state();
  for (size_t k = 0; k < ms.size(); ++k) Tensor(ms[k].second).copy_(es[k].second);
  // Constant through the validation: frozen, the convolution weights are reordered into their
  // primitives' layouts once, not on every batch (the next validation's copy_ thaws them).
  if (weight_cache_)
    for (auto& [name, mod] : ema_model_->named_modules())
      if (auto* c = dynamic_cast<graph::Conv2d*>(mod)) c->weight.storage()->freeze();
  if (!val_sharded_) {
    // An out-of-memory error in validation never loses the training run: the val batch is halved
    // (the rect batches rebuilt) and the validation retried, down to batch 1; if even that does not
    // fit, this epoch's validation is skipped with a warning (metrics 0) and training goes on.
    for (;;) {
      try {
        return validate_model(*ema_model_, val_ds_, val_loss_cfg_, vo_);  // prints the official table
      } catch (const engine::OutOfMemoryError& e) {
        const int b = vo_.batch_size;
        std::printf("\nWARNING ⚠️ validation ran out of %s memory at batch size %d (%s)\n",
                    device_.is_cuda() ? "device" : "host", b, e.message().substr(0, 200).c_str());
        engine::allocator_for(device_)->empty_cache();
        if (b <= 1) {
          std::printf("WARNING ⚠️ validation skipped for this epoch (metrics 0); training continues\n");
          std::fflush(stdout);
          return TrainValResult{};
        }
        val_aug_.batch_size = b / 2;
        val_ds_ = std::make_shared<const io::AugmentedDataset>(val_ds_->records(), val_aug_);
        vo_.batch_size = val_aug_.batch_size;
        std::printf("         retrying with validation batch size %d (set it with --val-batch)\n", vo_.batch_size);
        std::fflush(stdout);
      }
    }
  }
  ValOptions vo = vo_;
  vo.merge_stats = [this](ops::DetectionMetrics& m) {
    const std::vector<std::string> parts = dp_->all_gather_bytes(m.serialize());
    ops::DetectionMetrics merged(m.nc());
    for (const std::string& p : parts) merged.merge_serialized(p);
    m = std::move(merged);
  };
  TrainValResult r = validate_model(*ema_model_, val_ds_, val_loss_cfg_, vo);
  // The val losses: the mean over every rank's batches.
  std::vector<double> l = {r.box * static_cast<double>(r.batches), r.cls * static_cast<double>(r.batches),
                           r.dfl * static_cast<double>(r.batches), static_cast<double>(r.batches)};
  dp_->sum(l);
  if (l[3] > 0) r.box = l[0] / l[3], r.cls = l[1] / l[3], r.dfl = l[2] / l[3];
  r.batches = static_cast<int64_t>(l[3]);
  return r;
}

bool Trainer::end_epoch(int64_t epoch, const std::array<double, 3>& mloss, double t_train, int64_t images,
                        double t_epoch, int64_t batches, const double* times) {
  std::vector<double> lrs;
  for (const auto& g : opt_->param_groups()) lrs.push_back(g.lr);
  const bool final_epoch = epoch + 1 == o_.epochs || stopper_.possible_stop;
  TrainValResult vr;
  // Validation on rank 0 while the others wait in the broadcast below (no deadline, no spinning).
  if (val_ds_ && (main_ || val_sharded_) && (!o_.noval || final_epoch)) {
    try {
      vr = validate();
    } catch (const engine::IoError& e) {
      // A data error in validation (an image damaged after the scan; validation never substitutes
      // an image): keep the epoch's training as a data error in a batch does. The checkpoint has
      // every batch of this epoch done, so --resume runs only this validation and goes on.
      // Data-parallel: the other ranks wait in a collective, so the error ends the run (every
      // rank) and --resume continues from the last epoch checkpoint.
      if (dp_ && dp_->world_size() > 1)
        Y9_THROW(engine::IoError, e.message(), "\nData error in validation after epoch ", epoch, " on rank ",
                 dp_->rank(), "; fix the data, then continue with --resume (from the last epoch checkpoint)");
      save_last(epoch - 1, nb_, mloss);
      const std::string last = (wdir_ / "last.safetensors").string();
      Y9_THROW(engine::IoError, e.message(), "\nData error in validation after epoch ", epoch, ": saved ", last,
               " (all ", nb_, " batches of this epoch done); fix the data, then continue with: yolov9 train --resume ",
               last);
    }
  }
  // The official order steps the scheduler before validation; validation does not read the lr, and
  // stepping after it keeps the data-error checkpoint above the same as a stop after the last batch.
  sched_->step();
  const double fi = vr.fitness();
  bool stop = stopper_(epoch, fi);
  if (dp_) {
    // Rank 0's decision and early-stopping state for every rank (official: broadcast_object_list).
    double st[4] = {stop ? 1.0 : 0.0, stopper_.best_fitness, static_cast<double>(stopper_.best_epoch),
                    stopper_.possible_stop ? 1.0 : 0.0};
    if (dp_->world_size() > 1) dp_->comm().broadcast(st, sizeof st, 0);
    stop = st[0] != 0.0;
    stopper_.best_fitness = st[1];
    stopper_.best_epoch = static_cast<int64_t>(st[2]);
    stopper_.possible_stop = st[3] != 0.0;
  }
  if (fi > best_fitness_) best_fitness_ = fi;
  const double gn_mean = grad_norm_steps_ > 0 ? grad_norm_sum_ / static_cast<double>(grad_norm_steps_) : NAN;
  if (main_) {
    log_csv(epoch, {mloss[0], mloss[1], mloss[2], vr.p, vr.r, vr.map50, vr.map, vr.box, vr.cls, vr.dfl, lrs[0],
                    lrs[1], lrs[2], gn_mean});
    if (!o_.noplots) io::plot_grad_norm(grad_norm_csv_.string(), (save_dir_ / "grad_norm.png").string(), kClipMaxNorm);
    if (o_.plot_features > 0 && (epoch % o_.plot_features == 0 || final_epoch || stop)) plot_features(epoch);
  }
  const bool finished = final_epoch && (epoch + 1 == o_.epochs || stop);
  if (main_ && (!o_.nosave || final_epoch || stop)) {
    // last.safetensors is the commit point of the epoch: written after best and epochN, before
    // results.csv. A crash anywhere before it repeats the epoch from the previous checkpoint (the
    // same files again); a crash after it loses only the file copy of the row, which the
    // checkpoint holds (setup_csv).
    const io::Checkpoint ck = make_checkpoint(epoch, 0, mloss, finished || stop);
    if (best_fitness_ == fi) io::save_checkpoint((wdir_ / "best.safetensors").string(), ck);
    if (o_.save_period > 0 && epoch % o_.save_period == 0)
      io::save_checkpoint((wdir_ / fmt("epoch%lld.safetensors", (long long)epoch)).string(), ck);
    io::save_checkpoint((wdir_ / "last.safetensors").string(), ck);
  }
  if (main_) write_csv();
  std::printf("epoch %lld/%lld: train box %.4g cls %.4g dfl %.4g | val box %.4g cls %.4g dfl %.4g | P %.3g R %.3g "
              "mAP50 %.3g mAP50-95 %.3g | fitness %.4g (best %.4g) | lr %.3g | grad norm %.4g | %.1fs, %.1f img/s\n",
              (long long)epoch, (long long)(o_.epochs - 1), mloss[0], mloss[1], mloss[2], vr.box, vr.cls, vr.dfl, vr.p,
              vr.r, vr.map50, vr.map, fi, best_fitness_, lrs[1], gn_mean, t_epoch,
              t_train > 0 ? static_cast<double>(images) / t_train : 0.0);
  if (scaler_ && scaler_->enabled())
    std::printf("  AMP (%s): %lld optimizer steps skipped this epoch (inf/NaN gradients), %lld in all; loss scale %g\n",
                amp_mode_name(amp_mode_), (long long)amp_skipped_epoch_, (long long)scaler_->skipped_steps(),
                scaler_->get_scale());
  const double nbd = static_cast<double>(batches);
  std::printf("  time per batch: data wait %.0f ms, forward %.0f ms, loss %.0f ms, backward %.0f ms, "
              "optimizer+EMA %.0f ms\n", 1e3 * times[0] / nbd, 1e3 * times[1] / nbd, 1e3 * times[2] / nbd,
              1e3 * times[3] / nbd, 1e3 * times[4] / nbd);
  if (dist::GradReducer* red = dp_ ? dp_->reducer() : nullptr) {
    // Data wait and compute are above; communication: the bucket all-reduces (overlapping
    // backward) and the part the training thread waited for.
    const dist::ReducerStats rs = red->stats();
    std::printf("  communication per batch: all-reduce %.0f ms (%.1f MiB in %lld bucket reductions, %.0f MB/s), "
                "exposed (waited for after backward) %.0f ms\n",
                1e3 * rs.comm_s / nbd, static_cast<double>(rs.bytes) / 1048576.0, (long long)rs.reductions,
                rs.comm_s > 0 ? static_cast<double>(rs.bytes) / rs.comm_s / 1e6 : 0.0, 1e3 * rs.wait_s / nbd);
    red->reset_stats();
  }
  std::fflush(stdout);
  return stop;
}

// --- tracing (--trace) -----------------------------------------------------------------------------

// The traced window: 4 iterations from the third of the run (the first ones warm caches up).
void Trainer::trace_step(int64_t ni) {
  if (!tracer_) return;
  if (trace_begin_ < 0) {
    trace_begin_ = ni + std::min<int64_t>(2, std::max<int64_t>(0, nb_ - 1));
    trace_end_ = trace_begin_ + 4;
  }
  if (ni == trace_begin_) tracer_->set_active(true);
  if (ni == trace_end_ && tracer_->active()) {
    tracer_->set_active(false);
    if (main_) {
      tracer_->write(o_.trace);
      std::printf("\ntrace: wrote %s (%zu events, iterations %lld-%lld; open it in chrome://tracing or "
                  "ui.perfetto.dev)\n", o_.trace.c_str(), tracer_->size(), (long long)trace_begin_,
                  (long long)trace_end_ - 1);
    }
  }
}

// Backward spans per layer: the span of layer L ends at its last gradient.
void Trainer::trace_grad_ready(int layer) {
  if (!tracer_ || !tracer_->active()) return;
  const int64_t now = tracer_->now_us();
  if (layer != trace_layer_) {
    if (trace_layer_ >= 0 || trace_last_hook_ > trace_span_t0_) {
      tracer_->complete(fmt("backward model.%d", trace_layer_), "compute", trace_span_t0_,
                        trace_last_hook_ - trace_span_t0_);
      trace_span_t0_ = trace_last_hook_;
    }
    trace_layer_ = layer;
  }
  trace_last_hook_ = now;
}

void Trainer::trace_backward_end() {
  if (!tracer_ || !tracer_->active()) return;
  if (trace_layer_ >= 0)
    tracer_->complete(fmt("backward model.%d", trace_layer_), "compute", trace_span_t0_,
                      tracer_->now_us() - trace_span_t0_);
  trace_layer_ = -1;
}

}  // namespace training
