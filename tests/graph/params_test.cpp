// Model-config parser, channel inference, module tree names, initialisation and counts
// (no fixtures: shipped configs and inline YAML only).
#include <gtest/gtest.h>

#include <cstdio>

#include <cmath>
#include <string>

#include "engine/error.h"
#include "graph/model.h"

namespace {

std::string cfg(const std::string& file) { return std::string(Y9_SOURCE_DIR) + "/configs/models/" + file; }

// A tiny valid GELAN-like model; `row` replaces layer 2 to provoke errors.
std::string tiny(const std::string& row = "[-1, 1, Conv, [32, 3, 2]]", const std::string& extra = "") {
  return "nc: 4\ndepth_multiple: 1.0\nwidth_multiple: 1.0\nanchors: 3\n" + extra +
         "backbone:\n  [[-1, 1, Conv, [16, 3, 2]],\n   [-1, 1, Conv, [16, 3, 2]],\n   " + row +
         ",\n   [-1, 1, Conv, [32, 3, 2]],\n   [-1, 1, Conv, [32, 3, 2]]]\n"
         "head:\n  [[[2, 3, 4], 1, DDetect, [nc]]]\n";
}

// Expects a ConfigError whose message contains every fragment.
void expect_config_error(const std::string& yaml, std::initializer_list<const char*> fragments) {
  try {
    graph::parse_model_config(yaml, "bad.yaml");
    ADD_FAILURE() << "no error for:\n" << yaml;
  } catch (const engine::ConfigError& e) {
    for (const char* f : fragments) EXPECT_NE(e.message().find(f), std::string::npos) << e.message() << " lacks " << f;
  }
}

graph::BuildOptions no_init() {
  graph::BuildOptions o;
  o.init = false;
  return o;
}

}  // namespace

TEST(ModelConfig, MakeDivisible) {
  EXPECT_EQ(graph::make_divisible(180, 8), 184);
  EXPECT_EQ(graph::make_divisible(240, 8), 240);
  EXPECT_EQ(graph::make_divisible(64 * 0.25, 8), 16);
  EXPECT_EQ(graph::make_divisible(20, 4), 20);
}

TEST(ModelConfig, ChannelInferenceGelanM) {
  auto c = graph::load_model_config(cfg("gelan-m.yaml"));
  ASSERT_EQ(c.layers.size(), 23u);
  EXPECT_EQ(c.layers[16].c_out[0], 184);  // AConv [180] -> make_divisible -> 184 (spec 1)
  EXPECT_EQ(c.layers[17].c_out[0], 544);  // cat(184, 360)
  EXPECT_EQ(c.layers[18].c_in[0], 544);
  EXPECT_EQ(c.layers[22].args[1].repr(), "[240, 360, 480]");
  EXPECT_EQ(c.save, (std::vector<int>{4, 6, 9, 12, 15, 18, 21}));
}

TEST(ModelConfig, DualHeadCBLinearAndSilence) {
  auto c = graph::load_model_config(cfg("yolov9-c.yaml"));
  EXPECT_EQ(c.layers[0].type, "Silence");
  EXPECT_EQ(c.layers[0].c_out[0], 3);
  EXPECT_EQ(c.layers[25].c_out, (std::vector<int64_t>{256, 512, 512}));  // CBLinear pieces
  EXPECT_EQ(c.layers[26].c_in[0], 3);                                    // from 0 = the image again
  EXPECT_EQ(c.layers[30].c_out[0], 256);                                 // CBFuse -> ch of the last input
  EXPECT_EQ(c.layers[38].args[1].repr(), "[512, 512, 512, 256, 512, 512]");
  EXPECT_EQ(c.layers[11].args[2].repr(), "'nearest'");
  EXPECT_EQ(c.layers[11].args[0].repr(), "None");
}

TEST(ModelConfig, NcOverrideAndDepthGain) {
  auto c = graph::parse_model_config(tiny("[-1, 3, Conv, [16, 3, 1]]", ""), "t.yaml", 7);
  EXPECT_EQ(c.nc, 7);
  EXPECT_EQ(c.layers.back().args[0].i, 7);
  EXPECT_EQ(c.layers[2].n, 3);
  auto half = graph::parse_model_config(
      tiny("[-1, 3, Conv, [16, 3, 1]]").replace(tiny().find("depth_multiple: 1.0"), 19, "depth_multiple: 0.5"), "t.yaml");
  EXPECT_EQ(half.layers[2].n, 2);  // Python round(1.5) = 2 (half to even)
  graph::Model m(c, no_init());
  bool found = false;
  for (const auto& [n, t] : m.state_dict()) found |= n == "model.2.2.conv.weight";  // nn.Sequential repeat
  EXPECT_TRUE(found);
}

TEST(ModelConfig, WidthMultiple) {
  std::string y = tiny();
  y.replace(y.find("width_multiple: 1.0"), 19, "width_multiple: 0.25");
  auto c = graph::parse_model_config(y, "w.yaml");
  EXPECT_EQ(c.layers[0].c_out[0], 8);   // make_divisible(16*0.25, 8) = 8
  EXPECT_EQ(c.layers[2].c_out[0], 8);
}

TEST(ModelConfig, ErrorsNameFileLayerAndProblem) {
  expect_config_error(tiny("[-1, 1, MP, []]"), {"bad.yaml", "layer 2", "unknown module 'MP'"});
  expect_config_error(tiny("[7, 1, Conv, [32, 3, 2]]"), {"bad.yaml", "layer 2", "bad 'from' index 7"});
  expect_config_error(tiny("[-9, 1, Conv, [32, 3, 2]]"), {"layer 2", "bad 'from' index -9"});
  expect_config_error(tiny("[-1, 1, ADown, [32, 64]]"), {"layer 2", "ADown", "expected 1 arguments", "got 2"});
  expect_config_error(tiny("[-1, 1, RepNCSPELAN4, [32]]"), {"layer 2", "expected 3 to 4 arguments"});
  expect_config_error(tiny("[-1, 1, Conv, []]"), {"layer 2", "expected 1 to 7 arguments"});
  expect_config_error(tiny("[-1, 1, Conv, [abc]]"), {"layer 2", "must be an integer"});
  expect_config_error(tiny("[-1, 1, Concat, [2]]"), {"layer 2", "dimension 1"});
  expect_config_error(tiny("[-1, 1, nn.Upsample, [None, 2, 'bilinear']]"), {"layer 2", "nearest"});
  expect_config_error(tiny("[-1, 0, Conv, [32, 3, 2]]"), {"layer 2", "'number' must be >= 1"});
  expect_config_error(tiny("[-1, 1, Conv]"), {"layer 2", "[from, number, module, args]"});
  expect_config_error(tiny("[[-1, 0], 1, CBFuse, [[0]]]"), {"layer 2", "not a CBLinear"});
  expect_config_error("nc: 3\nbackbone: []\n", {"bad.yaml", "missing key 'depth_multiple'"});
  expect_config_error("nc: [3\n", {"bad.yaml", "YAML syntax error", "line"});
  std::string det = tiny();
  det.replace(det.find("[[2, 3, 4], 1, DDetect, [nc]]"), 29, "[[2, 3, 4], 1, DualDDetect, [nc]]");
  expect_config_error(det, {"layer 5", "DualDDetect needs 2 x"});
  EXPECT_THROW(graph::load_model_config("/nonexistent/x.yaml"), engine::IoError);
  EXPECT_THROW(graph::Model(graph::parse_model_config(tiny("[-1, 1, Conv, [32, 3, 2]]", "activation: nn.LeakyReLU(0.1)\n"), "a.yaml")),
               engine::ConfigError);
}

TEST(ModelGraph, OfficialNamesShapesAndBuffers) {
  auto m = graph::Model::from_yaml(cfg("yolov9-t.yaml"), 80, no_init());
  std::map<std::string, engine::Tensor> sd;
  for (const auto& [n, t] : m->state_dict()) sd[n] = t;
  ASSERT_TRUE(sd.count("model.0.conv.weight"));
  EXPECT_EQ(sd["model.0.conv.weight"].shape(), (engine::Shape{16, 3, 3, 3}));
  EXPECT_EQ(sd["model.0.bn.num_batches_tracked"].dtype(), engine::DType::I64);
  EXPECT_EQ(sd["model.0.bn.num_batches_tracked"].dim(), 0);
  EXPECT_TRUE(sd.count("model.4.cv2.0.m.0.cv1.conv1.bn.running_var"));
  EXPECT_TRUE(sd.count("model.4.cv2.0.m.2.cv1.conv2.conv.weight"));
  EXPECT_EQ(sd["model.29.cv2.0.1.conv.weight"].shape(), (engine::Shape{64, 16, 3, 3}));  // groups=4
  EXPECT_EQ(sd["model.29.cv2.0.2.weight"].shape(), (engine::Shape{64, 16, 1, 1}));
  EXPECT_EQ(sd["model.29.cv5.2.2.bias"].shape(), (engine::Shape{80}));
  EXPECT_EQ(sd["model.29.dfl2.conv.weight"].shape(), (engine::Shape{1, 16, 1, 1}));
  EXPECT_FALSE(sd["model.29.dfl2.conv.weight"].requires_grad());
  EXPECT_TRUE(sd["model.29.cv4.0.0.conv.weight"].requires_grad());
  EXPECT_EQ(sd["model.29.dfl.conv.weight"].to_vector<float>()[15], 15.0f);
  EXPECT_EQ(m->num_parameters() - m->num_trainable(), 32);  // two frozen DFL convs
}

TEST(ModelGraph, InitIsSeededPytorchDefaultAndBiasInit) {
  graph::BuildOptions o;
  o.seed = 3;
  auto a = graph::Model::from_yaml(cfg("gelan-t.yaml"), 80, o);
  auto b = graph::Model::from_yaml(cfg("gelan-t.yaml"), 80, o);
  o.seed = 4;
  auto c = graph::Model::from_yaml(cfg("gelan-t.yaml"), 80, o);
  std::map<std::string, engine::Tensor> sa, sb, sc;
  for (const auto& [n, t] : a->state_dict()) sa[n] = t;
  for (const auto& [n, t] : b->state_dict()) sb[n] = t;
  for (const auto& [n, t] : c->state_dict()) sc[n] = t;
  auto w = sa["model.4.cv1.conv.weight"].to_vector<float>();  // fan_in = 64
  EXPECT_EQ(w, sb["model.4.cv1.conv.weight"].to_vector<float>());
  EXPECT_NE(w, sc["model.4.cv1.conv.weight"].to_vector<float>());
  double lo = 1, hi = -1, mean = 0;
  for (float v : w) lo = std::min<double>(lo, v), hi = std::max<double>(hi, v), mean += v;
  mean /= static_cast<double>(w.size());
  EXPECT_GE(lo, -0.125);
  EXPECT_LE(hi, 0.125);
  EXPECT_LT(lo, -0.11);  // the whole range is used
  EXPECT_GT(hi, 0.11);
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_EQ(sa["model.4.cv1.bn.weight"].to_vector<float>()[0], 1.0f);
  EXPECT_EQ(sa["model.4.cv1.bn.running_var"].to_vector<float>()[0], 1.0f);
  // bias_init (spec 2.16): box 1.0; class ln(5/nc/(640/s)^2) for s = 8, 16, 32.
  EXPECT_EQ(sa["model.22.cv2.0.2.bias"].to_vector<float>()[63], 1.0f);
  EXPECT_NEAR(sa["model.22.cv3.0.2.bias"].to_vector<float>()[0], -11.536642, 1e-5);
  EXPECT_NEAR(sa["model.22.cv3.1.2.bias"].to_vector<float>()[79], -10.150348, 1e-5);
  EXPECT_NEAR(sa["model.22.cv3.2.2.bias"].to_vector<float>()[5], -8.764053, 1e-5);
}

TEST(ModelGraph, TraceStridesAndGflopsScale) {
  auto m = graph::Model::from_yaml(cfg("gelan-c.yaml"), 80, no_init());
  EXPECT_EQ(m->strides(), (std::vector<double>{8, 16, 32}));
  auto dims = m->trace(640, 480);
  EXPECT_EQ(dims[22].size(), 3u);
  EXPECT_EQ(dims[22][0].c, 144);
  EXPECT_EQ(dims[22][0].h, 80);
  EXPECT_EQ(dims[22][0].w, 60);
  EXPECT_EQ(dims[22][2].h, 20);
  const double g640 = m->gflops(640, 640), g320 = m->gflops(320, 320);
  EXPECT_GT(g640 / g320, 3.8);
  EXPECT_LT(g640 / g320, 4.2);
  EXPECT_THROW(m->gflops(200, 200), engine::ShapeError);  // not a multiple of 32
  // Per-layer multiply-accumulates: one per layer, adding up to the total; Concat and Upsample
  // (layers 10 and 11) do none, the head (layer 22) the most of the head layers.
  double total = 0;
  std::vector<double> per;
  m->trace(640, 640, &total, &per);
  ASSERT_EQ(per.size(), static_cast<size_t>(m->num_layers()));
  double sum = 0;
  for (double v : per) sum += v;
  EXPECT_DOUBLE_EQ(sum, total);
  EXPECT_DOUBLE_EQ(total, g640 / 2 * 1e9);
  EXPECT_EQ(per[10], 0.0);
  EXPECT_EQ(per[11], 0.0);
  EXPECT_GT(per[22], per[21]);
}

TEST(ModelGraph, SummaryTable) {
  auto m = graph::Model::from_yaml(cfg("gelan-m.yaml"), 80, no_init());
  const std::string s = m->summary("gelan-m");
  EXPECT_NE(s.find("models.common.AConv"), std::string::npos);
  EXPECT_NE(s.find("[240, 184]"), std::string::npos);  // resolved AConv args: c1, make_divisible(180)
  EXPECT_NE(s.find("gelan-m summary: 606 layers, 20124000 parameters, 20123984 gradients, 76.8 GFLOPs"),
            std::string::npos)
      << s;
  // Official model_info: GFLOPs of a grid_stride() input scaled to the image, so sides that are
  // not multiples of 32 still print (gflops(150, 150) itself would throw).
  EXPECT_EQ(m->grid_stride(), 32);
  const std::string s150 = m->summary("gelan-m", 150);
  char want[64];
  std::snprintf(want, sizeof want, "%.1f GFLOPs", m->gflops(32, 32) * (150.0 / 32) * (150.0 / 32));
  EXPECT_NE(s150.find(want), std::string::npos) << s150;
}
