// The ONNX exporter as a library (apps/onnx/onnx_export.h): the graph it writes parses back with
// ONNX's own schema, names its inputs and outputs as documented, holds no shape arithmetic when
// static (why --simplify is a no-op), is deterministic, and refuses unfused models and bad options.
#include <gtest/gtest.h>

#if Y9_WITH_ONNX
#include <onnx/onnx_pb.h>

#include <map>
#include <string>

#include "apps/onnx/onnx_export.h"
#include "engine/error.h"
#include "graph/fuse.h"
#include "graph/model.h"

namespace {

std::shared_ptr<graph::Model> gelan_t(bool fused) {
  graph::BuildOptions bo;
  bo.seed = 2;
  auto m = graph::Model::from_yaml(std::string(Y9_SOURCE_DIR) + "/configs/models/gelan-t.yaml", 5, bo);
  m->eval();
  if (fused) graph::fuse(*m);
  return m;
}

std::map<std::string, int> op_counts(const std::string& bytes) {
  onnx::ModelProto mp;
  EXPECT_TRUE(mp.ParseFromString(bytes));
  std::map<std::string, int> n;
  for (const auto& node : mp.graph().node()) ++n[node.op_type()];
  return n;
}

}  // namespace

TEST(OnnxExport, StaticGraphParsesAndIsFolded) {
  auto m = gelan_t(true);
  onnx_export::OnnxOptions o;
  o.img_h = 64;
  o.img_w = 96;
  const auto r = onnx_export::export_onnx(*m, o);
  onnx::ModelProto mp;
  ASSERT_TRUE(mp.ParseFromString(r.bytes));
  EXPECT_EQ(mp.opset_import(0).version(), 17);
  ASSERT_EQ(mp.graph().input_size(), 1);
  EXPECT_EQ(mp.graph().input(0).name(), "images");
  ASSERT_EQ(mp.graph().output_size(), 1);
  EXPECT_EQ(mp.graph().output(0).name(), "output0");
  // A = 8*12 + 4*6 + 2*3 = 126 anchors, 4 + 5 rows.
  EXPECT_EQ(onnx_export::describe(r.outputs[0]), "output0 float32 [1, 9, 126]");
  const auto ops = op_counts(r.bytes);
  for (const char* shape_op : {"Shape", "Range", "Expand", "Gather", "ConstantOfShape", "BatchNormalization"})
    EXPECT_EQ(ops.count(shape_op), 0u) << shape_op << " in a static graph";
  EXPECT_GT(ops.at("Conv"), 50);
  EXPECT_EQ(ops.at("Resize"), 2);
  // Deterministic bytes.
  EXPECT_EQ(onnx_export::export_onnx(*m, o).bytes, r.bytes);
}

TEST(OnnxExport, DynamicHalfNmsSignature) {
  auto m = gelan_t(true);
  onnx_export::OnnxOptions o;
  o.dynamic = o.half = o.nms = true;
  o.topk_all = 50;
  const auto r = onnx_export::export_onnx(*m, o);
  ASSERT_EQ(r.outputs.size(), 4u);
  EXPECT_EQ(onnx_export::describe(r.inputs[0]), "images float16 [batch, 3, height, width]");
  EXPECT_EQ(onnx_export::describe(r.outputs[0]), "num_dets int32 [batch, 1]");
  EXPECT_EQ(onnx_export::describe(r.outputs[1]), "boxes float16 [batch, 50, 4]");
  EXPECT_EQ(onnx_export::describe(r.outputs[2]), "scores float16 [batch, 50]");
  EXPECT_EQ(onnx_export::describe(r.outputs[3]), "classes int32 [batch, 50]");
  const auto ops = op_counts(r.bytes);
  EXPECT_EQ(ops.at("NonMaxSuppression"), 1);
  onnx::ModelProto mp;
  ASSERT_TRUE(mp.ParseFromString(r.bytes));
  for (const auto& t : mp.graph().initializer())
    if (t.data_type() == onnx::TensorProto::FLOAT) EXPECT_LE(t.raw_data().size(), 16u) << t.name() << ": FP32 weights";
}

TEST(OnnxExport, StaticNmsClampsTopKToAnchors) {
  auto m = gelan_t(true);
  onnx_export::OnnxOptions o;
  o.img_h = o.img_w = 32;  // A = 16 + 4 + 1 = 21 < 100
  o.nms = true;
  EXPECT_EQ(onnx_export::export_onnx(*m, o).topk, 21);
}

TEST(OnnxExport, Errors) {
  onnx_export::OnnxOptions o;
  EXPECT_THROW(onnx_export::export_onnx(*gelan_t(false), o), engine::ConfigError);  // not fused
  auto m = gelan_t(true);
  o.opset = 12;
  EXPECT_THROW(onnx_export::export_onnx(*m, o), engine::ConfigError);
  o.opset = 17;
  o.img_h = 100;
  EXPECT_THROW(onnx_export::export_onnx(*m, o), engine::ConfigError);
  o.img_h = 640;
  o.batch = 0;
  EXPECT_THROW(onnx_export::export_onnx(*m, o), engine::ConfigError);
  o.batch = 1;
  o.nms = true;
  o.iou_thres = 1.5;
  EXPECT_THROW(onnx_export::export_onnx(*m, o), engine::ConfigError);
}

#else
TEST(OnnxExport, Unavailable) { GTEST_SKIP() << "this build has no ONNX export (libonnx-dev, libprotobuf-dev)"; }
#endif
