// Model YAMLs with edge argument values (issue 16, item 7): every integer argument of every layer
// of the shipped gelan-t and yolov9-t configs, and every header number, replaced in turn by 0,
// -1, huge, non-integer and NaN values. Each variant either parses and builds (the layer trace at
// 256 px included) or is refused with an engine::ConfigError naming the file and a layer; none
// crashes (stride 0 and groups 0 used to end in SIGFPE).
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "engine/error.h"
#include "graph/config.h"
#include "graph/model.h"

namespace {

std::string cfg(const std::string& file) { return std::string(Y9_SOURCE_DIR) + "/configs/models/" + file; }

const std::vector<std::string> kEdges = {"0",          "-1",       "-2147483649", "2147483648", "9223372036854775807",
                                         "99999999999999999999", "1e308", ".nan", "65", "2.5", "None"};

struct Outcome {
  int built = 0, refused = 0;
};

// Parses `yaml`; builds the model when it parses. Fails the test on anything but success or a
// ConfigError naming the source and (for a row argument) a layer.
void check_variant(const std::string& yaml, const std::string& what, bool row_arg, Outcome& o) {
  SCOPED_TRACE(what);
  try {
    graph::BuildOptions bo;
    bo.init = false;
    graph::Model m(graph::parse_model_config(yaml, "edge.yaml", 3), bo);
    EXPECT_GT(m.num_parameters(), 0);
    ++o.built;
  } catch (const engine::ConfigError& e) {
    EXPECT_NE(e.message().find("edge.yaml"), std::string::npos) << e.message();
    if (row_arg) EXPECT_NE(e.message().find("layer "), std::string::npos) << e.message();
    ++o.refused;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a ConfigError: " << e.what();
  }
}

void sweep(const std::string& file) {
  const YAML::Node base = YAML::LoadFile(cfg(file));
  Outcome o;
  for (const char* key : {"nc", "depth_multiple", "width_multiple", "anchors"})
    for (const auto& v : kEdges) {
      YAML::Node doc = YAML::Clone(base);
      doc[key] = YAML::Load(v);
      check_variant(YAML::Dump(doc), std::string(key) + " = " + v, false, o);
    }
  for (const char* part : {"backbone", "head"}) {
    for (size_t r = 0; r < base[part].size(); ++r) {
      const YAML::Node row = base[part][r];
      const size_t nargs = row[3].size();
      for (size_t k = 0; k < nargs; ++k) {
        if (!row[3][k].IsScalar()) continue;
        for (const auto& v : kEdges) {
          YAML::Node doc = YAML::Clone(base);
          doc[part][r][3][k] = YAML::Load(v);
          check_variant(YAML::Dump(doc),
                        std::string(part) + " row " + std::to_string(r) + " argument " + std::to_string(k) + " = " + v,
                        true, o);
        }
      }
      for (const auto& v : kEdges) {  // the row's `number`
        YAML::Node doc = YAML::Clone(base);
        doc[part][r][1] = YAML::Load(v);
        check_variant(YAML::Dump(doc), std::string(part) + " row " + std::to_string(r) + " number = " + v, true, o);
      }
    }
  }
  std::printf("%s: %d variants built, %d refused with the layer named\n", file.c_str(), o.built, o.refused);
  EXPECT_GT(o.refused, 0);
}

}  // namespace

TEST(ModelConfigEdges, GelanT) { sweep("gelan-t.yaml"); }
TEST(ModelConfigEdges, Yolov9T) { sweep("yolov9-t.yaml"); }

// The two reported crashes, with the messages a user sees.
TEST(ModelConfigEdges, StrideAndGroupsZeroNameTheLayer) {
  const std::string head = "nc: 4\ndepth_multiple: 1.0\nwidth_multiple: 1.0\nanchors: 3\nbackbone:\n  [[-1, 1, Conv, [16, 3, 2]],\n   ";
  const std::string tail = ",\n   [-1, 1, Conv, [32, 3, 2]],\n   [-1, 1, Conv, [32, 3, 2]]]\nhead:\n  [[[1, 2, 3], 1, DDetect, [nc]]]\n";
  for (const auto& [row, want] : std::vector<std::pair<std::string, std::string>>{
           {"[-1, 1, Conv, [32, 3, 0]]", "stride (argument 2) must be in 1..64, got 0"},
           {"[-1, 1, Conv, [32, 3, 2, None, 0]]", "groups (argument 4) must be in 1..16384, got 0"},
           {"[-1, 1, Conv, [32, 3, 2, 1, 1, 0]]", "dilation (argument 5) must be in 1..64, got 0"},
           {"[-1, 1, Conv, [32, 0, 2]]", "kernel size (argument 1) must be in 1..63, got 0"}}) {
    try {
      graph::parse_model_config(head + row + tail, "m.yaml");
      ADD_FAILURE() << "accepted " << row;
    } catch (const engine::ConfigError& e) {
      EXPECT_NE(e.message().find("m.yaml: layer 1 (Conv): " + want), std::string::npos) << e.message();
    }
  }
}
