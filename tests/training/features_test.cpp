// Feature-map grids per stage (apps/training/features.h; issue 16 item 20): file names follow the
// official feature_visualization (stage<i>_<type>_features.png, maps with H or W of 1 skipped),
// the visualizing predictor returns what model_predictor returns and writes into <dir>/<stem>,
// <stem>2, ..., and letterboxed_input gives the [1, 3, S, S] RGB input.
#include "apps/training/features.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <opencv2/imgcodecs.hpp>

#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "engine/autograd.h"
#include "graph/model.h"

namespace {

namespace fs = std::filesystem;
using engine::Tensor;

std::string cfg(const std::string& file) { return std::string(Y9_SOURCE_DIR) + "/configs/models/" + file; }

fs::path temp(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("y9_features_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  return p;
}

}  // namespace

TEST(Features, OneGridPerStageWithOfficialNames) {
  graph::BuildOptions bo;
  bo.seed = 2;
  auto m = graph::Model::from_yaml(cfg("gelan-t.yaml"), 3, bo);
  m->eval();
  const fs::path dir = temp("stages");
  Tensor x = Tensor::full({1, 3, 64, 64}, 0.5, engine::DType::F32);
  const auto files = training::save_feature_maps(*m, x, dir.string());
  // Expected: every layer before the head whose map is larger than 1 x 1 (at 64 px the P5 maps
  // are 2 x 2, so all of them).
  const auto dims = m->trace(64, 64);
  std::vector<std::string> want;
  for (int64_t i = 0; i + 1 < m->num_layers(); ++i) {
    const auto& d = dims[static_cast<size_t>(i)][0];
    if (d.h > 1 && d.w > 1)
      want.push_back((dir / ("stage" + std::to_string(i) + "_" + m->layer(i)->type_name() + "_features.png")).string());
  }
  EXPECT_EQ(files, want);
  ASSERT_FALSE(files.empty());
  EXPECT_EQ(fs::path(files[0]).filename(), "stage0_Conv_features.png");
  for (const auto& f : files) EXPECT_FALSE(cv::imread(f).empty()) << f;
  // At 32 px the P5 maps are 1 x 1: skipped, as officially.
  const auto small = training::save_feature_maps(*m, Tensor::full({1, 3, 32, 32}, 0.5, engine::DType::F32),
                                                 temp("small").string());
  EXPECT_LT(small.size(), files.size());
  fs::remove_all(dir);
  fs::remove_all(temp("small"));
}

TEST(Features, VisualizingPredictorMatchesModelPredictor) {
  graph::BuildOptions bo;
  bo.seed = 3;
  auto m = graph::Model::from_yaml(cfg("yolov9-t.yaml"), 3, bo);
  const fs::path dir = temp("pred");
  fs::create_directories(dir);
  training::Predictor plain = training::model_predictor(*m);
  training::Predictor vis = training::visualizing_predictor(*m, dir.string(), 8);
  Tensor x = Tensor::full({1, 3, 64, 64}, 0.25, engine::DType::F32);
  io::Batch b;
  b.paths = {"/some/where/bus.jpg"};
  const Tensor a = plain(x, b), v = vis(x, b);
  ASSERT_EQ(a.shape(), v.shape());
  EXPECT_EQ(std::memcmp(a.contiguous().data_ptr(), v.contiguous().data_ptr(), static_cast<size_t>(a.numel()) * 4), 0);
  EXPECT_TRUE(fs::exists(dir / "bus" / "stage0_Conv_features.png"));
  vis(x, b);  // a second image with the same stem: official increment_path -> bus2
  EXPECT_TRUE(fs::exists(dir / "bus2" / "stage0_Conv_features.png"));
  fs::remove_all(dir);
}

TEST(Features, CBLinearPiecesAsOneGrid) {
  // yolov9-c's CBLinear rows output several pieces: one grid of their concatenation.
  graph::BuildOptions bo;
  bo.seed = 4;
  auto m = graph::Model::from_yaml(cfg("yolov9-c.yaml"), 3, bo);
  m->eval();
  const fs::path dir = temp("cbl");
  const auto files = training::save_feature_maps(*m, Tensor::full({1, 3, 64, 64}, 0.5, engine::DType::F32),
                                                 dir.string(), 4);
  int cblinear = 0;
  for (const auto& f : files) cblinear += f.find("_CBLinear_") != std::string::npos;
  EXPECT_GT(cblinear, 0);
  fs::remove_all(dir);
}

TEST(Features, LetterboxedInput) {
  const fs::path dir = temp("img");
  fs::create_directories(dir);
  cv::Mat im(40, 80, CV_8UC3, cv::Scalar(255, 0, 0));  // blue in BGR
  cv::imwrite((dir / "a.png").string(), im);
  Tensor t = training::letterboxed_input((dir / "a.png").string(), 64);
  ASSERT_EQ(t.shape(), (engine::Shape{1, 3, 64, 64}));
  const float* p = t.data<float>();
  const int64_t mid = 32 * 64 + 32;
  EXPECT_FLOAT_EQ(p[0 * 4096 + mid], 0.f);  // R
  EXPECT_FLOAT_EQ(p[2 * 4096 + mid], 1.f);  // B
  EXPECT_NEAR(p[0], 114.f / 255.f, 1e-6);   // grey padding at the top
  EXPECT_THROW(training::letterboxed_input((dir / "missing.png").string(), 64), engine::IoError);
  fs::remove_all(dir);
}
