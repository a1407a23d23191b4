// The NCCL communicator (GPU buffers): one ncclComm per process and GPU, every call stream-ordered
// on the device context's StreamKind::Communication stream, where the comm_accumulate and
// comm_scale kernels of our algorithms (kernels/cuda/comm.cu) also run, so that our ring and
// halving-doubling run on NCCL unchanged and ncclAllReduce is their baseline (`--allreduce nccl`).
// The NCCL unique id travels over a bootstrap communicator (MPI under mpirun/srun, sockets under
// the environment launchers), the same pattern as llm.c's multi_gpu_config_init (llmc/zero.cuh).
// Compiled only with Y9_WITH_NCCL (the CUDA kernels library defines it when libnccl is found);
// nccl_compiled() says whether this build has it.
#pragma once
#include <chrono>
#include <memory>

#include "apps/training/dist/communicator.h"

namespace training::dist {

/// True when this build has the NCCL communicator (Y9_WITH_NCCL).
bool nccl_compiled();

/// Declared in every build so that code can hold a pointer to one (null without NCCL).
class NcclCommunicator;

#if defined(Y9_WITH_NCCL)

class NcclCommunicator final : public Communicator {
 public:
  /// Joins the NCCL communicator of `bootstrap`'s ranks (same rank and world size) on `gpu` (a
  /// CUDA device; usually the node-local rank's GPU). Collective over `bootstrap`: rank 0 calls
  /// ncclGetUniqueId and broadcasts it. ncclCommInitRankConfig runs in non-blocking mode and is
  /// polled with ncclCommGetAsyncError; after `init_timeout` (or on an error) the communicator is
  /// aborted (ncclCommAbort) and CommError names this rank, the GPU, the call, ncclGetErrorString
  /// and ncclGetLastError, and the variables to check (NCCL_P2P_DISABLE, NCCL_IB_DISABLE,
  /// NCCL_SOCKET_IFNAME, with their values) and NCCL_DEBUG=INFO to see why. NCCL's own
  /// environment variables pass through untouched. Throws engine::CudaError when `gpu` is not a
  /// usable CUDA device. `bootstrap` must outlive this communicator (barrier() and abort() use it).
  NcclCommunicator(Communicator& bootstrap, engine::Device gpu,
                   std::chrono::milliseconds init_timeout = std::chrono::seconds(60));
  /// ncclCommDestroy after draining the stream (ncclCommAbort when that fails); never throws.
  ~NcclCommunicator() override;

  const char* backend() const override { return "nccl"; }
  engine::Device device() const override { return gpu_; }

  // Every exchange below is enqueued on the Communication stream and returns before the data has
  // moved (the Communicator contract for NCCL). Buffers are on device(); the caller orders their
  // producers before the call (event on the compute stream, waited on the Communication stream)
  // and their consumers after it (the reverse). Errors (ncclGetErrorString, ncclGetLastError, this
  // rank and the call) are thrown as CommError; a call that stays ncclInProgress for 60 s aborts.

  /// ncclSend / ncclRecv of `bytes` (as ncclUint8) inside a group.
  void send(const void* buf, size_t bytes, int peer) override;
  void recv(void* buf, size_t bytes, int peer) override;
  /// ncclGroupStart, ncclSend to dst, ncclRecv from src, ncclGroupEnd. The returned handle needs
  /// no wait(): later work on the stream (our reduction kernels, the next exchange) is ordered
  /// after it, so any number may be in flight.
  Pending start_sendrecv(const void* sbuf, size_t sbytes, int dst, void* rbuf, size_t rbytes, int src) override;
  /// A no-op: the exchange is stream-ordered (see start_sendrecv).
  void wait(Pending p) override;
  /// ncclBroadcast in place.
  void broadcast(void* buf, size_t bytes, int root) override;
  /// Drains this rank's Communication stream (synchronize(), with its deadline), then the
  /// bootstrap's barrier, which waits without a deadline and without spinning.
  void barrier() override;
  /// ncclAllGather of `bytes` per rank.
  void all_gather(const void* sbuf, size_t bytes, void* rbuf) override;
  /// ncclAllReduce in place: ncclSum or ncclAvg on ncclFloat32 / ncclFloat64 / ncclFloat16 /
  /// ncclBfloat16 (NCCL adds F16/BF16 in its own precision, per its algorithm).
  void all_reduce_library(void* buf, int64_t count, engine::DType dtype, ReduceOp op) override;
  /// A second NCCL communicator over the same ranks, set up as the constructor does (rank 0's id
  /// through the bootstrap; not ncclCommSplit, which failed with ncclInternalError on the lent
  /// H200), on the same Communication stream: our algorithms' kernels run on that stream, so work on the two
  /// communicators is serialised in issue order. Issue it in the same order on every rank (one
  /// thread, or an agreed order): two threads racing on it could interleave differently per rank
  /// and deadlock the stream.
  std::unique_ptr<Communicator> duplicate() override;
  /// ncclCommAbort, then the bootstrap's abort (which ends every rank). Does not return.
  [[noreturn]] void abort(int exit_code) override;

  /// Blocks until the work enqueued on the Communication stream is done, polling cudaStreamQuery
  /// and ncclCommGetAsyncError; after `deadline` the communicator is aborted and CommError says
  /// that a peer died or stopped issuing collectives. Throws CommError on an asynchronous NCCL
  /// error, engine::CudaError on a CUDA error.
  void synchronize(std::chrono::milliseconds deadline = std::chrono::seconds(60));

 private:
  struct Impl;
  Communicator& bootstrap_;
  engine::Device gpu_;
  std::unique_ptr<Impl> impl_;
};

#endif  // Y9_WITH_NCCL

}  // namespace training::dist
