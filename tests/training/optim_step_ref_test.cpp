// One official train_dual.py optimizer iteration (step_*.json fixtures) on the CPU: clip, SGD over
// the three official groups and ModelEMA against the fixture (tests/training/optim_step_ref_util.h).
#include "tests/training/optim_step_ref_util.h"

TEST(OptimStepRef, AllFixtures) {
  if (optim_step_ref::fixtures().empty()) GTEST_SKIP() << "no step_*.json under " << testutil::reference_dir();
  optim_step_ref::run_all_fixtures(engine::Device::cpu());
}
