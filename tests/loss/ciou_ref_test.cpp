// CIoU forward and gradient against the official bbox_iou fixtures (box_utils*.json).
#include <gtest/gtest.h>

#include <iostream>

#include "engine/autograd.h"
#include "ops/ciou.h"
#include "ops/reduce.h"
#include "tests/loss/st_reader.h"
#include "tests/testutil.h"

using engine::Tensor;

TEST(CiouRef, ForwardAndGradientMatchOfficial) {
  const std::string dir = testutil::reference_dir();
  if (dir.empty()) GTEST_SKIP() << "no reference folder";
  auto files = testutil::glob_files(dir, "box_utils*.json");
  if (files.empty()) GTEST_SKIP() << "no box_utils fixtures";
  for (const auto& js : files) {
    SCOPED_TRACE(js);
    auto j = testloss::read_json(js);
    testloss::StFile st(dir + "/" + j.at("tensors_file").get<std::string>());
    Tensor b1 = st.get("box1_xyxy"), b2 = st.get("box2_xyxy");
    b1.set_requires_grad(true);
    Tensor c = ops::ciou(b1, b2);
    // Forward: float32 math in the official order; atan may differ by an ulp from PyTorch's.
    EXPECT_TRUE(testutil::all_close(c, st.get("ciou_xyxy"), 1e-5, 1e-6));
    std::cout << "ciou max rel diff " << testutil::tolerance_ratio(c, st.get("ciou_xyxy"), 1, 1e-30) << "\n";
    ops::sum(c).backward();
    // Gradient: d sum(CIoU) / d box1; summation order differs from autograd's.
    EXPECT_TRUE(testutil::all_close(b1.grad(), st.get("grad_ciou_xyxy_box1"), 1e-4, 1e-6));
    std::cout << "grad max rel diff (atol 1e-6) "
              << testutil::tolerance_ratio(b1.grad(), st.get("grad_ciou_xyxy_box1"), 1, 1e-6) << "\n";
  }
}

TEST(CiouRef, SpecReferenceValue) {
  // shared/spec/loss.md section 4: (10,20,50,80) vs (15,25,60,70) -> CIoU 0.5418472290039062.
  Tensor a = Tensor::from_vector<float>({10, 20, 50, 80}, {1, 4});
  Tensor b = Tensor::from_vector<float>({15, 25, 60, 70}, {1, 4});
  EXPECT_NEAR(ops::ciou(a, b).item<float>(), 0.5418472290039062, 1e-7);
}
