// AutoBatch (official utils/autobatch.py, utils/torch_utils.py profile), the --batch checks, the
// progress line's memory column and the out-of-memory --batch advice. See autobatch.h.
#include "apps/training/autobatch.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>

#include "apps/training/strfmt.h"
#include "engine/allocator.h"
#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/cuda_memory.h"
#include "engine/error.h"
#include "engine/tensor.h"
#include "graph/model.h"
#include "ops/ops.h"
#include "ops/reduce.h"

namespace training {

namespace {

constexpr double kGiB = 1073741824.0;  // official gb = 1 << 30
constexpr double kMiB = 1048576.0;

double gib(int64_t bytes) { return static_cast<double>(bytes) / kGiB; }

void log(const std::string& s) {
  std::printf("AutoBatch: %s\n", s.c_str());
  std::fflush(stdout);
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// "CUDA:0" (official str(device).upper()).
std::string upper_device(engine::Device d) { return d.is_cpu() ? "CPU" : "CUDA:" + std::to_string(d.index); }

}  // namespace

void check_batch_size(int64_t batch, int64_t max_batch, int world) {
  Y9_CHECK_T(engine::ConfigError, batch == -1 || (batch >= 1 && batch <= max_batch),
             "--batch-size must be -1 (AutoBatch) or in 1..", max_batch, " (got ", batch, ")");
  // Official train_dual.py main(): assert opt.batch_size != -1 under DDP.
  Y9_CHECK_T(engine::ConfigError, batch != -1 || world <= 1,
             "AutoBatch with --batch-size -1 is not compatible with YOLO Multi-GPU DDP training, please pass a valid "
             "--batch-size");
}

AutoBatchFit autobatch_fit(const std::vector<AutoBatchSample>& samples, double total_gib, double reserved_gib,
                           double allocated_gib, double fraction, int64_t default_batch) {
  // Official: y = the memory of the sizes that ran; np.polyfit(batch_sizes[:len(y)], y, deg=1).
  // Deviation: the points are the sizes that ran (official pairs the first len(y) sizes with
  // them, which differs only when a size in the middle fails), and y is in GiB like the free
  // memory (official: y in 1E9 bytes, free in GiB).
  std::vector<std::pair<double, double>> pts;
  for (const auto& s : samples)
    if (s.ok) pts.emplace_back(static_cast<double>(s.batch), s.reserved_gib);
  const bool first_oom = samples.empty() || samples.front().out_of_memory;
  Y9_CHECK_T(engine::ConfigError, !pts.empty(), "AutoBatch: ",
             first_oom ? "not even batch " : "the profile of batch ",
             samples.empty() ? int64_t(1) : samples.front().batch,
             first_oom ? " fits in the device memory; lower --img (or train on a larger device)" : " failed",
             samples.empty() || samples.front().error.empty() ? std::string() : ": " + samples.front().error);
  AutoBatchFit fit;
  if (pts.size() == 1) {
    fit.slope_gib = pts[0].second / pts[0].first;
    fit.intercept_gib = 0;
  } else {
    double mx = 0, my = 0;
    for (const auto& [x, y] : pts) mx += x, my += y;
    mx /= static_cast<double>(pts.size());
    my /= static_cast<double>(pts.size());
    double sxx = 0, sxy = 0;
    for (const auto& [x, y] : pts) sxx += (x - mx) * (x - mx), sxy += (x - mx) * (y - my);
    fit.slope_gib = sxx > 0 ? sxy / sxx : 0;
    fit.intercept_gib = my - fit.slope_gib * mx;
  }
  const double free_gib = total_gib - (reserved_gib + allocated_gib);  // official f = t - (r + a)
  // b = int((f * fraction - p[1]) / p[0]); a slope <= 0 (memory not growing with the batch) is
  // an anomaly here (official: a huge or negative b, then the same anomaly branch).
  double bd = fit.slope_gib > 0 ? (free_gib * fraction - fit.intercept_gib) / fit.slope_gib : -1.0;
  if (!std::isfinite(bd)) bd = -1.0;
  int64_t b = bd > static_cast<double>(kAutoBatchMax) + 1 ? kAutoBatchMax + 1 : static_cast<int64_t>(bd);
  for (size_t i = 0; i < samples.size(); ++i) {
    if (samples[i].ok) continue;
    // The first failed size: at or above it, the size before it (official "prior safe point").
    if (b >= samples[i].batch) b = samples[i > 0 ? i - 1 : 0].batch;
    break;
  }
  if (b < 1 || b > kAutoBatchMax) {
    b = default_batch;
    fit.anomaly = true;
  }
  fit.batch = b;
  fit.predicted_fraction =
      total_gib > 0 ? (fit.slope_gib * static_cast<double>(b) + fit.intercept_gib + reserved_gib + allocated_gib) /
                          total_gib
                    : 0.0;
  return fit;
}

engine::Device parameters_device(const graph::Model& model) {
  const auto params = model.named_parameters();
  return params.empty() ? engine::Device::cpu() : params.front().second.device();
}

AutoBatchResult autobatch(graph::Model& model, engine::Device device, int64_t imgsz, const AutoBatchOptions& opt) {
  Y9_CHECK_T(engine::ConfigError, opt.runs >= 1, "AutoBatch: runs per size must be at least 1, got ", opt.runs);
  AutoBatchResult res;
  log(fmt("Computing optimal batch size for --imgsz %lld", (long long)imgsz));
  if (device.is_cpu()) {
    log(fmt("CUDA not detected, using default CPU batch-size %lld", (long long)opt.default_batch));
    res.batch = opt.default_batch;
    return res;
  }
  // (Official: a notice and the default when torch.backends.cudnn.benchmark is on. Our
  // convolutions do search their algorithms by timing, like benchmark on, but the profile
  // measures the memory after the search (see below), so it stays valid.)
  engine::Allocator* alloc = engine::allocator_for(device);
  const engine::CudaMemoryInfo mi = engine::cuda_memory_info(device.index);
  const int64_t total = opt.total_bytes_override > 0 ? opt.total_bytes_override : mi.total_bytes;
  {
    const engine::AllocatorStats st = alloc->stats();
    res.total_gib = gib(total);
    res.reserved_gib = gib(st.live_bytes + st.cached_bytes);  // torch.cuda.memory_reserved
    res.allocated_gib = gib(st.live_bytes);                   // torch.cuda.memory_allocated
    res.free_gib = res.total_gib - (res.reserved_gib + res.allocated_gib);
  }
  const std::string d = upper_device(device);
  log(fmt("%s (%s) %.2fG total, %.2fG reserved, %.2fG allocated, %.2fG free", d.c_str(), mi.name.c_str(),
          res.total_gib, res.reserved_gib, res.allocated_gib, res.free_gib));

  // The model as it is now, restored afterwards (official profiles a deep copy): the training
  // forward updates the BatchNorm statistics, backward fills the gradients.
  const auto params = model.named_parameters();
  std::vector<std::pair<engine::Tensor, engine::Tensor>> saved_buffers;
  {
    engine::autograd::NoGradGuard ng;
    for (const auto& [name, t] : model.named_buffers()) saved_buffers.emplace_back(t, t.detach().clone());
  }
  std::vector<engine::Tensor> saved_grads;
  for (const auto& [name, p] : params) saved_grads.push_back(p.grad());
  const bool was_training = model.training();
  model.train();

  const int64_t n_params = model.num_parameters();
  const double gflops = [&] {
    try {
      return model.gflops(imgsz, imgsz);
    } catch (const engine::Error&) {
      return 0.0;
    }
  }();
  std::printf("%12s%12s%14s%14s%14s%24s%24s\n", "Params", "GFLOPs", "GPU_mem (GB)", "forward (ms)", "backward (ms)",
              "input", "output");
  const int runs = opt.runs;
  for (int64_t b : opt.batch_sizes) {
    AutoBatchSample s;
    s.batch = b;
    try {
      for (const auto& [name, p] : params) p.set_grad(engine::Tensor());
      alloc->empty_cache();
      alloc->reset_peak();
      engine::Tensor x = engine::Tensor::zeros({b, 3, imgsz, imgsz}, engine::DType::F32, device);
      x.set_requires_grad(true);  // official profile: x.requires_grad = True
      // Official profile(n=3): three forward + backward runs, the times averaged over them (the
      // first run's include our cuDNN algorithm search: official runs with benchmark off). The
      // memory is measured over runs 2 and 3 (the cache emptied and the peak reset after run 1):
      // the first run of a new shape searches the cuDNN algorithms (our cudnn.benchmark), which
      // grows the shared workspace and leaves the smaller ones it replaced in the cache. The
      // workspace itself stays (live, as in training), so it is part of every size's memory.
      for (int run = 0; run < runs; ++run) {
        auto t0 = std::chrono::steady_clock::now();
        engine::Tensor y;
        {
          graph::ModelOutput out = model.forward(x);
          for (const auto& branch : out.raw)
            for (const auto& level : branch) {
              engine::Tensor l = ops::sum(level);
              y = y.defined() ? ops::add(y, l) : l;
            }
        }
        engine::backend(device.type).context(device).synchronize();
        s.forward_ms += ms_since(t0) / runs;
        t0 = std::chrono::steady_clock::now();
        y.backward();
        y = engine::Tensor();
        engine::backend(device.type).context(device).synchronize();
        s.backward_ms += ms_since(t0) / runs;
        if (run == 0 && runs > 1) {
          alloc->empty_cache();
          alloc->reset_peak();
        }
      }
      x = engine::Tensor();
      const engine::AllocatorStats st = alloc->stats();
      s.reserved_gib = gib(st.live_bytes + st.cached_bytes);
      s.peak_gib = gib(st.peak_bytes);
      s.ok = true;
      std::printf("%12lld%12.4g%14.3f%14.4g%14.4g%24s%24s\n", (long long)n_params, gflops * static_cast<double>(b),
                  s.reserved_gib * kGiB / 1e9, s.forward_ms, s.backward_ms,
                  fmt("(%lld, 3, %lld, %lld)", (long long)b, (long long)imgsz, (long long)imgsz).c_str(), "list");
    } catch (const engine::Error& e) {
      // Official profile: `except Exception as e: print(e)`, the size failed (out of memory, or
      // a size a library refuses, e.g. cuDNN's 2^31-element tensor limit).
      s.forward_ms = s.backward_ms = 0;
      s.error = e.message();
      s.out_of_memory = dynamic_cast<const engine::OutOfMemoryError*>(&e) != nullptr;
      std::printf("%s\n", e.message().c_str());
    }
    std::fflush(stdout);
    res.samples.push_back(s);
  }
  // Restore the model; return the profile's memory.
  for (size_t i = 0; i < params.size(); ++i) params[i].second.set_grad(saved_grads[i]);
  {
    engine::autograd::NoGradGuard ng;
    for (auto& [t, copy] : saved_buffers) {
      engine::Tensor dst = t;
      dst.copy_(copy);
    }
  }
  if (!was_training) model.eval();
  saved_buffers.clear();
  alloc->empty_cache();
  alloc->reset_peak();  // the training's peak (the out-of-memory advice) starts here

  res.fit = autobatch_fit(res.samples, res.total_gib, res.reserved_gib, res.allocated_gib, opt.fraction,
                          opt.default_batch);
  if (res.fit.anomaly) log("WARNING ⚠️ CUDA anomaly detected, recommend restart environment and retry command.");
  res.batch = res.fit.batch;
  const double f = res.fit.predicted_fraction;
  log(fmt("Using batch-size %lld for %s %.2fG/%.2fG (%.0f%%) ✅", (long long)res.batch, d.c_str(), res.total_gib * f,
          res.total_gib, f * 100.0));
  return res;
}

MemColumn progress_mem_column(engine::Device device) {
  if (device.is_cuda()) {
    const engine::AllocatorStats st = engine::allocator_for(device)->stats();
    return {"GPU_mem", fmt("%.3gG", static_cast<double>(st.live_bytes + st.cached_bytes) / 1e9)};
  }
  return {"CPU_mem", fmt("%.3gG", static_cast<double>(engine::cpu_allocator()->stats().peak_bytes) / 1e9)};
}

int64_t suggest_batch(int64_t peak_bytes, int64_t batch, int64_t total_bytes, double fraction) {
  if (peak_bytes <= 0 || batch <= 0 || total_bytes <= 0) return 0;
  const double per_image = static_cast<double>(peak_bytes) / static_cast<double>(batch);
  const double fit = std::floor(static_cast<double>(total_bytes) * fraction / per_image);
  const int64_t below = batch - 1;  // `batch` failed
  const int64_t n = fit >= static_cast<double>(below) ? below : static_cast<int64_t>(fit);
  return std::max<int64_t>(n, below >= 1 ? 1 : 0);
}

std::string oom_batch_advice(int64_t peak_bytes, int64_t batch, int64_t total_bytes) {
  const int64_t n = suggest_batch(peak_bytes, batch, total_bytes);
  const std::string facts =
      fmt("measured peak %.2f GiB for batch %lld, %.1f MiB per image; device total %.2f GiB", gib(peak_bytes),
          (long long)batch, static_cast<double>(peak_bytes) / static_cast<double>(std::max<int64_t>(batch, 1)) / kMiB,
          gib(total_bytes));
  if (n <= 0) return "batch 1 does not fit: lower --img (" + facts + ")";
  return fmt("try --batch %lld (", (long long)n) + facts + ")";
}

std::string oom_batch_advice(engine::Device device, int64_t batch) {
  if (!device.is_cuda()) return "";
  try {
    const int64_t peak = engine::allocator_for(device)->stats().peak_bytes;
    const int64_t total = engine::cuda_memory_info(device.index).total_bytes;
    if (peak <= 0 || total <= 0) return "";
    return oom_batch_advice(peak, batch, total);
  } catch (const std::exception&) {
    return "";
  }
}

engine::OutOfMemoryError with_batch_advice(const engine::OutOfMemoryError& e, engine::Device device, int64_t batch) {
  const std::string advice = oom_batch_advice(device, batch);
  if (advice.empty()) return e;
  return engine::OutOfMemoryError(e.message() + " Estimate: " + advice, e.expr().c_str(), e.file(), e.line());
}

}  // namespace training
