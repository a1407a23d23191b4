// CPU convolution entries: oneDNN primitives for F32 and direct loops for F64 (the reference
// path of finite-difference checks and of the F32 path's tests). The oneDNN engine and a
// primitive cache keyed by the convolution geometry live in the CPU device context (OneDnnState),
// so a primitive descriptor is built once per shape and direction. Executions may run
// concurrently from several threads (the detection head's inter-op parallelism, graph/forward.cpp):
// each thread executes on its own stream with its own reorder buffers and scratchpad (primitives
// use oneDNN's user scratchpad mode, the mode its documentation names for concurrent execution).
#include <omp.h>

#include <array>
#include <cassert>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "engine/allocator.h"
#include "engine/error.h"
#include "kernels/common/conv.h"
#include "kernels/cpu/onednn_isa.h"

namespace kernels::cpu {

namespace {

using dnnl::memory;
using tag = memory::format_tag;

/// A least-recently-used map of at most `capacity` entries (the primitive cache below: validation
/// with rectangular batches meets many shapes, so the cache must not grow without bound).
template <typename K, typename V>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {}
  /// The entry of `key`, created by `make()` on a miss (evicting the least recently used).
  template <typename Make>
  V& get(const K& key, Make make) {
    auto it = map_.find(key);
    if (it != map_.end()) {
      order_.splice(order_.begin(), order_, it->second.first);
      return it->second.second;
    }
    if (map_.size() >= capacity_) {
      map_.erase(order_.back());
      order_.pop_back();
    }
    order_.push_front(key);
    return map_.emplace(key, std::make_pair(order_.begin(), make())).first->second.second;
  }
  size_t size() const { return map_.size(); }

 private:
  size_t capacity_;
  std::list<K> order_;  // most recent first
  std::map<K, std::pair<typename std::list<K>::iterator, V>> map_;
};

struct Mds {
  memory::desc src, wei, bias, dst;                 // plain (user) layouts
  memory::desc src_any, wei_any, dst_any;           // layouts left to oneDNN
  memory::dims strides, dil, pad_l, pad_r;
  bool relaxed = false;  // make_mds's arguments: the backward directions build their forward hint
  bool bf16 = false;     // from them (bwd_hint)
};

/// The memory descriptors of geometry `s`. `relaxed`: the primitive may pick the layouts of blocked
/// operands too (tag::any; the user's blocked buffers are then reordered), used where the fixed
/// blocked layout would select oneDNN's reference kernel (see cached()).
/// `types`: the data types of the operands the primitive computes with (src, weights, dst; the
/// `_any` descriptors), all F32 unless the convolution runs in BF16 (Conv2dShape::bf16: the
/// direction's kBf16* types below); the user layouts (src, wei, bias, dst) are F32 always, and a reorder converts.
using Types = std::array<memory::data_type, 3>;
constexpr Types kF32Types{memory::data_type::f32, memory::data_type::f32, memory::data_type::f32};

// The BF16 operand types of each direction (Conv2dShape::bf16): the inputs in BF16, the output
// (dst, diff_src, diff_weights) in F32. A backward direction's `_any` types describe its own
// operands: backward data reads diff_dst (dst slot) and weights and writes diff_src (src slot);
// backward weights reads src and diff_dst and writes diff_weights (weights slot).
constexpr auto kBf16 = memory::data_type::bf16, kF32 = memory::data_type::f32;
constexpr Types kBf16Forward{kBf16, kBf16, kF32};
constexpr Types kBf16BackwardData{kF32, kBf16, kBf16};
constexpr Types kBf16BackwardWeights{kBf16, kF32, kBf16};

Mds make_mds(const Conv2dShape& s, bool relaxed = false, const Types& types = kF32Types) {
  Mds m;
  const auto f32 = memory::data_type::f32;
  memory::dims src{s.n, s.c_in, s.h, s.w}, dst{s.n, s.c_out, s.h_out, s.w_out};
  memory::dims wei = s.groups > 1 ? memory::dims{s.groups, s.c_out / s.groups, s.c_in / s.groups, s.kh, s.kw}
                                  : memory::dims{s.c_out, s.c_in, s.kh, s.kw};
  // A blocked operand (Conv2dShape::src_block / dst_block) is given to the primitive in its own
  // layout, so it is read or written in place; a plain one in the layout oneDNN prefers (a reorder
  // per call when that differs from NCHW).
  const auto layout = [](int64_t block) {
    assert(block == 0 || block == 8 || block == 16);
    return block == 16 ? tag::nChw16c : block == 8 ? tag::nChw8c : tag::nchw;
  };
  m.src = memory::desc(src, f32, layout(s.src_block));
  m.dst = memory::desc(dst, f32, layout(s.dst_block));
  m.wei = memory::desc(wei, f32, s.groups > 1 ? tag::goihw : tag::oihw);
  m.bias = memory::desc({s.c_out}, f32, tag::x);
  m.src_any = memory::desc(src, types[0], s.src_block && !relaxed ? layout(s.src_block) : tag::any);
  m.dst_any = memory::desc(dst, types[2], s.dst_block && !relaxed ? layout(s.dst_block) : tag::any);
  m.wei_any = memory::desc(wei, types[1], tag::any);
  m.relaxed = relaxed;
  m.bf16 = types != kF32Types;
  m.strides = {s.stride_h, s.stride_w};
  m.dil = {s.dil_h - 1, s.dil_w - 1};  // oneDNN counts the gaps: PyTorch dilation - 1
  m.pad_l = {s.pad_h, s.pad_w};
  // Right padding so that oneDNN's output size formula yields exactly h_out/w_out.
  m.pad_r = {(s.h_out - 1) * s.stride_h + (s.kh - 1) * s.dil_h + 1 - s.h - s.pad_h,
             (s.w_out - 1) * s.stride_w + (s.kw - 1) * s.dil_w + 1 - s.w - s.pad_w};
  return m;
}

/// Attributes of every primitive here: oneDNN's user scratchpad mode, so an execution gets its
/// scratchpad from the calling thread (ThreadExec::scratch) and a primitive may run on threads other
/// than the one that created it, and on two threads at once (oneDNN's default global scratchpad
/// forbids both).
dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

/// A reorder between a user (plain) layout and the primitive's layout of one operand, built with
/// the primitive (so executions, possibly concurrent, only read it). `want` is the primitive's
/// layout of the operand; `prim` is empty when it equals the user's; `scratch` is the reorder's
/// scratchpad layout (size 0 when it needs none).
struct CachedReorder {
  memory::desc want;
  std::optional<dnnl::reorder> prim;
  memory::desc scratch;
  /// A small F32 NCHW <-> NHWC reorder (1: to NHWC, 2: to NCHW) of [n, c, hw], run as a plain
  /// transposition instead of prim: the plain operands of convolutions that oneDNN runs channels-
  /// last (brgconv: channel counts off the blocked layout's block, 24 in gelan-t), where the
  /// primitive call costs more than the copy at batch 1. A copy either way: the same bits.
  int transpose = 0;
  int64_t n = 0, c = 0, hw = 0;
};

/// Elements up to which an NCHW <-> NHWC reorder is a CachedReorder::transpose (larger ones keep
/// oneDNN's multithreaded reorder).
constexpr int64_t kTransposeMaxElems = int64_t(1) << 14;

/// The reorder of one operand between the user's layout `user` and the primitive's `want`: from
/// user to want for an input (`user_to_want`), from want to user for an output; no primitive when
/// the layouts are equal.
CachedReorder make_reorder(const dnnl::engine& eng, const memory::desc& user, const memory::desc& want,
                           bool user_to_want) {
  CachedReorder r;
  r.want = want;
  if (user == want) return r;
  const memory::desc& from = user_to_want ? user : want;
  const memory::desc& to = user_to_want ? want : user;
  dnnl::reorder::primitive_desc pd(eng, from, eng, to, user_scratchpad_attr());
  r.prim.emplace(pd);
  r.scratch = pd.scratchpad_desc();
  const memory::dims d = from.dims();
  if (d.size() == 4 && d[0] * d[1] * d[2] * d[3] <= kTransposeMaxElems && from.data_type() == memory::data_type::f32 &&
      to.data_type() == memory::data_type::f32) {
    const auto f32 = memory::data_type::f32;
    const memory::desc nchw(d, f32, tag::nchw), nhwc(d, f32, tag::nhwc);
    r.transpose = from == nchw && to == nhwc ? 1 : from == nhwc && to == nchw ? 2 : 0;
    r.n = d[0];
    r.c = d[1];
    r.hw = d[2] * d[3];
  }
  return r;
}

/// CachedReorder::transpose from `x` to `y`: [n, c, hw] -> [n, hw, c] (1) or back (2).
void transpose_nchw(const CachedReorder& r, const float* x, float* y) {
  const int64_t c = r.c, hw = r.hw;
  for (int64_t b = 0; b < r.n; ++b, x += c * hw, y += c * hw)
    if (r.transpose == 1) {
      for (int64_t i = 0; i < hw; ++i)
        for (int64_t k = 0; k < c; ++k) y[i * c + k] = x[k * hw + i];
    } else {
      for (int64_t k = 0; k < c; ++k)
        for (int64_t i = 0; i < hw; ++i) y[k * hw + i] = x[i * c + k];
    }
}

/// A primitive descriptor, the primitive built from it, the memory descriptors of its geometry
/// and the reorders of its operands (built once per key, so a cache hit creates no descriptor).
/// in0 / in1 / out: the operands in the order of the direction's function (forward: src,
/// weights, dst; backward data: diff_dst, weights, diff_src; backward weights: src, diff_dst,
/// diff_weights). Immutable once built: executions on several threads share it.
template <typename Pd>
struct Cached {
  Pd pd;
  dnnl::primitive prim;
  Mds m;
  CachedReorder in0, in1, out;
  uint64_t id;             // unique over the process: keys the threads' BoundMemories of this entry
  memory::desc scratch;    // pd's scratchpad layout (size 0 when it needs none)
  /// A Winograd convolution of the blocked inference path takes no post-op: its SiLU runs after
  /// it, in place on the output (an eltwise primitive), when set.
  std::optional<dnnl::eltwise_forward> silu_after;
  memory::desc silu_scratch;
  /// Backward weights of a kept BF16 x (Conv2dShape::x_bf16) whose primitive reads x in another
  /// layout or type than the kept copy's (bf16_src_desc): the reorder from that copy.
  CachedReorder in0_bf16;
};

/// A process-unique id for a new cache entry (an evicted entry's address may be reused).
uint64_t next_entry_id() {
  static std::atomic<uint64_t> n{0};
  return n++;
}

/// A grow-only, 64-byte aligned host buffer that holds one operand of an execution in oneDNN's
/// chosen layout (the reorders of src / weights / dst), reused by the next execution instead of a
/// fresh allocation (and its page faults) per call. Only for operands of at most max_bytes (default
/// kMaxBytes): larger ones (training batches at full size) get a buffer of their own per call, as
/// before, so the state never holds more than 3 x kMaxBytes per direction.
class ReorderBuffer {
 public:
  static constexpr size_t kMaxBytes = size_t(8) << 20;
  explicit ReorderBuffer(size_t max_bytes = kMaxBytes) : max_bytes_(max_bytes) {}
  ReorderBuffer(const ReorderBuffer&) = delete;
  ReorderBuffer& operator=(const ReorderBuffer&) = delete;
  ~ReorderBuffer() { engine::cpu_allocator()->deallocate(p_, cap_); }
  /// This buffer, grown to at least `n` bytes, or null when n exceeds max_bytes (the caller makes
  /// a buffer of its own). The buffer comes from engine::cpu_allocator() (64-byte aligned; counted
  /// in its statistics); throws engine::Error when that allocation fails.
  void* data(size_t n) {
    if (n > max_bytes_) return nullptr;
    if (n > cap_) {
      engine::cpu_allocator()->deallocate(p_, cap_);
      p_ = nullptr, cap_ = 0;
      p_ = engine::cpu_allocator()->allocate(n);
      cap_ = n;
    }
    return p_;
  }

 private:
  size_t max_bytes_;
  void* p_ = nullptr;
  size_t cap_ = 0;
};

/// The reorder buffers of one direction: one per operand that may need a reorder.
struct ReorderBuffers {
  ReorderBuffer in0, in1, out;
};

/// The oneDNN memory objects of one cached primitive on one thread, kept across its calls and
/// re-pointed at each call's buffers (set_data_handle), so a call creates no memory object (on a
/// small convolution, creating and destroying the 5-8 objects of a call cost about as much as the
/// convolution itself). A slot's layout is the same on every call of its primitive.
struct BoundMemories {
  enum Slot { kIn0, kIn1, kOut, kBias, kIn0Buf, kIn1Buf, kOutBuf, kScratch, kSlots };
  /// Slot `s` as memory of layout `d` at `p` (created on its first use; re-pointed on `st`, the
  /// thread's stream, which also zero-pads a padded blocked layout).
  const memory& at(Slot s, const memory::desc& d, const dnnl::engine& eng, dnnl::stream& st, const void* p) {
    memory& x = m[s];
    if (!x) {
      x = memory(d, eng, const_cast<void*>(p));
    } else {
      assert(x.get_desc() == d);
      x.set_data_handle(const_cast<void*>(p), st);
    }
    return x;
  }
  std::array<memory, kSlots> m;
};

/// What one thread needs to execute primitives of one OneDnnState: its own stream (a dnnl::stream
/// is not thread-safe), reorder targets, scratchpad and memory objects (BoundMemories), so
/// concurrent executions share nothing mutable. Lives until the thread exits (thread_local; at
/// most 3 x 8 MiB of reorder buffers per direction are kept, larger ones are allocated per call).
/// The scratchpad grows to the largest one the thread's primitives asked for and is kept, as
/// oneDNN's own global scratchpad was.
struct ThreadExec {
  explicit ThreadExec(const dnnl::engine& eng) : stream(eng) {}
  /// The memory objects of cache entry `id` on this thread. Entries evicted from the cache leave
  /// theirs behind, so the map is emptied when it reaches kMaxBound entries.
  BoundMemories& bound_for(uint64_t id) {
    static constexpr size_t kMaxBound = 4096;
    if (bound.size() >= kMaxBound && !bound.count(id)) bound.clear();
    return bound[id];
  }
  dnnl::stream stream;
  ReorderBuffers fwd_buf, bwd_data_buf, bwd_weights_buf;
  ReorderBuffer scratch{std::numeric_limits<size_t>::max()};
  std::unordered_map<uint64_t, BoundMemories> bound;
};

/// The arguments of one execution (oneDNN's C API takes an array: no map is built per call).
struct ExecArgs {
  void add(int arg, const memory& m) { a[n++] = {arg, m.get()}; }
  std::array<dnnl_exec_arg_t, 8> a{};
  int n = 0;
};

/// Runs `prim` on `te`'s stream with `args`, adding a scratchpad of layout `scratch` (from the
/// thread's buffer; bound to `bm`'s slot when given) when the primitive needs one. Throws
/// dnnl::error when oneDNN fails.
void execute(const dnnl::primitive& prim, const memory::desc& scratch, const dnnl::engine& eng, ThreadExec& te,
             BoundMemories* bm, ExecArgs args) {
  memory sp;
  if (const size_t n = scratch.get_size(); n > 0) {
    const void* p = te.scratch.data(n);
    sp = bm ? bm->at(BoundMemories::kScratch, scratch, eng, te.stream, p)
            : memory(scratch, eng, const_cast<void*>(p));
    args.add(DNNL_ARG_SCRATCHPAD, sp);
  }
  dnnl::error::wrap_c_api(dnnl_primitive_execute(prim.get(), te.stream.get(), args.n, args.a.data()),
                          "could not execute a primitive");
}

/// Runs the reorder `r` from `from` to `to` on the thread's stream.
void run_reorder(const CachedReorder& r, const dnnl::engine& eng, ThreadExec& te, const memory& from, const memory& to) {
  if (r.transpose) {
    transpose_nchw(r, static_cast<const float*>(from.get_data_handle()), static_cast<float*>(to.get_data_handle()));
    return;
  }
  ExecArgs a;
  a.add(DNNL_ARG_FROM, from);
  a.add(DNNL_ARG_TO, to);
  execute(*r.prim, r.scratch, eng, te, nullptr, a);
}

/// Memory of layout `r.want` for an operand that needs a reorder: `buf` bound to slot `s` of `bm`,
/// or a buffer of its own when the operand is larger than buf keeps.
memory reorder_target(const dnnl::engine& eng, ThreadExec& te, const CachedReorder& r, ReorderBuffer& buf,
                      BoundMemories& bm, BoundMemories::Slot s) {
  const void* p = buf.data(r.want.get_size());
  return p ? bm.at(s, r.want, eng, te.stream, p) : memory(r.want, eng);
}

/// User memory in the layout of `r.want`: itself when the layouts agree, else reordered into
/// `buf` (with r's cached reorder primitive).
memory as_layout(const dnnl::engine& eng, const memory& user, const CachedReorder& r, ThreadExec& te,
                 ReorderBuffer& buf, BoundMemories& bm, BoundMemories::Slot s) {
  if (!r.prim) return user;
  memory m = reorder_target(eng, te, r, buf, bm, s);
  run_reorder(r, eng, te, user, m);
  return m;
}

/// The layouts of one frozen weight (engine::Storage::freeze) that primitives asked for, each
/// reordered from the user's plain layout once per DerivedData generation and kept in the
/// storage's DerivedData (fused inference reuses its folded weights on every call; training its
/// flat parameters on every batch between two optimizer steps, forward and backward-data layouts).
struct PackedWeights {
  struct Form {
    memory m;
    uint64_t generation;  // of the bytes m was reordered from
  };
  std::mutex mu;            // contexts other than this state's may share the weight
  std::vector<Form> forms;  // one per layout asked for (forward, backward data)
};

/// The frozen weight `user` in layout `r.want`: the copy kept in `d` when one of d's current
/// generation exists; else reordered (r's cached reorder primitive) into the kept copy of an
/// earlier generation (its memory reused), or into a new oneDNN buffer kept there.
memory packed_weights(const dnnl::engine& eng, engine::DerivedData& d, const memory& user, const CachedReorder& r,
                      ThreadExec& te) {
  const void* key = user.get_data_handle();
  auto p = std::static_pointer_cast<PackedWeights>(d.find(key));
  if (!p) {
    p = std::make_shared<PackedWeights>();
    d.put(key, p);
  }
  const uint64_t gen = d.generation();
  std::lock_guard<std::mutex> lock(p->mu);
  for (PackedWeights::Form& f : p->forms)
    if (f.m.get_desc() == r.want) {
      if (f.generation != gen) {
        run_reorder(r, eng, te, user, f.m);
        f.generation = gen;
      }
      return f.m;
    }
  memory m(r.want, eng);
  run_reorder(r, eng, te, user, m);
  p->forms.push_back({m, gen});
  return m;
}

/// Output memory in layout `r.want` (in `buf` when it differs from the user's); call finish()
/// to reorder it into the user buffer.
memory out_layout(const dnnl::engine& eng, ThreadExec& te, const memory& user, const CachedReorder& r,
                  ReorderBuffer& buf, BoundMemories& bm) {
  return r.prim ? reorder_target(eng, te, r, buf, bm, BoundMemories::kOutBuf) : user;
}
void finish(const memory& produced, const memory& user, const CachedReorder& r, const dnnl::engine& eng,
            ThreadExec& te) {
  if (r.prim) run_reorder(r, eng, te, produced, user);
}

/// The OpenMP threads a convolution of geometry `s` runs on. Inference (direction 3, the fused
/// conv + bias + SiLU of a folded model) runs on 1 thread when it is small (fewer than kSerialMacs
/// multiply-accumulates): a small convolution split over threads spends more in the fork, the join
/// and the imbalance of its few blocks than it gains. Measured (overhead_bench, 2 threads): a call
/// costs about 1.8 us on 1 thread and 2.6 us on 2 before any arithmetic, and a 3x3 16-channel
/// convolution on a 4x3 map (27 Ki MACs) took 2.8 us on 1 thread against 5.4 us on 2; at about
/// 35 GMAC/s per core the two meet near 256 Ki MACs. gelan-t's batch-1 detect at 128 px (its
/// RepNBottleneck convolutions of 110 Ki to 442 Ki MACs) went from 3.5-3.7 ms (medians) at 4 Mi to
/// 3.0-3.15 ms at 256 Ki, the same as at 0. Training (forward, backward data,
/// backward weights) always uses every thread: oneDNN's work split, and so the float rounding of
/// its reductions, depends on the thread count, and training results must not change with the
/// size of a layer (with the threshold there, the demo's final mAP50-95 moved from 0.294 to 0.179).
/// Both the primitive's creation (oneDNN sizes its work split then) and its execution use this count.
/// Inside an active OpenMP parallel region (several convolutions run concurrently, one per thread)
/// every direction runs on 1 thread: the nested region would get one thread anyway. Winograd
/// (direction 4, at least kWinogradMinMacs) uses every thread: giving the ones under kSerialMacs a
/// single thread did not move gelan-t's batch-1 detect (4.64 vs 4.59 ms, medians of 8 interleaved
/// runs, 2 threads).
constexpr int64_t kSerialMacs = int64_t(256) << 10;
int conv_threads(int direction, const Conv2dShape& s) {
  if (omp_in_parallel()) return 1;
  if (direction != 3) return omp_get_max_threads();
  const int64_t macs = s.n * s.c_out * s.h_out * s.w_out * (s.c_in / s.groups) * s.kh * s.kw;
  return macs < kSerialMacs ? 1 : omp_get_max_threads();
}

/// Sets the calling thread's OpenMP thread count (the ICV that oneDNN's OpenMP runtime reads) for
/// a scope; restores it after.
class OmpThreadsScope {
 public:
  explicit OmpThreadsScope(int n) : prev_(omp_get_max_threads()) {
    if (n != prev_) omp_set_num_threads(n);
  }
  ~OmpThreadsScope() {
    if (omp_get_max_threads() != prev_) omp_set_num_threads(prev_);
  }
  OmpThreadsScope(const OmpThreadsScope&) = delete;
  OmpThreadsScope& operator=(const OmpThreadsScope&) = delete;

 private:
  int prev_;
};

/// oneDNN state of the CPU context: engine and the primitive cache (per direction, keyed by the
/// geometry; a primitive descriptor is built once per shape). `mu` guards the cache only: entries
/// are shared_ptrs, so one evicted while another thread executes it stays alive until that
/// execution ends. Executions run outside the lock on the calling thread's ThreadExec.
struct OneDnnState {
  static constexpr size_t kCapacity = 512;  // per direction; one model has about 100 convs
  explicit OneDnnState(engine::DeviceContext&)
      : eng(dnnl::engine::kind::cpu, 0), fwd(kCapacity), bwd_data(kCapacity), bwd_weights(kCapacity) {}
  /// The calling thread's execution state for this OneDnnState (created on the thread's first call).
  ThreadExec& thread_exec() {
    thread_local std::unordered_map<uint64_t, std::unique_ptr<ThreadExec>> per_state;
    auto& te = per_state[id];
    if (!te) te = std::make_unique<ThreadExec>(eng);
    return *te;
  }
  dnnl::engine eng;
  const uint64_t id = next_id();  // keys thread_exec (an address could be reused by a later state)
  std::mutex mu;
  // Key: direction (0 fwd, 1 bwd data, 2 bwd weights, 3 fwd + SiLU, 4 Winograd fwd + SiLU) + 8 x the
  // thread count the primitive was created for (conv_threads), bias, then the geometry and the
  // operands' layouts and math (src_block + 32 x dst_block + 1024 x winograd + 2048 x bf16 + 4096 x
  // x_bf16 in the backward weights: a kept BF16 x binds other memory objects than an F32 one).
  using Key = std::tuple<int, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
  template <typename Pd>
  using Cache = LruCache<Key, std::shared_ptr<const Cached<Pd>>>;
  Cache<dnnl::convolution_forward::primitive_desc> fwd;
  Cache<dnnl::convolution_backward_data::primitive_desc> bwd_data;
  Cache<dnnl::convolution_backward_weights::primitive_desc> bwd_weights;
  /// Per training geometry that use_winograd selects (its winograd_shape, key_of direction 0):
  /// whether oneDNN creates its F32 Winograd forward and both backward directions (training_winograd).
  std::map<Key, bool> training_winograd;

 private:
  static uint64_t next_id() {
    static std::atomic<uint64_t> n{0};
    return n++;
  }
};

OneDnnState::Key key_of(int dir, int threads, bool bias, const Conv2dShape& s) {
  const int64_t x_bf16 = dir == 2 && s.x_bf16 ? 1 : 0;  // only the backward weights reads x
  return {dir + 8 * threads, bias, s.n, s.c_in, s.h, s.w, s.c_out, s.kh, s.kw, s.stride_h, s.stride_w, s.pad_h,
          s.pad_w, s.dil_h, s.dil_w, s.groups,
          s.src_block + 32 * s.dst_block + 1024 * s.winograd + 2048 * (s.bf16 ? 1 : 0) + 4096 * x_bf16};
}

/// The forward descriptor; `silu` (inference only) appends oneDNN's swish (alpha 1: x*sigmoid(x))
/// as a post-op, so the activation is applied while the output block is still in registers.
dnnl::convolution_forward::primitive_desc fwd_pd(const dnnl::engine& eng, const Mds& m, bool with_bias,
                                                 bool silu = false,
                                                 dnnl::algorithm alg = dnnl::algorithm::convolution_direct) {
  const auto prop = silu ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training;
  dnnl::primitive_attr attr = user_scratchpad_attr();
  if (silu) {
    dnnl::post_ops po;
#if DNNL_VERSION_MAJOR >= 3
    po.append_eltwise(dnnl::algorithm::eltwise_swish, 1.f, 0.f);
#else
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_swish, 1.f, 0.f);
#endif
    attr.set_post_ops(po);
  }
#if DNNL_VERSION_MAJOR >= 3
  if (with_bias)
    return {eng, prop, alg, m.src_any, m.wei_any, m.bias, m.dst_any, m.strides, m.dil, m.pad_l, m.pad_r, attr};
  return {eng, prop, alg, m.src_any, m.wei_any, m.dst_any, m.strides, m.dil, m.pad_l, m.pad_r, attr};
#else
  if (with_bias) {
    dnnl::convolution_forward::desc d(prop, alg, m.src_any, m.wei_any, m.bias, m.dst_any, m.strides, m.dil, m.pad_l,
                                      m.pad_r);
    return {d, attr, eng};
  }
  dnnl::convolution_forward::desc d(prop, alg, m.src_any, m.wei_any, m.dst_any, m.strides, m.dil, m.pad_l, m.pad_r);
  return {d, attr, eng};
#endif
}

/// The Winograd forward-inference descriptor (no post-op: oneDNN's Winograd kernels take no
/// swish); throws dnnl::error where oneDNN has no Winograd implementation for the geometry.
dnnl::convolution_forward::primitive_desc wino_pd(const dnnl::engine& eng, const Mds& m, bool with_bias) {
  const auto prop = dnnl::prop_kind::forward_inference;
  const auto alg = dnnl::algorithm::convolution_winograd;
#if DNNL_VERSION_MAJOR >= 3
  if (with_bias)
    return {eng, prop, alg, m.src_any, m.wei_any, m.bias, m.dst_any, m.strides, m.dil, m.pad_l, m.pad_r,
            user_scratchpad_attr()};
  return {eng, prop, alg, m.src_any, m.wei_any, m.dst_any, m.strides, m.dil, m.pad_l, m.pad_r, user_scratchpad_attr()};
#else
  if (with_bias) {
    dnnl::convolution_forward::desc d(prop, alg, m.src_any, m.wei_any, m.bias, m.dst_any, m.strides, m.dil, m.pad_l,
                                      m.pad_r);
    return {d, user_scratchpad_attr(), eng};
  }
  dnnl::convolution_forward::desc d(prop, alg, m.src_any, m.wei_any, m.dst_any, m.strides, m.dil, m.pad_l, m.pad_r);
  return {d, user_scratchpad_attr(), eng};
#endif
}

/// The forward descriptor a backward direction of `m` (geometry `s`) is created with (oneDNN's
/// hint): the forward of the same geometry and layouts, in BF16 when m is (oneDNN has no forward
/// with a backward direction's mix of types).
dnnl::convolution_forward::primitive_desc bwd_hint(const dnnl::engine& eng, const Mds& m, const Conv2dShape& s,
                                                   bool with_bias, dnnl::algorithm alg) {
  return fwd_pd(eng, m.bf16 ? make_mds(s, m.relaxed, kBf16Forward) : m, with_bias, false, alg);
}

dnnl::convolution_backward_data::primitive_desc bwd_data_pd(const dnnl::engine& eng, const Mds& m, const Conv2dShape& s,
                                                            dnnl::algorithm alg) {
  auto fpd = bwd_hint(eng, m, s, false, alg);
#if DNNL_VERSION_MAJOR >= 3
  return {eng, alg, m.src_any, m.wei_any, m.dst_any, m.strides, m.dil, m.pad_l, m.pad_r, fpd, user_scratchpad_attr()};
#else
  dnnl::convolution_backward_data::desc d(alg, m.src_any, m.wei_any, m.dst_any, m.strides, m.dil, m.pad_l, m.pad_r);
  return {d, user_scratchpad_attr(), eng, fpd};
#endif
}

dnnl::convolution_backward_weights::primitive_desc bwd_weights_pd(const dnnl::engine& eng, const Mds& m,
                                                                  const Conv2dShape& s, bool with_bias,
                                                                  dnnl::algorithm alg) {
  auto fpd = bwd_hint(eng, m, s, with_bias, alg);
#if DNNL_VERSION_MAJOR >= 3
  if (with_bias)
    return {eng,       alg,   m.src_any, m.wei_any, m.bias, m.dst_any,
            m.strides, m.dil, m.pad_l,   m.pad_r,   fpd,    user_scratchpad_attr()};
  return {eng, alg, m.src_any, m.wei_any, m.dst_any, m.strides, m.dil, m.pad_l, m.pad_r, fpd, user_scratchpad_attr()};
#else
  auto d = with_bias ? dnnl::convolution_backward_weights::desc(alg, m.src_any, m.wei_any, m.bias, m.dst_any, m.strides,
                                                                m.dil, m.pad_l, m.pad_r)
                     : dnnl::convolution_backward_weights::desc(alg, m.src_any, m.wei_any, m.dst_any, m.strides, m.dil,
                                                                m.pad_l, m.pad_r);
  return {d, user_scratchpad_attr(), eng, fpd};
#endif
}

/// Whether `pd` runs one of oneDNN's reference (untuned, scalar) implementations.
template <typename Pd>
bool is_reference(const Pd& pd) {
  const char* impl = pd.impl_info_str();
  return impl && std::string(impl).rfind("ref", 0) == 0;
}

/// The cached primitive descriptor and primitive of `key` in `st`'s `cache`, built by `make` on a
/// miss (under st.mu; the entry is returned as a shared_ptr, so it outlives an eviction while in
/// use). `make(mds)` builds the descriptor from the geometry's memory descriptors (make_mds(s));
/// `layouts(pd, mds)` returns, for the operands in0, in1, out, the user's (plain) layout and the
/// primitive's.
/// `finish(entry)` completes a new entry (the Winograd path's separate SiLU).
/// `bf16`: the direction's operand types when the convolution runs in BF16 (Conv2dShape::bf16):
/// tried first, and F32 taken instead where oneDNN has only its reference kernel in BF16.
template <typename Pd, typename Prim, typename Make, typename Layouts, typename Finish>
std::shared_ptr<const Cached<Pd>> cached(OneDnnState& st, OneDnnState::Cache<Pd>& cache, const OneDnnState::Key& key,
                                         const Conv2dShape& s, const Types& bf16, Make make, Layouts layouts,
                                         Finish finish) {
  std::lock_guard<std::mutex> lock(st.mu);
  return cache.get(key, [&] {
    // The first of: the fixed (user's) layouts, then, for blocked operands, the layouts oneDNN
    // picks (a fixed blocked layout can leave oneDNN only its reference kernel; measured: nChw8c
    // backward weights of a 3x3 pad-1 convolution on 2 x 2 maps, 5x slower than the plain path's
    // gemm; the blocked buffers are reordered then), that has a tuned kernel: in BF16 first under
    // Conv2dShape::bf16, then in F32 (where oneDNN has no BF16 kernel for the geometry). When
    // none has, the first candidate's reference kernel.
    const bool blocked = s.src_block || s.dst_block;
    std::vector<std::pair<Types, bool>> tries;  // (types, relaxed)
    if (s.bf16) {
      tries.push_back({bf16, false});
      if (blocked) tries.push_back({bf16, true});
    }
    tries.push_back({kF32Types, false});
    if (blocked) tries.push_back({kF32Types, true});
    Mds m = make_mds(s, tries[0].second, tries[0].first);
    Pd pd = make(m);
    for (size_t i = 1; i < tries.size() && is_reference(pd); ++i) {
      Mds alt_m = make_mds(s, tries[i].second, tries[i].first);
      Pd alt = make(alt_m);
      if (!is_reference(alt)) {
        m = alt_m;
        pd = alt;
      }
    }
    const auto l = layouts(pd, m);  // {user, want} for in0, in1, out
    auto c = std::make_shared<Cached<Pd>>(Cached<Pd>{
        pd, Prim(pd), m, make_reorder(st.eng, l[0].first, l[0].second, true),
        make_reorder(st.eng, l[1].first, l[1].second, true), make_reorder(st.eng, l[2].first, l[2].second, false),
        next_entry_id(), pd.scratchpad_desc(), std::nullopt, memory::desc(), CachedReorder{}});
    finish(*c);
    return std::shared_ptr<const Cached<Pd>>(std::move(c));
  });
}
template <typename Pd, typename Prim, typename Make, typename Layouts>
std::shared_ptr<const Cached<Pd>> cached(OneDnnState& st, OneDnnState::Cache<Pd>& cache, const OneDnnState::Key& key,
                                         const Conv2dShape& s, const Types& bf16, Make make, Layouts layouts) {
  return cached<Pd, Prim>(st, cache, key, s, bf16, make, layouts, [](Cached<Pd>&) {});
}

using Layouts3 = std::array<std::pair<memory::desc, memory::desc>, 3>;

[[noreturn]] void rethrow(const dnnl::error& e, const char* what, const Conv2dShape& s) {
  Y9_THROW(engine::Error, what, ": oneDNN error (status ", static_cast<int>(e.status), "): ", e.what(),
           " for x [", s.n, ", ", s.c_in, ", ", s.h, ", ", s.w, "], w [", s.c_out, ", ", s.c_in / s.groups, ", ",
           s.kh, ", ", s.kw, "], groups ", s.groups);
}

// --- oneDNN (F32) -------------------------------------------------------------------------------

/// The smallest Winograd convolution (multiply-accumulates of the direct one): below it the
/// separate SiLU pass (its own primitive call, about 5 us) eats the gain. Measured on gelan-t's
/// 3x3 layers at 128 px, batch 1, 2 threads (AMD EPYC, AVX-512): 16 -> 16 channels on 12 x 16
/// (0.44 M) 7.1 us Winograd vs 10.0 us direct, 48 -> 48 on 6 x 8 (1.0 M) 18.8 vs 23.9 us, 32 -> 32
/// on 12 x 16 (1.8 M) 16.1 vs 36.1 us, 128 -> 128 on 3 x 4 (1.8 M) 66 vs 95 us.
constexpr int64_t kWinogradMinMacs = int64_t(3) << 19;  // 1.5 Mi

/// Whether the convolution of `s` runs oneDNN's Winograd algorithm where oneDNN has it for the
/// geometry (Conv2dShape::winograd): blocked in and out, 3x3, stride 1, dense, ungrouped, at least
/// kWinogradMinMacs (one image's in training). Inference takes it with SiLU only (`silu`; the fused
/// entry) and in F32; training (the forward without SiLU and both backward directions) takes it in
/// F32 under Conv2dShape::bf16 too: oneDNN's F32 Winograd ran YOLOv9-s's training 3x3 layers (batch
/// 8, 640 px, 2 threads, AVX-512) 2.0-2.6x faster than its direct F32 kernels in each direction and
/// 1.0-1.3x faster than its BF16 ones (weighted totals 1281 ms against 2872 ms F32 and 1397 ms
/// BF16, without BF16's conversions), with F32 rounding.
/// Not under BF16 math on a CPU with AMX, whose BF16 tile kernels are expected to outrun F32
/// Winograd (not measured: the machine here has AVX512_BF16 without AMX).
bool use_winograd(const Conv2dShape& s, bool silu) {
  static const bool amx = onednn_isa_has(dnnl::cpu_isa::avx512_core_amx);
  if (!s.winograd || !s.src_block || !s.dst_block || s.kh != 3 || s.kw != 3 || s.stride_h != 1 || s.stride_w != 1 ||
      s.dil_h != 1 || s.dil_w != 1 || s.groups != 1 || (s.bf16 && (silu || amx)))
    return false;
  // Training counts one image's MACs, so that a batch and its shards (data-parallel ranks, micro-
  // batches) take the same algorithm; inference the whole call's (its own calibration).
  return (silu ? s.n : 1) * s.c_out * s.h_out * s.w_out * s.c_in * 9 >= kWinogradMinMacs;
}

/// `s` as its Winograd convolution runs it (use_winograd): in F32.
Conv2dShape winograd_shape(Conv2dShape s) {
  s.bf16 = 0;
  s.x_bf16 = 0;
  return s;
}

/// Whether the training convolution `s_in` (no SiLU) runs Winograd: use_winograd selects it and
/// oneDNN creates F32 Winograd for its geometry in the forward and both backward directions
/// (checked once per geometry, cached in st; oneDNN's x64 Winograd wants nChw16c, so block 8 is
/// refused). Where it does not, the convolution keeps its math (BF16 under Conv2dShape::bf16), and
/// its three directions agree.
bool training_winograd(OneDnnState& st, const Conv2dShape& s_in) {
  if (!use_winograd(s_in, false)) return false;
  const Conv2dShape s = winograd_shape(s_in);
  const OneDnnState::Key key = key_of(0, 0, false, s);
  std::lock_guard<std::mutex> lock(st.mu);
  if (const auto it = st.training_winograd.find(key); it != st.training_winograd.end()) return it->second;
  bool ok = true;
  try {
    const Mds m = make_mds(s);
    const auto alg = dnnl::algorithm::convolution_winograd;
    fwd_pd(st.eng, m, false, false, alg);
    bwd_data_pd(st.eng, m, s, alg);
    bwd_weights_pd(st.eng, m, s, false, alg);
  } catch (const dnnl::error&) {
    ok = false;
  }
  if (st.training_winograd.size() >= 4096) st.training_winograd.clear();  // many input sizes
  st.training_winograd.emplace(key, ok);
  return ok;
}

/// The layout of a BF16 copy of the blocked x of `s` (Conv2dShape::x_bf16): x's own blocked
/// layout in BF16.
memory::desc bf16_src_desc(const Conv2dShape& s) {
  return memory::desc({s.n, s.c_in, s.h, s.w}, memory::data_type::bf16,
                      s.src_block == 16 ? tag::nChw16c : tag::nChw8c);
}

/// y = conv(x, w) + bias, then SiLU when `silu` (inference). `w_derived` (may be null): w's
/// storage is frozen, so its reordered form is kept there (packed_weights). `x_kept` (may be
/// null): where the BF16 math of a blocked x converts x (bf16_src_desc), for the backward weights;
/// returns whether it was written (the primitive reads x in that layout and type).
bool conv2d_forward_onednn(OneDnnState& st, const Conv2dShape& s_in, const float* x, const float* w, const float* bias,
                           float* y, bool silu, engine::DerivedData* w_derived, void* x_kept = nullptr) {
  // Winograd (use_winograd; in training where training_winograd finds all three directions), where
  // oneDNN has the algorithm for the geometry; else the direct one (with the SiLU post-op when `silu`).
  const bool try_wino = silu ? use_winograd(s_in, true) : training_winograd(st, s_in);
  const Conv2dShape s = try_wino ? winograd_shape(s_in) : s_in;
  try {
    const int dir = try_wino && silu ? 4 : silu ? 3 : 0;
    const int threads = conv_threads(dir, s);
    OmpThreadsScope ts(threads);
    using Pd = dnnl::convolution_forward::primitive_desc;
    bool wino = false;
    const auto c = cached<Pd, dnnl::convolution_forward>(
        st, st.fwd, key_of(dir, threads, bias != nullptr, s), s, kBf16Forward,
        [&](const Mds& m) {
          if (try_wino) {
            try {
              if (!silu) return fwd_pd(st.eng, m, bias != nullptr, false, dnnl::algorithm::convolution_winograd);
              Pd pd = wino_pd(st.eng, m, bias != nullptr);
              wino = true;  // the SiLU runs after (finish below)
              return pd;
            } catch (const dnnl::error&) {
            }
          }
          return fwd_pd(st.eng, m, bias != nullptr, silu);
        },
        [](const Pd& pd, const Mds& m) {
          return Layouts3{{{m.src, pd.src_desc()}, {m.wei, pd.weights_desc()}, {m.dst, pd.dst_desc()}}};
        },
        [&](Cached<Pd>& e) {
          if (!wino) return;
#if DNNL_VERSION_MAJOR >= 3
          dnnl::eltwise_forward::primitive_desc epd(st.eng, dnnl::prop_kind::forward_inference,
                                                    dnnl::algorithm::eltwise_swish, e.m.dst, e.m.dst, 1.f, 0.f,
                                                    user_scratchpad_attr());
#else
          dnnl::eltwise_forward::desc ed(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_swish, e.m.dst,
                                         1.f, 0.f);
          dnnl::eltwise_forward::primitive_desc epd(ed, user_scratchpad_attr(), st.eng);
#endif
          e.silu_after.emplace(epd);
          e.silu_scratch = epd.scratchpad_desc();
        });
    const Mds& m = c->m;
    ThreadExec& te = st.thread_exec();
    ReorderBuffers& b = te.fwd_buf;
    BoundMemories& bm = te.bound_for(c->id);
    using S = BoundMemories::Slot;
    const memory& xu = bm.at(S::kIn0, m.src, st.eng, te.stream, x);
    const memory& wu = bm.at(S::kIn1, m.wei, st.eng, te.stream, w);
    const memory& yu = bm.at(S::kOut, m.dst, st.eng, te.stream, y);
    const bool keep = x_kept && s.bf16 && s.src_block && c->in0.prim && c->in0.want == bf16_src_desc(s);
    memory xm;
    if (keep) {  // converted into the caller's buffer, which the backward weights reads later
      xm = bm.at(S::kIn0Buf, c->in0.want, st.eng, te.stream, x_kept);
      run_reorder(c->in0, st.eng, te, xu, xm);
    } else {
      xm = as_layout(st.eng, xu, c->in0, te, b.in0, bm, S::kIn0Buf);
    }
    memory wm = w_derived && c->in1.prim ? packed_weights(st.eng, *w_derived, wu, c->in1, te)
                                         : as_layout(st.eng, wu, c->in1, te, b.in1, bm, S::kIn1Buf);
    memory ym = out_layout(st.eng, te, yu, c->out, b.out, bm);
    ExecArgs args;
    args.add(DNNL_ARG_SRC, xm);
    args.add(DNNL_ARG_WEIGHTS, wm);
    args.add(DNNL_ARG_DST, ym);
    if (bias) args.add(DNNL_ARG_BIAS, bm.at(S::kBias, m.bias, st.eng, te.stream, bias));
    execute(c->prim, c->scratch, st.eng, te, &bm, args);
    if (c->silu_after) {  // in place on the output (the blocked user layout: no reorder)
      ExecArgs ea;
      ea.add(DNNL_ARG_SRC, ym);
      ea.add(DNNL_ARG_DST, ym);
      execute(*c->silu_after, c->silu_scratch, st.eng, te, nullptr, ea);
    }
    finish(ym, yu, c->out, st.eng, te);
    te.stream.wait();
    return keep;
  } catch (const dnnl::error& e) {
    rethrow(e, silu ? "conv2d_bias_silu_forward (oneDNN)" : "conv2d_forward (oneDNN)", s);
  }
}

/// dx = conv_transpose(dy, w); `w_derived` as for conv2d_forward_onednn.
/// `dy_conv` (may be null): receives dy as the primitive read it (converted to BF16 under
/// Conv2dShape::bf16; the thread's reorder buffer, valid until its next backward-data call), for
/// the backward weights of the same call (conv2d_backward).
void conv2d_backward_data_onednn(OneDnnState& st, const Conv2dShape& s_in, const float* dy, const float* w, float* dx,
                                 engine::DerivedData* w_derived, memory* dy_conv = nullptr) {
  const bool try_wino = training_winograd(st, s_in);  // as the forward
  const Conv2dShape s = try_wino ? winograd_shape(s_in) : s_in;
  try {
    const int threads = conv_threads(1, s);
    OmpThreadsScope ts(threads);
    using Pd = dnnl::convolution_backward_data::primitive_desc;
    const auto c = cached<Pd, dnnl::convolution_backward_data>(
        st, st.bwd_data, key_of(1, threads, false, s), s, kBf16BackwardData,
        [&](const Mds& m) {
          if (try_wino) try {
              return bwd_data_pd(st.eng, m, s, dnnl::algorithm::convolution_winograd);
            } catch (const dnnl::error&) {
            }
          return bwd_data_pd(st.eng, m, s, dnnl::algorithm::convolution_direct);
        },
        [](const Pd& pd, const Mds& m) {
          return Layouts3{{{m.dst, pd.diff_dst_desc()}, {m.wei, pd.weights_desc()}, {m.src, pd.diff_src_desc()}}};
        });
    const Mds& m = c->m;
    ThreadExec& te = st.thread_exec();
    ReorderBuffers& b = te.bwd_data_buf;
    BoundMemories& bm = te.bound_for(c->id);
    using S = BoundMemories::Slot;
    const memory& dyu = bm.at(S::kIn0, m.dst, st.eng, te.stream, dy);
    const memory& wu = bm.at(S::kIn1, m.wei, st.eng, te.stream, w);
    const memory& dxu = bm.at(S::kOut, m.src, st.eng, te.stream, dx);
    memory dym = as_layout(st.eng, dyu, c->in0, te, b.in0, bm, S::kIn0Buf);
    if (dy_conv) *dy_conv = dym;
    memory wm = w_derived && c->in1.prim ? packed_weights(st.eng, *w_derived, wu, c->in1, te)
                                         : as_layout(st.eng, wu, c->in1, te, b.in1, bm, S::kIn1Buf);
    memory dxm = out_layout(st.eng, te, dxu, c->out, b.out, bm);
    ExecArgs args;
    args.add(DNNL_ARG_DIFF_DST, dym);
    args.add(DNNL_ARG_WEIGHTS, wm);
    args.add(DNNL_ARG_DIFF_SRC, dxm);
    execute(c->prim, c->scratch, st.eng, te, &bm, args);
    finish(dxm, dxu, c->out, st.eng, te);
    te.stream.wait();
  } catch (const dnnl::error& e) {
    rethrow(e, "conv2d_backward_data (oneDNN)", s);
  }
}

/// `dy_conv` (may be null): dy as the backward data of the same call read it (its dy_conv), used
/// instead of converting dy again when it is in the layout and type this primitive reads.
void conv2d_backward_weights_onednn(OneDnnState& st, const Conv2dShape& s_in, const float* x, const float* dy,
                                    float* dw, float* dbias, const memory* dy_conv = nullptr) {
  const bool try_wino = training_winograd(st, s_in);  // as the forward
  Y9_CHECK(!(try_wino && s_in.x_bf16), "conv2d_backward_weights: a Winograd convolution reads x in F32, got a BF16 x");
  const Conv2dShape s = try_wino ? winograd_shape(s_in) : s_in;
  try {
    const bool with_bias = dbias != nullptr;
    const int threads = conv_threads(2, s);
    OmpThreadsScope ts(threads);
    using Pd = dnnl::convolution_backward_weights::primitive_desc;
    const auto c = cached<Pd, dnnl::convolution_backward_weights>(
        st, st.bwd_weights, key_of(2, threads, with_bias, s), s, kBf16BackwardWeights,
        [&](const Mds& m) {
          if (try_wino) try {
              return bwd_weights_pd(st.eng, m, s, with_bias, dnnl::algorithm::convolution_winograd);
            } catch (const dnnl::error&) {
            }
          return bwd_weights_pd(st.eng, m, s, with_bias, dnnl::algorithm::convolution_direct);
        },
        [](const Pd& pd, const Mds& m) {
          return Layouts3{{{m.src, pd.src_desc()}, {m.dst, pd.diff_dst_desc()}, {m.wei, pd.diff_weights_desc()}}};
        },
        [&](Cached<Pd>& e) {
          if (s.x_bf16) e.in0_bf16 = make_reorder(st.eng, bf16_src_desc(s), e.in0.want, true);
        });
    const Mds& m = c->m;
    ThreadExec& te = st.thread_exec();
    ReorderBuffers& b = te.bwd_weights_buf;
    BoundMemories& bm = te.bound_for(c->id);
    using S = BoundMemories::Slot;
    const memory& dyu = bm.at(S::kIn1, m.dst, st.eng, te.stream, dy);
    const memory& dwu = bm.at(S::kOut, m.wei, st.eng, te.stream, dw);
    memory xm;
    if (s.x_bf16) {  // x is the forward's BF16 copy (bf16_src_desc): read in place, else reordered
      // (this primitive fell back to F32 or to oneDNN's layouts: in0_bf16)
      const memory& xu = bm.at(S::kIn0, bf16_src_desc(s), st.eng, te.stream, x);
      xm = as_layout(st.eng, xu, c->in0_bf16, te, b.in0, bm, S::kIn0Buf);
    } else {
      const memory& xu = bm.at(S::kIn0, m.src, st.eng, te.stream, x);
      xm = as_layout(st.eng, xu, c->in0, te, b.in0, bm, S::kIn0Buf);
    }
    memory dym = dy_conv && *dy_conv && dy_conv->get_desc() == c->in1.want
                     ? *dy_conv
                     : as_layout(st.eng, dyu, c->in1, te, b.in1, bm, S::kIn1Buf);
    memory dwm = out_layout(st.eng, te, dwu, c->out, b.out, bm);
    ExecArgs args;
    args.add(DNNL_ARG_SRC, xm);
    args.add(DNNL_ARG_DIFF_DST, dym);
    args.add(DNNL_ARG_DIFF_WEIGHTS, dwm);
    if (with_bias) args.add(DNNL_ARG_DIFF_BIAS, bm.at(S::kBias, m.bias, st.eng, te.stream, dbias));
    execute(c->prim, c->scratch, st.eng, te, &bm, args);
    finish(dwm, dwu, c->out, st.eng, te);
    te.stream.wait();
  } catch (const dnnl::error& e) {
    rethrow(e, "conv2d_backward_weights (oneDNN)", s);
  }
}

// --- reference loops ----------------------------------------------------------------------------
// Accumulate in double so the F32 instantiation is an accurate ground truth too.

template <typename T>
void conv2d_forward_ref(const Conv2dShape& s, const T* x, const T* w, const T* bias, T* y) {
  const int64_t cig = s.c_in / s.groups, cog = s.c_out / s.groups;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t co = 0; co < s.c_out; ++co) {
      const int64_t g = co / cog;
      for (int64_t oh = 0; oh < s.h_out; ++oh)
        for (int64_t ow = 0; ow < s.w_out; ++ow) {
          double acc = bias ? static_cast<double>(bias[co]) : 0.0;
          for (int64_t ci = 0; ci < cig; ++ci) {
            const T* xp = x + ((n * s.c_in) + g * cig + ci) * s.h * s.w;
            const T* wp = w + (co * cig + ci) * s.kh * s.kw;
            for (int64_t i = 0; i < s.kh; ++i) {
              const int64_t ih = oh * s.stride_h - s.pad_h + i * s.dil_h;
              if (ih < 0 || ih >= s.h) continue;
              for (int64_t j = 0; j < s.kw; ++j) {
                const int64_t iw = ow * s.stride_w - s.pad_w + j * s.dil_w;
                if (iw < 0 || iw >= s.w) continue;
                acc += static_cast<double>(xp[ih * s.w + iw]) * static_cast<double>(wp[i * s.kw + j]);
              }
            }
          }
          y[((n * s.c_out + co) * s.h_out + oh) * s.w_out + ow] = static_cast<T>(acc);
        }
    }
}

template <typename T>
void conv2d_backward_data_ref(const Conv2dShape& s, const T* dy, const T* w, T* dx) {
  const int64_t cig = s.c_in / s.groups, cog = s.c_out / s.groups;
  // Gather form: each dx element sums the (co, i, j) taps that read it, so threads never share
  // an output element.
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t c = 0; c < s.c_in; ++c) {
      const int64_t g = c / cig, ci = c - g * cig;
      for (int64_t ih = 0; ih < s.h; ++ih)
        for (int64_t iw = 0; iw < s.w; ++iw) {
          double acc = 0.0;
          for (int64_t k = 0; k < cog; ++k) {
            const int64_t co = g * cog + k;
            const T* dyp = dy + (n * s.c_out + co) * s.h_out * s.w_out;
            const T* wp = w + (co * cig + ci) * s.kh * s.kw;
            for (int64_t i = 0; i < s.kh; ++i) {
              const int64_t th = ih + s.pad_h - i * s.dil_h;
              if (th < 0 || th % s.stride_h != 0) continue;
              const int64_t oh = th / s.stride_h;
              if (oh >= s.h_out) continue;
              for (int64_t j = 0; j < s.kw; ++j) {
                const int64_t tw = iw + s.pad_w - j * s.dil_w;
                if (tw < 0 || tw % s.stride_w != 0) continue;
                const int64_t ow = tw / s.stride_w;
                if (ow >= s.w_out) continue;
                acc += static_cast<double>(dyp[oh * s.w_out + ow]) * static_cast<double>(wp[i * s.kw + j]);
              }
            }
          }
          dx[((n * s.c_in + c) * s.h + ih) * s.w + iw] = static_cast<T>(acc);
        }
    }
}

template <typename T>
void conv2d_backward_weights_ref(const Conv2dShape& s, const T* x, const T* dy, T* dw, T* dbias) {
  const int64_t cig = s.c_in / s.groups, cog = s.c_out / s.groups;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t co = 0; co < s.c_out; ++co)
    for (int64_t ci = 0; ci < cig; ++ci) {
      const int64_t g = co / cog;
      for (int64_t i = 0; i < s.kh; ++i)
        for (int64_t j = 0; j < s.kw; ++j) {
          double acc = 0.0;
          for (int64_t n = 0; n < s.n; ++n) {
            const T* xp = x + (n * s.c_in + g * cig + ci) * s.h * s.w;
            const T* dyp = dy + (n * s.c_out + co) * s.h_out * s.w_out;
            for (int64_t oh = 0; oh < s.h_out; ++oh) {
              const int64_t ih = oh * s.stride_h - s.pad_h + i * s.dil_h;
              if (ih < 0 || ih >= s.h) continue;
              for (int64_t ow = 0; ow < s.w_out; ++ow) {
                const int64_t iw = ow * s.stride_w - s.pad_w + j * s.dil_w;
                if (iw < 0 || iw >= s.w) continue;
                acc += static_cast<double>(xp[ih * s.w + iw]) * static_cast<double>(dyp[oh * s.w_out + ow]);
              }
            }
          }
          dw[((co * cig + ci) * s.kh + i) * s.kw + j] = static_cast<T>(acc);
        }
    }
  if (dbias) {
#pragma omp parallel for schedule(static)
    for (int64_t co = 0; co < s.c_out; ++co) {
      double acc = 0.0;
      for (int64_t n = 0; n < s.n; ++n) {
        const T* dyp = dy + (n * s.c_out + co) * s.h_out * s.w_out;
        for (int64_t k = 0; k < s.h_out * s.w_out; ++k) acc += static_cast<double>(dyp[k]);
      }
      dbias[co] = static_cast<T>(acc);
    }
  }
}

// --- entries -------------------------------------------------------------------------------------------

void conv2d_forward(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType dt, const void* x, const void* w,
                    const void* bias, void* y, engine::DerivedData* w_derived) {
  if (dt == engine::DType::F32)
    conv2d_forward_onednn(ctx.state<OneDnnState>(), s, static_cast<const float*>(x), static_cast<const float*>(w),
                          static_cast<const float*>(bias), static_cast<float*>(y), /*silu=*/false, w_derived);
  else {
    Y9_CHECK(s.src_block == 0 && s.dst_block == 0, "conv2d_forward: blocked layouts are F32 only");
    conv2d_forward_ref(s, static_cast<const double*>(x), static_cast<const double*>(w),
                       static_cast<const double*>(bias), static_cast<double*>(y));
  }
}

bool conv2d_forward_keep_input(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType /*F32*/,
                               const void* x, const void* w, const void* bias, void* y,
                               engine::DerivedData* w_derived, void* x_kept) {
  return conv2d_forward_onednn(ctx.state<OneDnnState>(), s, static_cast<const float*>(x),
                               static_cast<const float*>(w), static_cast<const float*>(bias), static_cast<float*>(y),
                               /*silu=*/false, w_derived, x_kept);
}

void conv2d_bias_silu_forward(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType dt, const void* x,
                              const void* w, const void* bias, void* y, engine::DerivedData* w_derived) {
  if (dt == engine::DType::F32) {
    conv2d_forward_onednn(ctx.state<OneDnnState>(), s, static_cast<const float*>(x), static_cast<const float*>(w),
                          static_cast<const float*>(bias), static_cast<float*>(y), /*silu=*/true, w_derived);
    return;
  }
  Y9_CHECK(s.src_block == 0 && s.dst_block == 0, "conv2d_bias_silu_forward: blocked layouts are F32 only");
  auto* yd = static_cast<double*>(y);
  conv2d_forward_ref(s, static_cast<const double*>(x), static_cast<const double*>(w),
                     static_cast<const double*>(bias), yd);
  const int64_t n = s.n * s.c_out * s.h_out * s.w_out;
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) yd[i] = yd[i] / (1.0 + std::exp(-yd[i]));
}

void conv2d_backward_data(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType dt, const void* dy,
                          const void* w, void* dx, engine::DerivedData* w_derived) {
  if (dt == engine::DType::F32)
    conv2d_backward_data_onednn(ctx.state<OneDnnState>(), s, static_cast<const float*>(dy),
                                static_cast<const float*>(w), static_cast<float*>(dx), w_derived);
  else {
    Y9_CHECK(s.src_block == 0 && s.dst_block == 0, "conv2d_backward_data: blocked layouts are F32 only");
    conv2d_backward_data_ref(s, static_cast<const double*>(dy), static_cast<const double*>(w),
                             static_cast<double*>(dx));
  }
}

void conv2d_backward_weights(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType dt, const void* x,
                             const void* dy, void* dw, void* dbias) {
  if (dt == engine::DType::F32)
    conv2d_backward_weights_onednn(ctx.state<OneDnnState>(), s, static_cast<const float*>(x),
                                   static_cast<const float*>(dy), static_cast<float*>(dw), static_cast<float*>(dbias));
  else {
    Y9_CHECK(s.src_block == 0 && s.dst_block == 0, "conv2d_backward_weights: blocked layouts are F32 only");
    conv2d_backward_weights_ref(s, static_cast<const double*>(x), static_cast<const double*>(dy),
                                static_cast<double*>(dw), static_cast<double*>(dbias));
  }
}

void conv2d_backward(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType dt, const void* x,
                     const void* dy, const void* w, void* dx, void* dw, void* dbias, engine::DerivedData* w_derived) {
  if (dt != engine::DType::F32) {
    if (dx) conv2d_backward_data(ctx, s, dt, dy, w, dx, w_derived);
    if (dw) conv2d_backward_weights(ctx, s, dt, x, dy, dw, dbias);
    return;
  }
  auto& st = ctx.state<OneDnnState>();
  memory dy_conv;  // dy as backward data read it: BF16 math converts it once for both directions
  if (dx)
    conv2d_backward_data_onednn(st, s, static_cast<const float*>(dy), static_cast<const float*>(w),
                                static_cast<float*>(dx), w_derived, &dy_conv);
  if (dw)
    conv2d_backward_weights_onednn(st, s, static_cast<const float*>(x), static_cast<const float*>(dy),
                                   static_cast<float*>(dw), static_cast<float*>(dbias), &dy_conv);
}

/// kConv2dBf16Math: oneDNN's effective ISA has native BF16.
bool bf16_math(engine::DeviceContext&) {
  static const bool native =
      onednn_isa_has(dnnl::cpu_isa::avx512_core_bf16) || onednn_isa_has(dnnl::cpu_isa::avx512_core_amx);
  return native;
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  b.add(kConv2dBf16Math, &bf16_math, engine::DTypeSet{engine::DType::F32});
  b.add(kConv2dForward, &conv2d_forward, engine::kF32F64);
  b.add(kConv2dBiasSiLUForward, &conv2d_bias_silu_forward, engine::kF32F64);
  b.add(kConv2dBackwardData, &conv2d_backward_data, engine::kF32F64);
  b.add(kConv2dBackwardWeights, &conv2d_backward_weights, engine::kF32F64);
  b.add(kConv2dBackward, &conv2d_backward, engine::kF32F64);
  b.add(kConv2dForwardKeepInput, &conv2d_forward_keep_input, engine::DTypeSet{engine::DType::F32});
}

}  // namespace kernels::cpu
