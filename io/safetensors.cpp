// safetensors reader/writer (see safetensors.h). Assumes a little-endian host, as the format
// stores little-endian data and every target (x86-64, aarch64) is little-endian.
#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/autograd.h"
#include "io/atomic_file.h"

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace io {

using engine::Tensor;

namespace {

#define Y9_IO_FAIL(path, ...) Y9_THROW(engine::IoError, "safetensors '", path, "': ", __VA_ARGS__)

std::vector<char> read_all(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st)) Y9_IO_FAIL(path, "file not found");
  if (std::filesystem::is_directory(st)) Y9_IO_FAIL(path, "is a directory, not a weights file");
  if (!std::filesystem::is_regular_file(st)) Y9_IO_FAIL(path, "is not a regular file");
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) Y9_IO_FAIL(path, "cannot open file for reading: ", std::strerror(errno));
  std::streamsize size = f.tellg();
  if (size < 0) Y9_IO_FAIL(path, "cannot determine file size");
  std::vector<char> buf(static_cast<size_t>(size));
  f.seekg(0);
  if (size > 0 && !f.read(buf.data(), size)) Y9_IO_FAIL(path, "read failed");
  return buf;
}

// torch.save writes a zip archive ("PK\x03\x04"); the legacy format and plain pickles start with
// the pickle PROTO opcode 0x80 and a protocol number. A safetensors header starts with '{' at 8.
const char* pytorch_kind(const char* d, size_t n) {
  if (n >= 9 && d[8] == '{') return nullptr;
  if (n >= 4 && std::memcmp(d, "PK\x03\x04", 4) == 0) return "a zip archive as torch.save writes";
  if (n >= 2 && static_cast<unsigned char>(d[0]) == 0x80 && d[1] >= 2 && d[1] <= 5)
    return "a Python pickle (legacy torch.save format)";
  return nullptr;
}

}  // namespace

// --- load ---------------------------------------------------------------------------------------

SafetensorsData load_safetensors(const std::string& path) {
  std::vector<char> buf = read_all(path);
  return parse_safetensors(buf.data(), buf.size(), path);
}

SafetensorsData parse_safetensors(const char* bytes, size_t size, const std::string& path) {
  if (const char* kind = pytorch_kind(bytes, size))
    Y9_IO_FAIL(path, "this is a PyTorch checkpoint (", kind,
               "), not a safetensors file: io::load_checkpoint and io::load_weights_file read torch.save zip "
               "archives (io/torch_pt.h); the legacy pre-1.6 pickle format is not supported, re-save it with a "
               "newer torch.save");
  if (size < 8) Y9_IO_FAIL(path, "truncated: ", size, " bytes, need at least 8 for the header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes, 8);
  if (header_len > size - 8)
    Y9_IO_FAIL(path, "truncated: header length ", header_len, " exceeds the ", size - 8,
               " bytes after the length field");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + header_len);
  } catch (const nlohmann::json::exception& e) {
    Y9_IO_FAIL(path, "bad header: not valid JSON (", e.what(), ")");
  }
  if (!header.is_object()) Y9_IO_FAIL(path, "bad header: top level is not a JSON object");
  const char* data = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  SafetensorsData out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) Y9_IO_FAIL(path, "bad header: __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          Y9_IO_FAIL(path, "bad header: __metadata__ value of '", m.key(), "' is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      Y9_IO_FAIL(path, "bad header: entry '", name, "' needs dtype, shape and data_offsets");
    if (!v["dtype"].is_string()) Y9_IO_FAIL(path, "bad header: dtype of '", name, "' is not a string");
    engine::DType dtype;
    try {
      dtype = engine::dtype_from_safetensors_name(v["dtype"].get<std::string>());
    } catch (const engine::Error& e) {
      Y9_IO_FAIL(path, "bad header: tensor '", name, "': ", e.message());
    }
    const auto& js = v["shape"];
    if (!js.is_array()) Y9_IO_FAIL(path, "bad header: shape of '", name, "' is not an array");
    if (js.size() > 8) Y9_IO_FAIL(path, "bad header: shape of '", name, "' has ", js.size(), " dimensions (at most 8)");
    engine::Shape shape;
    uint64_t numel = 1, extent = 1;  // extent: product of max(size, 1), which bounds every stride
    for (const auto& d : js) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        Y9_IO_FAIL(path, "bad header: shape of '", name, "' has a non-integer or negative size");
      const auto s = static_cast<uint64_t>(d.get<int64_t>());
      if (s > (uint64_t{1} << 48) || extent * std::max<uint64_t>(s, 1) > (uint64_t{1} << 48))
        Y9_IO_FAIL(path, "bad header: shape of '", name, "' is too large");
      extent *= std::max<uint64_t>(s, 1);
      numel *= s;
      shape.push_back(static_cast<int64_t>(s));
    }
    const auto& jo = v["data_offsets"];
    if (!jo.is_array() || jo.size() != 2 || !jo[0].is_number_unsigned() || !jo[1].is_number_unsigned())
      Y9_IO_FAIL(path, "bad header: data_offsets of '", name, "' must be two non-negative integers");
    const uint64_t begin = jo[0].get<uint64_t>(), end = jo[1].get<uint64_t>();
    if (begin > end || end > data_size)
      Y9_IO_FAIL(path, "data_offsets [", begin, ", ", end, "] of '", name, "' out of range (data section has ",
                 data_size, " bytes)");
    const uint64_t nbytes = numel * engine::dtype_size(dtype);
    if (end - begin != nbytes)
      Y9_IO_FAIL(path, "tensor '", name, "' has ", end - begin, " bytes, shape ", engine::shape_str(shape), " ",
                 engine::dtype_name(dtype), " needs ", nbytes);
    Tensor t = Tensor::empty(shape, dtype, engine::Device::cpu());
    if (nbytes > 0) std::memcpy(t.data_ptr(), data + begin, nbytes);
    out.tensors.emplace(name, std::move(t));
  }
  return out;
}

// --- save ---------------------------------------------------------------------------------------

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  engine::autograd::NoGradGuard no_grad;
  std::vector<Tensor> host;
  host.reserve(tensors.size());
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    Y9_CHECK(name != "__metadata__", "save_safetensors '", path, "': '__metadata__' is a reserved name");
    Y9_CHECK(t.defined(), "save_safetensors '", path, "': tensor '", name, "' is undefined");
    Tensor h = t.detach().to(engine::Device::cpu()).contiguous();
    const uint64_t nbytes = static_cast<uint64_t>(h.numel()) * engine::dtype_size(h.dtype());
    header[name] = {{"dtype", engine::dtype_safetensors_name(h.dtype())},
                    {"shape", h.shape()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    host.push_back(std::move(h));
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  // Metadata is arbitrary text (a model YAML saved in Latin-1): replace invalid UTF-8, never throw.
  std::string hs = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  while (hs.size() % 8 != 0) hs.push_back(' ');

  AtomicFile f(path);
  const uint64_t len = hs.size();
  f.write(&len, 8);
  f.write(hs.data(), hs.size());
  for (const Tensor& h : host) {
    const size_t nbytes = static_cast<size_t>(h.numel()) * engine::dtype_size(h.dtype());
    if (nbytes > 0) f.write(h.data_ptr(), nbytes);
  }
  f.commit();
}

}  // namespace io
