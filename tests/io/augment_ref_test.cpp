// Letterbox of a coco128 image against the official fixture (box_utils.json "letterbox" cases):
// output shape, ratio, padding and per-channel sums of the BGR bytes must match exactly.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "io/augment.h"
#include "io/image.h"
#include "tests/testutil.h"

TEST(LetterboxRef, Coco128MatchesOfficial) {
  const std::string ref = testutil::reference_dir(), coco = testutil::coco128_dir();
  if (ref.empty() || coco.empty()) GTEST_SKIP() << "fixtures or coco128 missing";
  auto files = testutil::glob_files(ref, "box_utils*.json");
  int cases = 0;
  for (const auto& file : files) {
    std::ifstream f(file);
    nlohmann::json j = nlohmann::json::parse(f);
    if (!j.contains("letterbox")) continue;
    const auto& lbj = j["letterbox"];
    cv::Mat im = io::read_image_bgr(coco + "/" + lbj["image"].get<std::string>());
    ASSERT_EQ(im.rows, lbj["input_shape_hwc"][0].get<int>());
    ASSERT_EQ(im.cols, lbj["input_shape_hwc"][1].get<int>());
    for (const auto& [name, c] : lbj["cases"].items()) {
      SCOPED_TRACE(name);
      const auto& a = c["args"];
      int th, tw;
      if (a["new_shape"].is_array()) {
        th = a["new_shape"][0];
        tw = a["new_shape"][1];
      } else {
        th = tw = a["new_shape"].get<int>();
      }
      auto res = io::letterbox(im, th, tw, a.value("auto", true), a.value("scaleFill", false),
                               a.value("scaleup", true), a.value("stride", 32));
      EXPECT_EQ(res.img.rows, c["out_shape"][0].get<int>());
      EXPECT_EQ(res.img.cols, c["out_shape"][1].get<int>());
      EXPECT_EQ(res.img.channels(), c["out_shape"][2].get<int>());
      EXPECT_DOUBLE_EQ(res.ratio_h, c["ratio"][0].get<double>());
      EXPECT_DOUBLE_EQ(res.ratio_w, c["ratio"][1].get<double>());
      EXPECT_DOUBLE_EQ(res.dw, c["pad_dw_dh"][0].get<double>());
      EXPECT_DOUBLE_EQ(res.dh, c["pad_dw_dh"][1].get<double>());
      cv::Scalar sums = cv::sum(res.img);
      for (int ch = 0; ch < 3; ++ch) EXPECT_EQ(static_cast<int64_t>(sums[ch]), c["channel_sums_bgr"][ch].get<int64_t>());
      ++cases;
    }
  }
  EXPECT_GT(cases, 0) << "no letterbox cases found in " << ref;
}
