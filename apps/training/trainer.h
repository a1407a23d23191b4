// The training run of the official train_dual.py / train.py (WongKinYiu/yolov9 5b1ea9a;
// shared/spec/train.md) as a Trainer with named steps: set-up (run folder, hyp, data, model,
// flat parameter store, optimizer, schedule, EMA, loaders, resume), then per epoch the steps
// (warm-up, forward, loss, backward, accumulation, clipping, optimizer, EMA), validation on the
// EMA weights, results.csv and checkpoints. Deviations from the official code are marked
// "Deviation:" in trainer.cpp. `yolov9 train` (apps/train.cpp) parses the flags into
// TrainOptions and runs a Trainer.
#pragma once
#include <nlohmann/json.hpp>

#include <array>
#include <exception>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "apps/training/cpu_threads.h"
#include "apps/training/dist/data_parallel.h"
#include "apps/training/ema.h"
#include "apps/training/grad_scaler.h"
#include "apps/training/optim.h"
#include "apps/training/option_checks.h"
#include "apps/training/param_store.h"
#include "apps/training/schedule.h"
#include "apps/training/trace.h"
#include "apps/training/train_val.h"
#include "graph/model.h"
#include "io/augment.h"
#include "io/checkpoint.h"
#include "io/data_yaml.h"
#include "io/dataset.h"
#include "io/hyp.h"
#include "io/loader.h"
#include "io/torch_pt.h"
#include "ops/yolo_loss.h"

namespace training {

/// Options of a training run; names as train_dual.py's argparse destinations, so opt.yaml reads
/// like the official one. Fields after "Ours" are this engine's.
struct TrainOptions {
  std::string weights;
  std::string cfg = "yolo.yaml";
  std::string data = "data/coco.yaml";
  std::string hyp = "hyp.scratch-high.yaml";
  int64_t epochs = 100;
  int64_t batch_size = 16;
  int64_t imgsz = 640;
  bool rect = false;
  std::string resume;  ///< path given to --resume ("" with the flag alone = latest run)
  bool nosave = false, noval = false, noautoanchor = false, noplots = false;
  int64_t evolve = 0;  ///< 0 = off
  std::string bucket;
  std::string cache;
  bool image_weights = false;
  std::string device;
  bool multi_scale = false, single_cls = false;
  std::string optimizer = "SGD";
  bool sync_bn = false;
  int64_t workers = 8;
  /// --augment-device: where the per-pixel augmentation runs: "cpu" (loader workers), "gpu" (the
  /// training CUDA device: io::LoaderOptions::AugmentDevice::Gpu) or "" = gpu when training on
  /// CUDA, else cpu. The batches are the same either way (within 1 grey level by contract).
  std::string augment_device;
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
  int64_t nbs = 64;                ///< nominal batch size (official constant 64)
  int64_t stop_after_batches = 0;  ///< hidden, tests: behave as if interrupted after N iterations
  int64_t benchmark = 0;           ///< --benchmark N: N timed steps after 3 warm-up steps, a report, exit
  std::string benchmark_data = "real";  ///< --benchmark-data: real (the loader) or synthetic (one batch repeated)
  int64_t plot_features = 0;       ///< > 0: feature-map grids of one fixed val image every N epochs
  std::string save_dir;
  // Data-parallel training (apps/training/dist/; docs/distributed.md).
  int64_t accumulate = 0;          ///< --accumulate: fixed gradient accumulation (0: the official nbs rule)
  std::string allreduce = "ring";  ///< --allreduce: ring (ours) or nccl (the library's)
  double bucket_mb = 25.0;         ///< --bucket-mb: gradient bucket cap (MiB; the first is 1 MiB)
  std::string grad_dtype = "fp32"; ///< --grad-dtype: gradient payload on the wire (fp32, fp16, bf16)
  int64_t master_port = 0;         ///< --master-port: rendezvous port of --device 0,1,.. (0: a free one)
  bool val_distributed = false;    ///< --val-distributed: validation sharded across the ranks
  /// --val-batch: batch size of the validation during training (0: twice the per-rank batch, as
  /// the official train_dual.py fixes it; WongKinYiu/yolov9 #459: users hit out-of-memory there).
  int64_t val_batch = 0;
  std::string trace;               ///< --trace FILE: Chrome-trace JSON of a few steps
  /// --cpu-threads: "" (OpenMP's thread count), N (that many OpenMP threads), or auto (the count
  /// follows the load of other processes between steps on the CPU; apps/training/cpu_threads.h).
  std::string cpu_threads;
  /// Mixed precision: "auto" (official: AMP iff training on CUDA), "fp16" (--amp), "bf16"
  /// (--amp bf16), "off" (--no-amp). AMP is CUDA-only in the official code: on the CPU it stays
  /// off (a notice when forced), except "bf16" on a CPU with native BF16, which runs the
  /// convolutions in BF16 (resolve_amp_mode).
  std::string amp = "auto";
};

/// TrainOptions <-> JSON (opt.yaml, checkpoint metadata "opt"); every field, in declaration order.
nlohmann::ordered_json options_to_json(const TrainOptions& o);
TrainOptions options_from_json(const nlohmann::json& j);

/// Official utils/torch_utils.py EarlyStopping.
struct EarlyStopping {
  double best_fitness = 0.0;
  int64_t best_epoch = 0;
  int64_t patience = 100;  ///< 0 -> never
  bool possible_stop = false;
  /// Records `fitness` of `epoch`; true when training should stop (prints the official message).
  bool operator()(int64_t epoch, double fitness);
};

/// One training run. Construction performs the whole set-up and prints what the official script
/// prints up to "Starting training"; run() trains. Not copyable. Errors (engine::ConfigError,
/// IoError, ShapeError, ...) name the file, flag or value at fault (a damaged checkpoint: the key).
/// Nothing is lost: checkpoints, plots and results.csv are replaced atomically, last.safetensors
/// (written after best/epochN, before results.csv) holds results.csv as of its epoch, and
/// SIGINT/SIGTERM (a second one kills at once), a data error in mid-epoch or --stop-after-batches
/// leave a resumable last.safetensors. Resume continues in the run folder recorded in the
/// checkpoint, restores results.csv to the checkpoint's epochs, removes temporaries of dead
/// processes and warns when the training data changed (label-cache hash).
class Trainer {
 public:
  /// `resume`: continue the run of o.resume (a checkpoint or a run folder), or when empty of the
  /// newest run folder under the parent of o.project (refused when that run has no checkpoint),
  /// reloading its options.
  Trainer(TrainOptions o, bool resume);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Trains the remaining epochs. Returns the process exit code: 0 when done (or stopped by
  /// --stop-after-batches / early stopping), 128 + signal when interrupted by SIGINT or SIGTERM.
  /// Installs its SIGINT / SIGTERM / SIGUSR1 handlers for the run and restores the previous ones
  /// on return; when it throws, those signals are left recorded and ignored instead, so that the
  /// caller prints the error before a launcher's SIGTERM can end the process (the CLI then exits).
  int run();

  const std::filesystem::path& save_dir() const { return save_dir_; }

 private:
  // --- set-up steps (in the official order) ---
  void setup_distributed();
  void setup_resume();
  /// setup_resume of an official train_dual.py last.pt: rck_ gets the model, EMA and metadata
  /// of our own checkpoints (options from the run's opt.yaml, else ckpt['opt']), pt_optim_ the
  /// torch.optim state (mapped onto our parameters in setup_resume_state).
  void setup_resume_pt(const TrainOptions& cli);
  void setup_notices();
  void setup_run_dir();
  void setup_csv();
  void setup_hyp();
  void setup_data();
  void setup_model();
  /// --batch -1: the official AutoBatch (apps/training/autobatch.h) sets o_.batch_size.
  void setup_autobatch();
  void setup_optimizer();
  void setup_resume_state();
  void setup_loaders();
  void setup_last();
  // --- the run ---
  int run_epochs();
  /// Data-parallel: prints `e` naming this rank and aborts every rank (no-op when alone).
  void end_world_on_error(const std::exception& e);
  enum class EpochEnd { Next, EarlyStop, Interrupted, BenchmarkDone };
  /// One epoch of steps, then end_epoch. Interrupted: the mid-epoch checkpoint is written.
  EpochEnd run_epoch(int64_t epoch);
  /// One iteration: warm-up, forward, loss, backward, optimizer step when accumulated.
  void step(const io::Batch& batch, int64_t epoch, int64_t i, int64_t ni, std::array<double, 3>& mloss,
            double* times);
  /// Validation of the EMA weights (official val_dual.run on ema.ema).
  TrainValResult validate();
  /// End of an epoch: schedule, validation, fitness, results.csv, checkpoints. True to stop.
  bool end_epoch(int64_t epoch, const std::array<double, 3>& mloss, double t_train, int64_t images, double t_epoch,
                 int64_t batches, const double* times);
  io::Checkpoint make_checkpoint(int64_t epoch_done, int64_t next_batch, const std::array<double, 3>& mloss,
                                 bool finished) const;
  void save_last(int64_t epoch_done, int64_t next_batch, const std::array<double, 3>& mloss) const;
  /// Data-parallel, before a mid-epoch checkpoint: every rank's gradient buffer into rank_grads_
  /// (collective).
  void gather_rank_grads();
  /// Tracing (--trace): starts and ends the traced window; backward spans per layer.
  void trace_step(int64_t ni);
  void trace_grad_ready(int layer);
  void trace_backward_end();
  /// grad_norm.csv row of one optimizer step and the running epoch mean (results.csv grad_norm).
  void record_grad_norm(int64_t epoch, int64_t i, int64_t ni, double norm);
  /// --plot-features: the EMA model's feature grids of the fixed image, features/epoch<E>/.
  void plot_features(int64_t epoch);
  /// Appends the row of `epoch` (and the header first) to csv_text_.
  void log_csv(int64_t epoch, const std::vector<double>& vals);
  /// Replaces results.csv with csv_text_ atomically.
  void write_csv() const;
  /// The "Interrupted ... continue with" line and the plots after an interruption; returns the
  /// exit code.
  int interrupted_exit(const char* when, int64_t epoch, int64_t batch) const;

  TrainOptions o_;
  bool resume_;
  std::string resume_path_;
  io::Checkpoint rck_;
  bool pt_resume_ = false;       ///< resuming an official .pt (optimizer state in pt_optim_)
  io::PtOptimizerState pt_optim_;
  std::filesystem::path save_dir_, wdir_, csv_;
  io::Hyp hyp_;
  io::DataConfig dcfg_;
  int64_t nc_ = 0;
  std::vector<std::string> names_;
  io::ScanResult train_scan_, val_scan_;
  bool have_val_ = false;

  std::shared_ptr<graph::Model> model_, ema_model_;
  int64_t imgsz_ = 0, gs_ = 32;
  ops::YoloLossConfig loss_cfg_;
  std::unique_ptr<ParamStore> store_;
  engine::FlatBuffer flat_buffers_;  ///< the model's floating buffers (BatchNorm statistics), packed
  std::unique_ptr<Optimizer> opt_;
  std::unique_ptr<LambdaLR> sched_;
  std::unique_ptr<ModelEMA> ema_;
  /// Dynamic loss scaling (torch.cuda.amp.GradScaler); disabled (a pass-through) unless FP16 AMP
  /// is on. Not saved in checkpoints (official train_dual.py does not save it).
  std::unique_ptr<GradScaler> scaler_;
  AmpMode amp_mode_ = AmpMode::Off;
  /// Where the model, its training state and the loss run: the CPU, or cuda:<i> for --device <i>
  /// (one process). Batches stay on the host until step() uploads them.
  engine::Device device_ = engine::Device::cpu();
  /// The batch whose images are being uploaded (CUDA): its pinned host memory must not return to
  /// the loader before `inflight_done_` completes.
  io::Batch inflight_batch_;
  engine::Event inflight_done_;
  int64_t amp_skipped_epoch_ = 0;  ///< optimizer steps the scaler skipped this epoch
  /// --benchmark: steps run so far (across epochs), the clocks at the end of the warm-up.
  int64_t bench_steps_ = 0;
  double bench_t0_ = 0, bench_times0_[5] = {0, 0, 0, 0, 0};
  int64_t bench_images0_ = 0;
  io::Batch bench_batch_;  ///< --benchmark-data synthetic: the batch repeated
  /// Prints the --benchmark report (img/s, ms per step split, peak memory).
  void print_benchmark(double t_train, const double* times, int64_t images, int64_t batch, int64_t imgsz) const;
  OptimizerKind opt_kind_ = OptimizerKind::SGD;
  int64_t accumulate_ = 1;
  /// Y9_CPU_WEIGHT_CACHE: freeze the flat parameters through accumulation windows of several
  /// batches (step()) and the EMA model's convolution weights through a validation.
  bool weight_cache_ = false;
  WarmupHyp warmup_;

  int64_t start_epoch_ = 0, skip_batches_ = 0, last_opt_step_ = -1;
  double best_fitness_ = 0.0;
  std::array<double, 3> mloss_resume_{0, 0, 0};
  EarlyStopping stopper_;

  int workers_ = 0;
  std::shared_ptr<const io::AugmentedDataset> train_ds_, val_ds_;
  std::unique_ptr<io::DataLoader> train_loader_;
  ValOptions vo_;
  int64_t nb_ = 0, nw_ = 0;
  std::string cfg_text_;   ///< the model YAML text (saved in checkpoints as cfg_yaml)
  std::string csv_text_;   ///< results.csv as it must be on disk (saved in checkpoints as results_csv)
  bool tty_ = false;
  std::array<double, 3> epoch_mloss_{0, 0, 0};  ///< mean losses of the last epoch run
  std::array<double, 3> last_finite_{0, 0, 0};
  int64_t last_finite_ni_ = -1;

  // Data parallelism (null when the process runs alone) and tracing.
  std::unique_ptr<dist::DataParallel> dp_;
  bool main_ = true;          ///< rank 0 (or alone): logs, plots, validates, writes checkpoints
  int64_t batch_rank_ = 0;    ///< this rank's batch (--batch / world size)
  int64_t nonfinite_run_ = 0; ///< consecutive non-finite steps skipped (data-parallel)
  ops::YoloLossConfig val_loss_cfg_;  ///< the loss of validation (this process's batches only)
  bool val_sharded_ = false;          ///< --val-distributed: val_ds_ is this rank's shard
  io::AugmentOptions val_aug_;        ///< val_ds_'s options (rebuilt with a halved batch after an OOM)
  std::vector<Tensor> rank_grads_;    ///< every rank's accumulated gradients for a mid-epoch checkpoint
  std::unique_ptr<Tracer> tracer_;
  std::unique_ptr<CpuThreadGovernor> cpu_threads_;  ///< --cpu-threads auto on the CPU, else null
  int64_t trace_begin_ = -1, trace_end_ = -1;  ///< traced iterations [begin, end)
  int trace_layer_ = -1;
  int64_t trace_span_t0_ = 0, trace_last_hook_ = 0;
  std::filesystem::path grad_norm_csv_;    ///< per-step norms before clipping (io/grad_norm_log.h)
  double grad_norm_sum_ = 0;               ///< this epoch's steps (from grad_norm.csv after a resume)
  int64_t grad_norm_steps_ = 0;
  std::string feature_image_;              ///< --plot-features: the first val (else train) image
};

}  // namespace training
