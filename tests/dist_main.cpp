// main() of the multi-process tests (*_dist_test.cpp, ctest label dist, run under mpirun with 2, 3
// and 4 ranks): initialises MPI through the MPI communicator, runs the GoogleTest suites on every
// rank, prints from rank 0 only (other ranks print their failures), and exits non-zero on every
// rank when any rank failed. The tests reach the world communicator with dist_test::world().
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "apps/training/dist/mpi_comm.h"
#include "tests/dist_util.h"

namespace dist_test {
namespace {
std::unique_ptr<training::dist::MpiCommunicator> g_world;
}
training::dist::Communicator& world() { return *g_world; }
}  // namespace dist_test

namespace {
// Prints only failures (with the rank), for ranks other than 0.
class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};
}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  dist_test::g_world = training::dist::MpiCommunicator::world();
  const int rank = dist_test::g_world->rank();
  if (rank != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  // Combine the ranks' results: every rank exits with the same code.
  std::vector<float> flags(static_cast<size_t>(dist_test::g_world->world_size()));
  float mine = static_cast<float>(failed);
  dist_test::g_world->all_gather(&mine, sizeof(float), flags.data());
  int total = 0;
  for (float f : flags) total += f != 0.0f;
  if (rank == 0 && total > 0) std::fprintf(stderr, "dist: %d of %zu ranks failed\n", total, flags.size());
  dist_test::g_world->barrier();
  dist_test::g_world.reset();
  return total > 0 ? 1 : 0;
}
