// Minimal private safetensors reader for the evaluation tests (F32/F64/I64/I32 -> engine::Tensor).
// Temporary: the lead will switch these tests to io/safetensors.h once that lands.
// Format: 8-byte little-endian header length, JSON header {name: {dtype, shape, data_offsets}},
// then raw little-endian C-order data.
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tensor.h"

namespace evaltest {

/// All tensors of a safetensors file, by name (CPU, contiguous, dtype as stored).
inline std::map<std::string, engine::Tensor> read_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("read_safetensors: cannot open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string bytes = ss.str();
  if (bytes.size() < 8) throw std::runtime_error("read_safetensors: truncated " + path);
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data(), 8);
  if (8 + hlen > bytes.size()) throw std::runtime_error("read_safetensors: bad header length in " + path);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, hlen));
  const char* data = bytes.data() + 8 + hlen;
  std::map<std::string, engine::Tensor> out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string dt = it.value()["dtype"].get<std::string>();
    engine::Shape shape = it.value()["shape"].get<std::vector<int64_t>>();
    auto offs = it.value()["data_offsets"].get<std::vector<uint64_t>>();
    engine::DType dtype;
    if (dt == "F32") dtype = engine::DType::F32;
    else if (dt == "F64") dtype = engine::DType::F64;
    else if (dt == "I64") dtype = engine::DType::I64;
    else if (dt == "I32") dtype = engine::DType::I32;
    else throw std::runtime_error("read_safetensors: unsupported dtype " + dt + " for " + it.key());
    engine::Tensor t = engine::Tensor::empty(shape, dtype);
    const uint64_t nbytes = offs[1] - offs[0];
    if (nbytes != static_cast<uint64_t>(t.numel()) * engine::dtype_size(dtype))
      throw std::runtime_error("read_safetensors: size mismatch for " + it.key());
    if (nbytes) std::memcpy(t.data_ptr(), data + offs[0], nbytes);
    out.emplace(it.key(), t);
  }
  return out;
}

/// Reads a JSON file.
inline nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("read_json: cannot open " + path);
  return nlohmann::json::parse(f);
}

}  // namespace evaltest
