// `yolov9 train`: the train_dual.py flags bound to training::TrainOptions, and a training::Trainer
// run (apps/training/trainer.h holds the training loop).
#include "apps/train.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/training/dist/launch.h"
#include "apps/training/option_checks.h"
#include "apps/training/trainer.h"

namespace apps {

namespace {
// This process's command line (/proc/self/cmdline), for spawning one rank per device.
std::vector<std::string> process_argv() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  size_t i = 0;
  while (i < all.size()) {
    const size_t j = all.find('\0', i);
    out.push_back(all.substr(i, j == std::string::npos ? std::string::npos : j - i));
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return out;
}
}  // namespace

void register_train(CLI::App& app) {
  static training::TrainOptions o;  // CLI11 binds options to storage that outlives parsing
  static CLI::App* sub_ptr = nullptr;
  static std::string evolve_s, cache_s, upload_s, amp_s;
  static bool no_amp = false;
  add_command(
      app, "train", "train a model (official train_dual.py flags)",
      [](CLI::App& sub) {
        sub_ptr = &sub;
        sub.add_option("--weights", o.weights, "initial weights (.safetensors checkpoint); empty = from scratch");
        sub.add_option("--cfg", o.cfg, "model YAML (path or name under configs/models)")->capture_default_str();
        sub.add_option("--data", o.data, "dataset YAML")->capture_default_str();
        sub.add_option("--hyp", o.hyp, "hyper-parameter YAML (path or name under configs/hyps)")->capture_default_str();
        sub.add_option("--epochs", o.epochs, "total training epochs")
            ->check(CLI::Range(int64_t{1}, training::kMaxEpochs))
            ->capture_default_str();
        sub.add_option("--batch-size,--batch", o.batch_size, "total batch size (-1: AutoBatch, the batch filling ~80% of the GPU memory; 16 on the CPU)")
            ->check(CLI::Range(int64_t{-1}, training::kMaxBatchSize))
            ->capture_default_str();
        sub.add_option("--imgsz,--img,--img-size", o.imgsz, "train, val image size (pixels)")
            ->check(CLI::Range(int64_t{1}, training::kMaxImgSize))
            ->capture_default_str();
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
        sub.add_flag("--sync-bn", o.sync_bn, "SyncBatchNorm across data-parallel ranks (also on CPU ranks)");
        sub.add_option("--workers", o.workers, "max dataloader workers")
            ->check(CLI::Range(int64_t{0}, int64_t{1024}))
            ->capture_default_str();
        sub.add_option("--augment-device", o.augment_device,
                       "where training augmentation runs: cpu or gpu (default: gpu when training on CUDA)")
            ->check(CLI::IsMember({"cpu", "gpu"}));
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
        sub.add_option("--freeze", o.freeze, "freeze layers: backbone=10, first3=0 1 2")
            ->expected(1, -1)
            ->check(CLI::Range(int64_t{0}, int64_t{100000}));
        sub.add_option("--save-period", o.save_period, "save checkpoint every x epochs (disabled if < 1)");
        sub.add_option("--seed", o.seed, "global training seed")->capture_default_str();
        sub.add_option("--local_rank,--local-rank", o.local_rank,
                       "automatic DDP multi-GPU argument (ignored: the launcher's environment gives the rank)");
        sub.add_option("--min-items", o.min_items, "drop images with fewer labels");
        sub.add_option("--close-mosaic", o.close_mosaic, "disable mosaic for the final N epochs")
            ->check(CLI::Range(int64_t{0}, training::kMaxEpochs));
        sub.add_option("--entity", o.entity, "W&B entity (ignored)");
        sub.add_option("--upload_dataset", upload_s, "W&B upload (ignored)")->expected(0, 1);
        sub.add_option("--bbox_interval", o.bbox_interval, "W&B bbox interval (ignored)");
        sub.add_option("--artifact_alias", o.artifact_alias, "W&B artifact alias (ignored)");
        sub.add_option("--cpu-threads", o.cpu_threads,
                       "OpenMP threads of CPU training: N, or auto (fewer while other processes keep the CPUs busy; "
                       "not with --deterministic); default: OpenMP's count");
        sub.add_flag("--deterministic", o.deterministic,
                     "bitwise reproducible run (fixed-order reductions; also needed for exact --resume)");
        sub.add_option("--nbs", o.nbs,
                       "nominal batch size: gradients are accumulated over ~nbs images per optimizer step and "
                       "weight decay is scaled by batch*accumulate/nbs (official constant 64)")
            ->capture_default_str();
        sub.add_flag("--fp32-init", o.fp32_init, "skip the official FP16 rounding of the initial weights");
        sub.add_option("--accumulate", o.accumulate,
                       "fixed gradient accumulation: update every N steps (0 = the nominal-batch rule, ~nbs images "
                       "per update)")
            ->capture_default_str();
        sub.add_option("--allreduce", o.allreduce,
                       "data-parallel gradient all-reduce: ring (ours: ring, or halving-doubling for small buckets), "
                       "ring-only, hd (ours, one algorithm forced) or nccl (the library's: ncclAllReduce on GPUs, "
                       "MPI_Allreduce on CPUs)")
            ->capture_default_str();
        sub.add_option("--bucket-mb", o.bucket_mb, "gradient bucket cap in MiB (the first bucket is 1 MiB)")
            ->capture_default_str();
        sub.add_option("--grad-dtype", o.grad_dtype, "gradient payload on the wire: fp32, fp16 or bf16 (FP32 sums)")
            ->capture_default_str();
        sub.add_option("--master-port", o.master_port,
                       "rendezvous port for --device 0,1,...: one process per GPU (0 = pick a free port)");
        sub.add_option("--val-batch", o.val_batch,
                       "batch size of the validation during training (0: twice the per-rank --batch, as "
                       "officially); an out-of-memory in validation halves it and retries")
            ->check(CLI::Range(int64_t(0), int64_t(1) << 20))
            ->capture_default_str();
        sub.add_flag("--val-distributed", o.val_distributed,
                     "shard validation across the data-parallel ranks instead of validating on rank 0");
        sub.add_option("--trace", o.trace,
                       "write a Chrome-trace JSON of a few training steps (forward, backward per layer, bucket "
                       "all-reduces, optimizer) to this file");
        sub.add_option("--plot-features", o.plot_features,
                       "every N epochs (and the last), write the EMA model's feature-map grids of the first val "
                       "image to features/epoch<E>/ (as detect --visualize); 0 = off")
            ->capture_default_str();
        sub.add_option("--amp", amp_s,
                       "mixed precision: --amp (FP16 with dynamic loss scaling, the official default on CUDA) or "
                       "--amp bf16; CUDA, and --amp bf16 on a CPU with native BF16 (AVX512_BF16/AMX: BF16 "
                       "convolutions, an extension; otherwise ignored with a notice on the CPU)")
            ->expected(0, 1);
        sub.add_flag("--no-amp", no_amp, "train in FP32 even on CUDA");
        sub.add_option("--benchmark", o.benchmark,
                       "measure: run 3 warm-up steps then N timed steps, print images/s, ms per step (data wait, "
                       "forward, loss, backward, optimizer) and peak memory, then exit (no validation, no "
                       "checkpoints)");
        sub.add_option("--benchmark-data", o.benchmark_data,
                       "--benchmark input: real (the data loader, augmentation included) or synthetic (the first "
                       "batch repeated: no data wait)")
            ->check(CLI::IsMember({"real", "synthetic"}))
            ->capture_default_str();
        sub.add_option("--stop-after-batches", o.stop_after_batches,
                       "testing: behave as if interrupted after N iterations (saves last, exits 0)")
            ->group("");
      },
      []() {
        if (sub_ptr->count("--evolve")) {
          char* end = nullptr;
          const long long g = evolve_s.empty() ? 300 : std::strtoll(evolve_s.c_str(), &end, 10);
          if (!evolve_s.empty() && (end == evolve_s.c_str() || *end != '\0' || g < 0)) {
            std::fprintf(stderr, "--evolve: '%s' is not a number of generations\n", evolve_s.c_str());
            return 2;
          }
          o.evolve = g;
        }
        if (sub_ptr->count("--cache")) o.cache = cache_s.empty() ? "ram" : cache_s;
        if (sub_ptr->count("--amp") && no_amp) {
          std::fprintf(stderr, "--amp and --no-amp exclude each other\n");
          return 2;
        }
        if (sub_ptr->count("--amp")) o.amp = amp_s.empty() ? "fp16" : amp_s;
        if (no_amp) o.amp = "off";
        if (sub_ptr->count("--upload_dataset")) o.upload_dataset = upload_s.empty() ? "True" : upload_s;
        // `--device 0,1,2,3` (official: one process per listed GPU) or `--device cpu:0,cpu:1` (one
        // CPU process per item): spawn the ranks, unless this process already is one (a launcher
        // set RANK / the MPI variables). A CUDA index that cannot be used is an error here, before
        // anything is spawned.
        if (o.benchmark != 0 && sub_ptr->count("--resume")) {
          std::fprintf(stderr, "--benchmark measures a fresh run; it cannot be combined with --resume\n");
          return 2;
        }
        training::check_device_option(o.device);
        const auto devices = training::dist::parse_device_list(o.device);
        if (devices.size() > 1 && training::dist::detect_launch().launcher == training::dist::Launcher::Single)
          return training::dist::spawn_local_ranks(process_argv(), devices, static_cast<int>(o.master_port));
        training::Trainer trainer(o, sub_ptr->count("--resume") > 0);
        return trainer.run();
      });
}

}  // namespace apps
