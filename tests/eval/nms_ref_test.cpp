// Official non_max_suppression against every nms*.json fixture case (same boxes, same order,
// scores within 1e-6), plus unit checks of the greedy NMS, class filter, agnostic mode, max_det,
// label rows and head-output selection.
#include <cmath>

#include <gtest/gtest.h>

#include "ops/nms.h"
#include "tests/eval/st_reader.h"
#include "tests/testutil.h"

namespace {

using engine::Tensor;

TEST(NmsRef, AllFixtureCases) {
  auto files = testutil::glob_files(testutil::reference_dir(), "nms*.json");
  if (files.empty()) GTEST_SKIP() << "no nms*.json under " << testutil::reference_dir();
  int cases = 0;
  for (const auto& jf : files) {
    auto js = evaltest::read_json(jf);
    auto ts = evaltest::read_safetensors(testutil::reference_dir() + "/" + js["tensors_file"].get<std::string>());
    const Tensor pred = ts.at("prediction");
    const int64_t batch = js["batch"].get<int64_t>();
    ASSERT_EQ(pred.size(0), batch);
    ASSERT_EQ(pred.size(1), 4 + js["nc"].get<int64_t>());
    for (auto it = js["cases"].begin(); it != js["cases"].end(); ++it) {
      SCOPED_TRACE(jf + " case " + it.key());
      const auto& c = it.value();
      ops::NmsOptions opt;
      opt.conf_thres = c["conf_thres"].get<double>();
      opt.iou_thres = c["iou_thres"].get<double>();
      opt.multi_label = c["multi_label"].get<bool>();
      opt.max_det = c["max_det"].get<int64_t>();
      if (c.contains("agnostic")) opt.agnostic = c["agnostic"].get<bool>();
      if (c.contains("classes") && !c["classes"].is_null()) opt.classes = c["classes"].get<std::vector<int64_t>>();
      auto out = ops::non_max_suppression(pred, opt);
      ASSERT_EQ(static_cast<int64_t>(out.size()), batch);
      for (int64_t b = 0; b < batch; ++b) {
        SCOPED_TRACE("image " + std::to_string(b));
        const Tensor ref = ts.at(it.key() + ".out." + std::to_string(b));
        if (js.contains("counts")) EXPECT_EQ(ref.size(0), js["counts"][it.key()][b].get<int64_t>());
        ASSERT_EQ(out[b].shape(), ref.shape());
        auto g = out[b].to_vector<double>();
        auto r = ref.to_vector<double>();
        int bad = 0;
        for (int64_t i = 0; i < ref.size(0); ++i) {
          bool ok = true;
          for (int q = 0; q < 4; ++q) ok &= std::fabs(g[6 * i + q] - r[6 * i + q]) <= 1e-6 * (1 + std::fabs(r[6 * i + q]));
          ok &= std::fabs(g[6 * i + 4] - r[6 * i + 4]) <= 1e-6;
          ok &= g[6 * i + 5] == r[6 * i + 5];
          if (!ok && bad++ < 3)
            ADD_FAILURE() << "row " << i << ": got [" << g[6 * i] << ", " << g[6 * i + 1] << ", " << g[6 * i + 2] << ", "
                          << g[6 * i + 3] << ", " << g[6 * i + 4] << ", " << g[6 * i + 5] << "] official [" << r[6 * i]
                          << ", " << r[6 * i + 1] << ", " << r[6 * i + 2] << ", " << r[6 * i + 3] << ", "
                          << r[6 * i + 4] << ", " << r[6 * i + 5] << "]";
        }
        EXPECT_EQ(bad, 0);
      }
      ++cases;
    }
  }
  EXPECT_GT(cases, 0);
}

/// Builds a [1, 4 + nc, A] prediction from per-anchor (cx, cy, w, h, scores...) rows.
Tensor make_pred(const std::vector<std::vector<float>>& rows, int64_t nc) {
  const int64_t a = static_cast<int64_t>(rows.size());
  std::vector<float> v(static_cast<size_t>((4 + nc) * a));
  for (int64_t j = 0; j < a; ++j)
    for (int64_t c = 0; c < 4 + nc; ++c) v[c * a + j] = rows[j][c];
  return Tensor::from_vector<float>(v, {1, 4 + nc, a});
}

TEST(Nms, GreedyTorchvisionSemantics) {
  // Box 1 overlaps box 0 with IoU 0.5 exactly (suppressed only when iou_thres < 0.5), box 2 is
  // far away; the lower-scored box 3 duplicates box 2.
  Tensor boxes = Tensor::from_vector<float>({0, 0, 4, 3, 0, 0, 4, 6, 10, 10, 12, 12, 10, 10, 12, 12}, {4, 4});
  Tensor scores = Tensor::from_vector<float>({0.9f, 0.95f, 0.5f, 0.4f}, {4});
  EXPECT_EQ(ops::nms(boxes, scores, 0.5).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ(ops::nms(boxes, scores, 0.49).to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
}

TEST(Nms, MultiLabelAgnosticClassesMaxDet) {
  // Two overlapping boxes of different best classes, one anchor with two classes above conf.
  auto pred = make_pred({{10, 10, 4, 4, 0.9f, 0.1f, 0.0f}, {10.5f, 10, 4, 4, 0.1f, 0.8f, 0.0f},
                         {50, 50, 4, 4, 0.0f, 0.6f, 0.7f}},
                        3);
  ops::NmsOptions opt;
  auto out = ops::non_max_suppression(pred, opt)[0];
  ASSERT_EQ(out.size(0), 3);  // different classes do not suppress each other
  auto v = out.to_vector<float>();
  EXPECT_EQ(v[4], 0.9f);
  EXPECT_EQ(v[5], 0.f);
  EXPECT_EQ(v[6 + 4], 0.8f);
  EXPECT_EQ(v[12 + 5], 2.f);
  EXPECT_FLOAT_EQ(v[0], 8.f);
  opt.agnostic = true;
  EXPECT_EQ(ops::non_max_suppression(pred, opt)[0].size(0), 2);
  opt.agnostic = false;
  opt.multi_label = true;
  EXPECT_EQ(ops::non_max_suppression(pred, opt)[0].size(0), 4);  // anchor 2 gives class 1 and 2
  opt.classes = {2};
  auto o2 = ops::non_max_suppression(pred, opt)[0];
  ASSERT_EQ(o2.size(0), 1);
  EXPECT_EQ(o2.to_vector<float>()[5], 2.f);
  opt.classes.clear();
  opt.max_det = 2;
  EXPECT_EQ(ops::non_max_suppression(pred, opt)[0].size(0), 2);
  opt.conf_thres = 0.95;
  EXPECT_EQ(ops::non_max_suppression(pred, opt)[0].size(0), 0);
  EXPECT_EQ(ops::non_max_suppression(pred, opt)[0].size(1), 6);
  EXPECT_THROW(ops::non_max_suppression(Tensor::zeros({1, 4, 3})), engine::ShapeError);
}

TEST(Nms, HybridLabelsAndHeadSelection) {
  auto pred = make_pred({{10, 10, 4, 4, 0.3f, 0.1f}}, 2);
  std::vector<Tensor> labels{Tensor::from_vector<float>({1, 40, 40, 8, 8}, {1, 5})};
  auto out = ops::non_max_suppression(pred, {}, labels)[0];
  ASSERT_EQ(out.size(0), 2);
  auto v = out.to_vector<float>();
  EXPECT_EQ(v[4], 1.f);  // label row first: score 1.0
  EXPECT_EQ(v[5], 1.f);
  EXPECT_FLOAT_EQ(v[0], 36.f);
  std::vector<Tensor> heads{Tensor::zeros({1}), Tensor::ones({1})};
  EXPECT_TRUE(ops::nms_input(heads, true).is_same(heads[1]));
  EXPECT_TRUE(ops::nms_input(heads, false).is_same(heads[0]));
  EXPECT_THROW(ops::nms_input({heads[0]}, true), engine::Error);
}

}  // namespace
