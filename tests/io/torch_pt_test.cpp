// Unit tests of io/torch_pt: the .pt files under tests/data/pt (written by the official torch.save
// with tests/data/pt/make_pt_testdata.py) read back with their dtypes, views, values and module
// state_dict names; the YOLO checkpoint conversion (EMA over model, FP16 -> F32, YAML, names);
// and truncated, corrupt, compressed, random and hand-made hostile inputs giving IoErrors that
// name the file, never a crash.
#include "io/torch_pt.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "engine/error.h"
#include "io/checkpoint.h"

namespace fs = std::filesystem;
using engine::DType;
using Kind = io::PtNode::Kind;
using namespace std::string_literals;

namespace {

std::string data(const std::string& n) { return std::string(Y9_SOURCE_DIR) + "/tests/data/pt/" + n; }

std::string read(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Expects an IoError whose message names "bad.pt" and contains `what`.
void expect_io_error(const std::string& bytes, const std::string& what) {
  try {
    io::parse_torch_pt(bytes.data(), bytes.size(), "bad.pt");
    ADD_FAILURE() << "no error, expected '" << what << "'";
  } catch (const engine::IoError& e) {
    EXPECT_NE(e.message().find("bad.pt"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(what), std::string::npos) << e.message();
  }
}

// A one-entry stored zip holding `pkl` as archive/data.pkl (what torch.save writes, minus data).
std::string zip_with_pickle(const std::string& pkl, uint16_t method = 0) {
  auto le16 = [](std::string& s, uint16_t v) { s.append(reinterpret_cast<const char*>(&v), 2); };
  auto le32 = [](std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); };
  const std::string name = "archive/data.pkl";
  std::string z;
  le32(z, 0x04034b50);
  le16(z, 20), le16(z, 0), le16(z, method), le16(z, 0), le16(z, 0);
  le32(z, 0), le32(z, pkl.size()), le32(z, pkl.size());
  le16(z, name.size()), le16(z, 0);
  z += name + pkl;
  const uint32_t cd = z.size();
  le32(z, 0x02014b50);
  le16(z, 20), le16(z, 20), le16(z, 0), le16(z, method), le16(z, 0), le16(z, 0);
  le32(z, 0), le32(z, pkl.size()), le32(z, pkl.size());
  le16(z, name.size()), le16(z, 0), le16(z, 0), le16(z, 0), le16(z, 0);
  le32(z, 0), le32(z, 0);
  z += name;
  const uint32_t cd_size = z.size() - cd;
  le32(z, 0x06054b50);
  le16(z, 0), le16(z, 0), le16(z, 1), le16(z, 1);
  le32(z, cd_size), le32(z, cd);
  le16(z, 0);
  return z;
}

}  // namespace

TEST(TorchPt, TensorsOfEveryDtypeAndViews) {
  const io::TorchPt pt = io::load_torch_pt(data("tensors.pt"));
  ASSERT_TRUE(pt.root && pt.root->is(Kind::Dict));
  auto t = [&](const char* k) {
    io::PtValue v = pt.root->get(k);
    EXPECT_TRUE(v && v->is(Kind::Tensor)) << k;
    return v->tensor;
  };
  EXPECT_EQ(t("f32").dtype(), DType::F32);
  EXPECT_EQ(t("f32").shape(), (engine::Shape{2, 3}));
  EXPECT_EQ(t("f32").to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(t("f16").dtype(), DType::F16);
  EXPECT_EQ(t("f16").to(DType::F32).to_vector<float>(), (std::vector<float>{0, 0.25f, 0.5f, 0.75f, 1, 1.25f}));
  EXPECT_EQ(t("bf16").dtype(), DType::BF16);
  EXPECT_EQ(t("bf16").to(DType::F32).to_vector<float>(), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(t("f64").to_vector<double>(), (std::vector<double>{-1.5, -0.5, 0.5}));
  EXPECT_EQ(t("i64").to_vector<int64_t>(), (std::vector<int64_t>{-(int64_t(1) << 40), 0, 7}));
  EXPECT_EQ(t("i32").to_vector<int32_t>(), (std::vector<int32_t>{-5, 9}));
  EXPECT_EQ(t("u8").to_vector<uint8_t>(), (std::vector<uint8_t>{0, 255}));
  EXPECT_EQ(t("bool").dtype(), DType::Bool);
  EXPECT_EQ(t("bool").numel(), 3);
  // base = arange(12).reshape(3, 4); transposed = base.t(); slice = base[1:, 2:]
  EXPECT_EQ(t("transposed").shape(), (engine::Shape{4, 3}));
  EXPECT_EQ(t("transposed").to_vector<float>(), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_EQ(t("slice").to_vector<float>(), (std::vector<float>{6, 7, 10, 11}));
  EXPECT_EQ(t("base").numel(), 12);
  EXPECT_EQ(t("scalar").shape(), engine::Shape{});
  EXPECT_EQ(t("scalar").to_vector<float>(), std::vector<float>{3.5f});
  EXPECT_EQ(t("empty").shape(), (engine::Shape{0, 5}));
}

TEST(TorchPt, PlainValues) {
  const io::TorchPt pt = io::load_torch_pt(data("values.pt"));
  const io::PtNode& r = *pt.root;
  EXPECT_EQ(r.get("int")->i, 7);
  EXPECT_EQ(r.get("neg")->i, -300);
  EXPECT_EQ(r.get("big")->i, int64_t(1) << 40);
  EXPECT_EQ(r.get("huge_neg")->i, -(int64_t(1) << 62));
  EXPECT_EQ(r.get("float")->f, 0.25);
  EXPECT_EQ(r.get("str")->s, "nearest");
  EXPECT_EQ(r.get("unicode")->s, "h\xc3\xa9llo \xe2\x9c\x93");
  EXPECT_TRUE(r.get("none")->is(Kind::None));
  EXPECT_TRUE(r.get("t")->b);
  EXPECT_FALSE(r.get("f")->b);
  ASSERT_TRUE(r.get("list")->is(Kind::List));
  EXPECT_EQ(r.get("list")->items.size(), 3u);
  EXPECT_EQ(r.get("list")->items[1]->items[1]->i, 3);
  EXPECT_TRUE(r.get("tuple")->is(Kind::Tuple));
  EXPECT_EQ(r.get("tuple")->items[1]->f, 2.5);
  EXPECT_TRUE(r.get("nested")->get("a")->get("b")->items[0]->is(Kind::None));
  ASSERT_TRUE(r.get("od")->is(Kind::Dict));
  EXPECT_EQ(r.get("od")->get("y")->i, 2);
  EXPECT_EQ(r.get("bytes")->s, std::string("\x00\xff"
                                           "ab",
                                           4));
  ASSERT_TRUE(r.get("set")->is(Kind::Set));
  EXPECT_EQ(r.get("set")->items.at(0)->i, 3);
}

TEST(TorchPt, ModuleStateDictHasOfficialNamesAndOrder) {
  const io::TorchPt pt = io::load_torch_pt(data("tiny_stripped.pt"));
  io::PtValue m = pt.root->get("model");
  ASSERT_TRUE(m && m->is(Kind::Object));
  EXPECT_EQ(m->cls->s, "__main__.Tiny");  // an unknown class: a generic object, never imported
  auto sd = io::pt_module_state_dict(m, "tiny");
  std::vector<std::string> names;
  for (auto& [k, t] : sd) names.push_back(k);
  // Module.state_dict(): own params, persistent buffers, then children; no bias=None, no tmp
  EXPECT_EQ(names, (std::vector<std::string>{"stride", "model.0.weight", "model.1.weight", "model.1.bias",
                                             "model.1.running_mean", "model.1.running_var",
                                             "model.1.num_batches_tracked", "model.2.weight", "model.2.bias"}));
  EXPECT_EQ(sd[1].second.dtype(), DType::F16);
  EXPECT_EQ(sd[6].second.dtype(), DType::I64);
  EXPECT_EQ(sd[6].second.to_vector<int64_t>(), std::vector<int64_t>{5});
}

TEST(TorchPt, StrippedCheckpointConvertsToF32WithMetadata) {
  const io::Checkpoint ck = io::load_checkpoint(data("tiny_stripped.pt"));
  EXPECT_TRUE(ck.ema.empty());  // 'ema': None
  ASSERT_EQ(ck.model.size(), 9u);
  const engine::Tensor w = ck.model.at("model.0.weight");
  EXPECT_EQ(w.dtype(), DType::F32);
  EXPECT_EQ(w.shape(), (engine::Shape{4, 3, 3, 3}));
  EXPECT_EQ(w.to_vector<float>()[9], 9.0f / 8);
  EXPECT_EQ(ck.model.at("model.1.running_mean").to_vector<float>(), (std::vector<float>{0.5f, 1, 1.5f, 2}));
  EXPECT_EQ(ck.model.at("model.1.num_batches_tracked").dtype(), DType::I64);
  EXPECT_EQ(ck.meta.at("source"), "torch-pt");
  EXPECT_EQ(ck.meta.at("nc"), "2");
  EXPECT_EQ(ck.meta.at("epoch"), "-1");
  EXPECT_EQ(ck.meta.at("cfg"), "tiny.yaml");
  EXPECT_EQ(ck.meta.at("names"), "[\"cat\",\"dog\"]");
  EXPECT_EQ(ck.meta.at("date"), "2024-01-01");
  // The model YAML round-trips with the shapes our config parser expects.
  const YAML::Node y = YAML::Load(ck.meta.at("cfg_yaml"));
  EXPECT_EQ(y["nc"].as<int>(), 2);
  EXPECT_EQ(y["width_multiple"].as<double>(), 0.25);
  EXPECT_EQ(y["backbone"][0][2].as<std::string>(), "Conv");
  EXPECT_EQ(y["backbone"][0][3][2].as<int>(), 2);
  EXPECT_EQ(y["head"][0][3][0].as<std::string>(), "None");
  EXPECT_EQ(y["head"][0][3][2].as<std::string>(), "nearest");
  EXPECT_EQ(y["head"][1][0][1].as<int>(), 0);
}

TEST(TorchPt, EmaIsTheInferenceWeights) {
  const io::Checkpoint ck = io::load_checkpoint(data("tiny_ema.pt"));
  ASSERT_FALSE(ck.ema.empty());
  EXPECT_EQ(ck.meta.at("epoch"), "4");
  EXPECT_EQ(ck.meta.at("updates"), "3");
  EXPECT_EQ(io::inference_weights(ck).at("model.2.bias").to_vector<float>(), (std::vector<float>{0.5f, 0.5f}));
  const io::SafetensorsData d = io::load_weights_file(data("tiny_ema.pt"));
  EXPECT_EQ(d.metadata.at("ema"), "1");
  EXPECT_EQ(d.tensors.at("model.2.bias").to_vector<float>(), (std::vector<float>{0.5f, 0.5f}));
}

TEST(TorchPt, BareStateDictIsModelWeights) {
  const io::Checkpoint ck = io::load_checkpoint(data("state_dict.pt"));
  EXPECT_EQ(ck.model.size(), 9u);
  EXPECT_EQ(ck.model.at("model.1.running_mean").to_vector<float>(), (std::vector<float>{0.5f, 1, 1.5f, 2}));
}

TEST(TorchPt, NonYoloCheckpointIsNamed) {
  try {
    io::load_checkpoint(data("not_yolo.pt"));
    FAIL() << "no error";
  } catch (const engine::IoError& e) {
    EXPECT_NE(e.message().find("not a YOLOv9 checkpoint"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("keys: foo"), std::string::npos) << e.message();
  }
}

TEST(TorchPt, TruncatedFilesGiveClearErrors) {
  const std::string full = read(data("tiny_stripped.pt"));
  ASSERT_GT(full.size(), 1000u);
  // Every cut: an IoError naming the file, never a crash or a read past the end.
  for (size_t n = 0; n < full.size(); n += n < 64 ? 1 : 37) {
    const std::string cut = full.substr(0, n);
    try {
      io::parse_torch_pt(cut.data(), cut.size(), "bad.pt");
      ADD_FAILURE() << "cut at " << n << " parsed";
    } catch (const engine::IoError& e) {
      EXPECT_NE(e.message().find("bad.pt"), std::string::npos) << e.message();
    }
  }
  expect_io_error(full.substr(0, full.size() - 30), "end-of-central-directory");
}

TEST(TorchPt, CorruptAndRandomBytesNeverCrash) {
  const std::string full = read(data("tiny_ema.pt"));
  std::mt19937 rng(7);
  int errors = 0;
  for (int k = 0; k < 3000; ++k) {
    std::string s = full;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int f = 0; f < flips; ++f) s[rng() % s.size()] = static_cast<char>(rng());
    try {
      io::TorchPt pt = io::parse_torch_pt(s.data(), s.size(), "bad.pt");
      try {
        io::torch_pt_checkpoint(pt);
      } catch (const engine::IoError&) {
      }
    } catch (const engine::IoError& e) {
      ++errors;
      ASSERT_NE(e.message().find("bad.pt"), std::string::npos) << e.message();
    }
  }
  EXPECT_GT(errors, 0);
  for (int k = 0; k < 500; ++k) {
    std::string s(rng() % 4096, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    if (k % 2) std::memcpy(s.data(), "PK\x03\x04", std::min<size_t>(4, s.size()));
    EXPECT_THROW(io::parse_torch_pt(s.data(), s.size(), "bad.pt"), engine::IoError);
  }
}

TEST(TorchPt, HostileInputsAreNamed) {
  expect_io_error("", "not a torch.save zip archive");
  expect_io_error("\x80\x02}q\x00."s, "legacy torch.save file");
  expect_io_error("hello world", "starts with bytes 68656c6c");
  expect_io_error(zip_with_pickle("\x80\x02}.", 8), "is compressed (method 8)");
  expect_io_error(zip_with_pickle("\x80\x02}"), "no STOP opcode");
  // an opcode outside the subset (INST, which would import and call) names its byte and offset
  expect_io_error(zip_with_pickle("\x80\x02(ios\nsystem\n."), "unsupported pickle opcode 0x69 ('i') at offset 3");
  expect_io_error(zip_with_pickle("\x80\x02"
                                  "0."),
                  "stack underflow");
  expect_io_error(zip_with_pickle("\x80\x02h\x05."s), "memo entry 5 was never stored");
  expect_io_error(zip_with_pickle("\x80\x02X\xff\xff\xff\x7f."), "truncated");
  expect_io_error(zip_with_pickle("\x80\x02\x8a\x09"
                                  "123456789."),
                  "does not fit in 64 bits");
  // a persistent id naming a storage the archive lacks
  expect_io_error(zip_with_pickle("\x80\x02(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x00"
                                  "0X\x03\x00\x00\x00"
                                  "cpuK\x04tQ."s),
                  "storage '0' is missing from the archive");
  // GLOBAL + REDUCE of os.system: recorded, never called; the result is an inert object
  const std::string evil = zip_with_pickle(
      "\x80\x02"
      "cos\nsystem\nX\x05\x00\x00\x00touch\x85R."s);
  const io::TorchPt pt = io::parse_torch_pt(evil.data(), evil.size(), "evil.pt");
  ASSERT_TRUE(pt.root->is(Kind::Object));
  EXPECT_EQ(pt.root->cls->s, "os.system");
  EXPECT_THROW(io::torch_pt_checkpoint(pt), engine::IoError);
  // a list that contains itself (memo cycle): no leak, no endless walk
  const std::string cyc = zip_with_pickle(
      "\x80\x02]q\x00h\x00"
      "a."s);
  const io::TorchPt c = io::parse_torch_pt(cyc.data(), cyc.size(), "cyc.pt");
  EXPECT_EQ(c.root->items.at(0), c.root);
  EXPECT_THROW(io::pt_to_yaml(c.root), engine::IoError);
}
