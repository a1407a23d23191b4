// The communicator interface of data-parallel training (issue 13; docs/design.md "Distributed"):
// rank, world size, point-to-point exchanges, broadcast, barrier, all-gather and the library's own
// all-reduce as a baseline. Our all-reduce algorithms (ring, recursive halving-doubling:
// apps/training/dist/allreduce.h) are written once against this interface and run on every
// implementation: MPI on CPUs (apps/training/dist/mpi_comm.h), sockets for the environment
// launchers (tcp_comm.h) and NCCL on GPUs (nccl_comm.h).
//
// Buffers live on device() (host memory for MPI and sockets, the GPU for NCCL). Exchanges are
// ordered per communicator: every rank issues the same sequence of calls on a communicator, from
// one thread at a time. A second thread (the gradient reducer's) uses its own duplicate().
// On NCCL the calls are stream-ordered on device()'s StreamKind::Communication stream and may
// return before the data has moved; on MPI and sockets they return when done.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/backend.h"
#include "engine/dtype.h"
#include "engine/error.h"
#include "engine/tensor.h"

namespace training::dist {

/// The reduction of an all-reduce: the sum, or the sum divided by the world size.
enum class ReduceOp { Sum, Avg };

/// A collective that failed or cannot work: a peer that died, closed its connection or never
/// joined, a port in use, a library error. what() names this rank, the operation, the peer at
/// fault when known and the cause.
class CommError : public engine::Error {
  using Error::Error;
};

/// Handle of an exchange started by Communicator::start_sendrecv.
struct Pending {
  int id = -1;
};

class Communicator {
 public:
  Communicator(int rank, int world_size);
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  /// "mpi", "tcp", "nccl" or "self" (a single process: launch.h's make_world).
  virtual const char* backend() const = 0;
  /// Where the buffers given to this communicator live.
  virtual engine::Device device() const = 0;

  /// Blocking point-to-point transfer of `bytes` to / from rank `peer` (!= rank()).
  virtual void send(const void* buf, size_t bytes, int peer) = 0;
  virtual void recv(void* buf, size_t bytes, int peer) = 0;
  /// Starts sending `sbytes` from `sbuf` to rank `dst` and receiving `rbytes` into `rbuf` from rank
  /// `src` at the same time (0 bytes: nothing in that direction; dst and src may be equal). The
  /// peer must start the matching exchange. Complete it with wait(); at most 4 exchanges may be
  /// started and not yet waited, and they complete in order. The buffers must stay untouched
  /// until then.
  virtual Pending start_sendrecv(const void* sbuf, size_t sbytes, int dst, void* rbuf, size_t rbytes, int src) = 0;
  /// Completes an exchange started by start_sendrecv. Throws CommError (naming the peer and the
  /// cause) when a transfer fails.
  virtual void wait(Pending p) = 0;
  /// start_sendrecv then wait: a blocking exchange.
  void sendrecv(const void* sbuf, size_t sbytes, int dst, void* rbuf, size_t rbytes, int src) {
    wait(start_sendrecv(sbuf, sbytes, dst, rbuf, rbytes, src));
  }
  /// `bytes` of root's `buf` into every rank's `buf`.
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;
  /// Returns when every rank has entered. Waits without a deadline and without spinning (a rank
  /// may wait a long time, e.g. while rank 0 validates); a peer that dies still ends it.
  virtual void barrier() = 0;
  /// rbuf (world_size * bytes) receives rank i's `bytes` of sbuf at offset i * bytes.
  virtual void all_gather(const void* sbuf, size_t bytes, void* rbuf) = 0;
  /// The library's own all-reduce (MPI_Allreduce, ncclAllReduce), in place over `count` dense
  /// elements of `dtype` (F32, F64, F16, BF16; F16/BF16 accumulated in FP32): the baseline our
  /// algorithms are measured against, and `--allreduce nccl`.
  virtual void all_reduce_library(void* buf, int64_t count, engine::DType dtype, ReduceOp op) = 0;
  /// A communicator over the same ranks whose traffic never mixes with this one's (for a second
  /// thread). Collective: every rank calls it in the same order.
  virtual std::unique_ptr<Communicator> duplicate() = 0;
  /// Ends every rank of the job promptly after a fatal error on this one (MPI_Abort, closing the
  /// connections so that the peers see this rank go). Does not return.
  [[noreturn]] virtual void abort(int exit_code) = 0;

  /// Scratch memory on device() of at least `bytes` (grows, never shrinks; owned by the
  /// communicator; the previous pointer is invalid after a call with more bytes). On a GPU the block
  /// is marked with engine::record_stream for the Communication stream (so a growth does not block:
  /// the old block is reused only after that stream's work is done) and the new block's first use
  /// is ordered after the compute stream (the stream its block belongs to).
  void* scratch(size_t bytes);
  /// The device context in which the local reductions of the algorithms run.
  engine::DeviceContext& context() const;

  /// "rank R/W" for messages.
  std::string who() const;

 protected:
  int rank_, world_;

 private:
  engine::Tensor scratch_;
};

}  // namespace training::dist
