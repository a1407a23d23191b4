// A whole training step on the CUDA backend against the CPU (label gpu; under the CUDA emulator
// it runs as step_cuda_test_emu_fwd/_emu_rev): yolov9-t at 64 px, batch 2, FP32, the same seeded
// weights on both devices (graph::Module::to moves the CUDA copy), then what Trainer::train_step
// does for one optimizer update: train-mode forward, ops::yolo_loss (dual), backward into the
// ParamStore's flat gradient buffer, clip_grad_norm_, SGD over the three official parameter groups
// (make_official_optimizer), ModelEMA::update over the parameter and BatchNorm-statistics flat
// buffers. Compared: the loss items (1e-5 relative, or 10x their own one-ulp-input noise), every
// parameter gradient (the tolerance of tests/train/model_loss_ref_test.cpp: max(1e-3, 3x our own one-ulp-input noise) of the tensor's
// scale), the BatchNorm running statistics after the forward (1e-3 of scale), and, with the CPU
// run given the CUDA run's gradients and statistics, the gradient norm, parameters, momentum
// buffers, model state and EMA state after the update (1e-5 of each tensor's scale).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "apps/training/clip.h"
#include "apps/training/ema.h"
#include "apps/training/optim.h"
#include "apps/training/param_groups.h"
#include "apps/training/param_store.h"
#include "engine/autograd.h"
#include "engine/flat_params.h"
#include "graph/model.h"
#include "ops/yolo_loss.h"
#include "tests/source_paths.h"
#include "tests/testutil.h"

using engine::Device;
using engine::DType;
using engine::Tensor;

namespace {

// cuDNN convolutions in strict FP32 (no TF32 tensor cores, which PyTorch and we allow by default):
// this test compares the device with the CPU within float rounding. On the lent H200 with TF32
// allowed it differed by 0.2% to 0.65% in the loss items and up to 130% in some gradients, and
// in strict FP32 every gradient passed (confirmed on the second device run, 2026-12-04:
// Y9_CUDNN_NO_TF32=0 in the environment wins, to see TF32's effect). Set before the first
// convolution: the backend reads the variable once.
[[maybe_unused]] const bool kStrictFp32 = [] {
  return ::setenv("Y9_CUDNN_NO_TF32", "1", /*overwrite=*/0) == 0;
}();

constexpr int64_t kNc = 80;
constexpr uint64_t kSeed = 7;

std::string yolov9t_yaml() { return testutil::source_file("configs/models/yolov9-t.yaml"); }

// max|got - want| / max(max|want|, tiny): the error relative to the tensor's scale (as
// tests/graph/graph_ref_util.h scaled_error), both on the host.
double scaled_error(const Tensor& got, const Tensor& want) {
  const auto g = got.to(Device::cpu()).to(DType::F64).contiguous().to_vector<double>();
  const auto w = want.to(Device::cpu()).to(DType::F64).contiguous().to_vector<double>();
  EXPECT_EQ(g.size(), w.size());
  double e = 0, s = 0;
  for (size_t i = 0; i < g.size() && i < w.size(); ++i) {
    e = std::max(e, std::fabs(g[i] - w[i]));
    s = std::max(s, std::fabs(w[i]));
  }
  return e / std::max(s, 1e-30);
}

// One model with its training state on one device, set up as Trainer::setup_optimizer does.
struct StepRun {
  std::shared_ptr<graph::Model> model;
  std::unique_ptr<training::ParamStore> store;
  engine::FlatBuffer bn;  // floating BatchNorm buffers, packed
  std::unique_ptr<training::Optimizer> opt;
  std::unique_ptr<training::ModelEMA> ema;
  std::map<std::string, Tensor> grads;  // host copies after backward
  std::vector<double> items;
  double total = 0, grad_norm = 0;
};

StepRun make_run(Device dev) {
  StepRun r;
  graph::BuildOptions bo;
  bo.seed = kSeed;
  r.model = graph::Model::from_yaml(yolov9t_yaml(), kNc, bo);
  r.model->train();
  if (dev != Device::cpu()) EXPECT_GT(r.model->to(dev), 0);
  const training::OfficialParamSplit split = training::official_param_split(*r.model);
  r.store = std::make_unique<training::ParamStore>(r.model->named_parameters());
  training::NamedTensors fb;
  for (const auto& nb : r.model->named_buffers())
    if (engine::is_floating(nb.second.dtype())) fb.push_back(nb);
  r.bn = engine::pack_flat(fb);
  // Official hyp.scratch-high: lr0 0.01, momentum 0.937, weight_decay 0.0005 scaled for batch 2
  // (accumulate 32, nbs 64). A warm-up-like bias lr exercises group 0 with a different lr.
  const int64_t acc = training::official_accumulate(2);
  r.opt = training::make_official_optimizer(training::OptimizerKind::SGD, *r.store, split, 0.01, 0.937,
                                            training::official_weight_decay(0.0005, 2, acc));
  r.opt->param_groups()[0].lr = 0.1;
  r.ema = std::make_unique<training::ModelEMA>(std::vector<engine::FlatBuffer>{r.store->params(), r.bn},
                                               r.model->state_dict());
  return r;
}

// The batch: two 64x64 images in [0, 1] and five boxes (image, class, cx, cy, w, h normalised).
Tensor batch_images() { return testutil::random_tensor({2, 3, 64, 64}, 11, 0.0, 1.0, DType::F32); }
Tensor batch_targets() {
  return Tensor::from_vector<float>({0, 3, 0.50f, 0.50f, 0.40f, 0.50f,   //
                                     0, 17, 0.25f, 0.30f, 0.20f, 0.25f,  //
                                     1, 0, 0.60f, 0.40f, 0.50f, 0.60f,   //
                                     1, 56, 0.20f, 0.75f, 0.30f, 0.20f,  //
                                     1, 79, 0.85f, 0.85f, 0.15f, 0.20f},
                                    {5, 6});
}

// Forward, loss, backward (no host reads between them); test-only host copies of the gradients
// and the loss afterwards.
void forward_backward(StepRun& r, const Tensor& images, const Tensor& targets) {
  const Device dev = r.store->params().flat.device();
  const Tensor x = images.to(dev);
  graph::ModelOutput out = r.model->forward(x);
  ops::YoloLossResult L = ops::yolo_loss(out.raw, targets, ops::YoloLossConfig::dual(kNc));
  EXPECT_EQ(L.total.device(), dev);
  L.total.backward();
  for (size_t i = 0; i < r.store->size(); ++i)
    if (r.store->trainable(i)) r.grads[r.store->name(i)] = r.store->grad_segment(i).to(Device::cpu()).clone();
  r.items = L.items.to(Device::cpu()).to(DType::F64).to_vector<double>();
  r.total = L.total.to(Device::cpu()).to(DType::F64).item<double>();
}

// The update of Trainer::train_step: clip, optimizer step, zero_grad, EMA.
void update(StepRun& r) {
  r.grad_norm = training::clip_grad_norm_(*r.store, 10.0);
  r.opt->step();
  r.opt->zero_grad();
  r.ema->update();
}

// Parameter gradients on the CPU for the input scaled by (1 + f): our own float-rounding noise,
// as tests/train/model_loss_ref_test.cpp measures it to set the per-tensor tolerance.
// The CPU run on the images scaled by (1 + f): its gradients and loss items, whose distance from the
// unscaled run measures how far a one-ulp change of the input moves them (the noise floor that
// the tolerances below scale).
struct Scaled {
  std::map<std::string, Tensor> grads;
  std::map<std::string, Tensor> buffers;  // after the train-mode forward (BatchNorm statistics)
  std::vector<double> items;
  double total = 0;
};

Scaled cpu_run_scaled(const Tensor& images, const Tensor& targets, double f) {
  graph::BuildOptions bo;
  bo.seed = kSeed;
  auto m = graph::Model::from_yaml(yolov9t_yaml(), kNc, bo);
  m->train();
  Tensor x = images.detach().clone();
  {
    engine::autograd::NoGradGuard ng;
    x.mul_(1.0 + f);
  }
  auto o = m->forward(x);
  auto L = ops::yolo_loss(o.raw, targets, ops::YoloLossConfig::dual(kNc));
  L.total.backward();
  Scaled r;
  for (const auto& [n, p] : m->named_parameters())
    if (p.grad().defined()) r.grads[n] = p.grad().detach().clone();
  for (const auto& [n, b] : m->named_buffers()) r.buffers[n] = b.detach().clone();
  r.items = L.items.to(DType::F64).to_vector<double>();
  r.total = L.total.to(DType::F64).item<double>();
  return r;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST(CudaStep, ModuleToMovesParametersAndBuffersKeepingHandles) {
  Y9_SKIP_WITHOUT_GPU();
  graph::BuildOptions bo;
  bo.seed = kSeed;
  auto m = graph::Model::from_yaml(testutil::source_file("configs/models/gelan-t.yaml"), kNc, bo);
  const auto before = m->state_dict();
  std::map<std::string, Tensor> host;
  for (const auto& [n, t] : before) host[n] = t.detach().clone();
  const int64_t moved = m->to(Device::cuda(0));
  EXPECT_EQ(moved, static_cast<int64_t>(before.size()));
  const auto after = m->state_dict();
  ASSERT_EQ(after.size(), before.size());
  for (size_t k = 0; k < after.size(); ++k) {
    const auto& [n, t] = after[k];
    EXPECT_EQ(n, before[k].first);
    EXPECT_EQ(t.impl(), before[k].second.impl()) << n << ": the handle must be re-pointed, not replaced";
    EXPECT_EQ(t.device(), Device::cuda(0)) << n;
    EXPECT_TRUE(testutil::all_close(t.to(Device::cpu()), host.at(n), 0, 0)) << n;
  }
  for (const auto& [n, p] : m->named_parameters())
    EXPECT_EQ(p.requires_grad(), n.find(".dfl.") == std::string::npos) << n;
  EXPECT_EQ(m->to(Device::cuda(0)), 0);  // already there
  EXPECT_EQ(m->to(Device::cpu()), static_cast<int64_t>(before.size()));
  for (const auto& [n, t] : m->state_dict()) EXPECT_TRUE(testutil::all_close(t, host.at(n), 0, 0)) << n;
}

TEST(CudaStep, Yolov9tTrainingStepMatchesCpu) {
  Y9_SKIP_WITHOUT_GPU();
  const auto t0 = std::chrono::steady_clock::now();
  const Tensor images = batch_images(), targets = batch_targets();

  StepRun cpu = make_run(Device::cpu());
  forward_backward(cpu, images, targets);
  const auto g_up = cpu_run_scaled(images, targets, std::ldexp(1.0, -23));
  const auto g_down = cpu_run_scaled(images, targets, -std::ldexp(1.0, -23));
  const double t_cpu = seconds_since(t0);

  const auto t1 = std::chrono::steady_clock::now();
  StepRun gpu = make_run(Device::cuda(0));
  ASSERT_EQ(gpu.store->params().flat.device(), Device::cuda(0));
  ASSERT_EQ(gpu.bn.flat.device(), Device::cuda(0));
  forward_backward(gpu, images, targets);
  const double t_gpu = seconds_since(t1);
  std::printf("  cpu forward+backward (+2 noise passes) %.1f s, cuda forward+backward %.1f s\n", t_cpu, t_gpu);

  // Loss items.
  const char* names[3] = {"box", "cls", "dfl"};
  // Within 1e-5 relative, or 10x what a one-ulp scaling of the input moves them on the CPU (the
  // SiLU of the CPU path rounds its own e^x, kernels/cpu/elementwise.cpp, and train-mode
  // BatchNorm over 2x2 P5 maps amplifies such last-bit differences: 2.5e-5 relative measured).
  // 10x, not 3x: the device rounds differently in every layer (cuDNN's summation orders), not once
  // at the input; on the H200 in strict FP32 the loss items differed by 3.3x to 3.5x that noise,
  // and with TF32 allowed by ~60x (so TF32 still fails here).
  auto tol = [](double cpu, double up, double down) {
    return std::max(1e-5 * std::fabs(cpu), 10.0 * std::max(std::fabs(up - cpu), std::fabs(down - cpu)));
  };
  for (int k = 0; k < 3; ++k) {
    const double t = tol(cpu.items[k], g_up.items[k], g_down.items[k]);
    EXPECT_NEAR(gpu.items[k], cpu.items[k], t) << names[k];
    std::printf("  %s: cuda %.8f cpu %.8f (tolerance %.2e)\n", names[k], gpu.items[k], cpu.items[k], t);
  }
  EXPECT_NEAR(gpu.total, cpu.total, tol(cpu.total, g_up.total, g_down.total));

  // Gradients: model_loss_ref_test.cpp's tolerance.
  ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, gc] : cpu.grads) {
    ASSERT_TRUE(gpu.grads.count(name)) << name;
    const double noise = std::max(scaled_error(g_up.grads.at(name), gc), scaled_error(g_down.grads.at(name), gc));
    const double tol = std::max(1e-3, 3.0 * noise);
    const double err = scaled_error(gpu.grads.at(name), gc);
    if (err / tol > worst) worst = err / tol, worst_name = name;
    EXPECT_LE(err, tol) << "grad " << name << " (noise " << noise << ")";
  }
  std::printf("  %zu gradients compared, worst error/tolerance %.3g (%s)\n", cpu.grads.size(), worst,
              worst_name.c_str());

  auto compare_state = [](const char* what, const std::vector<std::pair<std::string, Tensor>>& a,
                          const std::vector<std::pair<std::string, Tensor>>& b, double tol) {
    ASSERT_EQ(a.size(), b.size()) << what;
    double w = 0;
    std::string wn;
    for (size_t k = 0; k < a.size(); ++k) {
      ASSERT_EQ(a[k].first, b[k].first) << what;
      EXPECT_EQ(a[k].second.device(), Device::cuda(0)) << what << " " << a[k].first;
      const double err = scaled_error(a[k].second, b[k].second);
      if (err > w) w = err, wn = a[k].first;
      EXPECT_LE(err, tol) << what << " " << a[k].first;
    }
    std::printf("  %s: %zu tensors, worst scaled error %.3g (%s)\n", what, a.size(), w, wn.c_str());
  };
  // BatchNorm running statistics after the train-mode forward: the batch statistics of 2x2 maps
  // (P5 of 64 px) carry the forward's float noise (graph/model_ref_test.cpp measures it), so they
  // get the gradients' tolerance: 1e-3 of scale, or 3x what a one-ulp scaling of the input moves
  // them on the CPU. (The noise depends on the CPU's oneDNN kernels: on a 2-core AMD EPYC with AVX-512,
  // model.21.cv3.0.m.1.cv2.bn.running_mean differs by 1.11e-3 of scale under the emulator.)
  {
    const auto gb = gpu.model->named_buffers(), cb = cpu.model->named_buffers();
    ASSERT_EQ(gb.size(), cb.size());
    double w = 0;
    std::string wn;
    for (size_t k = 0; k < gb.size(); ++k) {
      const std::string& n = cb[k].first;
      ASSERT_EQ(gb[k].first, n);
      EXPECT_EQ(gb[k].second.device(), Device::cuda(0)) << n;
      const Tensor& c = cb[k].second;
      const double noise = std::max(scaled_error(g_up.buffers.at(n), c), scaled_error(g_down.buffers.at(n), c));
      const double tol = std::max(1e-3, 3.0 * noise);
      const double err = scaled_error(gb[k].second, c);
      if (err / tol > w) w = err / tol, wn = n;
      EXPECT_LE(err, tol) << "buffer " << n << " (noise " << noise << ")";
    }
    std::printf("  BatchNorm buffers after the forward: %zu tensors, worst error/tolerance %.3g (%s)\n", cb.size(),
                w, wn.c_str());
  }

  // The update (clip, SGD over the three groups, EMA) from the SAME gradients and statistics: the
  // CPU run takes the CUDA run's gradient and BatchNorm buffers (same layouts), so what remains is
  // the update itself, which must agree to 1e-5 of scale. (From each run's own gradients the
  // parameters after the step differ by lr x the gradient noise above, up to ~1e-2 of scale for
  // the BatchNorm biases of the backbone, which start at 0.)
  {
    engine::autograd::NoGradGuard ng;
    Tensor(cpu.store->grads().flat).copy_(gpu.store->grads().flat.to(Device::cpu()));
    cpu.bn.flat.copy_(gpu.bn.flat.to(Device::cpu()));
  }
  const auto t2 = std::chrono::steady_clock::now();
  update(gpu);
  const double t_upd = seconds_since(t2);
  update(cpu);
  EXPECT_NEAR(gpu.grad_norm, cpu.grad_norm, 1e-5 * cpu.grad_norm);
  std::printf("  gradient norm: cuda %.8g cpu %.8g; cuda update %.2f s\n", gpu.grad_norm, cpu.grad_norm, t_upd);
  compare_state("model state after the step", gpu.model->state_dict(), cpu.model->state_dict(), 1e-5);
  compare_state("EMA state", gpu.ema->state(), cpu.ema->state(), 1e-5);
  EXPECT_EQ(gpu.ema->updates(), 1);
  double wm = 0;
  for (size_t i = 0; i < cpu.store->size(); ++i) {
    if (!cpu.store->trainable(i)) continue;
    const std::string& n = cpu.store->name(i);
    Tensor mc = cpu.opt->state(n, "momentum_buffer"), mg = gpu.opt->state(n, "momentum_buffer");
    ASSERT_TRUE(mc.defined() && mg.defined()) << n;
    EXPECT_EQ(mg.device(), Device::cuda(0)) << n;
    const double err = scaled_error(mg, mc);
    wm = std::max(wm, err);
    EXPECT_LE(err, 1e-5) << "momentum_buffer " << n;
    EXPECT_EQ(gpu.opt->state_step(n), 1) << n;
  }
  std::printf("  momentum buffers: worst scaled error %.3g\n", wm);
  std::printf("  total %.1f s\n", seconds_since(t0));
}

