// Unit tests of io/safetensors: round trip of every dtype, metadata, strided views, and the
// errors raised for corrupt files (truncated, bad header, offsets out of range).
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/error.h"
#include "io/atomic_file.h"
#include "tests/testutil.h"

namespace {

using engine::DType;
using engine::Tensor;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("y9_st_" + std::to_string(::getpid()) + "_" + name)).string();
}

void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header << data;
}

std::string expect_io_error(const std::string& path) {
  try {
    io::load_safetensors(path);
  } catch (const engine::IoError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << "message does not name the path: " << msg;
    return msg;
  }
  ADD_FAILURE() << "no IoError for " << path;
  return "";
}

TEST(Safetensors, RoundTripAllDtypesAndMetadata) {
  std::map<std::string, Tensor> ts;
  ts["a.f32"] = testutil::random_tensor({2, 3, 4}, 1, -1, 1, DType::F32);
  ts["b.f64"] = testutil::random_tensor({5}, 2);
  ts["c.i64"] = Tensor::from_vector<int64_t>({1, -2, 3, 1LL << 40}, {2, 2});
  ts["d.i32"] = Tensor::from_vector<int32_t>({7, -8, 9}, {3});
  ts["e.u8"] = Tensor::from_vector<uint8_t>({0, 255}, {2});
  ts["f.scalar"] = Tensor::full({}, 3.5, DType::F32);
  ts["g.empty"] = Tensor::zeros({0, 3}, DType::F32);
  // A strided (transposed) view is written in its logical row-major order.
  Tensor base = testutil::random_tensor({3, 4}, 3, -1, 1, DType::F32);
  ts["h.view"] = base.transpose(0, 1);
  std::map<std::string, std::string> meta{{"format", "pt"}, {"epoch", "3"}};

  const std::string p = temp_path("rt.safetensors");
  io::save_safetensors(p, ts, meta);
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp." + std::to_string(::getpid())));
  auto back = io::load_safetensors(p);
  EXPECT_EQ(back.metadata, meta);
  ASSERT_EQ(back.tensors.size(), ts.size());
  for (const auto& [name, t] : ts) {
    ASSERT_TRUE(back.tensors.count(name)) << name;
    const Tensor& b = back.tensors.at(name);
    EXPECT_EQ(b.dtype(), t.dtype()) << name;
    EXPECT_EQ(b.shape(), t.shape()) << name;
    EXPECT_TRUE(b.is_contiguous()) << name;
    if (t.numel() > 0) EXPECT_EQ(b.to_vector<double>(), t.to_vector<double>()) << name;
  }
  // Header length is a multiple of 8 and the data follow in name order.
  std::ifstream f(p, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
  std::filesystem::remove(p);
}

TEST(Safetensors, OverwriteIsAtomicReplace) {
  const std::string p = temp_path("ow.safetensors");
  io::save_safetensors(p, {{"x", Tensor::ones({4}, DType::F32)}});
  io::save_safetensors(p, {{"y", Tensor::zeros({2}, DType::F64)}});
  auto back = io::load_safetensors(p);
  ASSERT_EQ(back.tensors.size(), 1u);
  EXPECT_TRUE(back.tensors.count("y"));
  std::filesystem::remove(p);
}

TEST(Safetensors, ReadsOfficialFixtureIndex) {
  auto files = testutil::glob_files(testutil::reference_dir(), "module_Conv*.safetensors");
  if (files.empty()) GTEST_SKIP() << "no reference fixtures";
  auto d = io::load_safetensors(files[0]);
  EXPECT_TRUE(d.tensors.count("input.0"));
  EXPECT_EQ(d.tensors.at("state.bn.num_batches_tracked").dtype(), DType::I64);
}

TEST(Safetensors, CorruptFilesThrowIoError) {
  const std::string p = temp_path("bad.safetensors");
  // Missing file.
  expect_io_error(temp_path("does_not_exist.safetensors"));
  // Shorter than the length field.
  { std::ofstream(p, std::ios::binary) << "abc"; }
  EXPECT_NE(expect_io_error(p).find("truncated"), std::string::npos);
  // Header length beyond the file.
  {
    std::ofstream f(p, std::ios::binary);
    uint64_t n = 1000;
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << "{}";
  }
  EXPECT_NE(expect_io_error(p).find("truncated"), std::string::npos);
  // Not JSON.
  write_raw(p, "{not json", "");
  EXPECT_NE(expect_io_error(p).find("bad header"), std::string::npos);
  // Unknown dtype.
  write_raw(p, R"({"x":{"dtype":"Q8","shape":[1],"data_offsets":[0,1]}})", "a");
  EXPECT_NE(expect_io_error(p).find("bad header"), std::string::npos);
  // Offsets past the data section (data truncated).
  write_raw(p, R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(8, '\0'));
  EXPECT_NE(expect_io_error(p).find("out of range"), std::string::npos);
  // Byte count that does not match the shape.
  write_raw(p, R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0'));
  EXPECT_NE(expect_io_error(p).find("needs 12"), std::string::npos);
  // Missing fields / negative size.
  write_raw(p, R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", "");
  EXPECT_NE(expect_io_error(p).find("negative"), std::string::npos);
  write_raw(p, R"({"x":{"dtype":"F32"}})", "");
  EXPECT_NE(expect_io_error(p).find("data_offsets"), std::string::npos);
  // Truncating a valid file at any point inside its data is caught.
  io::save_safetensors(p, {{"x", Tensor::ones({16}, DType::F32)}});
  auto size = std::filesystem::file_size(p);
  std::filesystem::resize_file(p, size - 4);
  EXPECT_NE(expect_io_error(p).find("out of range"), std::string::npos);
  std::filesystem::remove(p);
}

TEST(Safetensors, SaveRejectsUndefinedTensor) {
  EXPECT_THROW(io::save_safetensors(temp_path("u.safetensors"), {{"x", Tensor()}}), engine::Error);
}

}  // namespace

// Issue 16 item 8: a folder and a PyTorch checkpoint are named for what they are, not as a
// std::bad_alloc or a "truncated" safetensors.
TEST(Safetensors, FolderAndPyTorchCheckpointsAreNamed) {
  const std::string dir = temp_path("a_folder");
  std::filesystem::create_directories(dir);
  EXPECT_NE(expect_io_error(dir).find("is a directory"), std::string::npos);
  const std::string zip = temp_path("yolov9-c.pt");
  std::ofstream(zip, std::ios::binary) << std::string("PK\x03\x04\x14\x00", 6) << std::string(100, 'z');
  EXPECT_NE(expect_io_error(zip).find("PyTorch checkpoint"), std::string::npos);
  const std::string pickle = temp_path("legacy.pt");
  std::ofstream(pickle, std::ios::binary) << std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8", 12);
  const std::string msg = expect_io_error(pickle);
  EXPECT_NE(msg.find("PyTorch checkpoint"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(expect_io_error(temp_path("absent.safetensors")).find("not found"), std::string::npos);
}

// Item 1: a save killed mid-write leaves <file>.tmp.<pid>; the next run removes those of dead
// processes and keeps those of live ones.
TEST(Safetensors, StaleTemporariesOfDeadWritersAreRemoved) {
  const std::string dir = temp_path("weights_dir");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string dead = dir + "/last.safetensors.tmp.999999999";
  const std::string live = dir + "/last.safetensors.tmp." + std::to_string(::getppid());
  const std::string other = dir + "/notes.tmp.txt";
  for (const auto& p : {dead, live, other}) std::ofstream(p) << "x";
  const auto removed = io::remove_stale_temporaries(dir);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0], dead);
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(live));
  EXPECT_TRUE(std::filesystem::exists(other));
  EXPECT_TRUE(io::remove_stale_temporaries(dir + "/absent").empty());
}

// A write that fails (here: the target's folder is gone) names the file and the system's reason,
// and leaves no temporary.
TEST(Safetensors, FailedWriteNamesTheReason) {
  const std::string p = temp_path("no_such_dir") + "/x.safetensors";
  try {
    io::save_safetensors(p, {{"a", Tensor::zeros({2})}});
    FAIL() << "expected IoError";
  } catch (const engine::IoError& e) {
    EXPECT_NE(e.message().find(p), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("No such file or directory"), std::string::npos) << e.message();
  }
}
