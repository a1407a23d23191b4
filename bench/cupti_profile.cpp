// A per-kernel GPU time profile of any CUDA program, without Nsight Systems: a CUPTI injection
// library (libyolov9_cupti_profile.so). The CUDA driver loads it at initialisation when
//   CUDA_INJECTION64_PATH=/path/to/libyolov9_cupti_profile.so
// is set (the driver calls InitializeInjection), and it records every kernel, memcpy and memset
// with CUPTI's activity API (device timestamps, ns). At exit it prints to Y9_CUPTI_OUT (a file,
// default stderr) a summary over a window of the run's GPU activity:
//   - Y9_CUPTI_LAST_MS (default 0 = the whole run): only activities that started in the last N ms
//     of GPU activity (for `yolov9 train --benchmark`: the steady steps, not the first step's
//     cuDNN algorithm searches);
//   - the window's length, the GPU busy time (union of the activity intervals) and its fraction
//     (below 1: the device waits for the host), the number of kernels;
//   - per kernel name (demangled, templates cut at 110 characters): total ms, share, calls, mean us,
//     sorted by total; Y9_CUPTI_TOP rows (default 40).
// Needs libcupti (CUDA toolkit extras/CUPTI or the nvidia-cuda-cupti wheel) on LD_LIBRARY_PATH at
// run time. Used by the GPU kit (docs/gpu_kit.md); not linked into yolov9.
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Record {
  uint64_t start, end;
  int name;  // index into names()
};

std::mutex g_mu;
std::vector<Record>* g_records = nullptr;
std::map<std::string, int>* g_name_ids = nullptr;
std::vector<std::string>* g_names = nullptr;

constexpr size_t kBufferBytes = size_t(8) << 20;

int name_id(const std::string& n) {
  auto it = g_name_ids->find(n);
  if (it != g_name_ids->end()) return it->second;
  const int id = static_cast<int>(g_names->size());
  g_names->push_back(n);
  (*g_name_ids)[n] = id;
  return id;
}

std::string demangle(const char* mangled) {
  if (!mangled) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = (status == 0 && d) ? d : mangled;
  std::free(d);
  if (s.size() > 110) s = s.substr(0, 107) + "...";
  return s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        g_records->push_back({k->start, k->end, name_id(demangle(k->name))});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        g_records->push_back({m->start, m->end, name_id("[memcpy kind " + std::to_string(m->copyKind) + "]")});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        g_records->push_back({m->start, m->end, name_id("[memset]")});
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
}

void report() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(g_mu);
  const char* out_path = std::getenv("Y9_CUPTI_OUT");
  FILE* out = out_path && *out_path ? std::fopen(out_path, "w") : stderr;
  if (!out) out = stderr;
  std::vector<Record>& r = *g_records;
  if (r.empty()) {
    std::fprintf(out, "cupti profile: no GPU activity recorded\n");
    if (out != stderr) std::fclose(out);
    return;
  }
  std::sort(r.begin(), r.end(), [](const Record& a, const Record& b) { return a.start < b.start; });
  uint64_t last_end = 0;
  for (const auto& x : r) last_end = std::max(last_end, x.end);
  const double last_ms = std::getenv("Y9_CUPTI_LAST_MS") ? std::atof(std::getenv("Y9_CUPTI_LAST_MS")) : 0.0;
  uint64_t t0 = r.front().start;
  if (last_ms > 0 && last_end - t0 > static_cast<uint64_t>(last_ms * 1e6))
    t0 = last_end - static_cast<uint64_t>(last_ms * 1e6);
  std::vector<double> total(g_names->size(), 0.0);
  std::vector<int64_t> calls(g_names->size(), 0);
  uint64_t busy = 0, cover_end = t0, first = UINT64_MAX;
  int64_t n = 0;
  for (const auto& x : r) {
    if (x.start < t0) continue;
    first = std::min(first, x.start);
    total[x.name] += static_cast<double>(x.end - x.start);
    ++calls[x.name];
    ++n;
    if (x.end > cover_end) {
      busy += x.end - std::max(x.start, cover_end);
      cover_end = x.end;
    }
  }
  const double window = static_cast<double>(last_end - (first == UINT64_MAX ? t0 : first));
  double sum = 0;
  for (double v : total) sum += v;
  std::fprintf(out, "cupti profile: window %.1f ms (%s), GPU busy %.1f ms (%.1f%%), %lld activities, %.1f ms summed\n",
               window / 1e6, last_ms > 0 ? "the last Y9_CUPTI_LAST_MS" : "the whole run", busy / 1e6,
               window > 0 ? 100.0 * busy / window : 0.0, (long long)n, sum / 1e6);
  std::vector<int> order(total.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return total[a] > total[b]; });
  const int top = std::getenv("Y9_CUPTI_TOP") ? std::atoi(std::getenv("Y9_CUPTI_TOP")) : 40;
  std::fprintf(out, "%10s %7s %8s %10s  %s\n", "total ms", "share", "calls", "mean us", "name");
  for (int i = 0; i < top && i < static_cast<int>(order.size()); ++i) {
    const int k = order[i];
    if (calls[k] == 0) break;
    std::fprintf(out, "%10.2f %6.1f%% %8lld %10.1f  %s\n", total[k] / 1e6, sum > 0 ? 100.0 * total[k] / sum : 0.0,
                 (long long)calls[k], total[k] / 1e3 / static_cast<double>(calls[k]), (*g_names)[k].c_str());
  }
  if (out != stderr) std::fclose(out);
}

}  // namespace

/// Called by the CUDA driver when CUDA_INJECTION64_PATH names this library. Returns 1 on success.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  g_records = new std::vector<Record>();
  g_records->reserve(1 << 20);
  g_name_ids = new std::map<std::string, int>();
  g_names = new std::vector<std::string>();
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return 0;
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
  std::atexit(report);
  return 1;
}
