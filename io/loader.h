// DataLoader: worker threads producing collated batches into a bounded prefetch queue, and the
// distributed sampler. Collate matches the official collate_fn (utils/dataloaders.py,
// WongKinYiu/yolov9 5b1ea9a): images uint8 NCHW RGB, targets [image_index, class, cx, cy, w, h].
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/tensor.h"
#include "io/augment.h"

namespace io {

/// Indices of one rank for one epoch (torch DistributedSampler semantics): a permutation of
/// [0, n) seeded by (seed, epoch) when `shuffle`, padded by repeating its head to a multiple of
/// world_size, then every world_size-th element from `rank`. Equal length on every rank.
/// Throws engine::Error when rank is not in [0, world_size).
std::vector<int64_t> distributed_indices(int64_t n, int rank, int world_size, bool shuffle, uint64_t seed, int epoch);

struct LoaderOptions {
  int batch_size = 16;
  int workers = 2;          ///< 0 = produce batches on the calling thread
  int prefetch = 4;         ///< batches produced ahead of the consumer (bounded queue)
  bool shuffle = true;      ///< ignored (false) in rect mode, as officially
  uint64_t seed = 0;
  int rank = 0, world_size = 1;
  bool drop_last = false;
};

/// One collated batch.
struct Batch {
  engine::Tensor images;   ///< [B, 3, H, W] U8, RGB, contiguous, CPU
  engine::Tensor targets;  ///< [N, 6] F32 rows [image_index, class, cx, cy, w, h], box normalised
  std::vector<int64_t> indices;    ///< dataset indices
  std::vector<std::string> paths;  ///< image paths
};

/// Collates samples (all the same H x W) into a Batch. Throws engine::ShapeError on mixed sizes.
Batch collate(const std::vector<Sample>& samples, const std::vector<std::string>& paths);

/// Multi-threaded loader. Batch b of an epoch depends only on (seed, epoch, sampler order), so
/// the same seed gives the same batches whatever `workers` is. Not copyable.
/// TODO(data issue): pinned host memory for CUDA (the engine allocator has no pinned pool yet).
class DataLoader {
 public:
  DataLoader(std::shared_ptr<const AugmentedDataset> ds, LoaderOptions opts);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Starts `epoch` (stops any running epoch first).
  void start_epoch(int epoch);
  /// Next batch of the current epoch in order; false at the end. Rethrows a worker's error.
  bool next(Batch& out);
  int64_t num_batches() const;
  int64_t epoch_samples() const { return static_cast<int64_t>(order_.size()); }

 private:
  Batch make_batch(int64_t b) const;
  void stop();
  void worker_loop();

  std::shared_ptr<const AugmentedDataset> ds_;
  LoaderOptions opts_;
  int epoch_ = 0;
  std::vector<int64_t> order_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, Batch> ready_;
  int64_t next_to_make_ = 0, next_to_give_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> workers_;
};

}  // namespace io
