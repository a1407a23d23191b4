// Minimal header-only safetensors reader for the loss tests (private stand-in until
// io/safetensors.h lands): reads the JSON header and returns tensors as engine::Tensor.
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tensor.h"

namespace testloss {

/// Whole safetensors file in memory with its parsed header.
class StFile {
 public:
  explicit StFile(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot open " + path);
    uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    std::string h(n, '\0');
    f.read(h.data(), static_cast<std::streamsize>(n));
    header_ = nlohmann::json::parse(h);
    data_.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  bool has(const std::string& name) const { return header_.contains(name); }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (auto it = header_.begin(); it != header_.end(); ++it)
      if (it.key() != "__metadata__") out.push_back(it.key());
    return out;
  }
  /// Tensor `name` (F32 -> F32, F64 -> F64, I64 -> I64, I32 -> I32); throws if missing.
  engine::Tensor get(const std::string& name) const {
    if (!has(name)) throw std::runtime_error("safetensors: no tensor " + name);
    const auto& e = header_.at(name);
    engine::Shape shape;
    for (auto& d : e.at("shape")) shape.push_back(d.get<int64_t>());
    const std::string dt = e.at("dtype");
    const size_t b = e.at("data_offsets")[0].get<size_t>(), en = e.at("data_offsets")[1].get<size_t>();
    const char* p = data_.data() + b;
    const size_t n = static_cast<size_t>(engine::shape_numel(shape));
    if (dt == "F32") return make<float>(p, n, en - b, shape);
    if (dt == "F64") return make<double>(p, n, en - b, shape);
    if (dt == "I64") return make<int64_t>(p, n, en - b, shape);
    if (dt == "I32") return make<int32_t>(p, n, en - b, shape);
    throw std::runtime_error("safetensors: unsupported dtype " + dt);
  }

 private:
  template <typename T>
  static engine::Tensor make(const char* p, size_t n, size_t bytes, const engine::Shape& shape) {
    if (bytes != n * sizeof(T)) throw std::runtime_error("safetensors: size mismatch");
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), p, bytes);
    return engine::Tensor::from_vector(v, shape);
  }
  nlohmann::json header_;
  std::vector<char> data_;
};

/// Reads a JSON file.
inline nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(f);
}

}  // namespace testloss
