// The socket communicator (CPU buffers, POSIX TCP): the world of the environment launchers
// (torchrun, torch.distributed.launch, `yolov9 train --device 0,1,2,3`, hand-written scripts that
// export RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT). Our all-reduce algorithms
// (apps/training/dist/allreduce.h) run on it unchanged.
//
// Rendezvous: rank 0 listens on MASTER_ADDR:MASTER_PORT; every rank opens its own listening socket
// on an ephemeral port and registers (rank, address, port) with rank 0, which answers with the
// table once all have joined (deadline: dist_timeout_s(), default 60 s, naming the ranks missing).
// Then every pair of ranks connects once (a full mesh; TCP_NODELAY, keepalive, non-blocking).
// Every message is a frame (24-byte header + payload), so that a size mismatch between ranks is an
// error, not corrupted data, and a rank that sees a peer die tells the others which rank died:
// every rank's message names the dead rank, not just the neighbour that left because of it.
// Progress is a poll() loop over all pending transfers of the communicator, so simultaneous large
// transfers in both directions never deadlock, and a rank never spins while it waits.
// Wire format: native byte order (every rank runs the same binary on the same architecture).
#pragma once
#include <memory>
#include <string>

#include "apps/training/dist/communicator.h"

namespace training::dist {

/// The rendezvous and mesh deadline in seconds: Y9_DIST_TIMEOUT_S when set (a positive number,
/// fractions allowed; the tests use 2), else 60. Throws engine::ConfigError naming the variable and
/// its value when it is not a positive number.
double dist_timeout_s();

/// How a socket world is formed (launch.h fills it from the environment).
struct TcpWorldOptions {
  int rank = 0;        ///< this process, in [0, world_size)
  int world_size = 1;  ///< number of processes, >= 1
  std::string master_addr = "127.0.0.1";  ///< rank 0's host (name, IPv4 or IPv6 address)
  int master_port = 0;                    ///< rank 0's rendezvous port, 1..65535
  double timeout_s = 60;                  ///< join deadline (dist_timeout_s())
  /// How the port reached us, for messages: "MASTER_PORT", "--master-port" (the local spawner),
  /// or "MASTER_PORT+1" (torchrun's agent holds MASTER_PORT itself; see launch.h).
  std::string port_source = "MASTER_PORT";
  /// Rank 0 only: a socket already listening on master_port (handed down by the local spawner,
  /// which holds the port from its free-port check until rank 0 takes it), or -1 to bind one.
  int listen_fd = -1;
  /// Runs that share a port tell each other apart by this (TORCHELASTIC_RUN_ID, Y9_RUN_ID): a rank
  /// of another run that reaches our rank 0 is turned away instead of joining. "" matches "".
  std::string run_id;
};

class TcpCommunicator final : public Communicator {
 public:
  /// Joins the world: the rendezvous, then the mesh. Returns when this rank is connected to every
  /// other rank. Throws CommError (what() names this rank and, where known, the rank at fault):
  ///  - rank 0 cannot listen: the port is in use ("port P is already in use; another run may hold
  ///    it", with how to pick another for opts.port_source), or another bind error;
  ///  - a rank did not join within opts.timeout_s: rank 0 names the missing ranks and sends the
  ///    same message to every rank that joined, so that every rank ends with it;
  ///  - rank 0 cannot be reached within opts.timeout_s, or what answers is not rank 0 of this run;
  ///  - the ranks disagree on WORLD_SIZE, or two processes claim the same rank.
  /// Throws engine::ConfigError on invalid options (rank out of range, port outside 1..65535).
  static std::unique_ptr<TcpCommunicator> create(const TcpWorldOptions& opts);
  ~TcpCommunicator() override;

  const char* backend() const override { return "tcp"; }
  engine::Device device() const override { return engine::Device::cpu(); }

  /// Point-to-point and collective operations with the contract of Communicator. They wait without
  /// a deadline (a peer may take minutes, e.g. rank 0 validating) and without spinning, and throw
  /// CommError as soon as a peer's death is known:
  ///   "rank R/W: <op> with rank P failed: rank P closed its connection (it died or was killed)"
  /// or, when the dead rank is not the peer this rank was talking to,
  ///   "rank R/W: <op> with rank P failed: rank D closed its connection (it died or was killed);
  ///    rank P reported it".
  /// After the first failure the world is broken: every later call, on this communicator and its
  /// duplicates (another thread blocked in one is woken), throws with the same cause.
  /// send/recv of 0 bytes exchange an empty message (a synchronisation, like MPI); a size that
  /// differs between the two sides throws CommError naming both sizes.
  void send(const void* buf, size_t bytes, int peer) override;
  void recv(void* buf, size_t bytes, int peer) override;
  /// Queues both directions and pushes what the socket buffers take at once; wait() completes
  /// them. Up to 4 exchanges may be in flight (Communicator's contract).
  Pending start_sendrecv(const void* sbuf, size_t sbytes, int dst, void* rbuf, size_t rbytes, int src) override;
  void wait(Pending p) override;
  /// Binomial tree from root (log2(W) rounds). 0 bytes: returns at once.
  void broadcast(void* buf, size_t bytes, int root) override;
  /// Dissemination barrier (ceil(log2(W)) rounds of empty messages); no deadline.
  void barrier() override;
  /// Every rank sends its block to every other rank at once (W-1 messages each way).
  void all_gather(const void* sbuf, size_t bytes, void* rbuf) override;
  /// There is no library all-reduce over sockets: this is our ring (ring_all_reduce, allreduce.h),
  /// so `--allreduce nccl` on a socket world measures our ring against itself.
  void all_reduce_library(void* buf, int64_t count, engine::DType dtype, ReduceOp op) override;
  /// A second mesh of connections between the same ranks (through the listening sockets kept
  /// from the rendezvous). Collective; must not run concurrently with another duplicate() of the
  /// same world. Throws CommError when a rank does not connect within dist_timeout_s().
  std::unique_ptr<Communicator> duplicate() override;
  /// Tells every peer of every mesh of this world that this rank aborts (their next wait ends with
  /// "rank R aborted (exit code C)"; up to 1 s for the frames to leave, on meshes no other thread
  /// is using), shuts every socket down, flushes stdio and _exit()s.
  [[noreturn]] void abort(int exit_code) override;

  struct World;
  struct Mesh;

 private:
  TcpCommunicator(std::shared_ptr<World> world, std::unique_ptr<Mesh> mesh);
  std::shared_ptr<World> world_;
  std::unique_ptr<Mesh> mesh_;
};

/// The world of one process (world size 1, backend "self"): what launch.h's make_world returns for
/// a single process, so that callers need no special case. barrier, broadcast and all-reduces
/// return at once, all_gather copies, duplicate gives another; send / recv / start_sendrecv throw
/// engine::Error (there is no peer); abort flushes stdio and _exit()s.
class SelfCommunicator final : public Communicator {
 public:
  SelfCommunicator() : Communicator(0, 1) {}
  const char* backend() const override { return "self"; }
  engine::Device device() const override { return engine::Device::cpu(); }
  void send(const void* buf, size_t bytes, int peer) override;
  void recv(void* buf, size_t bytes, int peer) override;
  Pending start_sendrecv(const void* sbuf, size_t sbytes, int dst, void* rbuf, size_t rbytes, int src) override;
  void wait(Pending p) override {}
  void broadcast(void* buf, size_t bytes, int root) override {}
  void barrier() override {}
  void all_gather(const void* sbuf, size_t bytes, void* rbuf) override;
  void all_reduce_library(void* buf, int64_t count, engine::DType dtype, ReduceOp op) override {}
  std::unique_ptr<Communicator> duplicate() override { return std::make_unique<SelfCommunicator>(); }
  [[noreturn]] void abort(int exit_code) override;
};

}  // namespace training::dist
