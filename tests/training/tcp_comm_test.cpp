// The socket communicator with real processes (this binary re-executed per rank, Y9_TEST_ROLE):
// our ring and halving-doubling all-reduces are exact over sockets (2 and 3 ranks, F32 / BF16 /
// F16 / F64, counts 0, 1, n-1, n+1, 1003 and more), the collectives and duplicates work, and the
// failures of issue 13 end every rank fast with a message naming the rank at fault: a rank
// SIGKILLed mid-all-reduce, a rank that aborts, a busy MASTER_PORT, a rank that never joins,
// rank 0 missing, ranks that disagree on WORLD_SIZE or on a message size.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "apps/training/dist/allreduce.h"
#include "apps/training/dist/launch.h"
#include "apps/training/dist/tcp_comm.h"
#include "tests/training/payload_util.h"
#include "tests/training/proc_util.h"

namespace {

using engine::DType;
using proc_test::Clock;
using proc_test::Proc;
using training::dist::AllReduceAlgo;
using training::dist::CommError;
using training::dist::Communicator;
using training::dist::ReduceOp;

// ---------------------------------------------------------------------------------------------
// The ranks (child processes)

using payload_test::decode;
using payload_test::encode;
using payload_test::value;

int failures = 0;
#define CHILD_EXPECT(cond, ...)                                                    \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      ++failures;                                                                  \
      std::fprintf(stderr, "CHECK FAILED (%s:%d): %s ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                           \
      std::fprintf(stderr, "\n");                                                  \
    }                                                                              \
  } while (0)

// Exact sums (small integers are exact in every dtype) and bitwise-equal results on every rank.
void check_all_reduce(Communicator& c, AllReduceAlgo algo, DType dt, int64_t count, size_t slice) {
  const int W = c.world_size();
  std::vector<double> mine(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) mine[static_cast<size_t>(i)] = value(c.rank(), i);
  std::vector<uint8_t> buf = encode(mine, dt);
  training::dist::AllReduceOptions o;
  o.slice_bytes = slice;
  training::dist::all_reduce(c, buf.data(), count, dt, ReduceOp::Sum, algo, o);
  int bad = 0;
  for (int64_t i = 0; i < count && bad < 3; ++i) {
    double sum = 0;
    for (int r = 0; r < W; ++r) sum += value(r, i);
    const double got = decode(buf, dt, static_cast<size_t>(i));
    if (got != sum) ++bad;
    CHILD_EXPECT(got == sum, "rank %d algo %s dtype %s count %lld element %lld: %g != %g", c.rank(),
                 training::dist::allreduce_algo_name(algo), engine::dtype_name(dt), static_cast<long long>(count),
                 static_cast<long long>(i), got, sum);
  }
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : buf) h = (h ^ b) * 1099511628211ull;
  std::vector<uint64_t> all(static_cast<size_t>(W));
  c.all_gather(&h, sizeof h, all.data());
  for (int r = 0; r < W; ++r) CHILD_EXPECT(all[static_cast<size_t>(r)] == all[0], "rank %d's result differs from rank 0's", r);
}

int role_exact(Communicator& c) {
  const int64_t W = c.world_size();
  for (AllReduceAlgo algo : {AllReduceAlgo::Ring, AllReduceAlgo::HalvingDoubling, AllReduceAlgo::Library})
    for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::F64})
      for (int64_t n : {int64_t(0), int64_t(1), W - 1, W, W + 1, int64_t(1003), int64_t(65536 + 7)})
        check_all_reduce(c, algo, dt, n, 256 << 10);
  // Deep pipelining: 3-element slices, two in flight.
  for (AllReduceAlgo algo : {AllReduceAlgo::Ring, AllReduceAlgo::HalvingDoubling})
    for (int64_t n : {int64_t(97), int64_t(1001)}) check_all_reduce(c, algo, DType::F32, n, 12);
  // Large buffers: both directions of every link busy at once, beyond the socket buffers.
  check_all_reduce(c, AllReduceAlgo::Ring, DType::F32, (int64_t(1) << 22) + 5, 1 << 20);
  {
    // Simultaneous 32 MiB sends in both directions between the same two ranks, in one exchange.
    const size_t bytes = size_t(32) << 20;
    std::vector<uint8_t> out(bytes, static_cast<uint8_t>(c.rank() + 1)), in(bytes, 0);
    const int peer = c.rank() ^ 1;
    if (peer < c.world_size()) {
      c.sendrecv(out.data(), bytes, peer, in.data(), bytes, peer);
      CHILD_EXPECT(in.front() == peer + 1 && in.back() == peer + 1, "rank %d: sendrecv payload wrong", c.rank());
    }
  }
  // Broadcast from every root, barrier, all_gather, point-to-point with empty messages.
  for (int root = 0; root < c.world_size(); ++root) {
    std::vector<int32_t> v(100000, c.rank() == root ? 42 + root : -1);
    c.broadcast(v.data(), v.size() * sizeof(int32_t), root);
    CHILD_EXPECT(v.front() == 42 + root && v.back() == 42 + root, "broadcast from %d: got %d", root, v.back());
  }
  c.barrier();
  int32_t mine = c.rank() * 3;
  std::vector<int32_t> all(static_cast<size_t>(c.world_size()));
  c.all_gather(&mine, sizeof mine, all.data());
  for (int r = 0; r < c.world_size(); ++r) CHILD_EXPECT(all[static_cast<size_t>(r)] == r * 3, "all_gather[%d]", r);
  if (c.rank() == 0) {
    c.send(nullptr, 0, 1);
    int32_t x = 7;
    c.send(&x, sizeof x, 1);
  } else if (c.rank() == 1) {
    c.recv(nullptr, 0, 0);
    int32_t x = 0;
    c.recv(&x, sizeof x, 0);
    CHILD_EXPECT(x == 7, "recv got %d", x);
  }
  // Two threads, two communicators: their traffic never mixes.
  auto dup = c.duplicate();
  std::vector<float> a(5000, static_cast<float>(c.rank() + 1)), b(777, static_cast<float>(10 * (c.rank() + 1)));
  std::thread t([&] {
    for (int k = 0; k < 20; ++k)
      training::dist::ring_all_reduce(*dup, a.data(), static_cast<int64_t>(a.size()), DType::F32, ReduceOp::Avg, 512);
  });
  for (int k = 0; k < 20; ++k)
    training::dist::halving_doubling_all_reduce(c, b.data(), static_cast<int64_t>(b.size()), DType::F32, ReduceOp::Avg, 256);
  t.join();
  const float ea = static_cast<float>(c.world_size() + 1) / 2.0f;
  CHILD_EXPECT(std::abs(a[0] - ea) < 1e-4 && std::abs(a.back() - ea) < 1e-4, "dup ring avg %g", a[0]);
  CHILD_EXPECT(std::abs(b[0] - 10 * ea) < 1e-3, "hd avg %g", b[0]);
  c.barrier();
  return failures == 0 ? 0 : 1;
}

// Repeated all-reduces until a failure. Rank Y9_TEST_VICTIM: after Y9_TEST_ITERS iterations,
// "kill" SIGKILLs itself from a second thread while the main thread is inside an all-reduce;
// "abort" calls abort(7) between two all-reduces (its peers are already inside the next one).
int role_loop(Communicator& c) {
  const int victim = std::atoi(std::getenv("Y9_TEST_VICTIM"));
  const int iters = std::atoi(std::getenv("Y9_TEST_ITERS"));
  const std::string how = std::getenv("Y9_TEST_HOW");
  std::vector<float> buf(1 << 18, 1.0f);
  std::thread killer;
  for (int k = 0;; ++k) {
    if (c.rank() == victim && k == iters) {
      std::printf("victim ready\n");
      std::fflush(stdout);
      if (how == "abort") c.abort(7);
      killer = std::thread([] {
        std::mt19937 rng(std::random_device{}());
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));  // a random point, not a sync
        ::raise(SIGKILL);
      });
    }
    training::dist::ring_all_reduce(c, buf.data(), static_cast<int64_t>(buf.size()), DType::F32, ReduceOp::Avg,
                                    64 << 10);
  }
}

int child_main() {
  const std::string role = std::getenv("Y9_TEST_ROLE");
  try {
    const training::dist::LaunchInfo li = training::dist::detect_launch();
    if (role == "mismatch") {  // rank 0 expects 100 bytes, rank 1 sends 200
      auto c = training::dist::make_world(li);
      std::vector<char> b(200);
      if (c->rank() == 0) c->recv(b.data(), 100, 1);
      if (c->rank() == 1) c->send(b.data(), 200, 0);
      c->barrier();
      return 0;
    }
    auto c = training::dist::make_world(li);
    if (role == "exact") return role_exact(*c);
    if (role == "loop") return role_loop(*c);
    if (role == "join") {
      c->barrier();
      return 0;
    }
    std::fprintf(stderr, "unknown role %s\n", role.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "yolov9: error: %s\n", e.what());
    return 1;
  }
}

// ---------------------------------------------------------------------------------------------
// The tests (parent side)

std::map<std::string, std::string> rank_env(int rank, int world, int port, const std::string& role,
                                            std::map<std::string, std::string> extra = {}) {
  extra["RANK"] = std::to_string(rank);
  extra["WORLD_SIZE"] = std::to_string(world);
  extra["LOCAL_RANK"] = std::to_string(rank);
  extra["MASTER_ADDR"] = "127.0.0.1";
  extra["MASTER_PORT"] = std::to_string(port);
  extra["Y9_TEST_ROLE"] = role;
  extra["OMP_NUM_THREADS"] = "1";
  return extra;
}

std::vector<Proc> start_world(int world, const std::string& role, std::map<std::string, std::string> extra = {},
                              std::vector<int> ranks = {}) {
  const int port = training::dist::pick_free_port();
  if (ranks.empty())
    for (int r = 0; r < world; ++r) ranks.push_back(r);
  std::vector<Proc> ps;
  for (int r : ranks) ps.push_back(proc_test::start({""}, rank_env(r, world, port, role, extra)));
  return ps;
}

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

class SocketExact : public ::testing::TestWithParam<int> {};

TEST_P(SocketExact, AllReduceAndCollectivesOverSockets) {
  const auto t0 = Clock::now();
  auto ps = start_world(GetParam(), "exact");
  proc_test::wait_all(proc_test::ptrs(ps), t0, 120);
  for (size_t r = 0; r < ps.size(); ++r)
    EXPECT_TRUE(ps[r].exited_ok()) << "rank " << r << ": " << ps[r].describe() << "\n" << ps[r].out;
  std::printf("[ measured ] %d socket ranks: every check in %.2f s\n", GetParam(), proc_test::since(t0));
}

INSTANTIATE_TEST_SUITE_P(Ranks, SocketExact, ::testing::Values(2, 3));

struct KillCase {
  int world, victim;
  const char* how;
};

void PrintTo(const KillCase& k, std::ostream* os) { *os << k.how << " rank " << k.victim << " of " << k.world; }

class SocketFailure : public ::testing::TestWithParam<KillCase> {};

// (a) A rank dies (SIGKILL mid-all-reduce) or aborts: every other rank exits non-zero within 60 s
// and its message names that rank.
TEST_P(SocketFailure, EveryOtherRankEndsNamingIt) {
  const KillCase k = GetParam();
  auto ps = start_world(k.world, "loop",
                        {{"Y9_TEST_VICTIM", std::to_string(k.victim)}, {"Y9_TEST_ITERS", "20"}, {"Y9_TEST_HOW", k.how}});
  ASSERT_TRUE(proc_test::wait_for_text(ps[static_cast<size_t>(k.victim)], "victim ready", 60))
      << ps[static_cast<size_t>(k.victim)].out;
  const auto t0 = Clock::now();
  proc_test::wait_all(proc_test::ptrs(ps), t0, 60);
  const std::string expect = std::string(k.how) == "abort"
                                 ? "rank " + std::to_string(k.victim) + " aborted (exit code 7)"
                                 : "rank " + std::to_string(k.victim) + " closed its connection (it died or was killed)";
  double slowest = 0;
  for (int r = 0; r < k.world; ++r) {
    const Proc& p = ps[static_cast<size_t>(r)];
    if (r == k.victim) {
      if (std::string(k.how) == "kill") {
        EXPECT_TRUE(WIFSIGNALED(p.status) && WTERMSIG(p.status) == SIGKILL) << p.describe();
      } else {
        EXPECT_TRUE(WIFEXITED(p.status) && WEXITSTATUS(p.status) == 7) << p.describe();
      }
      continue;
    }
    EXPECT_FALSE(p.killed_by_test) << "rank " << r << " still ran 60 s after the failure:\n" << p.out;
    EXPECT_TRUE(WIFEXITED(p.status) && WEXITSTATUS(p.status) != 0) << "rank " << r << ": " << p.describe();
    EXPECT_TRUE(contains(p.out, expect)) << "rank " << r << " does not say '" << expect << "':\n" << p.out;
    EXPECT_LT(p.exit_s, 60.0);
    slowest = std::max(slowest, p.exit_s);
    std::printf("[ measured ] rank %d ended %.3f s after the victim's fault: %s", r, p.exit_s, p.out.c_str());
  }
  std::printf("[ measured ] world %d, rank %d %s: slowest rank ended after %.3f s\n", k.world, k.victim, k.how, slowest);
}

INSTANTIATE_TEST_SUITE_P(Cases, SocketFailure,
                         ::testing::Values(KillCase{4, 2, "kill"}, KillCase{3, 0, "kill"}, KillCase{4, 3, "kill"},
                                           KillCase{3, 1, "abort"}),
                         [](const auto& info) {
                           return std::string(info.param.how) + "_rank" + std::to_string(info.param.victim) + "_of" +
                                  std::to_string(info.param.world);
                         });

// (b) A busy MASTER_PORT: rank 0 says which port and that another run may hold it, at once; the
// other ranks, which reach whatever holds the port, end within the deadline saying so too.
TEST(SocketRendezvous, BusyMasterPortIsNamedAtOnce) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  const std::string p = std::to_string(port);

  training::dist::TcpWorldOptions o;
  o.rank = 0;
  o.world_size = 2;
  o.master_port = port;
  o.timeout_s = 2;
  auto t0 = Clock::now();
  try {
    training::dist::TcpCommunicator::create(o);
    ADD_FAILURE() << "no error for a busy port";
  } catch (const CommError& e) {
    const std::string m = e.message();
    std::printf("[ measured ] rank 0, busy MASTER_PORT, after %.3f s: %s\n", proc_test::since(t0), m.c_str());
    EXPECT_TRUE(contains(m, "MASTER_PORT=" + p)) << m;
    EXPECT_TRUE(contains(m, "port " + p + " is already in use; another run may hold it")) << m;
  }
  EXPECT_LT(proc_test::since(t0), 1.0);

  // The spawner's check, before any child starts: the --master-port wording.
  t0 = Clock::now();
  try {
    training::dist::check_port_free(port);
    ADD_FAILURE() << "no error for a busy port";
  } catch (const CommError& e) {
    const std::string m = e.message();
    std::printf("[ measured ] --master-port check after %.3f s: %s\n", proc_test::since(t0), m.c_str());
    EXPECT_EQ(m, "--master-port " + p + ": port " + p +
                     " is already in use; another run may hold it. Pick another port with --master-port, or omit "
                     "--master-port and yolov9 picks a free one");
  }

  // Rank 1 reaches the foreign listener, which never answers: it ends within the deadline.
  t0 = Clock::now();
  Proc r1 = proc_test::start({""}, rank_env(1, 2, port, "join", {{"Y9_DIST_TIMEOUT_S", "2"}}));
  proc_test::wait_all({&r1}, t0, 30);
  std::printf("[ measured ] rank 1 against the busy port ended after %.3f s: %s", r1.exit_s, r1.out.c_str());
  EXPECT_TRUE(WIFEXITED(r1.status) && WEXITSTATUS(r1.status) != 0) << r1.describe();
  EXPECT_TRUE(contains(r1.out, "did not answer as rank 0 of a yolov9 run")) << r1.out;
  EXPECT_TRUE(contains(r1.out, "another program or another run may hold port " + p)) << r1.out;
  ::close(fd);
}

// (c) A rank that never joins: every rank that did ends within the deadline, naming it.
TEST(SocketRendezvous, RankThatNeverJoinsIsNamed) {
  const auto t0 = Clock::now();
  auto ps = start_world(3, "join", {{"Y9_DIST_TIMEOUT_S", "2"}}, {0, 1});
  proc_test::wait_all(proc_test::ptrs(ps), t0, 30);
  for (size_t i = 0; i < ps.size(); ++i) {
    std::printf("[ measured ] rank %zu ended after %.3f s: %s", i, ps[i].exit_s, ps[i].out.c_str());
    EXPECT_TRUE(WIFEXITED(ps[i].status) && WEXITSTATUS(ps[i].status) != 0) << ps[i].describe();
    EXPECT_TRUE(contains(ps[i].out, "rank 2 did not join within 2 s (joined: 0, 1)")) << ps[i].out;
    EXPECT_LT(ps[i].exit_s, 15.0);  // a 2 s deadline after start-up; the margin is for a loaded machine
  }
}

TEST(SocketRendezvous, MissingRankZeroIsNamed) {
  const auto t0 = Clock::now();
  auto ps = start_world(3, "join", {{"Y9_DIST_TIMEOUT_S", "2"}}, {1, 2});
  proc_test::wait_all(proc_test::ptrs(ps), t0, 30);
  for (auto& p : ps) {
    std::printf("[ measured ] ended after %.3f s: %s", p.exit_s, p.out.c_str());
    EXPECT_TRUE(WIFEXITED(p.status) && WEXITSTATUS(p.status) != 0) << p.describe();
    EXPECT_TRUE(contains(p.out, "could not reach rank 0 at 127.0.0.1:")) << p.out;
    EXPECT_LT(p.exit_s, 15.0);  // a 2 s deadline after start-up; the margin is for a loaded machine
  }
}

TEST(SocketRendezvous, WorldSizeDisagreementEndsEveryRank) {
  const int port = training::dist::pick_free_port();
  const auto t0 = Clock::now();
  std::vector<Proc> ps;
  ps.push_back(proc_test::start({""}, rank_env(0, 2, port, "join", {{"Y9_DIST_TIMEOUT_S", "10"}})));
  ps.push_back(proc_test::start({""}, rank_env(1, 3, port, "join", {{"Y9_DIST_TIMEOUT_S", "10"}})));
  proc_test::wait_all(proc_test::ptrs(ps), t0, 30);
  for (auto& p : ps) {
    std::printf("[ measured ] ended after %.3f s: %s", p.exit_s, p.out.c_str());
    EXPECT_TRUE(WIFEXITED(p.status) && WEXITSTATUS(p.status) != 0) << p.describe();
    EXPECT_TRUE(contains(p.out, "has WORLD_SIZE=3 but rank 0 has WORLD_SIZE=2")) << p.out;
    EXPECT_LT(p.exit_s, 15.0);  // at once after start-up; the margin is for a loaded machine
  }
}

TEST(SocketWorld, MessageSizeMismatchIsAnError) {
  const auto t0 = Clock::now();
  auto ps = start_world(2, "mismatch");
  proc_test::wait_all(proc_test::ptrs(ps), t0, 30);
  EXPECT_TRUE(WIFEXITED(ps[0].status) && WEXITSTATUS(ps[0].status) != 0) << ps[0].describe();
  EXPECT_TRUE(contains(ps[0].out, "expected a message of 100 bytes, got one of 200 bytes")) << ps[0].out;
  EXPECT_TRUE(WIFEXITED(ps[1].status) && WEXITSTATUS(ps[1].status) != 0) << ps[1].describe() << "\n" << ps[1].out;
}

TEST(DistTimeout, DefaultIs60AndTheVariableOverridesIt) {
  const char* saved = std::getenv("Y9_DIST_TIMEOUT_S");
  const std::string keep = saved ? saved : "";
  ::unsetenv("Y9_DIST_TIMEOUT_S");
  EXPECT_EQ(training::dist::dist_timeout_s(), 60.0);
  ::setenv("Y9_DIST_TIMEOUT_S", "2.5", 1);
  EXPECT_EQ(training::dist::dist_timeout_s(), 2.5);
  ::setenv("Y9_DIST_TIMEOUT_S", "soon", 1);
  try {
    training::dist::dist_timeout_s();
    ADD_FAILURE() << "no error";
  } catch (const engine::ConfigError& e) {
    EXPECT_TRUE(contains(e.message(), "Y9_DIST_TIMEOUT_S=soon is not a positive number of seconds")) << e.message();
  }
  if (saved)
    ::setenv("Y9_DIST_TIMEOUT_S", keep.c_str(), 1);
  else
    ::unsetenv("Y9_DIST_TIMEOUT_S");
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("Y9_TEST_ROLE")) return child_main();
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
