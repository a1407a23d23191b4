// `--weights x.pt` end to end with a real official checkpoint: tests/data/pt/tiny_yolo.pt, a
// models.yolo.DetectionModel (4 layers + DDetect, nc 2) saved by the official code as
// train_dual.py saves last.pt (model + EMA in FP16, optimizer state, opt, numpy best_fitness).
// export converts it (EMA, F32, model YAML and names carried), the exported file holds the same
// values; detect and val run on it; train fine-tunes from it (its own YAML without --cfg); --resume of it (no train_dual.py
// options) is a clear refusal; a damaged .pt is a clear error naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "tests/apps/e2e_util.h"

namespace fs = std::filesystem;

namespace {

std::string tiny() { return std::string(Y9_SOURCE_DIR) + "/tests/data/pt/tiny_yolo.pt"; }

}  // namespace

TEST(TorchPtE2E, ExportConvertsTheEmaWeights) {
  const std::string dir = e2e::temp_dir("pt_export");
  const std::string out = dir + "/tiny.safetensors";
  auto r = e2e::run_cli("export --weights " + tiny() + " --out " + out);
  ASSERT_EQ(r.rc, 0) << r.out;
  const io::Checkpoint pt = io::load_checkpoint(tiny());
  const io::SafetensorsData st = io::load_safetensors(out);
  const auto& want = io::inference_weights(pt, tiny());
  ASSERT_FALSE(pt.ema.empty());
  ASSERT_EQ(st.tensors.size(), want.size());
  for (const auto& [k, t] : want) {
    ASSERT_TRUE(st.tensors.count(k)) << k;
    EXPECT_EQ(st.tensors.at(k).shape(), t.shape()) << k;
    if (t.dtype() == engine::DType::F32)
      EXPECT_EQ(st.tensors.at(k).to(engine::DType::F32).to_vector<float>(), t.to_vector<float>()) << k;
  }
  EXPECT_EQ(st.metadata.at("nc"), "2");
  EXPECT_NE(st.metadata.at("cfg_yaml").find("DDetect"), std::string::npos);
  // The converted file runs without the .pt.
  const std::string data = e2e::make_dataset(dir + "/data", 2, 64, 2);
  auto v = e2e::run_cli("val --weights " + out + " --data " + data + " --img 64 --batch 2 --workers 0 --project " +
                        dir + " --name val");
  EXPECT_EQ(v.rc, 0) << v.out;
}

TEST(TorchPtE2E, DetectValAndFineTuneFromPt) {
  const std::string dir = e2e::temp_dir("pt_run");
  const std::string data = e2e::make_dataset(dir + "/data", 4, 64, 2);
  auto d = e2e::run_cli("detect --weights " + tiny() + " --source " + dir +
                        "/data/images/val --img 64 --conf-thres 0.01 "
                        "--save-txt --project " +
                        dir + " --name det");
  ASSERT_EQ(d.rc, 0) << d.out;
  auto v = e2e::run_cli("val --weights " + tiny() + " --data " + data + " --img 64 --batch 2 --workers 0 --project " +
                        dir + " --name val");
  ASSERT_EQ(v.rc, 0) << v.out;
  EXPECT_NE(v.out.find("EMA"), std::string::npos) << v.out;
  auto t = e2e::run_cli("train --weights " + tiny() + " --cfg " + std::string(Y9_SOURCE_DIR) +
                        "/configs/models/gelan-t.yaml --data " + data +
                        " --img 64 --batch 2 --epochs 1 --workers 0 --project " + dir + " --name train");
  // gelan-t is another model: nothing matches, a clear error naming the file
  EXPECT_NE(t.rc, 0);
  EXPECT_NE(t.out.find("tiny_yolo.pt"), std::string::npos) << t.out;
  // Without --cfg the model YAML the .pt carries is built (official Model(cfg or ckpt['model'].yaml)):
  // every tensor transfers.
  t = e2e::run_cli("train --weights " + tiny() + " --data " + data +
                   " --img 64 --batch 2 --epochs 1 --workers 0 --project " + dir + " --name train2");
  ASSERT_EQ(t.rc, 0) << t.out;
  EXPECT_NE(t.out.find("Transferred 53/53 items"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("Transferred"), std::string::npos) << t.out;
  // Its ckpt['opt'] is not train_dual.py's (no hyp), and no opt.yaml is beside it: a clear refusal
  // (tests/apps/pt_resume_e2e_test.cpp resumes real official runs).
  auto r = e2e::run_cli("train --resume " + tiny());
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("no 'hyp' dict among the options"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tiny_yolo.pt"), std::string::npos) << r.out;
}

TEST(TorchPtE2E, DamagedPtIsAClearError) {
  const std::string dir = e2e::temp_dir("pt_bad");
  std::ifstream f(tiny(), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const std::string bad = dir + "/cut.pt";
  std::ofstream(bad, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  const std::string data = e2e::make_dataset(dir + "/data", 1, 64, 2);
  for (const std::string cmd : {"detect --source " + dir + "/data/images/val", "val --data " + data,
                                "export --out " + dir + "/y.safetensors", "train --data " + data + " --epochs 1"}) {
    auto r = e2e::run_cli(cmd + " --weights " + bad);
    EXPECT_EQ(r.rc, 1) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find(bad), std::string::npos) << cmd << "\n" << r.out;
    EXPECT_EQ(r.out.find("Segmentation"), std::string::npos) << r.out;
  }
}
