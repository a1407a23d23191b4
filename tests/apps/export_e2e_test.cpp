// `yolov9 export` end to end: random yolov9-t weights -> export --reparam -> gelan-t weights whose
// eval outputs equal the yolov9-t main branch; --fuse shrinks the state_dict; bad input is a
// clear, non-zero exit naming the path.
#include <gtest/gtest.h>
#include <unistd.h>

#include "apps/training/weights.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/autograd.h"
#include "graph/model.h"
#include "io/safetensors.h"
#include "tests/testutil.h"

namespace fs = std::filesystem;
using engine::Tensor;

namespace {

std::string bin() { return std::string(Y9_BINARY_DIR) + "/yolov9"; }
std::string cfg(const std::string& name) { return std::string(Y9_SOURCE_DIR) + "/configs/models/" + name; }

// Runs a shell command, returns its exit status; stderr+stdout go to `log`.
int run(const std::string& cmd, const std::string& log) {
  int rc = std::system((cmd + " > " + log + " 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string slurp(const std::string& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

TEST(ExportE2E, ReparamMatchesMainBranchAndFuseShrinks) {
  fs::path dir = fs::temp_directory_path() / ("y9_export_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto dual = graph::Model::from_yaml(cfg("yolov9-t.yaml"), 3);
  training::save_model_weights(*dual, (dir / "yolov9-t.safetensors").string());

  std::string log = (dir / "log.txt").string();
  ASSERT_EQ(run(bin() + " export --weights " + (dir / "yolov9-t.safetensors").string() + " --cfg " +
                    cfg("yolov9-t.yaml") + " --nc 3 --reparam --out " + (dir / "gelan.safetensors").string(),
                log),
            0)
      << slurp(log);
  ASSERT_EQ(run(bin() + " export --weights " + (dir / "yolov9-t.safetensors").string() + " --cfg " +
                    cfg("yolov9-t.yaml") + " --nc 3 --reparam --fuse --out " + (dir / "fused.safetensors").string(),
                log),
            0)
      << slurp(log);

  auto gelan = graph::Model::from_yaml(cfg("gelan-t.yaml"), 3);
  training::load_weights(*gelan, (dir / "gelan.safetensors").string());
  dual->eval();
  gelan->eval();
  Tensor x = testutil::random_tensor({1, 3, 96, 96}, 11, 0.0, 1.0, engine::DType::F32);
  engine::autograd::NoGradGuard ng;
  auto yd = dual->forward(x);
  auto yg = gelan->forward(x);
  ASSERT_EQ(yd.decoded.size(), 2u);
  ASSERT_EQ(yg.decoded.size(), 1u);
  EXPECT_TRUE(testutil::all_close(yg.decoded[0], yd.decoded[1], 1e-5, 1e-5));

  auto unfused = io::load_safetensors((dir / "gelan.safetensors").string()).tensors;
  auto fused = io::load_safetensors((dir / "fused.safetensors").string()).tensors;
  EXPECT_LT(fused.size(), unfused.size());
  EXPECT_LT(unfused.size(), io::load_safetensors((dir / "yolov9-t.safetensors").string()).tensors.size());
  fs::remove_all(dir);
}

TEST(ExportE2E, MissingWeightsIsAClearError) {
  std::string log = (fs::temp_directory_path() / ("y9_export_missing_" + std::to_string(::getpid()) + ".txt")).string();
  EXPECT_NE(run(bin() + " export --weights /nonexistent/w.safetensors --cfg " + cfg("yolov9-t.yaml") + " --out /tmp/x.st",
                log),
            0);
  EXPECT_NE(slurp(log).find("/nonexistent/w.safetensors"), std::string::npos) << slurp(log);
}
