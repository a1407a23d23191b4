// Ring and recursive halving-doubling all-reduce (apps/training/dist/allreduce.h).
#include "apps/training/dist/allreduce.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "kernels/common/comm.h"

namespace training::dist {

using engine::DType;

AllReduceAlgo parse_allreduce_algo(const std::string& s) {
  if (s == "ring" || s == "auto") return AllReduceAlgo::Auto;
  if (s == "ring-only") return AllReduceAlgo::Ring;
  if (s == "hd" || s == "halving-doubling") return AllReduceAlgo::HalvingDoubling;
  if (s == "nccl" || s == "mpi" || s == "library") return AllReduceAlgo::Library;
  Y9_THROW(engine::ConfigError, "--allreduce ", s,
           ": expected ring (ours, the default), nccl (the library's: ncclAllReduce on GPUs, MPI_Allreduce on "
           "CPUs), ring-only or hd");
}

const char* allreduce_algo_name(AllReduceAlgo a) {
  switch (a) {
    case AllReduceAlgo::Auto: return "auto";
    case AllReduceAlgo::Ring: return "ring";
    case AllReduceAlgo::HalvingDoubling: return "hd";
    case AllReduceAlgo::Library: return "library";
  }
  return "?";
}

AllReduceAlgo pick_algo(size_t bytes, int world_size, const AllReduceOptions& opts) {
  const bool pow2 = world_size > 0 && (world_size & (world_size - 1)) == 0;
  size_t cut = pow2 ? opts.cutover_bytes : opts.cutover_bytes_non_pow2;
  if (const char* e = std::getenv("Y9_ALLREDUCE_CUTOVER"); e && *e) cut = static_cast<size_t>(std::strtoull(e, nullptr, 10));
  if (world_size <= 2) return AllReduceAlgo::Ring;
  return bytes < cut ? AllReduceAlgo::HalvingDoubling : AllReduceAlgo::Ring;
}

namespace {

struct Ctx {
  Communicator& comm;
  DType dt;
  size_t esz;
  int64_t slice;  // elements
  int depth;      // slices in flight
  engine::Kernel<kernels::CommAccumulateFn> acc;
  char* scratch;  // `depth` slices
};

char* at(void* base, int64_t elem, size_t esz) { return static_cast<char*>(base) + elem * static_cast<int64_t>(esz); }

// Sends ns elements at sp to rank dst while receiving nr elements from rank src; received
// elements are accumulated into rp (reduce) or written to rp (copy). Sliced, with c.depth slices
// in flight: slice j + depth starts once slice j is received and reduced (its scratch slot is then
// free), so the transfers of the next slices overlap both the wait for and the reduction of slice j.
void exchange(Ctx& c, const char* sp, int64_t ns, int dst, char* rp, int64_t nr, int src, bool reduce) {
  const int64_t S = c.slice;
  const int64_t n_s = (ns + S - 1) / S, n_r = (nr + S - 1) / S, n = std::max(n_s, n_r);
  if (n == 0) return;
  const int64_t esz = static_cast<int64_t>(c.esz);
  auto slot = [&](int64_t j) { return c.scratch + (j % c.depth) * S * esz; };
  auto start = [&](int64_t j) {
    const int64_t sb = j < n_s ? std::min(S, ns - j * S) : 0;
    const int64_t rb = j < n_r ? std::min(S, nr - j * S) : 0;
    return c.comm.start_sendrecv(sp + j * S * esz, static_cast<size_t>(sb) * c.esz, dst, reduce ? slot(j) : rp + j * S * esz,
                                 static_cast<size_t>(rb) * c.esz, src);
  };
  Pending p[kMaxSlicesInFlight];
  for (int64_t j = 0; j < std::min<int64_t>(c.depth, n); ++j) p[j] = start(j);
  for (int64_t j = 0; j < n; ++j) {
    c.comm.wait(p[j % c.depth]);
    if (reduce && j < n_r) c.acc.fn(c.acc.ctx, c.dt, rp + j * S * esz, slot(j), std::min(S, nr - j * S));
    if (j + c.depth < n) p[j % c.depth] = start(j + c.depth);
  }
}

Ctx make_ctx(Communicator& comm, DType dt, const AllReduceOptions& o, int64_t count) {
  Y9_CHECK_SHAPE(dt == DType::F32 || dt == DType::F64 || dt == DType::F16 || dt == DType::BF16, "all_reduce: dtype ",
                 engine::dtype_name(dt), " is not F32, F64, F16 or BF16");
  Y9_CHECK(o.slices_in_flight >= 1 && o.slices_in_flight <= kMaxSlicesInFlight, "all_reduce: slices_in_flight ",
           o.slices_in_flight, " is not in [1, ", kMaxSlicesInFlight, "]");
  const size_t esz = engine::dtype_size(dt);
  int64_t slice = std::max<int64_t>(1, static_cast<int64_t>(o.slice_bytes / esz));
  slice = std::min<int64_t>(slice, std::max<int64_t>(count, 1));
  auto acc = engine::kernel(kernels::kCommAccumulate, dt, comm.device());
  char* scratch = static_cast<char*>(comm.scratch(static_cast<size_t>(o.slices_in_flight) * static_cast<size_t>(slice) * esz));
  return Ctx{comm, dt, esz, slice, o.slices_in_flight, acc, scratch};
}

void scale(Communicator& comm, DType dt, void* p, int64_t n, double s) {
  if (n <= 0) return;
  auto k = engine::kernel(kernels::kCommScale, dt, comm.device());
  k.fn(k.ctx, dt, p, n, s);
}

}  // namespace

void ring_all_reduce(Communicator& comm, void* data, int64_t count, DType dt, ReduceOp op, const AllReduceOptions& o) {
  const int W = comm.world_size(), r = comm.rank();
  if (count <= 0 || W == 1) return;
  Ctx c = make_ctx(comm, dt, o, count);
  const int64_t base = count / W, rem = count % W;
  auto begin = [&](int i) { return static_cast<int64_t>(i) * base + std::min<int64_t>(i, rem); };
  auto len = [&](int i) { return base + (i < rem ? 1 : 0); };
  const int right = (r + 1) % W, left = (r - 1 + W) % W;
  // Reduce-scatter: after step s rank r holds the partial sum of s + 2 ranks for chunk r - s - 1.
  for (int s = 0; s < W - 1; ++s) {
    const int sc = ((r - s) % W + W) % W, rc = ((r - s - 1) % W + W) % W;
    exchange(c, at(data, begin(sc), c.esz), len(sc), right, at(data, begin(rc), c.esz), len(rc), left, true);
  }
  const int own = (r + 1) % W;  // fully reduced here
  if (op == ReduceOp::Avg) scale(comm, dt, at(data, begin(own), c.esz), len(own), 1.0 / W);
  // All-gather: pass the finished chunks around.
  for (int s = 0; s < W - 1; ++s) {
    const int sc = ((r + 1 - s) % W + W) % W, rc = ((r - s) % W + W) % W;
    exchange(c, at(data, begin(sc), c.esz), len(sc), right, at(data, begin(rc), c.esz), len(rc), left, false);
  }
}

void ring_all_reduce(Communicator& comm, void* data, int64_t count, DType dt, ReduceOp op, size_t slice_bytes) {
  AllReduceOptions o;
  o.slice_bytes = slice_bytes;
  ring_all_reduce(comm, data, count, dt, op, o);
}

void halving_doubling_all_reduce(Communicator& comm, void* data, int64_t count, DType dt, ReduceOp op,
                                 const AllReduceOptions& o) {
  const int W = comm.world_size(), r = comm.rank();
  if (count <= 0 || W == 1) return;
  Ctx c = make_ctx(comm, dt, o, count);
  int p2 = 1;
  while (p2 * 2 <= W) p2 *= 2;
  const int extra = W - p2;  // ranks [0, 2*extra) fold in pairs (even -> odd)
  auto real = [&](int v) { return v < extra ? 2 * v + 1 : v + extra; };
  int vr;
  if (r < 2 * extra) {
    if (r % 2 == 0) {  // folded away: hand the data over, get the result back at the end
      exchange(c, static_cast<const char*>(data), count, r + 1, nullptr, 0, r + 1, false);
      exchange(c, nullptr, 0, r + 1, static_cast<char*>(data), count, r + 1, false);
      return;
    }
    exchange(c, nullptr, 0, r - 1, static_cast<char*>(data), count, r - 1, true);
    vr = r / 2;
  } else {
    vr = r - extra;
  }
  // Reduce-scatter by recursive halving: keep one half of the current range, send the other.
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t lo = 0, hi = count;
  for (int mask = p2 / 2; mask >= 1; mask /= 2) {
    const int partner = real(vr ^ mask);
    const int64_t mid = lo + (hi - lo) / 2;
    const bool lower = (vr & mask) == 0;
    const int64_t klo = lower ? lo : mid, khi = lower ? mid : hi;  // kept
    const int64_t slo = lower ? mid : lo, shi = lower ? hi : mid;  // sent
    exchange(c, at(data, slo, c.esz), shi - slo, partner, at(data, klo, c.esz), khi - klo, partner, true);
    ranges.emplace_back(lo, hi);
    lo = klo, hi = khi;
  }
  if (op == ReduceOp::Avg) scale(comm, dt, at(data, lo, c.esz), hi - lo, 1.0 / W);
  // All-gather by recursive doubling: swap halves back up the same tree.
  for (int mask = 1; mask < p2; mask *= 2) {
    const int partner = real(vr ^ mask);
    const auto [plo, phi] = ranges.back();
    ranges.pop_back();
    const bool lower = (vr & mask) == 0;
    const int64_t olo = lower ? hi : plo, ohi = lower ? phi : lo;  // the partner's half
    exchange(c, at(data, lo, c.esz), hi - lo, partner, at(data, olo, c.esz), ohi - olo, partner, false);
    lo = plo, hi = phi;
  }
  if (r < 2 * extra) exchange(c, static_cast<const char*>(data), count, r - 1, nullptr, 0, r - 1, false);
}

void halving_doubling_all_reduce(Communicator& comm, void* data, int64_t count, DType dt, ReduceOp op,
                                 size_t slice_bytes) {
  AllReduceOptions o;
  o.slice_bytes = slice_bytes;
  halving_doubling_all_reduce(comm, data, count, dt, op, o);
}

AllReduceAlgo all_reduce(Communicator& comm, void* data, int64_t count, DType dt, ReduceOp op, AllReduceAlgo algo,
                         const AllReduceOptions& opts) {
  if (algo == AllReduceAlgo::Auto)
    algo = pick_algo(static_cast<size_t>(std::max<int64_t>(count, 0)) * engine::dtype_size(dt), comm.world_size(), opts);
  switch (algo) {
    case AllReduceAlgo::Ring: ring_all_reduce(comm, data, count, dt, op, opts); break;
    case AllReduceAlgo::HalvingDoubling: halving_doubling_all_reduce(comm, data, count, dt, op, opts); break;
    default: comm.all_reduce_library(data, count, dt, op); break;
  }
  return algo;
}

AllReduceAlgo all_reduce(Communicator& comm, engine::Tensor& t, ReduceOp op, AllReduceAlgo algo,
                         const AllReduceOptions& opts) {
  Y9_CHECK_SHAPE(t.defined() && t.is_contiguous() && t.device() == comm.device(), "all_reduce: tensor ",
                 t.defined() ? t.str() : "undefined", " must be dense on ", comm.device().str());
  return all_reduce(comm, t.data_ptr(), t.numel(), t.dtype(), op, algo, opts);
}

}  // namespace training::dist
