// Task-Aligned Assigner against every assigner call recorded in the loss fixtures (loss_*.json).
#include <gtest/gtest.h>

#include <iostream>

#include "ops/tal.h"
#include "tests/loss/st_reader.h"
#include "tests/testutil.h"

using engine::Tensor;

TEST(TalRef, MatchesOfficialAssigner) {
  const std::string dir = testutil::reference_dir();
  if (dir.empty()) GTEST_SKIP() << "no reference folder";
  auto files = testutil::glob_files(dir, "loss_*.json");
  if (files.empty()) GTEST_SKIP() << "no loss fixtures";
  int calls = 0;
  for (const auto& js : files) {
    auto j = testloss::read_json(js);
    testloss::StFile st(dir + "/" + j.at("tensors_file").get<std::string>());
    for (int k = 0; st.has("assigner" + std::to_string(k) + ".in.pd_scores"); ++k, ++calls) {
      const std::string p = "assigner" + std::to_string(k);
      SCOPED_TRACE(js + " " + p);
      Tensor ps = st.get(p + ".in.pd_scores");
      ops::TalConfig cfg;
      cfg.num_classes = ps.size(2);
      auto r = ops::tal_assign(ps, st.get(p + ".in.pd_bboxes"), st.get(p + ".in.anc_points"),
                               st.get(p + ".in.gt_labels"), st.get(p + ".in.gt_bboxes"), st.get(p + ".in.mask_gt"),
                               cfg);
      auto fg = r.fg_mask.to(engine::DType::I32).to_vector<int32_t>();
      auto fg_ref = st.get(p + ".out.fg_mask").to_vector<int32_t>();
      EXPECT_EQ(fg, fg_ref);
      // target_labels / target_bboxes are only meaningful on foreground; background rows take gt 0
      // officially, which we reproduce too, so compare everything exactly.
      EXPECT_EQ(r.target_labels.to_vector<int64_t>(), st.get(p + ".out.target_labels").to_vector<int64_t>());
      EXPECT_EQ(r.target_bboxes.to_vector<float>(), st.get(p + ".out.target_bboxes").to_vector<float>());
      // Soft labels: same float32 ops; powf(x, 6) vs PyTorch's vectorised pow may differ by an ulp.
      EXPECT_TRUE(testutil::all_close(r.target_scores, st.get(p + ".out.target_scores"), 1e-5, 1e-9));
      std::cout << p << ": target_scores max |diff| / 1e-12 = "
                << testutil::tolerance_ratio(r.target_scores, st.get(p + ".out.target_scores"), 0, 1e-12) << "\n";
      if (j.contains("fg_count") && k < static_cast<int>(j["fg_count"].size())) {
        int64_t n = 0;
        for (int v : fg) n += v;
        EXPECT_EQ(n, j["fg_count"][k].get<int64_t>());
      }
    }
  }
  EXPECT_GT(calls, 0);
}
