// Fixture access for the loss tests: a thin adapter over io::load_safetensors with the
// has/get/names interface the tests use.
#pragma once
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/tensor.h"
#include "io/safetensors.h"

namespace testloss {

/// A safetensors file loaded into CPU tensors.
class StFile {
 public:
  explicit StFile(const std::string& path) : path_(path), tensors_(io::load_safetensors(path).tensors) {}
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& kv : tensors_) out.push_back(kv.first);
    return out;
  }
  /// Tensor `name`; throws engine::IoError naming the file when missing.
  engine::Tensor get(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) Y9_THROW(engine::IoError, path_, ": no tensor '", name, "'");
    return it->second;
  }

 private:
  std::string path_;
  std::map<std::string, engine::Tensor> tensors_;
};

/// Reads a JSON file.
inline nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) Y9_THROW(engine::IoError, "cannot open ", path);
  return nlohmann::json::parse(f);
}

}  // namespace testloss
