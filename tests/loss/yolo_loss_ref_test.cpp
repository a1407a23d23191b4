// Full YOLOv9 loss against the official loss fixtures (loss_*.json): items, total, and the
// gradient w.r.t. the head maps through the recorded bias gradients of the final 1x1 convs
// (d loss / d bias[c] of level l = sum over H*W of d loss / d head_l[c]). Head maps are the
// train.raw.* tensors of the model fixture named in the loss JSON.
#include <gtest/gtest.h>

#include <iostream>
#include <regex>

#include "ops/reduce.h"
#include "ops/yolo_loss.h"
#include "tests/loss/st_reader.h"
#include "tests/testutil.h"

using engine::Tensor;

TEST(YoloLossRef, ItemsTotalAndHeadGradients) {
  const std::string dir = testutil::reference_dir();
  if (dir.empty()) GTEST_SKIP() << "no reference folder";
  auto files = testutil::glob_files(dir, "loss_*.json");
  if (files.empty()) GTEST_SKIP() << "no loss fixtures";
  for (const auto& js : files) {
    SCOPED_TRACE(js);
    auto j = testloss::read_json(js);
    testloss::StFile st(dir + "/" + j.at("tensors_file").get<std::string>());
    auto mj = testloss::read_json(dir + "/" + j.at("model_fixture").get<std::string>() + ".json");
    testloss::StFile ms(dir + "/" + mj.at("tensors_file").get<std::string>());
    const int64_t nc = mj.at("nc").get<int64_t>();
    const bool dual = j.at("loss_module").get<std::string>().find("dual") != std::string::npos;
    ops::YoloLossConfig cfg = dual ? ops::YoloLossConfig::dual(nc) : ops::YoloLossConfig::single(nc);
    cfg.strides = mj.at("strides").get<std::vector<double>>();
    const size_t K = dual ? 2 : 1, L = cfg.strides.size();
    std::vector<std::vector<Tensor>> br(K);
    for (size_t k = 0; k < K; ++k)
      for (size_t l = 0; l < L; ++l) {
        std::string name = dual ? "train.raw." + std::to_string(k) + "." + std::to_string(l)
                                : "train.raw." + std::to_string(l);
        Tensor t = ms.get(name);
        t.set_requires_grad(true);
        br[k].push_back(t);
      }
    auto r = ops::yolo_loss(br, st.get("targets"), cfg);
    auto items = r.items.to_vector<double>();
    const auto& ji = j.at("loss_items");
    const double ref[3] = {ji.at("box").get<double>(), ji.at("cls").get<double>(), ji.at("dfl").get<double>()};
    // 1e-6 relative: the terms follow the official float32 formulas (BCE in the pos_weight order,
    // kernels/common/box_loss.h) and the sums are in double, so what remains is PyTorch's float32
    // cascade-sum rounding (~1e-7 relative).
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(items[i], ref[i], 1e-6 * std::fabs(ref[i])) << "item " << i;
      std::cout << "item " << i << ": ours " << items[i] << " official " << ref[i] << " rel "
                << std::fabs(items[i] - ref[i]) / std::fabs(ref[i]) << "\n";
    }
    const double tot = j.at("loss_total").get<double>();
    EXPECT_NEAR(r.total.item<double>(), tot, 1e-6 * std::fabs(tot));
    // target_scores.sum() is a float32 cascade sum officially and a double sum rounded to float32
    // here: both within an ulp or two of the exact sum, so relative (an absolute 1e-6 is below one
    // float32 ulp once the sum passes 8).
    if (j.contains("target_scores_sum"))
      for (size_t k = 0; k < K; ++k) {
        const double want = std::max(1.0, j["target_scores_sum"][k].get<double>());
        EXPECT_NEAR(r.target_scores_sum[k].item<double>(), want, 1e-6 * want) << "branch " << k;
      }
    r.total.backward();
    // Bias gradients of the last 1x1 convs: cv2/cv3 (branch 0 box/cls), cv4/cv5 (branch 1).
    const std::regex re(R"(^grad\.model\.\d+\.cv(\d+)\.(\d+)\.2\.bias$)");
    int checked = 0;
    for (const auto& name : st.names()) {
      std::smatch m;
      if (!std::regex_match(name, m, re)) continue;
      const int cv = std::stoi(m[1]);
      const size_t l = static_cast<size_t>(std::stoi(m[2]));
      const size_t k = static_cast<size_t>((cv - 2) / 2);
      const bool box = cv % 2 == 0;
      ASSERT_LT(k, K);
      const int64_t c0 = box ? 0 : 4 * cfg.reg_max, n = box ? 4 * cfg.reg_max : nc;
      Tensor g = ops::sum(br[k][l].grad().narrow(1, c0, n), {0, 2, 3});
      Tensor ref_g = st.get(name);
      // Gradients summed over many terms: ~1e-3 relative to the tensor's scale (fixture README).
      double scale = 0;
      for (double v : ref_g.to_vector<double>()) scale = std::max(scale, std::fabs(v));
      EXPECT_TRUE(testutil::all_close(g, ref_g, 1e-3, 1e-4 * scale)) << name;
      std::cout << name << ": worst |diff|/(1e-6*scale + 1e-4|ref|) = "
                << testutil::tolerance_ratio(g, ref_g, 1e-4, 1e-6 * scale) << "\n";
      ++checked;
    }
    EXPECT_GT(checked, 0);
  }
}
