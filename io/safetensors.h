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

/// Reads `path` completely into CPU tensors (parse_safetensors on the file's bytes).
/// Errors: engine::IoError naming the path and the problem: file missing, a directory or
/// unreadable, plus every error of parse_safetensors.
/// Determinism: exact (bytes are copied verbatim).
SafetensorsData load_safetensors(const std::string& path);

/// Parses a whole safetensors file held in memory (`size` bytes at `data`); `name` (the path)
/// names it in messages. Never reads past `size`, whatever the bytes.
/// Errors: engine::IoError naming `name` and the problem: a PyTorch checkpoint (torch.save zip
/// archive or pickle: read those with io::load_checkpoint / io::load_weights_file), fewer than 8 bytes or fewer than the header length
/// (truncated), header not valid JSON or not an object, an entry without a known dtype / a
/// non-negative integer shape / two data_offsets, data offsets out of range, a byte size that
/// does not equal numel * dtype size, non-string metadata.
SafetensorsData parse_safetensors(const char* data, size_t size, const std::string& name);

/// Writes `tensors` (any device, dtype, layout; each is copied to a contiguous CPU buffer) and
/// `metadata` to `path`. Data are laid out in name order; the header is space-padded to a
/// multiple of 8 bytes. Atomic (io::AtomicFile): writes `<path>.tmp.<pid>`, flushes it to the disk
/// (fsync) and renames it over `path`, so a reader, a crash or a full disk never leaves a
/// half-written `path`; on failure the temporary is removed and `path` keeps its old contents.
/// Errors: engine::IoError naming the path and the system's reason ("No space left on device",
/// "Permission denied", ...) when the file cannot be written or renamed; engine::Error for an
/// undefined tensor or the reserved name "__metadata__".
/// Determinism: the output bytes depend only on the inputs.
void save_safetensors(const std::string& path, const std::map<std::string, engine::Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace io
