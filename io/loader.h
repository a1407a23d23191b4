// DataLoader: persistent worker threads producing collated batches into a bounded prefetch queue
// that runs across epoch boundaries (the official InfiniteDataLoader), optional pinned host
// memory, and the distributed sampler. Collate matches the official collate_fn
// (utils/dataloaders.py, WongKinYiu/yolov9 5b1ea9a): images uint8 NCHW RGB, targets
// [image_index, class, cx, cy, w, h].
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/allocator.h"
#include "engine/backend.h"
#include "engine/tensor.h"
#include "io/augment.h"
#include "io/batch.h"

namespace io {

/// Indices of one rank for one epoch (torch DistributedSampler semantics): a permutation of
/// [0, n) seeded by (seed, epoch) when `shuffle`, padded by repeating its head to a multiple of
/// world_size, then every world_size-th element from `rank`. Equal length on every rank.
/// Throws engine::Error when rank is not in [0, world_size).
std::vector<int64_t> distributed_indices(int64_t n, int rank, int world_size, bool shuffle, uint64_t seed, int epoch);

struct LoaderOptions {
  int batch_size = 16;
  int workers = 2;          ///< 0 = produce batches on the calling thread (inside next())
  /// Batches produced (or being produced) ahead of the consumer, all epochs together. Each
  /// worker makes a whole batch, so this also bounds how many workers are busy. 0 (the default):
  /// 2 per worker, at least 4 (PyTorch DataLoader's prefetch_factor = 2, which the official
  /// loader uses); a fixed 4 kept 12 of 16 workers idle on the lent H200 (225 images/s at 640 px).
  int prefetch = 0;
  bool shuffle = true;      ///< ignored (false) in rect mode, as officially
  uint64_t seed = 0;
  int rank = 0, world_size = 1;
  bool drop_last = false;
  /// Number of epochs of the run: workers never produce a batch of an epoch >= epochs (no
  /// prefetch past the last epoch). 0 = unbounded.
  int epochs = 0;
  /// Batch images and targets in page-locked host memory (engine::pinned_host_allocator())
  /// when a CUDA device is usable, for faster host->device copies (official PIN_MEMORY default
  /// True). Without a usable GPU: ordinary CPU memory, silently.
  bool pin_memory = true;
  /// Where the per-pixel augmentation runs (--augment-device). Cpu: the workers render every
  /// sample (AugmentedDataset::get + finish_to_planes) and Batch::images is a host tensor. Gpu:
  /// the workers draw the same plans (get(..., pixels = false): the same labels), decode the
  /// tiles into host (pinned) memory, and next() uploads them and renders the batch on `device`
  /// with one letterbox launch (non-mosaic samples, if any) and one augment_warp launch
  /// (kernels/common/augment.h): Batch::images is then a [B, 3, H, W] U8 RGB tensor on `device`
  /// whose bytes equal the CPU path's (io/augment_device.h; within 1 grey level by contract,
  /// bitwise on coco128 in tests/io/augment_cuda_test.cpp). Targets stay on the host.
  enum class AugmentDevice { Cpu, Gpu };
  AugmentDevice augment_device = AugmentDevice::Cpu;
  engine::Device device = engine::Device::cpu();  ///< the CUDA device of AugmentDevice::Gpu
};


/// Collates finished samples (H x W x 3 uint8 BGR, all the same size; paths[i] belongs to
/// samples[i]) into a Batch (official collate_fn): images [B, 3, H, W] uint8 RGB, targets
/// [N, 6] F32 [image_index, class, cx, cy, w, h]. Images and targets are allocated from
/// `allocator` (a CPU-memory allocator, e.g. engine::pinned_host_allocator()) or, when nullptr,
/// as ordinary CPU tensors. Throws engine::ShapeError on mixed sizes, an empty batch or a
/// paths/samples count mismatch.
Batch collate(const std::vector<Sample>& samples, const std::vector<std::string>& paths,
              engine::Allocator* allocator = nullptr);

/// Counters of a DataLoader's production (for tests and diagnostics).
struct LoaderStats {
  int64_t claimed = 0;          ///< batches whose production started (each calls dataset get() per sample)
  int64_t discarded = 0;        ///< claimed batches thrown away by a restarting start_epoch()
  int max_epoch_claimed = -1;   ///< highest epoch a batch was claimed for (-1: none yet)
};

/// Multi-threaded loader with persistent workers (official InfiniteDataLoader, utils/dataloaders.py).
///
/// Batch b of epoch e holds samples order[b*B, (b+1)*B) of distributed_indices(..., e), each
/// from AugmentedDataset::get(index, e): a pure function of (seed, e, index), so batches are
/// identical whatever `workers`, `prefetch` or thread timing. Each sample is produced with its
/// per-pixel ops deferred (get(index, e, &ops)) and finished by io::finish_to_planes while it is
/// written into the batch planes: byte-identical to collate() of the finished get(index, e).
///
/// Threads: `workers` threads are created by the first start_epoch() and live until the
/// destructor, which stops them promptly (a worker abandons its batch between two samples) and
/// joins them. Once every batch of the epoch being produced has been claimed, workers go on
/// with the next epoch (up to LoaderOptions::epochs), so the pipeline does not drain at epoch
/// boundaries; at most `prefetch` batches are claimed but not yet taken by next(), across epochs.
///
/// Unreadable images while training (AugmentedDataset::options().augment): an image that fails
/// to decode when its sample is produced (engine::IoError: the file was damaged, emptied or
/// removed after the scan, which drops what is unreadable then) gets one warning naming the file
/// ("WARNING <message>: sample replaced by <path>", once per message, on stdout, naming the sample
/// that was read in its place), and its sample
/// is replaced, not lost: the sample of dataset index (index + k) % n (k = 1, 2, ...; in rect
/// mode, whose shapes are per batch, the next sample of the same batch, cyclically) takes its
/// place with its own seeded draws, so the batch keeps its size and the CPU and GPU paths
/// (--augment-device) make the same choice. After 8 failed replacements (or none possible) the
/// sample's own error is thrown as below (training then stops with a resumable checkpoint). Validation (augment off) never replaces: an image counted twice
/// would change the metrics.
///
/// Errors: an exception thrown while producing batch b of epoch e (e.g. engine::IoError for an
/// unreadable image) is stored in place of that batch and rethrown by the next() call that would
/// have returned it: every earlier batch of e is delivered first, the failed batch counts as
/// consumed (a caller that catches may call next() again and gets batch b+1), and an error of an
/// epoch that is discarded by start_epoch() is dropped with it, never thrown into another epoch.
/// With workers = 0 the same happens synchronously. A failure outside batch production (out of
/// memory computing an epoch's order) is sticky: every later next() rethrows it.
///
/// Constructing a DataLoader calls cv::setNumThreads(0) once per process (as the official
/// dataloaders.py does at import): process-wide, it makes OpenCV run its functions on the
/// calling thread, so loader workers do not each fan out onto OpenCV's thread pool and fight the
/// training threads. Not copyable; one consumer thread (next/start_epoch are not concurrent).
class DataLoader {
 public:
  /// Throws engine::Error on a null dataset, batch_size <= 0, workers < 0, prefetch <= 0,
  /// epochs < 0 or rank not in [0, world_size).
  DataLoader(std::shared_ptr<const AugmentedDataset> ds, LoaderOptions opts);
  /// Stops and joins the workers (promptly, also when they are blocked on a full queue).
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Makes `epoch` (>= 0) the current epoch; next() then returns its batches from the first.
  /// Keeps the batches already produced when `epoch` continues the stream: it is the current
  /// epoch and nothing of it was taken yet (calling start_epoch(e) twice), or it is current + 1
  /// and every batch of the current epoch was taken. Otherwise (jump, resume, repeat, abandoning
  /// an epoch halfway) queued and in-flight work is discarded and production restarts at `epoch`.
  /// An epoch >= LoaderOptions::epochs is accepted (num_batches() stays valid) but next() throws.
  void start_epoch(int epoch);
  /// Next batch of the current epoch in order; false at the end of the epoch. Rethrows the
  /// error of that batch (see class comment). Throws engine::Error before any start_epoch() or
  /// when the current epoch is >= LoaderOptions::epochs (> 0).
  bool next(Batch& out);
  /// Batches per epoch (the same for every epoch).
  int64_t num_batches() const { return nb_; }
  /// Samples of this rank per epoch.
  int64_t epoch_samples() const { return per_rank_; }
  LoaderStats stats() const;

 private:
  using Order = std::shared_ptr<const std::vector<int64_t>>;
  /// A batch whose pixels are still to be rendered on the device (AugmentDevice::Gpu).
  struct DeviceWork;
  struct Slot {  // one produced batch or its error
    Batch batch;
    std::shared_ptr<DeviceWork> work;  ///< null on the CPU path
    std::exception_ptr error;
  };
  Order order_for(int epoch) const;
  bool may_produce(int epoch) const { return opts_.epochs <= 0 || epoch < opts_.epochs; }
  bool can_claim_locked() const;
  /// nullopt when cancelled (generation changed or stopping) between two samples.
  std::optional<Slot> make_batch(const std::vector<int64_t>& order, int epoch, int64_t b, uint64_t gen) const;
  /// The GPU path of make_batch: plans, labels and decoded tiles.
  std::optional<Slot> make_plan_batch(const std::vector<int64_t>& order, int epoch, int64_t b, uint64_t gen) const;
  /// The dataset index to try for sample position i of batch [lo, hi) of `order` after its t-th
  /// failed attempt (t >= 0); -1 when augmentation is off or no replacement is left.
  int64_t replacement(const std::vector<int64_t>& order, int64_t lo, int64_t hi, int64_t i, int64_t t) const;
  /// After a replacement (dataset index `index`) succeeded: one warning per failure message not
  /// yet printed, naming the replacement (see the class comment).
  void warn_replaced(const std::vector<std::string>& failures, int64_t index) const;
  /// Uploads slot.work and renders its images into slot.batch.images on opts_.device.
  void render_on_device(Slot& slot) const;
  void restart_locked(int epoch, std::map<std::pair<int, int64_t>, Slot>& dropped);
  void worker_loop();

  std::shared_ptr<const AugmentedDataset> ds_;
  LoaderOptions opts_;
  engine::Allocator* pinned_ = nullptr;  ///< batch memory allocator (nullptr: plain CPU)
  int64_t per_rank_ = 0, nb_ = 0;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;   ///< workers: a batch may be claimed, or stop
  std::condition_variable ready_cv_;  ///< consumer: a slot arrived, or a sticky error
  // Consumer side (guarded by mu_).
  bool started_ = false;
  int epoch_ = 0;
  Order order_;  ///< current epoch's order (used when workers == 0)
  int64_t next_to_give_ = 0;
  // Producer side (guarded by mu_): the stream continues epoch after epoch from make_epoch_.
  int make_epoch_ = 0;
  Order make_order_;
  int64_t next_to_make_ = 0;
  int64_t outstanding_ = 0;  ///< claimed in this generation and not yet taken
  std::map<std::pair<int, int64_t>, Slot> ready_;  ///< (epoch, batch) -> produced slot
  std::exception_ptr fatal_;
  LoaderStats stats_;
  std::atomic<uint64_t> generation_{0};  ///< bumped by every restart; stale work is dropped
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> workers_;
  // GPU augmentation (consumer thread only): the host arena of the last upload and its event.
  mutable engine::Tensor inflight_arena_;
  mutable engine::Event inflight_done_;
  // Replaced samples: the warnings already printed (any thread).
  mutable std::mutex warn_mu_;
  mutable std::set<std::string> warned_;
};

}  // namespace io
