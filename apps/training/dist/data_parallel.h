// Data-parallel training glue for the Trainer (issue 13): the world of this process (from its
// launcher), and the pieces a training run needs from it: rank-0 decisions broadcast to every
// rank, agreement on stopping, the gradient reducer, synchronised BatchNorm and the loss's global
// normalisation. The Trainer owns one DataParallel when the process was started by a launcher
// (mpirun / srun / torchrun-style variables / `yolov9 train --device 0,1,...`), none otherwise.
#pragma once
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "apps/training/dist/communicator.h"
#include "apps/training/dist/reducer.h"
#include "apps/training/param_store.h"
#include "apps/training/trace.h"
#include "kernels/common/batch_norm.h"

namespace training::dist {

class DataParallel {
 public:
  /// The world of this process when a launcher started it (also with world size 1), else
  /// nullptr (apps/training/dist/launch.h: detect_launch, make_world): mpirun/mpiexec/srun -> MPI;
  /// torchrun-style variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or `--device 0,1,..`
  /// -> sockets. Throws CommError / engine::ConfigError when the world cannot be formed (names
  /// the variable, port or rank at fault; a rank that never joins ends every rank within 60 s).
  static std::unique_ptr<DataParallel> from_launcher();
  explicit DataParallel(std::unique_ptr<Communicator> world, int local_rank = 0);
  ~DataParallel();

  int rank() const { return world_->rank(); }
  int world_size() const { return world_->world_size(); }
  int local_rank() const { return local_rank_; }
  bool is_main() const { return rank() == 0; }
  /// The training thread's communicator.
  Communicator& comm() { return *world_; }

  /// Root's `t` (dense, on the communicator's device) into every rank's `t`.
  void broadcast(engine::Tensor& t, int root = 0);
  /// Root's string on every rank.
  std::string broadcast_string(const std::string& s, int root = 0);
  /// Every rank's `mine`, in rank order, on every rank (sizes may differ).
  std::vector<std::string> all_gather_bytes(const std::string& mine);
  /// Element-wise sum of `v` over the ranks, in place (F64 all-reduce).
  void sum(std::vector<double>& v);
  /// True on every rank when `flag` is true on any rank (an all-reduce).
  bool any(bool flag);
  /// Waits for every rank without a deadline and without spinning (rank 0 may validate for
  /// minutes); ends with CommError when a peer dies.
  void barrier() { world_->barrier(); }

  /// Starts the bucketed gradient reducer over `store` on a duplicate of the world (its own
  /// thread). No-op on a world of one.
  void attach_reducer(ParamStore& store, const ReducerOptions& opts, Tracer* tracer);
  /// The reducer (nullptr on a world of one or before attach_reducer).
  GradReducer* reducer() { return reducer_.get(); }
  /// Synchronised BatchNorm over the world (for graph::Model::set_batchnorm_sync); nullptr on a
  /// world of one.
  const kernels::BatchNormSync* batchnorm_sync() const { return world_size() > 1 ? &bn_sync_ : nullptr; }
  /// The loss's reduce_sums hook (empty on a world of one).
  std::function<void(engine::Tensor&)> loss_reduce();

  /// Ends every rank after a fatal error on this one (prints nothing; see Communicator::abort).
  [[noreturn]] void abort(int exit_code) {
    world_->abort(exit_code);
    std::_Exit(exit_code);  // not reached (Communicator::abort does not return); tells the compiler so
  }

 private:
  std::unique_ptr<Communicator> world_;
  int local_rank_;
  kernels::BatchNormSync bn_sync_;
  std::unique_ptr<GradReducer> reducer_;
};

/// The per-rank batch of a global `--batch` over `world_size` ranks. Throws engine::ConfigError
/// when it does not divide, naming the two nearest valid batches.
int64_t per_rank_batch(int64_t global_batch, int world_size);

}  // namespace training::dist
