// How the processes of a data-parallel run are started, and how each one joins the world
// (issue 13, "Launching"; docs/distributed.md):
//  - mpirun / mpiexec / srun: MPI (apps/training/dist/mpi_comm.h);
//  - torchrun, torch.distributed.launch, hand-written scripts (RANK, WORLD_SIZE, LOCAL_RANK,
//    MASTER_ADDR, MASTER_PORT in the environment): sockets (apps/training/dist/tcp_comm.h);
//  - `yolov9 train --device 0,1,2,3`: spawn_local_ranks() starts one process per device with those
//    variables set, so each child is an environment-launched rank;
//  - otherwise a single process (a world of 1).
// The Trainer's use:
//    if (!already launched && devices.size() > 1) return spawn_local_ranks(argv, devices, port);
//    LaunchInfo li = detect_launch();            // throws ConfigError on bad variables
//    auto world = make_world(li);                 // never null; throws CommError on failures
//    ... on a CommError: print it, then world->abort(1) so that every peer ends at once.
#pragma once
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "apps/training/dist/communicator.h"

namespace training::dist {

/// Who started this process.
enum class Launcher {
  Single,  ///< nobody: one process, world size 1
  Mpi,     ///< mpirun / mpiexec / srun (launched_by_mpi())
  Env,     ///< an environment launcher: torchrun, torch.distributed.launch, spawn_local_ranks, a script
};
const char* launcher_name(Launcher l);

/// This process's place in the run, from the environment (detect_launch()).
struct LaunchInfo {
  Launcher launcher = Launcher::Single;
  /// Global rank and world size. For MPI they are read from the launcher's variables when it sets
  /// them (OMPI_COMM_WORLD_RANK / _SIZE, PMI_RANK / PMI_SIZE, SLURM_PROCID / SLURM_NTASKS), else -1
  /// and 0 until make_world() asks MPI (the communicator has the final word).
  int rank = 0;
  int world_size = 1;
  /// Rank on this machine, to pick the GPU: OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID (MPICH),
  /// SLURM_LOCALID, LOCAL_RANK, in this order; 0 when none is set.
  int local_rank = 0;
  /// Ranks on this machine (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, SLURM_NTASKS_PER_NODE
  /// when a plain number, LOCAL_WORLD_SIZE); 0 when unknown.
  int local_world_size = 0;
  /// Env launcher: rank 0's address and port (MASTER_ADDR, MASTER_PORT).
  std::string master_addr;
  int master_port = 0;
  /// TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent serves its own store on MASTER_PORT, so
  /// rank 0 listens on MASTER_PORT+1 instead (every rank derives the same port).
  bool agent_store = false;
  /// Started by spawn_local_ranks (Y9_LAUNCHED_BY=yolov9): messages speak of --master-port.
  bool spawned = false;
  /// A listening socket on master_port handed down by spawn_local_ranks to rank 0 (Y9_MASTER_FD),
  /// or -1.
  int inherited_listen_fd = -1;
  /// TORCHELASTIC_RUN_ID or Y9_RUN_ID: keeps ranks of another run on the same port out.
  std::string run_id;

  /// More than one process, or MPI (whose world size is known after make_world()).
  bool distributed() const { return launcher == Launcher::Mpi || world_size > 1; }
  /// One line for the log: "env launcher: rank 1/4, local rank 1, MASTER_ADDR=..., MASTER_PORT=...".
  std::string str() const;
};

/// Reads the environment. Precedence: an environment launcher that names itself
/// (TORCHELASTIC_RUN_ID from torchrun / torch.distributed.launch, Y9_LAUNCHED_BY from
/// spawn_local_ranks) -> Env; else launched_by_mpi() -> Mpi; else RANK or WORLD_SIZE set -> Env;
/// else Single. (The first rule keeps a torchrun inside a Slurm allocation, whose SLURM_* variables
/// would look like srun, on sockets.)
/// Throws engine::ConfigError naming the variable and its value: RANK or WORLD_SIZE without the
/// other, a value that is not an integer, WORLD_SIZE < 1, RANK outside [0, WORLD_SIZE) ("RANK=5 is
/// not below WORLD_SIZE=4"), MASTER_ADDR missing or MASTER_PORT missing / outside 1..65535 when
/// WORLD_SIZE > 1, LOCAL_RANK negative or not below LOCAL_WORLD_SIZE.
LaunchInfo detect_launch();

/// The world communicator of this process: MpiCommunicator::world() for Mpi; a TcpCommunicator
/// for Env with WORLD_SIZE > 1 (deadline dist_timeout_s(), Y9_DIST_TIMEOUT_S, default 60 s); a
/// SelfCommunicator (world size 1, backend "self") for Single and for Env with WORLD_SIZE=1.
/// Never returns null. Throws CommError when the world cannot form (port in use, a rank that
/// never joins, rank 0 unreachable: see TcpCommunicator::create), engine::ConfigError on bad
/// variables (Y9_DIST_TIMEOUT_S).
std::unique_ptr<Communicator> make_world(const LaunchInfo& info);

/// "0,1,2,3" -> {"0", "1", "2", "3"}; blanks around items are dropped; "" -> {}. Throws
/// engine::ConfigError on an empty item ("0,,1") or a repeated one ("0,0").
std::vector<std::string> parse_device_list(const std::string& device_flag);

/// Throws CommError when TCP `port` (1..65535) cannot be listened on here: "--master-port 29500:
/// port 29500 is already in use; another run may hold it. Pick another port with --master-port, or
/// omit --master-port and yolov9 picks a free one" (other bind errors: their strerror text).
void check_port_free(int port);

/// A TCP port that is free now (the kernel's choice of an ephemeral port).
int pick_free_port();

struct SpawnOptions {
  /// After the first failure (or a forwarded SIGINT / SIGTERM), how long the other ranks get to
  /// end on SIGTERM before SIGKILL, in seconds.
  double grace_s = 10;
  /// The program each child runs; "" = this program (/proc/self/exe).
  std::string exe;
  /// Where the spawner's own lines go ("yolov9: rank 1 (device 1) exited with code 3").
  std::FILE* log = stderr;
};

/// `yolov9 train --device 0,1,2,3` (the official meaning: one process per listed GPU of this
/// machine): runs one child per device and waits for them.
///  - argv: this process's command line (argv[0] first). Each child gets the same one with the
///    `--device X` / `--device=X` option replaced by `--device <its device>` (added when absent).
///  - devices: one entry per rank; child i is RANK=i, LOCAL_RANK=i, WORLD_SIZE=LOCAL_WORLD_SIZE=n,
///    MASTER_ADDR=127.0.0.1, MASTER_PORT, Y9_LAUNCHED_BY=yolov9, Y9_RUN_ID (random); rank 0 also
///    inherits the listening socket (Y9_MASTER_FD), so no other program can take the port between
///    the check and rank 0's rendezvous.
///  - master_port: 0 = pick a free port; else it must be free (checked before any child starts).
/// Children are in their own process groups and get SIGTERM if this process dies (PR_SET_PDEATHSIG).
/// SIGINT, SIGTERM and SIGHUP received here are forwarded to every child (a second one sends
/// SIGKILL); after opts.grace_s, SIGKILL. When a child exits non-zero or is killed, prints
/// "yolov9: rank i (device d) exited with code X" or "... was killed by signal N (SIGKILL)", sends
/// SIGTERM to the others (SIGKILL after opts.grace_s) and returns once all are gone. When several
/// ended before it looked, a child killed by a signal is named first (the others usually exited
/// because it died).
/// Returns 0 when every child exited 0; else the first failed child's exit code, or 128 + N for a
/// signal N (128 + N of a forwarded signal when interrupted). Throws CommError for a busy
/// master_port (check_port_free's message, before spawning), engine::ConfigError for an empty
/// device list, engine::Error when fork fails. Not thread-safe: it installs signal handlers for the
/// duration of the call (restored on return).
int spawn_local_ranks(const std::vector<std::string>& argv, const std::vector<std::string>& devices,
                      int master_port, const SpawnOptions& opts = {});

}  // namespace training::dist
