// The MPI communicator (CPU buffers): every collective algorithm of ours runs on it, so that they
// are tested here with several processes under `mpirun` (ctest label dist), and it carries the
// NCCL unique id to the ranks of a multi-node GPU run. Debian's OpenMPI 4.1; any MPI-3 library
// with MPI_THREAD_MULTIPLE works.
#pragma once
#include <memory>

#include "apps/training/dist/communicator.h"

namespace training::dist {

/// True when this process was started by an MPI launcher: mpirun/mpiexec (OpenMPI's
/// OMPI_COMM_WORLD_SIZE, MPICH/Hydra's PMI_SIZE, PMIx's PMIX_RANK) or Slurm's srun (SLURM_PROCID
/// with SLURM_NTASKS > 1).
bool launched_by_mpi();

class MpiCommunicator final : public Communicator {
 public:
  /// MPI_COMM_WORLD (duplicated), initialising MPI with MPI_THREAD_MULTIPLE on the first call
  /// (finalised at exit). Throws CommError when MPI cannot start or gives less than
  /// MPI_THREAD_MULTIPLE.
  static std::unique_ptr<MpiCommunicator> world();
  ~MpiCommunicator() override;

  const char* backend() const override { return "mpi"; }
  engine::Device device() const override { return engine::Device::cpu(); }
  void send(const void* buf, size_t bytes, int peer) override;
  void recv(void* buf, size_t bytes, int peer) override;
  Pending start_sendrecv(const void* sbuf, size_t sbytes, int dst, void* rbuf, size_t rbytes, int src) override;
  void wait(Pending p) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  /// MPI_Ibarrier, polled with a growing sleep (up to 2 ms): no CPU burnt while a rank waits.
  void barrier() override;
  void all_gather(const void* sbuf, size_t bytes, void* rbuf) override;
  /// Blocking MPI_Allreduce (MPI_SUM on MPI_FLOAT / MPI_DOUBLE; F16/BF16 through a user operation that
  /// adds in FP32); Avg scales afterwards.
  void all_reduce_library(void* buf, int64_t count, engine::DType dtype, ReduceOp op) override;
  std::unique_ptr<Communicator> duplicate() override;
  [[noreturn]] void abort(int exit_code) override;

 private:
  struct Impl;
  explicit MpiCommunicator(std::unique_ptr<Impl> impl, int rank, int world);
  std::unique_ptr<Impl> impl_;
};

}  // namespace training::dist
