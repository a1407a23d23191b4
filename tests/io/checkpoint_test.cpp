// Unit tests of io/checkpoint: round trip of the four tensor groups and the metadata, a bare
// state_dict file read as model weights, inference_weights preferring the EMA, and
// load_state_into's error naming the first mismatched tensor with both shapes.
#include "io/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "engine/error.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using engine::Tensor;

namespace {
std::string tmp(const std::string& n) {
  return (fs::temp_directory_path() / ("y9_ckpt_" + std::to_string(::getpid()) + "_" + n)).string();
}
}  // namespace

TEST(Checkpoint, RoundTripKeepsGroupsBitsAndMetadata) {
  io::Checkpoint ck;
  ck.model["model.0.conv.weight"] = Tensor::from_vector<float>({1.5f, -2.0f, 3.25f}, {3});
  ck.model["model.0.bn.num_batches_tracked"] = Tensor::from_vector<int64_t>({7}, {});
  ck.ema["model.0.conv.weight"] = Tensor::from_vector<float>({0.1f, 0.2f, 0.3f}, {3});
  ck.optim["state.model.0.conv.weight.momentum_buffer"] = Tensor::from_vector<float>({9, 8, 7}, {3});
  ck.grad["model.0.conv.weight"] = Tensor::from_vector<float>({1e-30f, 0, -0.f}, {3});
  ck.meta["epoch"] = "4";
  const std::string p = tmp("rt.safetensors");
  io::save_checkpoint(p, ck);
  const io::Checkpoint r = io::load_checkpoint(p);
  EXPECT_EQ(r.meta.at("epoch"), "4");
  EXPECT_EQ(r.meta.at("format"), io::kCkptFormat);
  ASSERT_EQ(r.model.size(), 2u);
  ASSERT_EQ(r.ema.size(), 1u);
  ASSERT_EQ(r.optim.size(), 1u);
  ASSERT_EQ(r.grad.size(), 1u);
  EXPECT_EQ(r.model.at("model.0.conv.weight").to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 3.25f}));
  EXPECT_EQ(r.model.at("model.0.bn.num_batches_tracked").item<int64_t>(), 7);
  EXPECT_EQ(r.ema.at("model.0.conv.weight").to_vector<float>(), (std::vector<float>{0.1f, 0.2f, 0.3f}));
  EXPECT_EQ(r.grad.at("model.0.conv.weight").to_vector<float>()[0], 1e-30f);
  EXPECT_EQ(&io::inference_weights(r), &r.ema);
  fs::remove(p);
}

TEST(Checkpoint, BareStateDictIsModelWeights) {
  const std::string p = tmp("bare.safetensors");
  io::save_safetensors(p, {{"model.0.conv.weight", Tensor::zeros({2, 3})}});
  const io::Checkpoint r = io::load_checkpoint(p);
  ASSERT_EQ(r.model.count("model.0.conv.weight"), 1u);
  EXPECT_TRUE(r.ema.empty());
  EXPECT_EQ(&io::inference_weights(r), &r.model);
  fs::remove(p);
}

TEST(Checkpoint, LoadStateIntoNamesFirstMismatch) {
  Tensor a = Tensor::zeros({2, 2}), b = Tensor::zeros({3});
  std::vector<std::pair<std::string, Tensor>> dst = {{"model.0.w", a}, {"model.1.w", b}};
  std::map<std::string, Tensor> src = {{"model.0.w", Tensor::ones({2, 2})}, {"model.1.w", Tensor::ones({4})}};
  try {
    io::load_state_into(dst, src, "file.safetensors");
    FAIL() << "no throw";
  } catch (const engine::ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("model.1.w"), std::string::npos) << m;
    EXPECT_NE(m.find("[4]"), std::string::npos) << m;
    EXPECT_NE(m.find("[3]"), std::string::npos) << m;
  }
  EXPECT_EQ(a.to_vector<float>()[0], 0.0f) << "nothing copied on error";
  src["model.1.w"] = Tensor::ones({3});
  io::load_state_into(dst, src, "file.safetensors");
  EXPECT_EQ(a.to_vector<float>()[3], 1.0f);
  EXPECT_EQ(b.to_vector<float>()[2], 1.0f);
  src.erase("model.0.w");
  EXPECT_THROW(io::load_state_into(dst, src, "f"), engine::ConfigError);
}
