// Fixture access for the evaluation tests: thin wrappers over io::load_safetensors and JSON.
#pragma once
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/tensor.h"
#include "io/safetensors.h"

namespace evaltest {

/// All tensors of a safetensors file, by name (CPU, contiguous, dtype as stored).
inline std::map<std::string, engine::Tensor> read_safetensors(const std::string& path) {
  return io::load_safetensors(path).tensors;
}

/// Reads a JSON file; throws engine::IoError naming the path when it cannot be opened.
inline nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) Y9_THROW(engine::IoError, "cannot open ", path);
  return nlohmann::json::parse(f);
}

}  // namespace evaltest
