// One official train_dual.py optimizer iteration (step_*.json fixtures) with every parameter,
// gradient, BatchNorm buffer, optimizer state and EMA buffer on cuda:0 (label gpu; under the CUDA
// emulator optim_step_ref_cuda_test_emu_fwd/_emu_rev): the same checks and 1e-6 bound as the CPU
// test (tests/training/optim_step_ref_util.h).
#include "tests/training/optim_step_ref_util.h"

TEST(OptimStepRefCuda, AllFixturesOnCuda) {
  Y9_SKIP_WITHOUT_GPU();
  if (optim_step_ref::fixtures().empty()) GTEST_SKIP() << "no step_*.json under " << testutil::reference_dir();
  optim_step_ref::run_all_fixtures(engine::Device::cuda(0));
}
