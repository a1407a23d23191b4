// All-reduce bandwidth, as nccl-tests' all_reduce_perf prints it: for each payload from --min-bytes
// to --max-bytes, the time, algorithm bandwidth (bytes / time) and bus bandwidth (2(n-1)/n x
// bytes / time, nccl-tests doc/PERFORMANCE.md) of ours (auto = what pick_algo chooses, and the ring
// and halving-doubling forced) and of the library's all-reduce (MPI_Allreduce or ncclAllReduce),
// measured in the same run, with the ratio ours/baseline. Then the measured cut-over (the payload
// below which halving-doubling beats the ring), the alpha-beta-gamma cost model fitted on these
// runs (apps/training/dist/cost_model.h) with predicted against measured times, and predictions
// for 8 to 1024 ranks at a given link bandwidth and latency. --slice-sweep times the ring per
// pipelining slice. Run under mpirun, one process per rank (per GPU with --backend nccl):
//   mpirun --oversubscribe --bind-to none -np 2 build/allreduce_bench [flags]   (--help lists them)
// Harness: Google Benchmark runs one benchmark per payload with a fixed ->Iterations() (= samples)
// and UseManualTime, so every rank runs the same collectives (an iteration count decided by timing
// would differ per rank and deadlock). One iteration is one sample: every variant in turn
// (rotated per sample, so that a load change on a shared machine biases none of them), each as a
// synchronised batch of calls whose time is the slowest rank's (all_gather). The table shows the
// best sample of each variant (the machine's capability with the least interference from other
// jobs) and, as "med", the median over samples of the baseline/ours ratio within one sample.
// Google Benchmark's own row reports auto's mean time and the same values as counters. Only rank 0
// prints (the others get a silent reporter).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "apps/training/dist/allreduce.h"
#include "apps/training/dist/cost_model.h"
#include "apps/training/dist/mpi_comm.h"
#include "apps/training/dist/nccl_comm.h"
#include "engine/cuda_runtime.h"
#include "engine/device.h"
#include "engine/half.h"
#include "engine/tensor.h"
#include "kernels/common/comm.h"

namespace {

using engine::DType;
using training::dist::AllReduceAlgo;
using training::dist::Communicator;
using training::dist::ReduceOp;
using Clock = std::chrono::steady_clock;

// --- flags -------------------------------------------------------------------------------------

struct Flags {
  size_t min_bytes = size_t(4) << 10, max_bytes = size_t(256) << 20;
  int step_factor = 2;
  DType dtype = DType::F32;
  int iters = 5;       // calls per variant per sample up to 4 MiB; scaled by 4 MiB / size above
  int warmup = 5;      // untimed calls per variant before the samples (scaled likewise)
  int samples = 30;    // Google Benchmark iterations per payload; the best is reported
  bool check = true;   // one call per variant on known data, compared with the exact sum
  bool print_samples = false;
  std::string backend = "mpi";
  size_t slice_bytes = training::dist::AllReduceOptions{}.slice_bytes;
  int in_flight = training::dist::AllReduceOptions{}.slices_in_flight;
  std::vector<size_t> slice_sweep;             // --slice-sweep: ring per slice at --sweep-bytes
  std::vector<int> in_flight_sweep;            // --in-flight-sweep: and per slices in flight
  size_t sweep_bytes = size_t(64) << 20;
  double link_gbps = 25, link_latency_us = 5;  // for the predictions past this machine
  std::vector<int> predict_ranks{8, 16, 32, 64, 128, 256, 512, 1024};
  std::vector<size_t> predict_bytes{size_t(64) << 10, size_t(1) << 20, size_t(25) << 20, size_t(256) << 20};
};

const char* kUsage =
    "allreduce_bench: all-reduce time and bandwidth, ours against the library's (run under mpirun)\n"
    "  --min-bytes N       smallest payload (default 4K; suffixes K, M, G)\n"
    "  --max-bytes N       largest payload (default 256M)\n"
    "  --step-factor F     payload multiplier between rows (2 or 4; default 2)\n"
    "  --dtype T           f32 | f16 | bf16 (default f32)\n"
    "  --iters N           timed calls per variant per sample, up to 4 MiB (default 5; above, scaled\n"
    "                      by 4 MiB / size, at least 1)\n"
    "  --warmup N          untimed calls per variant first (default 5, scaled likewise)\n"
    "  --samples N         samples per payload; the table shows the best (default 30)\n"
    "  --no-check          skip the correctness check (one call per variant against the exact sum)\n"
    "  --print-samples     print every sample's time per variant (in run order), to see the spread\n"
    "  --backend B         mpi (CPU buffers) | nccl (GPU buffers, one process per GPU; default mpi)\n"
    "  --slice-bytes N     ring / halving-doubling pipelining slice (default the library's)\n"
    "  --slices-in-flight N  slices of one exchange in flight, 1 to 4 (default the library's)\n"
    "  --slice-sweep LIST  also time the ring at --sweep-bytes for each slice in LIST (e.g. 64K,256K,1M)\n"
    "  --in-flight-sweep L and for each number of slices in flight in L (e.g. 1,2,4; default --slices-in-flight)\n"
    "  --sweep-bytes N     payload of the slice sweep (default 64M)\n"
    "  --link-gbps G       link bandwidth of the predictions, GB/s (default 25)\n"
    "  --link-latency-us L per-step latency of the predictions, us (default 5)\n"
    "  --predict-ranks L   world sizes of the predictions (default 8,16,...,1024)\n"
    "  --predict-bytes L   payloads of the predictions (default 64K,1M,25M,256M)\n"
    "  --benchmark_*       Google Benchmark's flags (--benchmark_format=json, --benchmark_out=FILE,\n"
    "                      --benchmark_filter=REGEX: the same on every rank)\n";

size_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  double m = 1;
  if (end && *end) {
    switch (*end) {
      case 'k': case 'K': m = 1024; break;
      case 'm': case 'M': m = 1024.0 * 1024; break;
      case 'g': case 'G': m = 1024.0 * 1024 * 1024; break;
      default: Y9_THROW(engine::ConfigError, "allreduce_bench: bad size '", s, "' (a number with K, M or G)");
    }
  }
  Y9_CHECK_T(engine::ConfigError, v > 0, "allreduce_bench: bad size '", s, "'");
  return static_cast<size_t>(v * m);
}

template <typename T, typename F>
std::vector<T> parse_list(const std::string& s, F one) {
  std::vector<T> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = std::min(s.find(',', pos), s.size());
    if (comma > pos) out.push_back(one(s.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  return out;
}

Flags parse_flags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      Y9_CHECK_T(engine::ConfigError, i + 1 < argc, "allreduce_bench: ", a, " needs a value");
      return argv[++i];
    };
    if (a == "--min-bytes") f.min_bytes = parse_bytes(next());
    else if (a == "--max-bytes") f.max_bytes = parse_bytes(next());
    else if (a == "--step-factor") f.step_factor = std::stoi(next());
    else if (a == "--dtype") {
      const std::string d = next();
      if (d == "f32") f.dtype = DType::F32;
      else if (d == "f16") f.dtype = DType::F16;
      else if (d == "bf16") f.dtype = DType::BF16;
      else Y9_THROW(engine::ConfigError, "allreduce_bench: --dtype ", d, ": expected f32, f16 or bf16");
    } else if (a == "--iters") f.iters = std::stoi(next());
    else if (a == "--warmup") f.warmup = std::stoi(next());
    else if (a == "--samples") f.samples = std::stoi(next());
    else if (a == "--no-check") f.check = false;
    else if (a == "--print-samples") f.print_samples = true;
    else if (a == "--backend") f.backend = next();
    else if (a == "--slice-bytes") f.slice_bytes = parse_bytes(next());
    else if (a == "--slices-in-flight") f.in_flight = std::stoi(next());
    else if (a == "--slice-sweep") f.slice_sweep = parse_list<size_t>(next(), parse_bytes);
    else if (a == "--in-flight-sweep") f.in_flight_sweep = parse_list<int>(next(), [](const std::string& s) { return std::stoi(s); });
    else if (a == "--sweep-bytes") f.sweep_bytes = parse_bytes(next());
    else if (a == "--link-gbps") f.link_gbps = std::stod(next());
    else if (a == "--link-latency-us") f.link_latency_us = std::stod(next());
    else if (a == "--predict-ranks") f.predict_ranks = parse_list<int>(next(), [](const std::string& s) { return std::stoi(s); });
    else if (a == "--predict-bytes") f.predict_bytes = parse_list<size_t>(next(), parse_bytes);
    else Y9_THROW(engine::ConfigError, "allreduce_bench: unknown flag ", a, " (--help lists them)");
  }
  Y9_CHECK_T(engine::ConfigError, f.step_factor >= 2, "allreduce_bench: --step-factor must be >= 2");
  Y9_CHECK_T(engine::ConfigError, f.iters >= 1 && f.samples >= 1 && f.warmup >= 0,
             "allreduce_bench: --iters and --samples must be >= 1, --warmup >= 0");
  Y9_CHECK_T(engine::ConfigError, f.min_bytes <= f.max_bytes, "allreduce_bench: --min-bytes above --max-bytes");
  if (f.in_flight_sweep.empty()) f.in_flight_sweep.push_back(f.in_flight);
  Y9_CHECK_T(engine::ConfigError, f.backend == "mpi" || f.backend == "nccl", "allreduce_bench: --backend ", f.backend,
             ": expected mpi or nccl");
  return f;
}

// Calls per batch: `n` up to 4 MiB, n * 4 MiB / bytes above (at least 1), so that the large
// payloads do not take minutes.
int scaled(int n, size_t bytes) {
  constexpr size_t k4M = size_t(4) << 20;
  if (n <= 0 || bytes <= k4M) return n;
  return std::max(1, static_cast<int>(static_cast<double>(n) * k4M / static_cast<double>(bytes)));
}

std::string human(double bytes) {
  char b[32];
  if (bytes >= 1 << 30) std::snprintf(b, sizeof b, "%g GiB", bytes / (1 << 30));
  else if (bytes >= 1 << 20) std::snprintf(b, sizeof b, "%g MiB", bytes / (1 << 20));
  else if (bytes >= 1 << 10) std::snprintf(b, sizeof b, "%g KiB", bytes / (1 << 10));
  else std::snprintf(b, sizeof b, "%g B", bytes);
  return b;
}

// --- the run -----------------------------------------------------------------------------------

// What one timed variant runs.
struct Variant {
  std::string name;
  AllReduceAlgo algo;
  size_t slice_bytes;
  int in_flight;
};

// One payload's results: seconds per call of each variant, wrong elements per variant.
struct Row {
  size_t bytes = 0;
  int64_t count = 0;
  AllReduceAlgo picked = AllReduceAlgo::Ring;
  std::vector<double> seconds;  // per variant: the best (minimum) over samples
  std::vector<int64_t> wrong;
  double ratio = 0;  // the median over samples of base time / first variant's time, both of the same sample
};

struct Setup {
  Flags flags;
  Communicator* boot = nullptr;  // MPI: host-side synchronisation and the gathering of times
  Communicator* comm = nullptr;  // the communicator measured (MPI, or NCCL on the GPU)
  training::dist::NcclCommunicator* nccl = nullptr;
  std::map<size_t, Row> rows;
  std::map<std::pair<size_t, int>, Row> sweep;  // (slice bytes, slices in flight)
};

Setup g;

// Waits for the enqueued work (NCCL is stream-ordered; MPI returns when done).
void device_sync() {
#if defined(Y9_WITH_NCCL)
  if (g.nccl) g.nccl->synchronize();
#endif
}

// Every rank leaves at about the same time: the barrier (which sleeps while it waits), then a
// one-element MPI_Allreduce, whose busy progress releases the ranks together.
void tight_sync() {
  g.boot->barrier();
  float x = 0;
  g.boot->all_reduce_library(&x, 1, DType::F32, ReduceOp::Sum);
}

// The maximum over ranks of each value.
std::vector<double> max_over_ranks(const std::vector<double>& mine) {
  const int W = g.boot->world_size();
  std::vector<double> all(mine.size() * static_cast<size_t>(W));
  g.boot->all_gather(mine.data(), mine.size() * sizeof(double), all.data());
  std::vector<double> out(mine.size(), 0.0);
  for (int r = 0; r < W; ++r)
    for (size_t i = 0; i < mine.size(); ++i) out[i] = std::max(out[i], all[static_cast<size_t>(r) * mine.size() + i]);
  return out;
}

// Host staging of a payload.
std::vector<uint8_t> encode(const std::vector<float>& v, DType dt) {
  std::vector<uint8_t> out(v.size() * engine::dtype_size(dt));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::F32) std::memcpy(&out[i * 4], &v[i], 4);
    else {
      const uint16_t h = dt == DType::F16 ? engine::f32_to_f16(v[i]) : engine::f32_to_bf16(v[i]);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

float decode(const uint8_t* p, DType dt) {
  if (dt == DType::F32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return dt == DType::F16 ? engine::f16_to_f32(h) : engine::bf16_to_f32(h);
}

// Small integers: every partial sum is exact in F16 and BF16 for up to 16 ranks.
float pattern(int rank, int64_t i) { return static_cast<float>((i * 7 + rank * 3 + 1) % 9) - 4.0f; }

// Runs `v` once on known data and counts the elements that differ from the exact sum.
int64_t check_variant(engine::Tensor& buf, int64_t count, const Variant& v) {
  const DType dt = g.flags.dtype;
  const int W = g.comm->world_size(), r = g.comm->rank();
  std::vector<float> host(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) host[i] = pattern(r, i);
  std::vector<uint8_t> bytes = encode(host, dt);
  engine::memcpy_between_devices(buf.data_ptr(), buf.device(), bytes.data(), engine::Device::cpu(), bytes.size());
  training::dist::AllReduceOptions o;
  o.slice_bytes = v.slice_bytes;
  o.slices_in_flight = v.in_flight;
  training::dist::all_reduce(*g.comm, buf.data_ptr(), count, dt, ReduceOp::Sum, v.algo, o);
  device_sync();
  engine::memcpy_between_devices(bytes.data(), engine::Device::cpu(), buf.data_ptr(), buf.device(), bytes.size());
  int64_t wrong = 0;
  const size_t esz = engine::dtype_size(dt);
  for (int64_t i = 0; i < count; ++i) {
    float sum = 0;
    for (int q = 0; q < W; ++q) sum += pattern(q, i);
    wrong += decode(&bytes[static_cast<size_t>(i) * esz], dt) != sum;
  }
  return wrong;
}

// One payload: warm-up, check, then `state.max_iterations` samples of every variant.
void run_case(benchmark::State& state, size_t bytes, const std::vector<Variant>& variants, Row& row) {
  const DType dt = g.flags.dtype;
  const size_t esz = engine::dtype_size(dt);
  const int64_t count = static_cast<int64_t>(bytes / esz);
  const int W = g.comm->world_size();
  // Zeros: a sum of zeros stays zero, where repeated in-place sums of data grow by W per call
  // (F16 reaches inf in a few calls). The kernels' speed does not depend on the values, except
  // that the F16/BF16 conversions take their zero branch; ours and MPI's F16 operation share them.
  engine::Tensor buf = engine::Tensor::zeros({count}, dt, g.comm->device());
  g.comm->context().synchronize(engine::StreamKind::Compute);  // the fill, before the Communication stream
  row.bytes = bytes;
  row.count = count;
  row.picked = training::dist::pick_algo(bytes, W, training::dist::AllReduceOptions{});
  row.wrong.assign(variants.size(), 0);
  auto run = [&](const Variant& v) {
    training::dist::AllReduceOptions o;
    o.slice_bytes = v.slice_bytes;
    o.slices_in_flight = v.in_flight;
  o.slices_in_flight = v.in_flight;
    training::dist::all_reduce(*g.comm, buf.data_ptr(), count, dt, ReduceOp::Sum, v.algo, o);
  };
  if (g.flags.check) {
    for (size_t k = 0; k < variants.size(); ++k) row.wrong[k] = check_variant(buf, count, variants[k]);
    std::vector<double> w(row.wrong.begin(), row.wrong.end());
    w = max_over_ranks(w);
    for (size_t k = 0; k < w.size(); ++k) row.wrong[k] = static_cast<int64_t>(w[k]);
    buf.zero_();
    g.comm->context().synchronize(engine::StreamKind::Compute);
  }
  const int calls = scaled(g.flags.iters, bytes), warm = scaled(g.flags.warmup, bytes);
  for (const Variant& v : variants)
    for (int i = 0; i < warm; ++i) run(v);
  device_sync();
  std::vector<std::vector<double>> samples(variants.size());
  int sample = 0;
  for (auto _ : state) {
    std::vector<double> mine(variants.size());
    for (size_t j = 0; j < variants.size(); ++j) {
      const size_t k = (j + static_cast<size_t>(sample)) % variants.size();
      tight_sync();
      const auto t0 = Clock::now();
      for (int i = 0; i < calls; ++i) run(variants[k]);
      device_sync();
      mine[k] = std::chrono::duration<double>(Clock::now() - t0).count() / calls;
    }
    const std::vector<double> t = max_over_ranks(mine);
    for (size_t k = 0; k < t.size(); ++k) samples[k].push_back(t[k]);
    state.SetIterationTime(t[0]);
    ++sample;
  }
  if (g.flags.print_samples && g.boot->rank() == 0)
    for (size_t k = 0; k < samples.size(); ++k) {
      std::printf("samples(us) %zu %s:", bytes, variants[k].name.c_str());
      for (double x : samples[k]) std::printf(" %.0f", x * 1e6);
      std::printf("\n");
    }
  std::vector<double> ratios;
  for (size_t i = 0; i < samples[0].size(); ++i) ratios.push_back(samples.back()[i] / samples[0][i]);
  std::sort(ratios.begin(), ratios.end());
  row.ratio = ratios.empty() ? 0.0 : ratios[ratios.size() / 2];
  row.seconds.clear();
  for (auto& s : samples) {
    std::sort(s.begin(), s.end());
    row.seconds.push_back(s.empty() ? 0.0 : s.front());
  }
  const double bus = 2.0 * (W - 1) / W;
  for (size_t k = 0; k < variants.size(); ++k)
    state.counters["busbw_" + variants[k].name] = row.seconds[k] > 0 ? bus * bytes / row.seconds[k] / 1e9 : 0;
  state.counters["ours/base"] = row.seconds.back() / row.seconds[0];
  state.counters["ours/base_med"] = row.ratio;
  state.counters["calls"] = calls;
  state.SetLabel(std::string("GB/s; auto=") + training::dist::allreduce_algo_name(row.picked));
}

// The local reduction alone (comm_accumulate of one slice into a payload-sized buffer, slice by
// slice, as the ring does), on every rank at once: gamma of the cost model is its slope.
// Returns false (nothing measured) when --max-bytes is below two of its payloads.
bool measure_gamma(std::vector<double>* xs, std::vector<double>* ts, training::dist::LineFit* fit) {
  const DType dt = g.flags.dtype;
  const size_t esz = engine::dtype_size(dt);
  auto k = engine::kernel(kernels::kCommAccumulate, dt, g.comm->device());
  for (size_t bytes = size_t(256) << 10; bytes <= std::min<size_t>(g.flags.max_bytes, size_t(64) << 20); bytes *= 4) {
    const int64_t n = static_cast<int64_t>(bytes / esz);
    const int64_t slice = std::max<int64_t>(1, static_cast<int64_t>(g.flags.slice_bytes / esz));
    engine::Tensor dst = engine::Tensor::zeros({n}, dt, g.comm->device());
    engine::Tensor src = engine::Tensor::zeros({slice}, dt, g.comm->device());
    g.comm->context().synchronize(engine::StreamKind::Compute);
    const int calls = std::max(1, scaled(g.flags.iters, bytes) / 2);
    std::vector<double> best{1e30};
    for (int s = 0; s < 10; ++s) {  // the best of 10, like the table
      tight_sync();
      const auto t0 = Clock::now();
      for (int c = 0; c < calls; ++c)
        for (int64_t off = 0; off < n; off += slice)
          k.fn(k.ctx, dt, static_cast<char*>(dst.data_ptr()) + off * esz, src.data_ptr(), std::min(slice, n - off));
      g.comm->context().synchronize(engine::StreamKind::Communication);
      const double t = std::chrono::duration<double>(Clock::now() - t0).count() / calls;
      best[0] = std::min(best[0], max_over_ranks({t})[0]);
    }
    xs->push_back(static_cast<double>(bytes));
    ts->push_back(best[0]);
  }
  if (xs->size() < 2) return false;
  *fit = training::dist::fit_line(*xs, *ts);
  return true;
}

// --- reports (rank 0) --------------------------------------------------------------------------

class SilentReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

void print_table(int W) {
  const double bus = 2.0 * (W - 1) / W;
  std::printf("\n# all-reduce, %d ranks, backend %s, dtype %s, op sum, in place. time: the best of %d samples, a\n"
              "# sample being the slowest rank's mean over a batch of calls; algbw = size / time, busbw = 2(n-1)/n x\n"
              "# algbw (GB/s = 1e9 B/s); ours/base = auto's busbw / the baseline's; med = the median over samples of\n"
              "# that ratio within each sample (robust to load changes on a shared machine)\n",
              W, g.flags.backend.c_str(), engine::dtype_name(g.flags.dtype), g.flags.samples);
  std::printf("# %10s %10s | %-4s %9s %7s %7s | %9s %7s | %9s %7s | %9s %7s %7s | %9s %5s | %s\n", "size(B)", "count",
              "auto", "time(us)", "algbw", "busbw", "ring(us)", "busbw", "hd(us)", "busbw", "base(us)", "algbw", "busbw",
              "ours/base", "med", "#wrong a/r/h/b");
  for (const auto& [bytes, r] : g.rows) {
    auto bw = [&](double s, double f) { return s > 0 ? f * static_cast<double>(bytes) / s / 1e9 : 0.0; };
    std::printf("  %10zu %10lld | %-4s %9.1f %7.3f %7.3f | %9.1f %7.3f | %9.1f %7.3f | %9.1f %7.3f %7.3f | %9.2f %5.2f | "
                "%lld/%lld/%lld/%lld\n",
                bytes, static_cast<long long>(r.count), training::dist::allreduce_algo_name(r.picked),
                r.seconds[0] * 1e6, bw(r.seconds[0], 1), bw(r.seconds[0], bus), r.seconds[1] * 1e6,
                bw(r.seconds[1], bus), r.seconds[2] * 1e6, bw(r.seconds[2], bus), r.seconds[3] * 1e6,
                bw(r.seconds[3], 1), bw(r.seconds[3], bus), r.seconds[3] / r.seconds[0], r.ratio,
                static_cast<long long>(r.wrong[0]), static_cast<long long>(r.wrong[1]),
                static_cast<long long>(r.wrong[2]), static_cast<long long>(r.wrong[3]));
  }
}

// The measured cut-over: scanning from the smallest payload, the first one from which
// halving-doubling is not more than kCutoverMargin faster than the ring at kCutoverRun consecutive
// payloads (best-of-samples times). Below it halving-doubling's fewer steps pay; from it on the
// two are equivalent within the margin (or the ring wins), and the ring is preferred: its
// bandwidth term holds on any topology, while halving-doubling's exchanges at distance 2^k cross
// the machine's bisection. Requiring a run of payloads keeps one noisy row (a large payload where
// both are bandwidth-bound, or one small row) from moving the cut-over.
constexpr double kCutoverMargin = 0.10;
constexpr size_t kCutoverRun = 3;

void print_cutover(int W) {
  if (W < 2) {
    std::printf("\ncut-over: not measured on 1 rank (no exchange; run under mpirun -np 2 or more)\n");
    return;
  }
  std::printf("\nhd/ring time per payload (< 1: halving-doubling faster):");
  for (const auto& [bytes, r] : g.rows) std::printf(" %s %.2f", human(static_cast<double>(bytes)).c_str(), r.seconds[2] / r.seconds[1]);
  std::printf("\n");
  // 0: halving-doubling stayed more than the margin faster somewhere in every run of payloads.
  size_t from = 0;
  std::vector<std::pair<size_t, bool>> ring_ok;  // (payload, hd not more than the margin faster)
  for (const auto& [bytes, r] : g.rows) ring_ok.emplace_back(bytes, r.seconds[2] >= (1 - kCutoverMargin) * r.seconds[1]);
  for (size_t i = 0; i < ring_ok.size() && from == 0; ++i) {
    const size_t n = std::min(kCutoverRun, ring_ok.size() - i);
    bool all = true;
    for (size_t k = 0; k < n; ++k) all = all && ring_ok[i + k].second;
    if (all) from = ring_ok[i].first;
  }
  if (W == 2)
    std::printf("cut-over (2 ranks): none; ring and halving-doubling run the same two exchanges, auto uses the ring\n");
  else if (from == 0)
    std::printf("cut-over (%d ranks): above %s: halving-doubling is more than %.0f%% faster somewhere in every run of %zu "
                "payloads\n",
                W, human(static_cast<double>(g.rows.rbegin()->first)).c_str(), kCutoverMargin * 100, kCutoverRun);
  else if (from == g.rows.begin()->first)
    std::printf("cut-over (%d ranks): at or below %s: halving-doubling is never more than %.0f%% faster\n", W,
                human(static_cast<double>(from)).c_str(), kCutoverMargin * 100);
  else
    std::printf("cut-over (%d ranks): %s (halving-doubling more than %.0f%% faster at the payload below; not at %s "
                "and the %zu payloads after it)\n",
                W, human(static_cast<double>(from)).c_str(), kCutoverMargin * 100, human(static_cast<double>(from)).c_str(),
                kCutoverRun - 1);
  if (W == 2) return;  // auto uses the ring whatever the cut-over
  const training::dist::AllReduceOptions o;
  const bool pow2 = (W & (W - 1)) == 0;
  size_t c = pow2 ? o.cutover_bytes : o.cutover_bytes_non_pow2;
  const char* e = std::getenv("Y9_ALLREDUCE_CUTOVER");
  if (e && *e) c = std::strtoull(e, nullptr, 10);
  std::printf("  auto's cut-over on %d ranks now: %zu bytes (%s)\n", W, c,
              e && *e ? "Y9_ALLREDUCE_CUTOVER"
                      : pow2 ? "AllReduceOptions::cutover_bytes" : "AllReduceOptions::cutover_bytes_non_pow2");
}

void print_sweep(int W) {
  if (g.sweep.empty()) return;
  const double bus = 2.0 * (W - 1) / W;
  std::printf("\n# ring slice sweep at %s (%d ranks): busbw GB/s of the ring per slice, baseline in the same samples\n",
              human(static_cast<double>(g.flags.sweep_bytes)).c_str(), W);
  std::printf("# %10s %9s %10s %7s %10s %7s %9s %5s\n", "slice(B)", "in flight", "ring(us)", "busbw", "base(us)", "busbw",
              "ours/base", "med");
  for (const auto& [key, r] : g.sweep)
    std::printf("  %10zu %9d %10.1f %7.3f %10.1f %7.3f %9.2f %5.2f\n", key.first, key.second, r.seconds[0] * 1e6,
                bus * static_cast<double>(r.bytes) / r.seconds[0] / 1e9, r.seconds[1] * 1e6,
                bus * static_cast<double>(r.bytes) / r.seconds[1] / 1e9, r.seconds[1] / r.seconds[0], r.ratio);
}

void print_model(int W, const training::dist::LineFit& gamma_fit, const std::vector<double>& gx,
                 const std::vector<double>& gt) {
  using training::dist::CostParams;
  std::vector<training::dist::CostSample> samples;
  for (const auto& [bytes, r] : g.rows) {
    samples.push_back({AllReduceAlgo::Ring, W, static_cast<double>(bytes), r.seconds[1]});
    samples.push_back({AllReduceAlgo::HalvingDoubling, W, static_cast<double>(bytes), r.seconds[2]});
  }
  const double gamma = std::max(0.0, gamma_fit.slope);
  std::printf("\n# cost model (alpha-beta-gamma, apps/training/dist/cost_model.h), fitted on this run\n");
  std::printf("  gamma (local reduction, comm_accumulate in %s slices, every rank at once): %.4g ns/B = %.3f GB/s "
              "(line fit over %zu payloads %s..%s)\n",
              human(static_cast<double>(g.flags.slice_bytes)).c_str(), gamma * 1e9, gamma > 0 ? 1e-9 / gamma : 0.0,
              gx.size(), human(gx.front()).c_str(), human(gx.back()).c_str());
  (void)gt;
  CostParams p;
  try {
    p = training::dist::fit_cost_model(samples, gamma);
  } catch (const std::exception& e) {
    std::printf("  no fit: %s\n", e.what());
    return;
  }
  std::printf("  alpha = %.3f us per step, beta = %.4g ns/B (link %.3f GB/s), gamma = %.4g ns/B (weighted least "
              "squares on the relative error, %zu samples)\n",
              p.alpha_s * 1e6, p.beta_s_per_byte * 1e9, p.beta_s_per_byte > 0 ? 1e-9 / p.beta_s_per_byte : 0.0,
              gamma * 1e9, samples.size());
  std::printf("# %10s | %10s %10s %7s | %10s %10s %7s\n", "size(B)", "ring meas", "predicted", "err", "hd meas",
              "predicted", "err");
  double worst = 0;
  for (const auto& [bytes, r] : g.rows) {
    const double pr = training::dist::predict_seconds(p, AllReduceAlgo::Ring, W, static_cast<double>(bytes));
    const double ph = training::dist::predict_seconds(p, AllReduceAlgo::HalvingDoubling, W, static_cast<double>(bytes));
    const double er = (pr - r.seconds[1]) / r.seconds[1], eh = (ph - r.seconds[2]) / r.seconds[2];
    worst = std::max({worst, std::abs(er), std::abs(eh)});
    std::printf("  %10zu | %10.1f %10.1f %+6.0f%% | %10.1f %10.1f %+6.0f%%\n", bytes, r.seconds[1] * 1e6, pr * 1e6,
                er * 100, r.seconds[2] * 1e6, ph * 1e6, eh * 100);
  }
  std::printf("  worst |error| %.0f%%; model cut-over on %d ranks: %s\n", worst * 100, W, [&] {
    const double c = training::dist::predicted_cutover_bytes(p, W);
    return std::isinf(c) ? std::string("halving-doubling never slower") : c == 0 ? std::string("ring never slower")
                                                                                   : human(c);
  }().c_str());

  // Predictions past this machine.
  auto predict = [&](const CostParams& q, const char* what) {
    std::printf("\n# predicted all-reduce time (us) of the ring and halving-doubling, and the ring's busbw (GB/s):\n"
                "# %s\n", what);
    std::printf("# %6s", "");
    for (size_t b : g.flags.predict_bytes) std::printf(" | %-30s", human(double(b)).c_str());
    std::printf(" |\n# %6s", "ranks");
    for (size_t i = 0; i < g.flags.predict_bytes.size(); ++i) std::printf(" | %10s %10s %8s", "ring", "hd", "busbw");
    std::printf(" | model cut-over\n");
    for (int n : g.flags.predict_ranks) {
      std::printf("  %6d", n);
      for (size_t b : g.flags.predict_bytes) {
        const double tr = training::dist::predict_seconds(q, AllReduceAlgo::Ring, n, double(b));
        const double th = training::dist::predict_seconds(q, AllReduceAlgo::HalvingDoubling, n, double(b));
        std::printf(" | %10.1f %10.1f %8.2f", tr * 1e6, th * 1e6, 2.0 * (n - 1) / n * double(b) / tr / 1e9);
      }
      const double c = training::dist::predicted_cutover_bytes(q, n);
      std::printf(" | %s\n", std::isinf(c) ? "hd never slower" : c == 0 ? "ring never slower" : human(c).c_str());
    }
  };
  CostParams link{g.flags.link_latency_us * 1e-6, 1.0 / (g.flags.link_gbps * 1e9), gamma};
  char what[160];
  std::snprintf(what, sizeof what, "link %.3g GB/s, latency %.3g us, local gamma %.3g ns/B", g.flags.link_gbps,
                g.flags.link_latency_us, gamma * 1e9);
  predict(link, what);
  std::snprintf(what, sizeof what, "the fitted local values (alpha %.3g us, beta %.3g ns/B, gamma %.3g ns/B)",
                p.alpha_s * 1e6, p.beta_s_per_byte * 1e9, gamma * 1e9);
  predict(p, what);
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<training::dist::MpiCommunicator> mpi;
  try {
    mpi = training::dist::MpiCommunicator::world();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_bench: %s\n", e.what());
    return 1;
  }
  const int rank = mpi->rank(), W = mpi->world_size();
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      // Ours, before Google Benchmark's Initialize answers --help with its own flags only.
      if (rank == 0) std::fputs(kUsage, stdout);
      return 0;
    }
  // Only rank 0 writes Google Benchmark's output file.
  std::vector<char*> args;
  bool color_given = false;
  for (int i = 0; i < argc; ++i) {
    if (rank == 0 || std::strncmp(argv[i], "--benchmark_out", 15) != 0) args.push_back(argv[i]);
    color_given = color_given || std::strncmp(argv[i], "--benchmark_color", 17) == 0;
  }
  // mpirun forwards output through a pseudo-terminal: no colour codes unless asked for.
  static char no_color[] = "--benchmark_color=false";
  if (!color_given) args.insert(args.begin() + 1, no_color);
  int ac = static_cast<int>(args.size());
  benchmark::Initialize(&ac, args.data());
  try {
    g.flags = parse_flags(ac, args.data());
  } catch (const std::exception& e) {
    if (rank == 0) std::fprintf(stderr, "%s\n%s", e.what(), kUsage);
    return 2;
  }
  g.boot = mpi.get();
  g.comm = mpi.get();

  std::unique_ptr<Communicator> nccl_owner;
  if (g.flags.backend == "nccl") {
    // Every rank decides the same way: all have a GPU, or the run stops on every rank.
    const int devices = engine::cuda_device_count();
    std::vector<double> have = max_over_ranks({devices > 0 ? 0.0 : 1.0});
    if (!training::dist::nccl_compiled() || have[0] > 0) {
      if (rank == 0)
        std::fprintf(stderr,
                     "allreduce_bench: --backend nccl needs %s; %s. Run --backend mpi on CPUs.\n",
                     training::dist::nccl_compiled() ? "one CUDA GPU per process" : "a build with NCCL (Y9_WITH_NCCL)",
                     training::dist::nccl_compiled() ? "no GPU is visible to at least one rank (cudaGetDeviceCount failed or found none)"
                                                     : "this build has none");
      return 3;
    }
#if defined(Y9_WITH_NCCL)
    const char* lr = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    const int local = lr ? std::atoi(lr) : rank;
    try {
      auto n = std::make_unique<training::dist::NcclCommunicator>(*mpi, engine::Device::cuda(local % devices));
      g.nccl = n.get();
      nccl_owner = std::move(n);
      g.comm = nccl_owner.get();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "allreduce_bench: %s\n", e.what());
      mpi->abort(4);
    }
#endif
  }

  const size_t slice = g.flags.slice_bytes;
  const int depth = g.flags.in_flight;
  const std::vector<Variant> variants{{"auto", AllReduceAlgo::Auto, slice, depth},
                                      {"ring", AllReduceAlgo::Ring, slice, depth},
                                      {"hd", AllReduceAlgo::HalvingDoubling, slice, depth},
                                      {"base", AllReduceAlgo::Library, slice, depth}};
  const std::string prefix = std::string("allreduce/") + g.flags.backend + "/" + engine::dtype_name(g.flags.dtype) +
                             "/np" + std::to_string(W) + "/";
  for (size_t b = g.flags.min_bytes; b <= g.flags.max_bytes; b *= static_cast<size_t>(g.flags.step_factor)) {
    benchmark::RegisterBenchmark((prefix + std::to_string(b)).c_str(),
                                 [b, variants](benchmark::State& st) { run_case(st, b, variants, g.rows[b]); })
        ->Iterations(g.flags.samples)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  for (size_t s : g.flags.slice_sweep)
    for (int d : g.flags.in_flight_sweep) {
      const std::vector<Variant> sv{{"ring", AllReduceAlgo::Ring, s, d}, {"base", AllReduceAlgo::Library, s, d}};
      benchmark::RegisterBenchmark((prefix + "slice/" + std::to_string(s) + "/in_flight/" + std::to_string(d)).c_str(),
                                   [s, d, sv](benchmark::State& st) { run_case(st, g.flags.sweep_bytes, sv, g.sweep[{s, d}]); })
          ->Iterations(g.flags.samples)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }

  SilentReporter silent;
  if (rank == 0) benchmark::RunSpecifiedBenchmarks();
  else benchmark::RunSpecifiedBenchmarks(&silent);  // its --benchmark_out was removed above

  std::vector<double> gx, gt;
  training::dist::LineFit gamma_fit;
  const bool have_gamma = measure_gamma(&gx, &gt, &gamma_fit);
  if (rank == 0) {
    if (!g.rows.empty()) {
      print_table(W);
      print_cutover(W);
    }
    print_sweep(W);
    if (W < 2) std::printf("no cost model on 1 rank (nothing is exchanged)\n");
    else if (g.rows.size() >= 2 && have_gamma) print_model(W, gamma_fit, gx, gt);
    else if (g.rows.size() >= 2) std::printf("\nno cost model: gamma needs payloads from 256 KiB to 1 MiB at least\n");
    std::fflush(stdout);
  }
  mpi->barrier();
  nccl_owner.reset();
  return 0;
}
