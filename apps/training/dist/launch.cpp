// Launch detection, world creation and the local spawner of `yolov9 train --device 0,1,2,3`
// (apps/training/dist/launch.h). The spawner is fork + exec with a self-pipe signal loop: SIGCHLD,
// SIGINT, SIGTERM and SIGHUP write a byte, the loop poll()s the pipe, reaps and escalates.
#include "apps/training/dist/launch.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <set>

#include "apps/training/dist/mpi_comm.h"
#include "apps/training/dist/tcp_comm.h"

extern char** environ;

namespace training::dist {

namespace {

using Clock = std::chrono::steady_clock;

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

// "NAME=value" must be an integer; throws ConfigError naming both.
int env_int(const char* name, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v.c_str(), &end, 10);
  Y9_CHECK_T(engine::ConfigError, end != v.c_str() && *end == '\0' && errno == 0 && x >= INT32_MIN && x <= INT32_MAX,
             name, "=", v, " is not an integer");
  return static_cast<int>(x);
}

std::optional<int> env_int(const char* name) {
  auto v = env(name);
  if (!v) return std::nullopt;
  return env_int(name, *v);
}

// The first of `names` that is set, as an integer.
std::optional<int> first_int(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (auto v = env_int(n)) return v;
  return std::nullopt;
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGPIPE: return "SIGPIPE";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return "?";
  }
}

std::string busy_message(int port) {
  return "--master-port " + std::to_string(port) + ": port " + std::to_string(port) +
         " is already in use; another run may hold it. Pick another port with --master-port, or omit --master-port "
         "and yolov9 picks a free one";
}

// A socket listening on 0.0.0.0:port (0: an ephemeral port). Throws CommError (busy port, other
// bind errors).
int hold_port(int port) {
  Y9_CHECK_T(engine::ConfigError, port >= 0 && port <= 65535, "--master-port ", port,
             " is not a port (1-65535, or 0 to pick a free one)");
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) Y9_THROW(CommError, "socket() failed: ", std::strerror(errno));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // as rank 0 binds it
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    const int e = errno;
    ::close(fd);
    if (e == EADDRINUSE) Y9_THROW(CommError, busy_message(port));
    Y9_THROW(CommError, "--master-port ", port, ": cannot listen on port ", port, ": ", std::strerror(e));
  }
  return fd;
}

int bound_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

// --- signal self-pipe of the spawner ---------------------------------------------------------

int g_sig_pipe_w = -1;

extern "C" void spawner_on_signal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  if (g_sig_pipe_w >= 0) [[maybe_unused]] auto r = ::write(g_sig_pipe_w, &b, 1);
  errno = saved;
}

constexpr int kCaught[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};

// The child's command line: `--device X` / `--device=X` becomes `--device <device>`.
std::vector<std::string> child_argv(const std::vector<std::string>& argv, const std::string& device) {
  std::vector<std::string> out{argv[0]};
  bool found = false;
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--device" || a.rfind("--device=", 0) == 0) {
      if (a == "--device" && i + 1 < argv.size()) ++i;  // its value
      if (!found) out.insert(out.end(), {"--device", device});
      found = true;
      continue;
    }
    out.push_back(a);
  }
  if (!found) out.insert(out.end(), {"--device", device});
  return out;
}

struct CStrings {  // argv / envp for execve, built before fork (no allocation after it)
  std::vector<std::string> s;
  std::vector<char*> p;
  void seal() {
    p.clear();
    for (auto& x : s) p.push_back(x.data());
    p.push_back(nullptr);
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Detection and the world

const char* launcher_name(Launcher l) {
  switch (l) {
    case Launcher::Single: return "single process";
    case Launcher::Mpi: return "MPI launcher";
    case Launcher::Env: return "environment launcher";
  }
  return "?";
}

std::string LaunchInfo::str() const {
  std::string s = launcher_name(launcher);
  if (launcher == Launcher::Single) return s;
  s += ": rank " + (rank >= 0 ? std::to_string(rank) : std::string("?")) + "/" +
       (world_size > 0 ? std::to_string(world_size) : std::string("?")) + ", local rank " + std::to_string(local_rank);
  if (launcher == Launcher::Env && world_size > 1) {
    s += ", MASTER_ADDR=" + master_addr + ", MASTER_PORT=" + std::to_string(master_port);
    if (agent_store) s += " (torchrun's store; yolov9 listens on " + std::to_string(master_port + 1) + ")";
  }
  return s;
}

LaunchInfo detect_launch() {
  LaunchInfo li;
  const bool named = env("TORCHELASTIC_RUN_ID").has_value() || env("Y9_LAUNCHED_BY").has_value();
  if (!named && launched_by_mpi()) {
    li.launcher = Launcher::Mpi;
    li.rank = first_int({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}).value_or(-1);
    li.world_size = first_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}).value_or(0);
    li.local_rank = first_int({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"}).value_or(0);
    std::optional<int> lws = first_int({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"});
    if (!lws) {
      // SLURM_NTASKS_PER_NODE may read "2(x3),1"; only a plain number is taken.
      if (auto v = env("SLURM_NTASKS_PER_NODE"); v && v->find_first_not_of("0123456789") == std::string::npos)
        lws = env_int("SLURM_NTASKS_PER_NODE", *v);
    }
    li.local_world_size = lws.value_or(0);
    return li;
  }
  const auto rank = env("RANK"), world = env("WORLD_SIZE");
  if (!named && !rank && !world) {
    li.launcher = Launcher::Single;
    if (auto lr = env_int("LOCAL_RANK")) {
      Y9_CHECK_T(engine::ConfigError, *lr >= 0, "LOCAL_RANK=", *lr, " is negative");
      li.local_rank = *lr;
    }
    return li;
  }
  li.launcher = Launcher::Env;
  Y9_CHECK_T(engine::ConfigError, rank.has_value(), "WORLD_SIZE=", world.value_or(""),
             " is set but RANK is not; an environment launcher (torchrun) sets RANK, WORLD_SIZE, MASTER_ADDR and "
             "MASTER_PORT together");
  Y9_CHECK_T(engine::ConfigError, world.has_value(), "RANK=", *rank,
             " is set but WORLD_SIZE is not; an environment launcher (torchrun) sets RANK, WORLD_SIZE, MASTER_ADDR and "
             "MASTER_PORT together");
  li.rank = env_int("RANK", *rank);
  li.world_size = env_int("WORLD_SIZE", *world);
  Y9_CHECK_T(engine::ConfigError, li.world_size >= 1, "WORLD_SIZE=", *world, " must be at least 1");
  Y9_CHECK_T(engine::ConfigError, li.rank >= 0, "RANK=", *rank, " is negative");
  Y9_CHECK_T(engine::ConfigError, li.rank < li.world_size, "RANK=", li.rank, " is not below WORLD_SIZE=",
             li.world_size, " (the ranks are 0..", li.world_size - 1, ")");
  const auto addr = env("MASTER_ADDR");
  const auto port = env("MASTER_PORT");
  if (li.world_size > 1) {
    Y9_CHECK_T(engine::ConfigError, addr.has_value(), "MASTER_ADDR is not set (RANK=", li.rank,
               ", WORLD_SIZE=", li.world_size, "): set it to the address of rank 0's machine");
    Y9_CHECK_T(engine::ConfigError, port.has_value(), "MASTER_PORT is not set (RANK=", li.rank,
               ", WORLD_SIZE=", li.world_size, "): set it to a free TCP port on rank 0's machine");
  }
  if (addr) li.master_addr = *addr;
  if (port) {
    li.master_port = env_int("MASTER_PORT", *port);
    Y9_CHECK_T(engine::ConfigError, li.master_port >= 1 && li.master_port <= 65535, "MASTER_PORT=", *port,
               " is not a port (1-65535)");
  }
  li.agent_store = env("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
  Y9_CHECK_T(engine::ConfigError, !(li.agent_store && li.master_port == 65535), "MASTER_PORT=65535: under torchrun "
             "yolov9 listens on MASTER_PORT+1, which does not exist; start torchrun with another --master-port");
  li.spawned = env("Y9_LAUNCHED_BY").value_or("") == "yolov9";
  if (auto lr = env_int("LOCAL_RANK")) {
    Y9_CHECK_T(engine::ConfigError, *lr >= 0, "LOCAL_RANK=", *lr, " is negative");
    li.local_rank = *lr;
  }
  if (auto lws = env_int("LOCAL_WORLD_SIZE")) {
    Y9_CHECK_T(engine::ConfigError, *lws >= 1 && li.local_rank < *lws, "LOCAL_RANK=", li.local_rank,
               " is not below LOCAL_WORLD_SIZE=", *lws);
    li.local_world_size = *lws;
  }
  if (auto fd = env_int("Y9_MASTER_FD"); fd && li.rank == 0) li.inherited_listen_fd = *fd;
  li.run_id = env("TORCHELASTIC_RUN_ID").value_or(env("Y9_RUN_ID").value_or(""));
  return li;
}

std::unique_ptr<Communicator> make_world(const LaunchInfo& li) {
  if (li.launcher == Launcher::Mpi) return MpiCommunicator::world();
  if (li.launcher == Launcher::Single || li.world_size <= 1) return std::make_unique<SelfCommunicator>();
  TcpWorldOptions o;
  o.rank = li.rank;
  o.world_size = li.world_size;
  o.master_addr = li.master_addr;
  o.master_port = li.agent_store ? li.master_port + 1 : li.master_port;
  o.timeout_s = dist_timeout_s();
  o.port_source = li.spawned ? "--master-port" : li.agent_store ? "MASTER_PORT+1" : "MASTER_PORT";
  o.listen_fd = li.inherited_listen_fd;
  o.run_id = li.run_id;
  return TcpCommunicator::create(o);
}

std::vector<std::string> parse_device_list(const std::string& flag) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= flag.size() && !flag.empty()) {
    const size_t j = std::min(flag.find(',', i), flag.size());
    std::string item = flag.substr(i, j - i);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    Y9_CHECK_T(engine::ConfigError, !item.empty(), "--device ", flag, ": empty item in the device list");
    Y9_CHECK_T(engine::ConfigError, std::find(out.begin(), out.end(), item) == out.end(), "--device ", flag,
               ": device ", item, " is listed twice (one process per device)");
    out.push_back(item);
    i = j + 1;
  }
  return out;
}

void check_port_free(int port) {
  Y9_CHECK_T(engine::ConfigError, port >= 1 && port <= 65535, "--master-port ", port, " is not a port (1-65535)");
  ::close(hold_port(port));
}

int pick_free_port() {
  const int fd = hold_port(0);
  const int port = bound_port(fd);
  ::close(fd);
  return port;
}

// ---------------------------------------------------------------------------------------------
// The local spawner

int spawn_local_ranks(const std::vector<std::string>& argv, const std::vector<std::string>& devices, int master_port,
                      const SpawnOptions& opts) {
  Y9_CHECK_T(engine::ConfigError, !devices.empty(), "spawn_local_ranks: no device given");
  Y9_CHECK_T(engine::ConfigError, !argv.empty(), "spawn_local_ranks: empty command line");
  const int n = static_cast<int>(devices.size());
  std::FILE* log = opts.log ? opts.log : stderr;
  // Held from the check until rank 0 takes it over: no other program can grab the port between.
  const int lfd = hold_port(master_port);
  const int port = bound_port(lfd);
  const std::string exe = opts.exe.empty() ? "/proc/self/exe" : opts.exe;
  std::random_device rd;
  char run_id[40];
  std::snprintf(run_id, sizeof run_id, "yolov9-%08x%08x", rd(), rd());

  // Everything execve needs, built before fork: the child may only make async-signal-safe calls.
  static const std::set<std::string> kOurs = {
      "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",
      "ROLE_RANK", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "Y9_LAUNCHED_BY", "Y9_RUN_ID",
      "Y9_MASTER_FD"};
  std::vector<std::string> base_env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    if (!kOurs.count(kv.substr(0, kv.find('=')))) base_env.push_back(kv);
  }
  std::vector<CStrings> cargv(static_cast<size_t>(n)), cenv(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    cargv[static_cast<size_t>(i)].s = child_argv(argv, devices[static_cast<size_t>(i)]);
    cargv[static_cast<size_t>(i)].seal();
    auto& e = cenv[static_cast<size_t>(i)].s;
    e = base_env;
    e.push_back("RANK=" + std::to_string(i));
    e.push_back("LOCAL_RANK=" + std::to_string(i));
    e.push_back("WORLD_SIZE=" + std::to_string(n));
    e.push_back("LOCAL_WORLD_SIZE=" + std::to_string(n));
    e.push_back("MASTER_ADDR=127.0.0.1");
    e.push_back("MASTER_PORT=" + std::to_string(port));
    e.push_back("Y9_LAUNCHED_BY=yolov9");
    e.push_back(std::string("Y9_RUN_ID=") + run_id);
    if (i == 0) e.push_back("Y9_MASTER_FD=" + std::to_string(lfd));
    cenv[static_cast<size_t>(i)].seal();
  }

  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(lfd);
    Y9_THROW(engine::Error, "spawn_local_ranks: pipe2 failed: ", std::strerror(errno));
  }
  g_sig_pipe_w = pipefd[1];
  struct sigaction sa{}, old[4];
  sa.sa_handler = spawner_on_signal;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigemptyset(&sa.sa_mask);
  for (int k = 0; k < 4; ++k) ::sigaction(kCaught[k], &sa, &old[k]);
  auto restore = [&] {
    for (int k = 0; k < 4; ++k) ::sigaction(kCaught[k], &old[k], nullptr);
    g_sig_pipe_w = -1;
    ::close(pipefd[0]);
    ::close(pipefd[1]);
  };

  struct Child {
    pid_t pid = -1;
    bool alive = false;
  };
  std::vector<Child> kids(static_cast<size_t>(n));
  auto signal_all = [&](int sig) {
    for (auto& k : kids)
      if (k.alive && ::kill(-k.pid, sig) != 0) ::kill(k.pid, sig);  // the group may not exist yet
  };
  const pid_t parent = ::getpid();
  for (int i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(1);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      for (int sig : kCaught) ::signal(sig, SIG_DFL);
      if (i == 0) ::fcntl(lfd, F_SETFD, 0);  // rank 0 keeps the listening socket across exec
      ::execve(exe.c_str(), cargv[static_cast<size_t>(i)].p.data(), cenv[static_cast<size_t>(i)].p.data());
      const char msg[] = "yolov9: cannot start a rank: execve failed\n";
      [[maybe_unused]] auto r = ::write(2, msg, sizeof msg - 1);
      ::_exit(127);
    }
    if (pid < 0) {
      const int e = errno;
      signal_all(SIGKILL);
      for (auto& k : kids)
        if (k.alive) ::waitpid(k.pid, nullptr, 0);
      restore();
      ::close(lfd);
      Y9_THROW(engine::Error, "spawn_local_ranks: fork failed for rank ", i, ": ", std::strerror(e));
    }
    ::setpgid(pid, pid);  // also here: whichever of parent and child runs first
    kids[static_cast<size_t>(i)] = {pid, true};
  }
  ::close(lfd);  // rank 0 has it now

  int result = 0, interrupted = 0, alive = n;
  bool failing = false, killed = false;
  auto kill_at = Clock::time_point::max();
  const auto grace = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opts.grace_s));
  while (alive > 0) {
    // Reap everything that ended. When several failed since the last pass, a rank killed by a
    // signal is named first: the others usually exited because it died (their CommError).
    std::vector<std::pair<int, int>> failed;  // (rank, wait status)
    for (int i = 0; i < n; ++i) {
      Child& k = kids[static_cast<size_t>(i)];
      int st = 0;
      if (!k.alive || ::waitpid(k.pid, &st, WNOHANG) != k.pid) continue;
      k.alive = false;
      --alive;
      const bool bad = (WIFEXITED(st) && WEXITSTATUS(st) != 0) || WIFSIGNALED(st);
      if (bad && !failing && !interrupted) failed.emplace_back(i, st);  // after our own signals, exits are expected
    }
    std::stable_sort(failed.begin(), failed.end(),
                     [](const auto& a, const auto& b) { return WIFSIGNALED(a.second) && !WIFSIGNALED(b.second); });
    for (const auto& [i, st] : failed) {
      const std::string dev = devices[static_cast<size_t>(i)];
      int code;
      if (WIFEXITED(st)) {
        code = WEXITSTATUS(st);
        std::fprintf(log, "yolov9: rank %d (device %s) exited with code %d\n", i, dev.c_str(), code);
      } else {
        code = 128 + WTERMSIG(st);
        std::fprintf(log, "yolov9: rank %d (device %s) was killed by signal %d (%s)\n", i, dev.c_str(), WTERMSIG(st),
                     signal_name(WTERMSIG(st)));
      }
      if (!failing) result = code;
      failing = true;
    }
    if (!failed.empty() && alive > 0) {
      std::fprintf(log, "yolov9: stopping the other %d rank%s (SIGTERM, SIGKILL after %g s)\n", alive,
                   alive == 1 ? "" : "s", opts.grace_s);
      signal_all(SIGTERM);
      kill_at = Clock::now() + grace;
    }
    std::fflush(log);
    if (alive == 0) break;
    if (!killed && Clock::now() >= kill_at) {
      std::fprintf(log, "yolov9: %d rank%s still running after %g s: SIGKILL\n", alive, alive == 1 ? "" : "s",
                   opts.grace_s);
      std::fflush(log);
      signal_all(SIGKILL);
      killed = true;
    }
    // Woken by SIGCHLD / a signal through the pipe; the 1 s cap only guards a lost wake-up.
    int timeout_ms = 1000;
    if (!killed && kill_at != Clock::time_point::max()) {
      const auto d = std::chrono::duration_cast<std::chrono::milliseconds>(kill_at - Clock::now()).count() + 1;
      timeout_ms = static_cast<int>(std::clamp<long long>(d, 0, 1000));
    }
    pollfd p{pipefd[0], POLLIN, 0};
    ::poll(&p, 1, timeout_ms);
    unsigned char sigs[64];
    ssize_t got;
    while ((got = ::read(pipefd[0], sigs, sizeof sigs)) > 0) {
      for (ssize_t j = 0; j < got; ++j) {
        const int sig = sigs[j];
        if (sig == SIGCHLD) continue;
        if (interrupted) {  // a second interrupt: no more waiting
          signal_all(SIGKILL);
          killed = true;
          continue;
        }
        interrupted = sig;
        std::fprintf(log, "yolov9: %s: forwarding it to the %d rank%s\n", signal_name(sig), alive,
                     alive == 1 ? "" : "s");
        std::fflush(log);
        signal_all(sig);
        if (kill_at == Clock::time_point::max()) kill_at = Clock::now() + grace;
      }
    }
  }
  restore();
  if (failing) return result;
  if (interrupted) return 128 + interrupted;
  return 0;
}

}  // namespace training::dist
