// `yolov9 info --cfg FILE [--img 640] [--nc N]`: the official model summary (graph/model.h).
// `yolov9 info --self-check`: exercises tensor views, autograd and the CPU kernels on values
// whose results are known in closed form, so a fresh build can be trusted at a glance.
#include "apps/selfcheck.h"

#include "engine/backend.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "apps/commands.h"
#include "apps/training/config_paths.h"
#include "engine/autograd.h"
#include "engine/device.h"
#include "engine/tensor.h"
#include "graph/model.h"
#include "ops/autocast.h"
#include "ops/ops.h"
#include "ops/reduce.h"

namespace apps {

using namespace training;  // the library layer behind the commands

int self_check() {
  using engine::Tensor;
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    std::printf("  %-48s %s\n", what, ok ? "ok" : "FAILED");
    if (!ok) failures++;
  };
  // y = sum(permute(x)) over a strided view: dy/dx = 1 everywhere.
  Tensor x = Tensor::arange(24).reshape({2, 3, 4});
  x.set_requires_grad(true);
  Tensor y = ops::sum(x.permute({2, 0, 1}).slice(0, 1, 4));
  expect(std::fabs(y.item<float>() - (276.0f - (0 + 4 + 8 + 12 + 16 + 20))) < 1e-4f, "sum over a sliced permuted view");
  y.backward();
  auto g = x.grad().to_vector<float>();
  bool grad_ok = true;
  for (int i = 0; i < 24; ++i) grad_ok = grad_ok && g[i] == (i % 4 == 0 ? 0.0f : 1.0f);
  expect(grad_ok, "gradient of the sliced view");
  Tensor h = Tensor::full({5}, 1.5).to(engine::DType::F16).to(engine::DType::F32);
  expect(h.to_vector<float>()[4] == 1.5f, "f32 -> f16 -> f32 round trip");
  if (failures) {
    std::printf("self-check FAILED (%d)\n", failures);
    return 1;
  }
  std::printf("self-check passed\n");
  return 0;
}

void register_info(CLI::App& app) {
  // CLI11 binds options to storage that outlives parsing.
  static bool self = false, backends = false;
  static std::string cfg;
  static int64_t img = 640;
  static int64_t nc = -1;
  add_command(
      app, "info", "print a model summary (--cfg), the kernel table (--backends) or run the self-check",
      [](CLI::App& sub) {
        sub.add_flag("--self-check", self, "run the numeric self-check and exit");
        sub.add_flag("--backends", backends,
                     "print the kernel table: every entry, the dtypes each backend supports (CPU, CUDA)");
        sub.add_option("--cfg", cfg, "model YAML (official grammar), e.g. configs/models/yolov9-c.yaml");
        sub.add_option("--img,--imgsz", img, "image size for the GFLOPs figure (pixels)")
            ->check(CLI::Range(int64_t{1}, int64_t{1} << 20).description("a positive integer"));
        sub.add_option("--nc", nc, "override the YAML's class count")
            ->check(CLI::Range(int64_t{1}, int64_t{1} << 20).description("a positive integer"));
      },
      []() {
        if (self) return self_check();
        if (backends) {
          std::fputs(engine::backend_table().c_str(), stdout);
          // What the CPU's vector unit gives the convolutions (kernels/cpu: oneDNN's ISA).
          const int64_t block = ops::channel_block(engine::Device::cpu());
          std::printf("\ncpu: activations in %s; BF16 convolutions (train --amp bf16): %s\n",
                      block ? ("blocked layout nChw" + std::to_string(block) + "c").c_str() : "plain NCHW",
                      ops::cpu_bf16_convolutions(engine::Device::cpu())
                          ? "yes (native BF16)"
                          : "no (no AVX512_BF16 or AMX: --amp bf16 trains in FP32)");
          return 0;
        }
        if (cfg.empty()) {
          std::fprintf(stderr, "yolov9 info: give --cfg FILE (model summary), --backends or --self-check\n");
          return 2;
        }
        graph::BuildOptions opts;
        opts.init = false;  // counts and shapes only
        cfg = resolve_config(cfg, "models", "model config (--cfg)");
        auto model = graph::Model::from_yaml(cfg, nc, opts);
        if (nc > 0 && nc != model->config().nc_yaml)
          std::printf("Overriding model.yaml nc=%lld with nc=%lld\n", static_cast<long long>(model->config().nc_yaml),
                      static_cast<long long>(nc));
        std::fputs(model->summary(std::filesystem::path(cfg).stem().string(), img).c_str(), stdout);
        return 0;
      });
}

}  // namespace apps
