// Fuzz target: PyTorch .pt checkpoints (io::parse_torch_pt, then the YOLOv9 conversion, the
// model-YAML emitter, the optimizer-state reader and the JSON writer on whatever it parsed). Any
// bytes: never crashes, never reads out of bounds, never leaks (memo cycles included), the only
// exceptions are engine::IoError naming the file.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/error.h"
#include "fuzz/fuzz_check.h"
#include "io/torch_pt.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const io::TorchPt pt = io::parse_torch_pt(reinterpret_cast<const char*>(data), size, "fuzz.pt");
    Y9_FUZZ_CHECK(pt.root != nullptr);
    try {
      const io::Checkpoint ck = io::torch_pt_checkpoint(pt);
      for (const auto* group : {&ck.model, &ck.ema})
        for (const auto& [name, t] : *group) Y9_FUZZ_CHECK(t.numel() >= 0 && !name.empty());
    } catch (const engine::IoError& e) {
      Y9_FUZZ_CHECK(e.message().find("fuzz.pt") != std::string::npos);
    }
    try {
      (void)io::pt_to_yaml(pt.root);
    } catch (const engine::IoError&) {
    }
    try {  // train --resume: ckpt['optimizer'] and ckpt['opt']
      const io::PtOptimizerState st = io::pt_optimizer_state(pt);
      for (const auto& [id, bufs] : st.state)
        for (const auto& [name, t] : bufs) Y9_FUZZ_CHECK(t.numel() >= 0 && !name.empty());
    } catch (const engine::IoError& e) {
      Y9_FUZZ_CHECK(e.message().find("fuzz.pt") != std::string::npos);
    }
    try {
      (void)io::pt_to_json(pt.root).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    } catch (const engine::IoError&) {
    }
  } catch (const engine::IoError& e) {
    Y9_FUZZ_CHECK(e.message().find("fuzz.pt") != std::string::npos);
  }
  return 0;
}
