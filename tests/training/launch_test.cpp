// Launch detection (the environment of mpirun / srun / torchrun / the local spawner, and the
// errors that name the variable at fault), the world of a single process, the local spawner of
// `yolov9 train --device 0,1,2,3` (children and their environment, a child that exits 3, one that
// is killed, survivors that ignore SIGTERM, a busy --master-port before spawning, SIGTERM
// forwarding) and the MPI path's failure (a rank SIGKILLed mid-all-reduce under mpirun -np 3).
// Children are this binary re-executed with Y9_TEST_ROLE.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "apps/training/dist/allreduce.h"
#include "apps/training/dist/launch.h"
#include "apps/training/dist/tcp_comm.h"
#include "tests/training/proc_util.h"

namespace {

namespace fs = std::filesystem;
using proc_test::Clock;
using proc_test::Proc;
using training::dist::CommError;
using training::dist::Launcher;

// ---------------------------------------------------------------------------------------------
// The children

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream f(p.string() + ".tmp");
  f << text;
  f.close();
  fs::rename(p.string() + ".tmp", p);
}

// What the child's --device is.
std::string device_arg(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--device") return argv[i + 1];
  return "";
}

int child_main(int argc, char** argv) {
  const std::string role = std::getenv("Y9_TEST_ROLE");
  const char* dir_env = std::getenv("Y9_TEST_DIR");
  const fs::path dir = dir_env ? dir_env : ".";
  try {
    if (role == "spawn_ok") {  // report what we got, then form the socket world and all-reduce
      const auto li = training::dist::detect_launch();
      std::ostringstream s;
      s << "rank=" << li.rank << " world=" << li.world_size << " local=" << li.local_rank
        << " addr=" << li.master_addr << " port=" << li.master_port << " spawned=" << li.spawned
        << " fd=" << (li.inherited_listen_fd >= 0) << " device=" << device_arg(argc, argv) << " argv=";
      for (int i = 1; i < argc; ++i) s << argv[i] << (i + 1 < argc ? " " : "");
      auto c = training::dist::make_world(li);
      float x = static_cast<float>(c->rank() + 1);
      training::dist::ring_all_reduce(*c, &x, 1, engine::DType::F32, training::dist::ReduceOp::Sum);
      s << " sum=" << x;
      write_file(dir / ("rank" + std::to_string(li.rank)), s.str());
      return 0;
    }
    if (role == "spawn_ring_kill") {  // a socket world; rank 2 SIGKILLs itself mid-all-reduce
      auto c = training::dist::make_world(training::dist::detect_launch());
      std::vector<float> buf(1 << 18, 1.0f);
      std::thread killer;
      for (int k = 0;; ++k) {
        if (c->rank() == 2 && k == 20)
          killer = std::thread([] {
            ::poll(nullptr, 0, 1);
            ::raise(SIGKILL);
          });
        training::dist::ring_all_reduce(*c, buf.data(), static_cast<int64_t>(buf.size()), engine::DType::F32,
                                        training::dist::ReduceOp::Avg, 64 << 10);
      }
    }
    if (role == "spawn_fail") {  // rank Y9_TEST_VICTIM fails (exit 3 / SIGKILL); the others wait forever
      const int rank = std::atoi(std::getenv("RANK"));
      const int victim = std::atoi(std::getenv("Y9_TEST_VICTIM"));
      const std::string how = std::getenv("Y9_TEST_HOW");
      if (rank == victim) {
        // Wait until every survivor has started (its pid file), so that the test sees them stopped.
        const int world = std::atoi(std::getenv("WORLD_SIZE"));
        for (int r = 0; r < world; ++r)
          while (r != victim && !fs::exists(dir / ("pid" + std::to_string(r)))) ::poll(nullptr, 0, 10);
        if (how == "exit3") return 3;
        ::raise(SIGKILL);
      }
      if (std::getenv("Y9_TEST_IGNORE_TERM")) ::signal(SIGTERM, SIG_IGN);
      write_file(dir / ("pid" + std::to_string(rank)), std::to_string(::getpid()));
      for (;;) ::pause();
    }
    if (role == "spawn_wait") {  // waits for SIGTERM, notes it, exits 0
      static volatile sig_atomic_t got = 0;
      // SIGTERM stays blocked except inside sigsuspend, so it cannot land between the check and
      // the wait (pause() would then sleep forever).
      sigset_t term, old;
      sigemptyset(&term);
      sigaddset(&term, SIGTERM);
      ::sigprocmask(SIG_BLOCK, &term, &old);
      ::signal(SIGTERM, [](int) { got = 1; });
      const int rank = std::atoi(std::getenv("RANK"));
      write_file(dir / ("pid" + std::to_string(rank)), std::to_string(::getpid()));
      while (!got) ::sigsuspend(&old);
      write_file(dir / ("term" + std::to_string(rank)), "SIGTERM");
      return 0;
    }
    if (role == "spawner") {  // the parent of `yolov9 train --device a,b`: runs the spawner
      std::vector<std::string> args = {"/proc/self/exe", "train", "--device", "0,1"};
      ::setenv("Y9_TEST_ROLE", "spawn_wait", 1);
      return training::dist::spawn_local_ranks(args, {"0", "1"}, 0);
    }
    if (role == "mpi_kill") {  // under mpirun: rank 1 SIGKILLs itself mid-all-reduce
      auto c = training::dist::make_world(training::dist::detect_launch());
      std::vector<float> buf(1 << 18, 1.0f);
      std::thread killer;
      for (int k = 0;; ++k) {
        if (c->rank() == 1 && k == 20) {
          std::printf("victim ready\n");
          std::fflush(stdout);
          killer = std::thread([] {
            ::poll(nullptr, 0, 1);
            ::raise(SIGKILL);
          });
        }
        training::dist::ring_all_reduce(*c, buf.data(), static_cast<int64_t>(buf.size()), engine::DType::F32,
                                        training::dist::ReduceOp::Avg, 64 << 10);
      }
    }
    std::fprintf(stderr, "unknown role %s\n", role.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "yolov9: error: %s\n", e.what());
    return 1;
  }
}

// ---------------------------------------------------------------------------------------------
// Environment helpers

// Sets the given variables (value nullptr: unset) for the scope, and restores them after.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    static const char* kAll[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                 "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "Y9_LAUNCHED_BY", "Y9_RUN_ID",
                                 "Y9_MASTER_FD", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                                 "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_SIZE", "PMI_RANK",
                                 "PMIX_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
                                 "MPI_LOCALRANKID", "MPI_LOCALNRANKS"};
    for (const char* n : kAll) {
      const char* v = std::getenv(n);
      saved_.emplace_back(n, v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(n);
    }
    for (auto& [k, v] : vars)
      if (v) ::setenv(k, v, 1);
  }
  ~ScopedEnv() {
    for (auto& [k, v] : saved_) {
      if (v)
        ::setenv(k.c_str(), v->c_str(), 1);
      else
        ::unsetenv(k.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

std::string config_error(std::initializer_list<std::pair<const char*, const char*>> vars) {
  ScopedEnv e(vars);
  try {
    training::dist::detect_launch();
  } catch (const engine::ConfigError& err) {
    return err.message();
  }
  return "(no error)";
}

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// ---------------------------------------------------------------------------------------------
// Detection

TEST(DetectLaunch, SingleProcessWhenNothingIsSet) {
  ScopedEnv e({});
  const auto li = training::dist::detect_launch();
  EXPECT_EQ(li.launcher, Launcher::Single);
  EXPECT_EQ(li.rank, 0);
  EXPECT_EQ(li.world_size, 1);
  EXPECT_FALSE(li.distributed());
  auto w = training::dist::make_world(li);
  ASSERT_NE(w, nullptr);
  EXPECT_STREQ(w->backend(), "self");
  EXPECT_EQ(w->world_size(), 1);
  float x = 3;
  training::dist::all_reduce(*w, &x, 1, engine::DType::F32, training::dist::ReduceOp::Avg);
  w->barrier();
  w->broadcast(&x, sizeof x, 0);
  float g = 0;
  w->all_gather(&x, sizeof x, &g);
  EXPECT_EQ(g, 3.0f);
  EXPECT_THROW(w->send(&x, 4, 1), engine::Error);
  EXPECT_EQ(w->duplicate()->world_size(), 1);
}

TEST(DetectLaunch, TorchrunVariables) {
  ScopedEnv e({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
               {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RUN_ID", "none"},
               {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}});
  const auto li = training::dist::detect_launch();
  EXPECT_EQ(li.launcher, Launcher::Env);  // torchrun inside a Slurm allocation stays on sockets
  EXPECT_EQ(li.rank, 3);
  EXPECT_EQ(li.world_size, 8);
  EXPECT_EQ(li.local_rank, 1);
  EXPECT_EQ(li.local_world_size, 2);
  EXPECT_EQ(li.master_addr, "10.0.0.1");
  EXPECT_EQ(li.master_port, 29500);
  EXPECT_TRUE(li.agent_store);
  EXPECT_EQ(li.run_id, "none");
  EXPECT_TRUE(contains(li.str(), "yolov9 listens on 29501")) << li.str();
}

TEST(DetectLaunch, MpiVariables) {
  {
    ScopedEnv e({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"RANK", "7"}});
    const auto li = training::dist::detect_launch();
    EXPECT_EQ(li.launcher, Launcher::Mpi);
    EXPECT_EQ(li.rank, 2);
    EXPECT_EQ(li.world_size, 4);
    EXPECT_EQ(li.local_rank, 0);
    EXPECT_EQ(li.local_world_size, 2);
  }
  {
    ScopedEnv e({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS_PER_NODE", "4"}});
    const auto li = training::dist::detect_launch();
    EXPECT_EQ(li.launcher, Launcher::Mpi);
    EXPECT_EQ(li.rank, 5);
    EXPECT_EQ(li.world_size, 8);
    EXPECT_EQ(li.local_rank, 1);
    EXPECT_EQ(li.local_world_size, 4);
  }
}

TEST(DetectLaunch, ErrorsNameTheVariableAndValue) {
  EXPECT_EQ(config_error({{"RANK", "5"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}),
            "RANK=5 is not below WORLD_SIZE=4 (the ranks are 0..3)");
  EXPECT_TRUE(contains(config_error({{"RANK", "2"}}), "RANK=2 is set but WORLD_SIZE is not"));
  EXPECT_TRUE(contains(config_error({{"WORLD_SIZE", "4"}}), "WORLD_SIZE=4 is set but RANK is not"));
  EXPECT_EQ(config_error({{"RANK", "one"}, {"WORLD_SIZE", "4"}}), "RANK=one is not an integer");
  EXPECT_EQ(config_error({{"RANK", "0"}, {"WORLD_SIZE", "0"}}), "WORLD_SIZE=0 must be at least 1");
  EXPECT_EQ(config_error({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}), "RANK=-1 is negative");
  EXPECT_TRUE(contains(config_error({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}}),
                       "MASTER_ADDR is not set (RANK=1, WORLD_SIZE=2)"));
  EXPECT_TRUE(contains(config_error({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}),
                       "MASTER_PORT is not set (RANK=1, WORLD_SIZE=2)"));
  EXPECT_EQ(config_error({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}),
            "MASTER_PORT=70000 is not a port (1-65535)");
  EXPECT_EQ(config_error({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "2"},
                          {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}),
            "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2");
  EXPECT_EQ(config_error({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "x"}}),
            "OMPI_COMM_WORLD_RANK=x is not an integer");
}

TEST(DetectLaunch, WorldSizeOneIsASingleProcessWorld) {
  ScopedEnv e({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_RUN_ID", "x"}});
  const auto li = training::dist::detect_launch();
  EXPECT_EQ(li.launcher, Launcher::Env);
  EXPECT_FALSE(li.distributed());
  EXPECT_STREQ(training::dist::make_world(li)->backend(), "self");
}

TEST(DeviceList, ParsesAndRejects) {
  EXPECT_EQ(training::dist::parse_device_list("0,1,2,3"), (std::vector<std::string>{"0", "1", "2", "3"}));
  EXPECT_EQ(training::dist::parse_device_list(" 0 , 1"), (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(training::dist::parse_device_list("cpu"), (std::vector<std::string>{"cpu"}));
  EXPECT_TRUE(training::dist::parse_device_list("").empty());
  EXPECT_THROW(training::dist::parse_device_list("0,,1"), engine::ConfigError);
  EXPECT_THROW(training::dist::parse_device_list("0,0"), engine::ConfigError);
}

// ---------------------------------------------------------------------------------------------
// The local spawner

struct TempDir {
  fs::path path;
  TempDir() {
    char t[] = "/tmp/y9_launch_XXXXXX";
    path = ::mkdtemp(t);
  }
  ~TempDir() { fs::remove_all(path); }
};

// Runs spawn_local_ranks with the log in a temporary file; returns (code, log, seconds).
struct SpawnResult {
  int code;
  std::string log;
  double seconds;
};
SpawnResult run_spawn(const std::vector<std::string>& args, const std::vector<std::string>& devices, int port,
                      std::initializer_list<std::pair<const char*, const char*>> vars, double grace_s = 10) {
  ScopedEnv e({});
  for (auto& [k, v] : vars) ::setenv(k, v, 1);
  std::FILE* log = std::tmpfile();
  training::dist::SpawnOptions o;
  o.log = log;
  o.grace_s = grace_s;
  const auto t0 = Clock::now();
  SpawnResult r{training::dist::spawn_local_ranks(args, devices, port, o), "", proc_test::since(t0)};
  for (auto& [k, v] : vars) ::unsetenv(k);
  std::rewind(log);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, log)) > 0) r.log.append(buf, n);
  std::fclose(log);
  std::printf("[ measured ] spawner returned %d after %.3f s; its lines:\n%s", r.code, r.seconds, r.log.c_str());
  return r;
}

// Every pid listed in dir/pid* is gone (the spawner reaped it).
void expect_survivors_gone(const fs::path& dir, int expected_files) {
  int n = 0;
  for (auto& f : fs::directory_iterator(dir)) {
    if (f.path().filename().string().rfind("pid", 0) != 0) continue;
    ++n;
    const pid_t pid = std::stoi(read_file(f.path()));
    EXPECT_NE(::kill(pid, 0), 0) << "rank with pid " << pid << " is still alive";
  }
  EXPECT_EQ(n, expected_files);
}

TEST(SpawnLocalRanks, OneChildPerDeviceFormsTheWorld) {
  TempDir d;
  const int port = training::dist::pick_free_port();
  const auto r = run_spawn({"/proc/self/exe", "train", "--batch", "8", "--device", "0,1,2", "--epochs", "1"},
                           {"0", "1", "2"}, port, {{"Y9_TEST_ROLE", "spawn_ok"}, {"Y9_TEST_DIR", d.path.c_str()}});
  EXPECT_EQ(r.code, 0) << r.log;
  for (int i = 0; i < 3; ++i) {
    const std::string s = read_file(d.path / ("rank" + std::to_string(i)));
    const std::string dev = std::to_string(i);
    EXPECT_TRUE(contains(s, "rank=" + dev + " world=3 local=" + dev + " addr=127.0.0.1 port=" + std::to_string(port) +
                                " spawned=1"))
        << s;
    EXPECT_TRUE(contains(s, "fd=" + std::string(i == 0 ? "1" : "0"))) << s;
    EXPECT_TRUE(contains(s, "argv=train --batch 8 --device " + dev + " --epochs 1 sum=6")) << s;
  }
}

TEST(SpawnLocalRanks, PicksAFreePortAndRewritesDeviceEqualsForm) {
  TempDir d;
  const auto r = run_spawn({"/proc/self/exe", "train", "--device=a,b"}, {"a", "b"}, 0,
                           {{"Y9_TEST_ROLE", "spawn_ok"}, {"Y9_TEST_DIR", d.path.c_str()}});
  EXPECT_EQ(r.code, 0) << r.log;
  const std::string s0 = read_file(d.path / "rank0"), s1 = read_file(d.path / "rank1");
  EXPECT_TRUE(contains(s0, "argv=train --device a sum=3")) << s0;
  EXPECT_TRUE(contains(s1, "argv=train --device b sum=3")) << s1;
  EXPECT_FALSE(contains(s0, "port=0 ")) << s0;
}

TEST(SpawnLocalRanks, ChildExitingWithCode3StopsTheOthers) {
  TempDir d;
  const auto r = run_spawn({"/proc/self/exe", "train", "--device", "4,5,6"}, {"4", "5", "6"}, 0,
                           {{"Y9_TEST_ROLE", "spawn_fail"}, {"Y9_TEST_VICTIM", "1"}, {"Y9_TEST_HOW", "exit3"},
                            {"Y9_TEST_DIR", d.path.c_str()}});
  EXPECT_EQ(r.code, 3);
  EXPECT_TRUE(contains(r.log, "yolov9: rank 1 (device 5) exited with code 3\n")) << r.log;
  EXPECT_TRUE(contains(r.log, "stopping the other 2 ranks")) << r.log;
  EXPECT_FALSE(contains(r.log, "still running")) << r.log;  // the survivors ended on SIGTERM, before the grace
  EXPECT_LT(r.seconds, 30.0);
  expect_survivors_gone(d.path, 2);
}

TEST(SpawnLocalRanks, KilledChildIsNamedWithItsSignal) {
  TempDir d;
  const auto r = run_spawn({"/proc/self/exe", "train", "--device", "0,1,2"}, {"0", "1", "2"}, 0,
                           {{"Y9_TEST_ROLE", "spawn_fail"}, {"Y9_TEST_VICTIM", "2"}, {"Y9_TEST_HOW", "kill"},
                            {"Y9_TEST_DIR", d.path.c_str()}});
  EXPECT_EQ(r.code, 128 + SIGKILL);
  EXPECT_TRUE(contains(r.log, "yolov9: rank 2 (device 2) was killed by signal 9 (SIGKILL)\n")) << r.log;
  EXPECT_FALSE(contains(r.log, "still running")) << r.log;
  EXPECT_LT(r.seconds, 30.0);
  expect_survivors_gone(d.path, 2);
}

// The realistic case: `--device 0,1,2` trains, rank 2 dies mid-all-reduce; its peers fail with a
// CommError (exit 1) at about the same time, and the spawner still names the rank that died.
TEST(SpawnLocalRanks, RankKilledMidAllReduceIsNamedFirst) {
  const auto r = run_spawn({"/proc/self/exe", "train", "--device", "0,1,2"}, {"0", "1", "2"}, 0,
                           {{"Y9_TEST_ROLE", "spawn_ring_kill"}});
  EXPECT_EQ(r.code, 128 + SIGKILL);
  EXPECT_EQ(r.log.rfind("yolov9: rank 2 (device 2) was killed by signal 9 (SIGKILL)\n", 0), 0u) << r.log;
  EXPECT_LT(r.seconds, 60.0);
}

TEST(SpawnLocalRanks, SurvivorsIgnoringSigtermGetSigkillAfterTheGrace) {
  TempDir d;
  const auto r = run_spawn({"/proc/self/exe", "train", "--device", "0,1"}, {"0", "1"}, 0,
                           {{"Y9_TEST_ROLE", "spawn_fail"}, {"Y9_TEST_VICTIM", "0"}, {"Y9_TEST_HOW", "exit3"},
                            {"Y9_TEST_IGNORE_TERM", "1"}, {"Y9_TEST_DIR", d.path.c_str()}},
                           /*grace_s=*/1.0);
  EXPECT_EQ(r.code, 3);
  EXPECT_TRUE(contains(r.log, "yolov9: rank 0 (device 0) exited with code 3\n")) << r.log;
  EXPECT_TRUE(contains(r.log, "1 rank still running after 1 s: SIGKILL")) << r.log;
  EXPECT_GE(r.seconds, 1.0);
  EXPECT_LT(r.seconds, 15.0);
  expect_survivors_gone(d.path, 1);
}

TEST(SpawnLocalRanks, BusyMasterPortFailsBeforeSpawning) {
  TempDir d;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  ScopedEnv e({});
  ::setenv("Y9_TEST_ROLE", "spawn_ok", 1);
  ::setenv("Y9_TEST_DIR", d.path.c_str(), 1);
  const auto t0 = Clock::now();
  try {
    training::dist::spawn_local_ranks({"/proc/self/exe", "train", "--device", "0,1"}, {"0", "1"}, port);
    ADD_FAILURE() << "no error for a busy --master-port";
  } catch (const CommError& err) {
    std::printf("[ measured ] busy --master-port refused after %.3f s: %s\n", proc_test::since(t0),
                err.message().c_str());
    EXPECT_TRUE(contains(err.message(), "--master-port " + std::to_string(port) + ": port " + std::to_string(port) +
                                            " is already in use; another run may hold it"))
        << err.message();
  }
  ::unsetenv("Y9_TEST_ROLE");
  ::unsetenv("Y9_TEST_DIR");
  EXPECT_TRUE(fs::is_empty(d.path)) << "a child was started";
  ::close(fd);
}

TEST(SpawnLocalRanks, ForwardsSigtermToTheChildren) {
  TempDir d;
  Proc spawner = proc_test::start({""}, {{"Y9_TEST_ROLE", "spawner"}, {"Y9_TEST_DIR", d.path.string()}});
  // Both children are up when their pid files exist; then stop the spawner as a scheduler would.
  const auto t0 = Clock::now();
  while (!(fs::exists(d.path / "pid0") && fs::exists(d.path / "pid1")) && proc_test::since(t0) < 20 && !spawner.done)
    proc_test::pump({&spawner}, 20, t0);
  ASSERT_TRUE(fs::exists(d.path / "pid1")) << spawner.out;
  ::kill(spawner.pid, SIGTERM);
  proc_test::wait_all({&spawner}, Clock::now(), 30);
  std::printf("[ measured ] spawner after SIGTERM: %s, output:\n%s", spawner.describe().c_str(), spawner.out.c_str());
  EXPECT_TRUE(WIFEXITED(spawner.status) && WEXITSTATUS(spawner.status) == 128 + SIGTERM) << spawner.describe();
  EXPECT_TRUE(contains(spawner.out, "yolov9: SIGTERM: forwarding it to the 2 ranks")) << spawner.out;
  EXPECT_EQ(read_file(d.path / "term0"), "SIGTERM");
  EXPECT_EQ(read_file(d.path / "term1"), "SIGTERM");
}

// ---------------------------------------------------------------------------------------------
// The MPI path: OpenMPI's error manager ends the job when a rank dies.

std::string find_in_path(const std::string& prog) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  std::string dir;
  while (std::getline(ss, dir, ':'))
    if (!dir.empty() && ::access((dir + "/" + prog).c_str(), X_OK) == 0) return dir + "/" + prog;
  return "";
}

TEST(MpiFailure, KilledRankEndsTheJobNamingIt) {
  const std::string mpirun = find_in_path("mpirun");
  if (mpirun.empty()) GTEST_SKIP() << "mpirun is not installed";
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  ASSERT_GT(n, 0);
  self[n] = 0;
  Proc job = proc_test::start({mpirun, "--oversubscribe", "--bind-to", "none", "-np", "3", self},
                              {{"Y9_TEST_ROLE", "mpi_kill"},
                               {"OMPI_ALLOW_RUN_AS_ROOT", "1"},
                               {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"},
                               {"OMP_NUM_THREADS", "1"},
                               {"OMPI_MCA_btl_vader_single_copy_mechanism", "none"}});
  ASSERT_TRUE(proc_test::wait_for_text(job, "victim ready", 60)) << job.out;
  const auto t0 = Clock::now();
  proc_test::wait_all({&job}, t0, 60);
  std::printf("[ measured ] mpirun ended %.3f s after rank 1's SIGKILL (%s); its output:\n%s", job.exit_s,
              job.describe().c_str(), job.out.c_str());
  EXPECT_FALSE(job.killed_by_test) << "mpirun still ran 60 s after the failure";
  EXPECT_TRUE(WIFEXITED(job.status) && WEXITSTATUS(job.status) != 0) << job.describe();
  // OpenMPI 4.1's errmgr: "mpirun noticed that process rank 1 with PID ... on node ... exited on
  // signal 9 (Killed)."
  EXPECT_TRUE(contains(job.out, "process rank 1 with PID")) << job.out;
  EXPECT_TRUE(contains(job.out, "exited on signal 9 (Killed)")) << job.out;
  EXPECT_LT(job.exit_s, 60.0);
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("Y9_TEST_ROLE")) return child_main(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
