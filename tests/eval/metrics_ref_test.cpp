// Detection metrics against every metrics*.json fixture: process_batch correct matrices exactly,
// ap_per_class per-class P, R, F1, AP (10 IoUs), AP50, AP50-95, tp, fp and the overall mP, mR,
// mAP50, mAP50-95, fitness within 1e-6; plus ConfusionMatrix unit checks.
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "ops/metrics.h"
#include "tests/eval/st_reader.h"
#include "tests/testutil.h"

namespace {

using engine::Tensor;

std::vector<std::string> image_keys(const std::map<std::string, Tensor>& ts) {
  std::vector<std::string> keys;
  const std::string suf = ".detections";
  for (const auto& [k, v] : ts)
    if (k.size() > suf.size() && k.compare(k.size() - suf.size(), suf.size(), suf) == 0)
      keys.push_back(k.substr(0, k.size() - suf.size()));
  return keys;  // std::map order: img00, img01, ...
}

TEST(MetricsRef, ProcessBatchAndApPerClass) {
  auto files = testutil::glob_files(testutil::reference_dir(), "metrics*.json");
  if (files.empty()) GTEST_SKIP() << "no metrics*.json under " << testutil::reference_dir();
  for (const auto& jf : files) {
    SCOPED_TRACE(jf);
    auto js = evaltest::read_json(jf);
    auto ts = evaltest::read_safetensors(testutil::reference_dir() + "/" + js["tensors_file"].get<std::string>());
    const Tensor iouv = ts.at("iouv");
    EXPECT_TRUE(testutil::all_close(ops::iou_vector(), iouv, 0, 0)) << "torch.linspace(0.5, 0.95, 10) in FP32";
    auto keys = image_keys(ts);
    ASSERT_EQ(static_cast<int64_t>(keys.size()), js["n_images"].get<int64_t>());
    const int64_t nc = js["nc"].get<int64_t>();
    ops::DetectionMetrics dm(nc);
    int64_t total_wrong = 0;
    for (size_t k = 0; k < keys.size(); ++k) {
      SCOPED_TRACE(keys[k]);
      const Tensor det = ts.at(keys[k] + ".detections"), lab = ts.at(keys[k] + ".labels");
      EXPECT_EQ(det.size(0), js["per_image"][k]["n_det"].get<int64_t>());
      EXPECT_EQ(lab.size(0), js["per_image"][k]["n_lab"].get<int64_t>());
      auto got = ops::process_batch(det, lab, iouv).to_vector<int32_t>();
      auto ref = ts.at(keys[k] + ".correct").to_vector<int32_t>();
      ASSERT_EQ(got.size(), ref.size());
      int64_t wrong = 0;
      for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != ref[i];
      EXPECT_EQ(wrong, 0) << "correct-matrix entries differing from the official process_batch";
      total_wrong += wrong;
      dm.add_image(det, lab);
    }
    EXPECT_EQ(total_wrong, 0);
    ops::ValMetrics m = dm.compute();
    const double tol = 1e-6;
    const ops::ApResult& r = m.per_class;
    ASSERT_TRUE(r.ap_class.defined());
    EXPECT_EQ(r.ap_class.to_vector<int64_t>(), ts.at("ap_class").to_vector<int64_t>());
    EXPECT_EQ(r.nt.to_vector<int64_t>(), ts.at("nt").to_vector<int64_t>());
    EXPECT_TRUE(testutil::all_close(r.p, ts.at("P"), 0, tol)) << "P";
    EXPECT_TRUE(testutil::all_close(r.r, ts.at("R"), 0, tol)) << "R";
    EXPECT_TRUE(testutil::all_close(r.f1, ts.at("F1"), 0, tol)) << "F1";
    EXPECT_TRUE(testutil::all_close(r.ap, ts.at("AP"), 0, tol)) << "AP";
    EXPECT_TRUE(testutil::all_close(r.ap.select(1, 0).contiguous(), ts.at("AP50"), 0, tol)) << "AP50";
    EXPECT_TRUE(testutil::all_close(r.tp, ts.at("tp"), 0, 0)) << "tp";
    EXPECT_TRUE(testutil::all_close(r.fp, ts.at("fp"), 0, 0)) << "fp";
    auto ap5095 = ts.at("AP50_95").to_vector<double>();
    auto apc = r.ap_class.to_vector<int64_t>();
    for (size_t i = 0; i < apc.size(); ++i) {
      EXPECT_NEAR(m.maps[apc[i]], ap5095[i], tol) << "AP50-95 class " << apc[i];
      const auto& pc = js["per_class"][std::to_string(apc[i])];
      EXPECT_NEAR(r.p.to_vector<double>()[i], pc["P"].get<double>(), tol);
      EXPECT_NEAR(r.r.to_vector<double>()[i], pc["R"].get<double>(), tol);
      EXPECT_NEAR(r.ap.to_vector<double>()[i * 10], pc["AP50"].get<double>(), tol);
      EXPECT_NEAR(m.maps[apc[i]], pc["AP50-95"].get<double>(), tol);
      EXPECT_EQ(m.nt_per_class[apc[i]], pc["n_labels"].get<int64_t>());
    }
    const auto& o = js["overall"];
    EXPECT_NEAR(m.mp, o["P"].get<double>(), tol);
    EXPECT_NEAR(m.mr, o["R"].get<double>(), tol);
    EXPECT_NEAR(m.map50, o["mAP50"].get<double>(), tol);
    EXPECT_NEAR(m.map, o["mAP50-95"].get<double>(), tol);
    EXPECT_NEAR(m.fitness, o["fitness"].get<double>(), tol);
    EXPECT_EQ(m.seen, js["n_images"].get<int64_t>());
  }
}

TEST(Metrics, ProcessBatchPrefersHighestConfidenceDetection) {
  // One label, two detections of its class: det 0 (higher conf) IoU 0.6, det 1 IoU 1.0.
  // Official matching keeps the lowest detection index per label: det 0 at 0.5/0.55, det 1 from 0.65.
  Tensor lab = Tensor::from_vector<float>({0, 0, 0, 10, 10}, {1, 5});
  Tensor det = Tensor::from_vector<float>({0, 0, 10, 6, 0.9f, 0, 0, 0, 10, 10, 0.8f, 0}, {2, 6});
  auto c = ops::process_batch(det, lab, ops::iou_vector()).to_vector<int32_t>();
  std::vector<int32_t> want = {1, 1, 1, 0, 0, 0, 0, 0, 0, 0,   // det 0: IoU 0.6 (>= 0.6 but the pair is
                               0, 0, 0, 1, 1, 1, 1, 1, 1, 1};  // taken by det 0 up to t = 0.6)
  EXPECT_EQ(c, want);
  // A class mismatch never matches.
  Tensor det2 = Tensor::from_vector<float>({0, 0, 10, 10, 0.9f, 1}, {1, 6});
  EXPECT_EQ(ops::process_batch(det2, lab, ops::iou_vector()).to_vector<int32_t>(), std::vector<int32_t>(10, 0));
}

TEST(Metrics, PerfectDetectorScoresOne) {
  ops::DetectionMetrics dm(2);
  Tensor lab = Tensor::from_vector<float>({0, 0, 0, 10, 10, 1, 20, 20, 30, 40}, {2, 5});
  Tensor det = Tensor::from_vector<float>({0, 0, 10, 10, 0.9f, 0, 20, 20, 30, 40, 0.8f, 1}, {2, 6});
  dm.add_image(det, lab);
  dm.add_image(Tensor::zeros({0, 6}), Tensor::zeros({0, 5}));
  auto m = dm.compute();
  // Official quirk: with recall reaching 1 the sentinel (1, 0) makes interp() return 0 at x = 1,
  // so the last trapezoid is halved and a perfect detector scores 0.995, as in YOLOv5/YOLOv9.
  EXPECT_NEAR(m.map50, 0.995, 1e-12);
  EXPECT_NEAR(m.map, 0.995, 1e-12);
  EXPECT_NEAR(m.mp, 1.0, 1e-12);
  EXPECT_NEAR(m.mr, 1.0, 1e-12);
  EXPECT_EQ(m.seen, 2);
  ops::DetectionMetrics none(2);
  none.add_image(Tensor::zeros({0, 6}), lab);
  auto z = none.compute();
  EXPECT_EQ(z.map, 0.0);
  EXPECT_FALSE(z.per_class.ap_class.defined());
}

TEST(Metrics, ConfusionMatrix) {
  ops::ConfusionMatrix cm(2);
  Tensor lab = Tensor::from_vector<float>({0, 0, 0, 10, 10, 1, 20, 20, 30, 30, 1, 50, 50, 60, 60}, {3, 5});
  // det 0 matches label 0 with the right class; det 1 matches label 1 with the wrong class;
  // det 2 matches nothing; det 3 is below conf 0.25. Label 2 is missed.
  Tensor det = Tensor::from_vector<float>({0, 0, 10, 10, 0.9f, 0, 20, 20, 30, 30, 0.8f, 0, 100, 100, 110, 110, 0.7f, 1,
                                           50, 50, 60, 60, 0.1f, 1},
                                          {4, 6});
  cm.process_batch(det, lab);
  cm.process_background(Tensor::from_vector<float>({1}, {1}));
  auto m = cm.matrix().to_vector<double>();  // rows pred, cols true, 3x3
  std::vector<double> want = {1, 1, 0,   // pred 0: true 0, true 1 (wrong class)
                              0, 0, 1,   // pred 1: background FP (det 2)
                              0, 2, 0};  // background: label 2 (missed) + the no-detection image
  EXPECT_EQ(m, want);
  auto [tp, fp] = cm.tp_fp();
  EXPECT_EQ(tp.to_vector<double>(), (std::vector<double>{1, 0}));
  EXPECT_EQ(fp.to_vector<double>(), (std::vector<double>{1, 1}));
}

}  // namespace
