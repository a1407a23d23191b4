// Box utilities against the official fixture box_utils*.json/.safetensors: bbox_iou (IoU, GIoU,
// DIoU, CIoU with xywh; CIoU with xyxy) on every pair, the box_iou matrix, and the documented
// NaN rows of the official CIoU. Plus unit checks of xywh <-> xyxy.
#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "ops/box.h"
#include "tests/eval/st_reader.h"
#include "tests/testutil.h"

namespace {

using engine::Tensor;
using ops::IouKind;

std::vector<std::string> fixtures() {
  return testutil::glob_files(testutil::reference_dir(), "box_utils*.json");
}

/// Compares an [N] result with an [N, 1] reference: NaN exactly where the reference is NaN
/// (rows listed in the JSON must be among them), else within atol + rtol * |ref|.
void expect_match(const Tensor& got, const Tensor& ref, const std::set<int64_t>& nan_rows, double rtol,
                  double atol, const std::string& what) {
  auto g = got.to_vector<double>();
  auto r = ref.to_vector<double>();
  ASSERT_EQ(g.size(), r.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (nan_rows.count(static_cast<int64_t>(i))) EXPECT_TRUE(std::isnan(r[i])) << what << " row " << i;
    if (std::isnan(r[i]) || std::isnan(g[i])) {
      if (std::isnan(r[i]) != std::isnan(g[i]) && bad++ < 5)
        ADD_FAILURE() << what << " row " << i << ": got " << g[i] << ", official " << r[i];
      continue;
    }
    if (std::fabs(g[i] - r[i]) > atol + rtol * std::fabs(r[i]) && bad++ < 5)
      ADD_FAILURE() << what << " row " << i << ": got " << g[i] << ", official " << r[i];
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " mismatching rows of " << g.size();
}

TEST(BoxRef, BboxIouAllKinds) {
  auto files = fixtures();
  if (files.empty()) GTEST_SKIP() << "no box_utils*.json under " << testutil::reference_dir();
  for (const auto& jf : files) {
    SCOPED_TRACE(jf);
    auto js = evaltest::read_json(jf);
    auto ts = evaltest::read_safetensors(testutil::reference_dir() + "/" + js["tensors_file"].get<std::string>());
    std::set<int64_t> nan_rows;
    if (js.contains("ciou_xywh_nan_rows"))
      for (auto v : js["ciou_xywh_nan_rows"]) nan_rows.insert(v.get<int64_t>());
    const Tensor b1 = ts.at("box1_xywh"), b2 = ts.at("box2_xywh");
    ASSERT_EQ(b1.size(0), js["n"].get<int64_t>());
    // FP32 with the official operation order: IoU/GIoU/DIoU agree to rounding; CIoU's atan may
    // differ by an ulp between libm and PyTorch's vectorised atan, so a few ulps of slack.
    const double rtol = 1e-5, atol = 1e-6;
    expect_match(ops::bbox_iou(b1, b2, true, IouKind::IoU), ts.at("iou_xywh"), {}, rtol, atol, "iou_xywh");
    expect_match(ops::bbox_iou(b1, b2, true, IouKind::GIoU), ts.at("giou_xywh"), {}, rtol, atol, "giou_xywh");
    expect_match(ops::bbox_iou(b1, b2, true, IouKind::DIoU), ts.at("diou_xywh"), {}, rtol, atol, "diou_xywh");
    expect_match(ops::bbox_iou(b1, b2, true, IouKind::CIoU), ts.at("ciou_xywh"), nan_rows, rtol, atol, "ciou_xywh");
    expect_match(ops::bbox_iou(ts.at("box1_xyxy"), ts.at("box2_xyxy"), false, IouKind::CIoU), ts.at("ciou_xyxy"), {},
                 rtol, atol, "ciou_xyxy");
    // The fixture's xyxy boxes are the official xywh2xyxy of the xywh ones.
    EXPECT_TRUE(testutil::all_close(ops::xywh2xyxy(b1), ts.at("box1_xyxy"), 0, 0));
    EXPECT_TRUE(testutil::all_close(ops::xywh2xyxy(b2), ts.at("box2_xyxy"), 0, 0));
  }
}

TEST(BoxRef, BoxIouMatrix) {
  auto files = fixtures();
  if (files.empty()) GTEST_SKIP() << "no box_utils*.json under " << testutil::reference_dir();
  for (const auto& jf : files) {
    SCOPED_TRACE(jf);
    auto js = evaltest::read_json(jf);
    auto ts = evaltest::read_safetensors(testutil::reference_dir() + "/" + js["tensors_file"].get<std::string>());
    const Tensor ref = ts.at("box_iou_matrix");
    const int64_t n = ref.size(0), m = ref.size(1);
    Tensor a = ts.at("box1_xyxy").narrow(0, 0, n), b = ts.at("box2_xyxy").narrow(0, 0, m);
    Tensor got = ops::box_iou(a, b);
    ASSERT_EQ(got.shape(), ref.shape());
    EXPECT_TRUE(testutil::all_close(got, ref, 1e-6, 1e-7));
  }
}

TEST(Box, XywhXyxyRoundTrip) {
  Tensor b = Tensor::from_vector<float>({10, 20, 4, 6, 0.5f, 0.25f, 1, 0.5f}, {2, 4});
  Tensor xyxy = ops::xywh2xyxy(b);
  EXPECT_TRUE(testutil::all_close(xyxy, Tensor::from_vector<float>({8, 17, 12, 23, 0, 0, 1, 0.5f}, {2, 4}), 0, 0));
  EXPECT_TRUE(testutil::all_close(ops::xyxy2xywh(xyxy), b, 0, 0));
  EXPECT_THROW(ops::xywh2xyxy(Tensor::zeros({3, 5})), engine::ShapeError);
  EXPECT_THROW(ops::box_iou(Tensor::zeros({3, 4}), Tensor::zeros({3, 3})), engine::ShapeError);
}

TEST(Box, IouKindsOnSimplePair) {
  // Two unit-offset 2x2 squares: inter 2, union 6, enclosing 3x2 box, centres 1 apart.
  Tensor a = Tensor::from_vector<float>({0, 0, 2, 2}, {1, 4});
  Tensor b = Tensor::from_vector<float>({1, 0, 3, 2}, {1, 4});
  EXPECT_NEAR(ops::bbox_iou(a, b, false, IouKind::IoU).item<double>(), 2.0 / 6.0, 1e-6);
  EXPECT_NEAR(ops::bbox_iou(a, b, false, IouKind::GIoU).item<double>(), 2.0 / 6.0, 1e-6);  // c_area == union
  EXPECT_NEAR(ops::bbox_iou(a, b, false, IouKind::DIoU).item<double>(), 2.0 / 6.0 - 1.0 / 13.0, 1e-6);
  EXPECT_NEAR(ops::box_iou(a, b).item<double>(), 2.0 / 6.0, 1e-6);
}

}  // namespace
