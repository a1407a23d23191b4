// Reading and writing safetensors files (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length, a JSON header {name: {dtype, shape, data_offsets}} with an optional
// "__metadata__" string map, then raw little-endian C-order tensor data. The official fixtures
// (shared/reference, written by stio.py) and our checkpoints use this format.
#pragma once
#include <map>
#include <string>

#include "engine/tensor.h"

namespace io {

/// Contents of one safetensors file.
struct SafetensorsData {
  /// Tensors by name: contiguous CPU tensors with the stored dtype (F32, F64, F16, BF16, I32,
  /// I64, U8, Bool) and shape (0-d allowed).
  std::map<std::string, engine::Tensor> tensors;
  /// The "__metadata__" string map (empty when absent).
  std::map<std::string, std::string> metadata;
};

/// Reads `path` completely into CPU tensors.
/// Errors: engine::IoError naming the path and the problem: file missing or unreadable, file
/// shorter than 8 bytes or than its header length (truncated), header not valid JSON or not an
/// object, an entry without a known dtype / a non-negative integer shape / two data_offsets, data
/// offsets out of range, a byte size that does not equal numel * dtype size, non-string metadata.
/// Determinism: exact (bytes are copied verbatim).
SafetensorsData load_safetensors(const std::string& path);

/// Writes `tensors` (any device, dtype, layout; each is copied to a contiguous CPU buffer) and
/// `metadata` to `path`. Data are laid out in name order; the header is space-padded to a
/// multiple of 8 bytes. Atomic: writes `<path>.tmp.<pid>` and renames it over `path`, so a reader
/// never sees a half-written file. Errors: engine::IoError naming the path when the file cannot
/// be written or renamed; engine::Error for an undefined tensor or the reserved name "__metadata__".
/// Determinism: the output bytes depend only on the inputs.
void save_safetensors(const std::string& path, const std::map<std::string, engine::Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace io
