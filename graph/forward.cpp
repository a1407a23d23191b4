// Forward passes of the YOLOv9 blocks and the whole model on top of ops/ops.h (official
// models/common.py and models/yolo.py forwards; spec shared/spec/model.md sections 2, 3 and 8).
// Kept apart from construction so that code which only builds/counts models links without ops.
// Only shape metadata is read on the host here (anchor grids); never tensor data.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "engine/autograd.h"
#include "engine/error.h"
#include "graph/model.h"
#include "ops/cbfuse.h"
#include "ops/ops.h"
#include "ops/parallel.h"
#include "ops/tal.h"

namespace graph {

namespace {

Tensor apply_act(const Tensor& x, Act act) {
  switch (act) {
    case Act::SiLU: return ops::silu(x);
    case Act::ReLU: return ops::relu(x);
    case Act::Identity: return x;
  }
  return x;
}

/// Whether a block that concatenates its pieces along channels writes them in place, each piece's
/// last op into its channel slice of one buffer (UnaryBlock::forward_into), instead of producing
/// them apart and copying them with ops::concat: in CPU inference (grad mode off) at batch 1, where
/// a channel slice of an NCHW buffer is contiguous, so a fused convolution writes it directly
/// (issue 15 item 3). The values are the same either way (the same kernels; a copy is exact).
bool concat_in_place(const Tensor& x) {
  return !engine::autograd::grad_enabled() && (x.dim() == 4 || ops::is_blocked(x)) && x.size(0) == 1 &&
         x.device().is_cpu();
}

/// The logical [C, H, W] of x (plain or blocked).
Dims dims_of(const Tensor& x) {
  const engine::Shape s = ops::logical_shape(x);
  return Dims{s[1], s[2], s[3]};
}

// --- the blocked layout of the CPU (Model::blocked_forward) ----------------------------------------
// Inside a blocked forward (t_block > 0 on the thread that runs the model), every convolution whose
// output channels are a multiple of the block writes a blocked output; a convolution that reads a
// blocked input does the same on any thread. t_block is per thread: tasks that run parts of the
// forward on other threads (the concurrent head's chains, the overlapped head) set the forward's.
// Blocks convert at their edges what cannot stay blocked: channel splits and concats off block
// boundaries, CBLinear / CBFuse, the head's raw maps. In training the conversions are
// differentiable (ops::to_blocked).

thread_local int64_t t_block = 0;  // the channel block of the blocked forward running here (0: none)
std::atomic<int64_t> g_blocked_forwards{0};
std::atomic<int> g_blocked_on{-1};  // -1: not read from the environment yet
std::atomic<int> g_blocked_train_on{-1};
std::atomic<int> g_winograd_on{-1};
std::atomic<int> g_head_overlap{-1};  // a HeadOverlap; -1: not read from the environment yet
std::atomic<int64_t> g_head_overlaps{0};

/// Sets t_block for a scope (the blocked forward of one model).
class BlockedScope {
 public:
  explicit BlockedScope(int64_t block) : prev_(t_block) { t_block = block; }
  ~BlockedScope() { t_block = prev_; }
  BlockedScope(const BlockedScope&) = delete;
  BlockedScope& operator=(const BlockedScope&) = delete;

 private:
  int64_t prev_;
};

int64_t block_of(const Tensor& x) { return ops::is_blocked(x) ? x.size(4) : 0; }

Tensor as_plain(const Tensor& x) { return ops::from_blocked(x); }

/// The layout of a convolution's output (0: plain, else the block) for c_out channels from x:
/// blocked when x is, or inside a blocked forward, and the block divides c_out.
int64_t conv_out_block(const Tensor& x, int64_t c_out) {
  const int64_t b = ops::is_blocked(x) ? x.size(4) : t_block;
  return b > 0 && c_out % b == 0 ? b : 0;
}

/// The block a concat buffer of x's block uses for pieces of channels `parts`: the block when
/// every piece and every split point `extra` fall on its boundaries, else 0 (plain).
int64_t buffer_block(const Tensor& x, const std::vector<Dims>& parts, std::initializer_list<int64_t> extra = {}) {
  const int64_t b = ops::is_blocked(x) ? x.size(4) : t_block;
  if (b <= 0) return 0;
  for (const Dims& d : parts)
    if (d.c % b != 0) return 0;
  for (int64_t e : extra)
    if (e % b != 0) return 0;
  return b;
}

/// Channels [start, start + len) of x (plain, or blocked with both on block boundaries).
Tensor ch_narrow(const Tensor& x, int64_t start, int64_t len) {
  if (!ops::is_blocked(x)) return x.narrow(1, start, len);
  const int64_t b = x.size(4);
  Y9_CHECK_SHAPE(start % b == 0 && len % b == 0, "channel slice [", start, ", ", start + len, ") of blocked ", x.str(),
                 " is off its block boundaries");
  return x.narrow(1, start / b, len / b);
}

/// ops::chunk(x, 2, 1) on the logical channels: blocked pieces when the halves fall on block
/// boundaries, else plain ones.
std::vector<Tensor> chunk2(const Tensor& x) {
  if (ops::is_blocked(x) && x.size(1) % 2 == 0) return ops::chunk(x, 2, 1);
  return ops::chunk(as_plain(x), 2, 1);
}

/// ops::concat(xs, 1) on the logical channels: blocked when every piece has the same block, else
/// plain (blocked pieces converted).
Tensor cat_channels(const std::vector<Tensor>& xs) {
  bool same = !xs.empty() && ops::is_blocked(xs[0]);
  for (const Tensor& t : xs) same = same && block_of(t) == block_of(xs[0]);
  if (same) return ops::concat(xs, 1);
  std::vector<Tensor> plain;
  for (const Tensor& t : xs) plain.push_back(as_plain(t));
  return ops::concat(plain, 1);
}

/// `a` and `b` in one layout: as they are when their layouts agree, else both plain.
std::pair<Tensor, Tensor> same_layout(const Tensor& a, const Tensor& b) {
  if (block_of(a) == block_of(b)) return {a, b};
  return {as_plain(a), as_plain(b)};
}

/// Copies y into out (a view of y's logical shape), converting y to out's layout.
void copy_into(const Tensor& out, const Tensor& y, const char* who) {
  Y9_CHECK_SHAPE(ops::logical_shape(y) == ops::logical_shape(out), who, "::forward_into: output ", out.str(),
                 " for a result ", y.str());
  const int64_t bo = block_of(out);
  Tensor src = block_of(y) == bo ? y : bo ? ops::to_blocked(as_plain(y), bo) : as_plain(y);
  Tensor(out).copy_(src);
}

/// The output channels and size of block b on an input of dims `in` (the analytic trace; no
/// tensor work).
Dims out_dims(const UnaryBlock& b, const Dims& in) {
  double macs = 0;
  return b.trace1(in, macs);
}

std::atomic<int64_t> g_in_place_concats{0};  // in_place_concats()

/// A batch-1 buffer [1, sum of c, h, w] of x's dtype and device for pieces of dims `parts` (their
/// h, w those of parts[0]; a piece that differs fails in forward_into, as the concat would),
/// blocked by `block` (buffer_block) or plain (0).
Tensor concat_buffer(const Tensor& x, const std::vector<Dims>& parts, int64_t block = 0) {
  g_in_place_concats++;
  int64_t c = 0;
  for (const Dims& d : parts) c += d.c;
  if (block) return Tensor::empty({1, c / block, parts[0].h, parts[0].w, block}, x.dtype(), x.device());
  return Tensor::empty({1, c, parts[0].h, parts[0].w}, x.dtype(), x.device());
}

}  // namespace

int64_t in_place_concats() { return g_in_place_concats.load(); }

namespace {

/// A process-wide switch: `state` once set (1 on, 0 off), else on unless the environment sets `var`
/// to 0 (read on first use).
bool env_switch(std::atomic<int>& state, const char* var) {
  int v = state.load();
  if (v < 0) {
    const char* e = std::getenv(var);
    int expected = -1;
    state.compare_exchange_strong(expected, e && std::strcmp(e, "0") == 0 ? 0 : 1);
    v = state.load();
  }
  return v == 1;
}

}  // namespace

void set_blocked_inference(bool on) { g_blocked_on = on ? 1 : 0; }

bool blocked_inference() { return env_switch(g_blocked_on, "Y9_CPU_BLOCKED"); }

void set_blocked_training(bool on) { g_blocked_train_on = on ? 1 : 0; }

bool blocked_training() { return env_switch(g_blocked_train_on, "Y9_CPU_BLOCKED_TRAIN"); }

int64_t blocked_forwards() { return g_blocked_forwards.load(); }

void set_cpu_winograd(bool on) { g_winograd_on = on ? 1 : 0; }

bool cpu_winograd() { return env_switch(g_winograd_on, "Y9_CPU_WINOGRAD"); }

void set_head_overlap(HeadOverlap mode) { g_head_overlap = static_cast<int>(mode); }

HeadOverlap head_overlap() {
  int v = g_head_overlap.load();
  if (v < 0) {
    const char* e = std::getenv("Y9_CPU_HEAD_OVERLAP");
    const HeadOverlap m = !e                             ? HeadOverlap::Auto
                          : std::strcmp(e, "0") == 0     ? HeadOverlap::Off
                          : std::strcmp(e, "always") == 0 ? HeadOverlap::Always
                                                         : HeadOverlap::Auto;
    int expected = -1;
    g_head_overlap.compare_exchange_strong(expected, static_cast<int>(m));
    v = g_head_overlap.load();
  }
  return static_cast<HeadOverlap>(v);
}

int64_t head_overlaps() { return g_head_overlaps.load(); }

// --- leaves and blocks ------------------------------------------------------------------------------

Tensor Conv2d::forward(const Tensor& x) const {
  const int64_t ob = conv_out_block(x, c2);
  if (ob || ops::is_blocked(x))
    return ops::conv2d_blocked(x, weight, bias, {s, s}, {p, p}, {d, d}, g, false, ob, cpu_winograd());
  return ops::conv2d(x, weight, bias, {s, s}, {p, p}, {d, d}, g);
}

void UnaryBlock::forward_into(const Tensor& x, const Tensor& out) const { copy_into(out, forward(x), type_name().c_str()); }

void Conv2d::forward_into(const Tensor& x, const Tensor& out) const {
  if (!out.is_contiguous()) return UnaryBlock::forward_into(x, out);
  if (ops::is_blocked(x) || ops::is_blocked(out))
    return ops::conv2d_blocked_into(out, x, weight, bias, {s, s}, {p, p}, {d, d}, g, false);
  ops::conv2d_into(out, x, weight, bias, {s, s}, {p, p}, {d, d}, g);
}

void Conv2d::forward_silu_into(const Tensor& x, const Tensor& out) const {
  if (!out.is_contiguous()) return copy_into(out, forward_silu(x), "Conv2d");
  if (ops::is_blocked(x) || ops::is_blocked(out))
    return ops::conv2d_blocked_into(out, x, weight, bias, {s, s}, {p, p}, {d, d}, g, true, cpu_winograd());
  ops::conv2d_silu_into(out, x, weight, bias, {s, s}, {p, p}, {d, d}, g);
}

namespace {

/// num_batches_tracked += 1 on the device (the CPU add_ kernel is float-only: count in F64, exact
/// below 2^53, and convert back).
void count_batch(const Tensor& num_batches_tracked) {
  Tensor count = num_batches_tracked.to(engine::DType::F64);
  count.add_(Tensor::ones({}, engine::DType::F64, count.device()));
  Tensor(num_batches_tracked).copy_(count);
}

}  // namespace

Tensor BatchNorm2d::forward(const Tensor& x) const {
  if (training()) count_batch(num_batches_tracked);
  return ops::batch_norm(x, weight, bias, running_mean, running_var, training(), momentum, eps, sync);
}

Tensor BatchNorm2d::forward_silu(const Tensor& x) const {
  if (training()) count_batch(num_batches_tracked);
  return ops::batch_norm_silu(x, weight, bias, running_mean, running_var, training(), momentum, eps, sync);
}

Tensor Sequential::forward(const Tensor& x) const {
  Tensor y = x;
  for (const auto& b : items) y = b->forward(y);
  return y;
}

void Sequential::forward_into(const Tensor& x, const Tensor& out) const {
  if (items.empty()) return UnaryBlock::forward_into(x, out);
  Tensor y = x;
  for (size_t i = 0; i + 1 < items.size(); ++i) y = items[i]->forward(y);
  items.back()->forward_into(y, out);
}

Tensor Conv2d::forward_silu(const Tensor& x) const {
  const int64_t ob = conv_out_block(x, c2);
  if (ob || ops::is_blocked(x))
    return ops::conv2d_blocked(x, weight, bias, {s, s}, {p, p}, {d, d}, g, true, ob, cpu_winograd());
  return ops::conv2d_silu(x, weight, bias, {s, s}, {p, p}, {d, d}, g);
}

Tensor Conv::forward(const Tensor& x) const {
  if (!bn && act == Act::SiLU) return conv->forward_silu(x);  // fused: one kernel when inferring
  if (bn && act == Act::SiLU) return bn->forward_silu(conv->forward(x));  // fused BN + SiLU
  return apply_act(bn ? bn->forward(conv->forward(x)) : conv->forward(x), act);
}

void Conv::forward_into(const Tensor& x, const Tensor& out) const {
  if (!bn && act == Act::SiLU) return conv->forward_silu_into(x, out);
  if (!bn && act == Act::Identity) return conv->forward_into(x, out);
  UnaryBlock::forward_into(x, out);
}

Tensor RepConvN::forward(const Tensor& x) const {
  if (conv) return act == Act::SiLU ? conv->forward_silu(x) : apply_act(conv->forward(x), act);
  return apply_act(ops::add(conv1->forward(x), conv2->forward(x)), act);
}

void RepConvN::forward_into(const Tensor& x, const Tensor& out) const {
  if (conv && act == Act::SiLU) return conv->forward_silu_into(x, out);
  UnaryBlock::forward_into(x, out);
}

Tensor RepNBottleneck::forward(const Tensor& x) const {
  Tensor y = cv2->forward(cv1->forward(x));
  if (!add) return y;
  const auto [a, b] = same_layout(x, y);
  return ops::add(a, b);
}

Tensor RepNCSP::forward(const Tensor& x) const {
  if (concat_in_place(x)) {
    const Tensor h = cv1->forward(x);
    const Dims a = out_dims(*m, dims_of(h)), b = out_dims(*cv2, dims_of(x));
    const Tensor buf = concat_buffer(x, {a, b}, buffer_block(x, {a, b}));
    m->forward_into(h, ch_narrow(buf, 0, a.c));
    cv2->forward_into(x, ch_narrow(buf, a.c, b.c));
    return cv3->forward(buf);
  }
  return cv3->forward(cat_channels({m->forward(cv1->forward(x)), cv2->forward(x)}));
}

namespace {

/// The forward of RepNCSPELAN4 / ELAN1 (same dataflow): cv4(cat(chunk(cv1(x), 2), y2 = cv2(y1),
/// cv3(y2))), the pieces written in place into one buffer when concat_in_place(x).
template <typename Cv1, typename Cv2, typename Cv4>
Tensor elan_forward(const Tensor& x, const Cv1& cv1, const Cv2& cv2, const Cv2& cv3, const Cv4& cv4) {
  if (concat_in_place(x)) {
    const Dims a = out_dims(cv1, dims_of(x));
    const int64_t step = (a.c + 1) / 2;  // ops::chunk(., 2): pieces of ceil(c / 2) and the rest
    const Dims b = out_dims(cv2, Dims{a.c - step, a.h, a.w});
    const Dims c = out_dims(cv3, b);
    const Tensor buf = concat_buffer(x, {a, b, c}, buffer_block(x, {a, b, c}, {step}));
    const Tensor y01 = ch_narrow(buf, 0, a.c), y2 = ch_narrow(buf, a.c, b.c), y3 = ch_narrow(buf, a.c + b.c, c.c);
    cv1.forward_into(x, y01);
    cv2.forward_into(ch_narrow(y01, step, a.c - step), y2);
    cv3.forward_into(y2, y3);
    return cv4.forward(buf);
  }
  auto y = chunk2(cv1.forward(x));
  Tensor y2 = cv2.forward(y[1]);
  Tensor y3 = cv3.forward(y2);
  return cv4.forward(cat_channels({y[0], y[1], y2, y3}));
}

}  // namespace

Tensor RepNCSPELAN4::forward(const Tensor& x) const { return elan_forward(x, *cv1, *cv2, *cv3, *cv4); }

Tensor ELAN1::forward(const Tensor& x) const { return elan_forward(x, *cv1, *cv2, *cv3, *cv4); }

Tensor AConv::forward(const Tensor& x) const { return cv1->forward(ops::avg_pool2d(x, 2, 1, 0)); }

Tensor ADown::forward(const Tensor& x) const {
  auto h = chunk2(ops::avg_pool2d(x, 2, 1, 0));
  if (concat_in_place(x)) {
    const Tensor p = ops::max_pool2d(h[1], 3, 2, 1);
    const Dims a = out_dims(*cv1, dims_of(h[0])), b = out_dims(*cv2, dims_of(p));
    const Tensor buf = concat_buffer(x, {a, b}, buffer_block(x, {a, b}));
    cv1->forward_into(h[0], ch_narrow(buf, 0, a.c));
    cv2->forward_into(p, ch_narrow(buf, a.c, b.c));
    return buf;
  }
  Tensor x1 = cv1->forward(h[0]);
  Tensor x2 = cv2->forward(ops::max_pool2d(h[1], 3, 2, 1));
  return cat_channels({x1, x2});
}

Tensor SP::forward(const Tensor& x) const { return ops::max_pool2d(x, k, s, k / 2); }

Tensor SPPELAN::forward(const Tensor& x) const {
  if (concat_in_place(x)) {
    const Dims a = out_dims(*cv1, dims_of(x)), b = out_dims(*cv2, a), c = out_dims(*cv3, b), d = out_dims(*cv4, c);
    const Tensor buf = concat_buffer(x, {a, b, c, d}, buffer_block(x, {a, b, c, d}));
    const Tensor y0 = ch_narrow(buf, 0, a.c), y1 = ch_narrow(buf, a.c, b.c), y2 = ch_narrow(buf, a.c + b.c, c.c);
    cv1->forward_into(x, y0);
    cv2->forward_into(y0, y1);
    cv3->forward_into(y1, y2);
    cv4->forward_into(y2, ch_narrow(buf, a.c + b.c + c.c, d.c));
    return cv5->forward(buf);
  }
  Tensor y0 = cv1->forward(x);
  Tensor y1 = cv2->forward(y0);
  Tensor y2 = cv3->forward(y1);
  Tensor y3 = cv4->forward(y2);
  return cv5->forward(cat_channels({y0, y1, y2, y3}));
}

Tensor Concat::forward(const std::vector<Tensor>& xs) const {
  bool blocked = false;
  for (const Tensor& t : xs) blocked = blocked || ops::is_blocked(t);
  if (!blocked) return ops::concat(xs, d);
  if (d == 1 || d == -3) return cat_channels(xs);
  std::vector<Tensor> plain;
  for (const Tensor& t : xs) plain.push_back(as_plain(t));
  return ops::concat(plain, d);
}

Tensor Upsample::forward(const Tensor& x) const { return ops::upsample_nearest(x, scale); }

std::vector<Tensor> CBLinear::forward(const Tensor& x) const {
  return ops::split(as_plain(conv->forward(x)), c2s, 1);
}

Tensor CBFuse::forward(const std::vector<std::vector<Tensor>>& routed, const Tensor& x) const {
  Y9_CHECK_SHAPE(routed.size() == idx.size(), "CBFuse: ", routed.size(), " routed inputs for ", idx.size(), " indices");
  const int64_t h = x.size(2), w = x.size(3);
  std::vector<Tensor> pieces;
  for (size_t i = 0; i < routed.size(); ++i) {
    const Tensor piece = as_plain(routed[i].at(static_cast<size_t>(idx[i])));
    const int64_t ph = piece.size(2), pw = piece.size(3);
    Y9_CHECK_SHAPE(h % ph == 0 && w % pw == 0 && h / ph == w / pw, "CBFuse: cannot resize ", engine::shape_str(piece.shape()),
                   " to ", h, "x", w, " by one integer factor");
    pieces.push_back(piece);
  }
  // F.interpolate(mode='nearest') with an integer factor is pure replication; ops::cbfuse sums the
  // replicated pieces and x in one kernel, in torch.sum(stack(res + [x]))'s order: pieces first, x
  // last (bitwise the chain of upsample_nearest and add it replaces).
  return ops::cbfuse(pieces, as_plain(x));
}

Tensor DFL::forward(const Tensor& x) const {
  const int64_t b = x.size(0), a = x.size(2);
  Tensor p = ops::softmax(x.view({b, 4, c1, a}).transpose(2, 1), 1);  // [b, 16, 4, a]
  return conv->forward(p).view({b, 4, a});
}

std::vector<Tensor> Block::run(const std::vector<std::vector<Tensor>>&) const {
  Y9_THROW(engine::InternalError, type_name(), " has no single-output forward (detection heads run through "
           "Detect::forward)");
}

std::vector<Tensor> Concat::run(const std::vector<std::vector<Tensor>>& in) const {
  std::vector<Tensor> xs;
  for (const auto& v : in) xs.push_back(v.at(0));
  return {forward(xs)};
}

std::vector<Tensor> CBFuse::run(const std::vector<std::vector<Tensor>>& in) const {
  std::vector<std::vector<Tensor>> routed(in.begin(), in.end() - 1);
  return {forward(routed, in.back().at(0))};
}

// --- detection head ------------------------------------------------------------------------------------

std::vector<int64_t> Detect::chain_order() const {
  std::vector<int64_t> order;
  for (int64_t l = 0; l < nl; ++l)
    for (int b = 0; b < branches; ++b) {
      order.push_back(2 * (b * nl + l) + 1);  // class chain (the wider) first
      order.push_back(2 * (b * nl + l));
    }
  return order;
}

double Detect::inter_op_speedup(const std::vector<Tensor>& xs, int threads) const {
  Y9_CHECK_SHAPE(static_cast<int64_t>(xs.size()) == nl * branches, type_name(), ": ", xs.size(), " inputs, expected ",
                 nl * branches);
  if (threads < 1) return 1.0;
  std::vector<double> load(static_cast<size_t>(threads), 0.0);
  double total = 0.0;
  for (int64_t k : chain_order()) {
    const Tensor& x = xs[static_cast<size_t>(k / 2)];
    Y9_CHECK_SHAPE(x.dim() == 4 || ops::is_blocked(x), type_name(), ": input ", k / 2, " is not [B, C, H, W]");
    const auto b = static_cast<size_t>(k / 2 / nl), l = static_cast<size_t>(k / 2 % nl);
    double macs = 0.0;
    (k % 2 ? cls_seq : box_seq)[b][l]->trace1(dims_of(x), macs);
    macs *= static_cast<double>(x.size(0));
    *std::min_element(load.begin(), load.end()) += macs;  // the thread that frees first takes it
    total += macs;
  }
  const double makespan = *std::max_element(load.begin(), load.end());
  return makespan > 0 ? total / makespan : 1.0;
}

bool Detect::inter_op(const std::vector<Tensor>& xs) const {
  if (training() || static_cast<int64_t>(xs.size()) != nl * branches || !xs[0].device().is_cpu() ||
      engine::autograd::grad_enabled())
    return false;
  for (const Tensor& x : xs)
    if (x.dim() != 4 && !ops::is_blocked(x)) return false;
  const int threads = ops::concurrent_threads();
  if (threads < 2) return false;
  const Tensor& x = xs[0];  // the largest level
  const bool small = x.size(0) * x.size(2) * x.size(3) <= kInterOpMaxPixels;
  const double speedup = inter_op_speedup(xs, threads);
  return small ? speedup > 1.2 : speedup >= kInterOpMinSpeedup * threads;
}

Detect::LevelBuffers Detect::level_buffers(size_t i, const Tensor& x) const {
  const auto bi = i / static_cast<size_t>(nl), li = i % static_cast<size_t>(nl);
  const Dims a = out_dims(*box_seq[bi][li], dims_of(x)), c = out_dims(*cls_seq[bi][li], dims_of(x));
  LevelBuffers r;
  r.raw = concat_buffer(x, {a, c}, buffer_block(x, {a, c}));
  r.box = ch_narrow(r.raw, 0, a.c);
  r.cls = ch_narrow(r.raw, a.c, c.c);
  return r;
}

const Sequential& Detect::chain(int64_t k) const {
  const auto bi = static_cast<size_t>(k / 2 / nl), li = static_cast<size_t>(k / 2 % nl);
  return k % 2 ? *cls_seq[bi][li] : *box_seq[bi][li];
}

HeadOutput Detect::forward(const std::vector<Tensor>& xs) const {
  Y9_CHECK_SHAPE(static_cast<int64_t>(xs.size()) == nl * branches, type_name(), ": ", xs.size(), " inputs, expected ",
                 nl * branches);
  // Batch-1 inference: each level's chains write their outputs into its raw map in place.
  bool in_place = true;
  for (const Tensor& x : xs) in_place = in_place && concat_in_place(x);
  const size_t n = xs.size();
  std::vector<Tensor> box_out(n), cls_out(n), raws(n);
  if (in_place)
    for (size_t i = 0; i < n; ++i) {
      LevelBuffers b = level_buffers(i, xs[i]);
      raws[i] = std::move(b.raw);
      box_out[i] = std::move(b.box);
      cls_out[i] = std::move(b.cls);
    }
  if (inter_op(xs)) {
    // The 2 x branches x nl conv chains are independent: run them concurrently, one per thread,
    // largest level first (dynamic schedule), class chain (the wider) before box chain.
    // Each task runs in the caller's blocked scope: a chain on a plain input (a level whose
    // channels are off the block) lays out its convolutions' outputs by t_block, which is per thread.
    std::vector<std::function<void()>> tasks;
    const int64_t tb = t_block;
    for (int64_t k : chain_order()) {
      const auto i = static_cast<size_t>(k / 2);
      Tensor* o = k % 2 ? &cls_out[i] : &box_out[i];
      const Sequential* ch = &chain(k);
      tasks.emplace_back([&xs, i, in_place, o, ch, tb] {
        BlockedScope task_scope(tb);
        if (in_place)
          ch->forward_into(xs[i], *o);
        else
          *o = ch->forward(xs[i]);
      });
    }
    ops::run_concurrently(tasks);
    if (!in_place)
      for (size_t i = 0; i < n; ++i) raws[i] = cat_channels({box_out[i], cls_out[i]});
  } else if (in_place) {
    for (size_t i = 0; i < n; ++i) {
      const auto bi = i / static_cast<size_t>(nl), li = i % static_cast<size_t>(nl);
      box_seq[bi][li]->forward_into(xs[i], box_out[i]);
      cls_seq[bi][li]->forward_into(xs[i], cls_out[i]);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const auto bi = i / static_cast<size_t>(nl), li = i % static_cast<size_t>(nl);
      raws[i] = cat_channels({box_seq[bi][li]->forward(xs[i]), cls_seq[bi][li]->forward(xs[i])});
    }
  }
  return finish(raws, xs[0]);
}

HeadOutput Detect::finish(const std::vector<Tensor>& raws, const Tensor& x0) const {
  Y9_CHECK_SHAPE(static_cast<int64_t>(raws.size()) == nl * branches, type_name(), ": ", raws.size(),
                 " raw maps, expected ", nl * branches);
  HeadOutput out;
  out.raw.resize(static_cast<size_t>(branches));
  // The raw maps leave the head plain NCHW (the loss and the decode below read them so).
  for (size_t i = 0; i < raws.size(); ++i) out.raw[i / static_cast<size_t>(nl)].push_back(as_plain(raws[i]));
  if (training()) return out;
  // Anchors and strides come from branch 0's level shapes (identical for every branch), as
  // [1, 2, A] and [1, 1, A] (official make_anchors(feats, strides, 0.5), transposed).
  std::vector<std::pair<int64_t, int64_t>> level_hw;
  for (const Tensor& r : out.raw[0]) level_hw.emplace_back(r.size(2), r.size(3));
  const ops::Anchors anc = ops::make_anchors(level_hw, stride, engine::DType::F32, 0.5, x0.device());
  const Tensor anchors = anc.points.transpose(0, 1).unsqueeze(0).contiguous();
  const Tensor strides = anc.strides.transpose(0, 1).unsqueeze(0).contiguous();
  const int64_t bsz = x0.size(0);
  for (int b = 0; b < branches; ++b) {
    std::vector<Tensor> flat;
    for (const Tensor& r : out.raw[static_cast<size_t>(b)]) flat.push_back(r.reshape({bsz, no, -1}));
    auto parts = ops::split(ops::concat(flat, 2), {reg_max * 4, nc}, 1);
    Tensor dist = dfl[static_cast<size_t>(b)]->forward(parts[0]);  // [B, 4, A] (l, t, r, b)
    auto lr = ops::split(dist, {2, 2}, 1);
    Tensor x1y1 = ops::sub(anchors, lr[0]);
    Tensor x2y2 = ops::add(anchors, lr[1]);
    Tensor cxy = ops::mul_scalar(ops::add(x1y1, x2y2), 0.5);  // (x1y1 + x2y2) / 2, exact
    Tensor wh = ops::sub(x2y2, x1y1);
    Tensor dbox = ops::mul(ops::concat({cxy, wh}, 1), strides);
    out.decoded.push_back(ops::concat({dbox, ops::sigmoid(parts[1])}, 1));
  }
  return out;
}

// --- model ------------------------------------------------------------------------------------------

ModelOutput Model::forward(const Tensor& x) { return forward_impl(x, nullptr); }

bool Model::blocked_forward(const Tensor& x) const {
  if (!x.defined() || !x.device().is_cpu() || x.dtype() != engine::DType::F32 || ops::channel_block(x.device()) == 0)
    return false;
  if (engine::autograd::grad_enabled() || training()) return blocked_training();
  return blocked_inference();
}

ModelOutput Model::forward(const Tensor& x, const LayerObserver& observe) {
  return forward_impl(x, observe ? &observe : nullptr);
}

bool Model::overlap_head(const Tensor& x) const {
  // Exactly 2 threads: the layers after the head's first input run on one thread, so with more
  // threads the rest would idle (and the split was measured on 2 cores only).
  const HeadOverlap mode = head_overlap();
  if (mode == HeadOverlap::Off || training() || engine::autograd::grad_enabled() || !x.device().is_cpu() ||
      x.size(0) != 1 || ops::concurrent_threads() != 2 || head_->stride.empty() || head_->stride[0] <= 0)
    return false;
  // The head's chains run concurrently only on small maps (Detect::inter_op): its largest level
  // has at most kInterOpMaxPixels cells.
  const auto cells = [&](int64_t side) { return static_cast<int64_t>(std::ceil(double(side) / head_->stride[0])); };
  if (cells(x.size(2)) * cells(x.size(3)) > Detect::kInterOpMaxPixels) return false;
  // The head is the last layer and reads saved outputs of earlier layers.
  const LayerSpec& H = cfg_.layers.back();
  if (layers_.back().get() != head_) return false;
  for (int f : H.from_abs)
    if (f < 0 || static_cast<size_t>(f) + 1 >= layers_.size()) return false;
  return mode == HeadOverlap::Always || light_tail(x.size(2), x.size(3));
}

bool Model::light_tail(int64_t img_h, int64_t img_w) const {
  TailCache& c = *tail_cache_;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (auto it = c.light.find({img_h, img_w}); it != c.light.end()) return it->second;
  }
  const std::vector<int>& from = cfg_.layers.back().from_abs;
  const size_t first = static_cast<size_t>(*std::min_element(from.begin(), from.end()));
  bool light = false;
  try {
    std::vector<double> macs;
    trace(img_h, img_w, nullptr, &macs);
    double tail = 0;
    for (size_t i = first + 1; i + 1 < macs.size(); ++i) tail += macs[i];
    light = macs.back() > 0 && tail <= kOverlapMaxTailShare * macs.back();  // the head is the last layer
  } catch (const engine::ShapeError&) {  // the forward reports the sizes it cannot take
    light = false;
  }
  std::lock_guard<std::mutex> lock(c.mu);
  c.light[{img_h, img_w}] = light;
  return light;
}

namespace {

/// A pause in a spin-wait loop.
inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

ModelOutput Model::forward_impl(const Tensor& x, const LayerObserver* observe) {
  Y9_CHECK_SHAPE(x.dim() == 4 && x.size(1) == cfg_.ch_in, "Model::forward: expected [B, ", cfg_.ch_in,
                 ", H, W], got ", engine::shape_str(x.shape()));
  // The blocked layout (blocked_forward): convolutions write blocked outputs from here on; the
  // observed forward stays plain (its observers read NCHW maps).
  const int64_t block = !observe && blocked_forward(x) ? ops::channel_block(x.device()) : 0;
  BlockedScope scope(block);
  if (block) g_blocked_forwards++;
  std::vector<std::vector<Tensor>> saved(layers_.size());
  std::vector<Tensor> prev{x};
  // Layer i's inputs: the image, the previous layer's output or a saved one.
  const auto inputs_of = [&](size_t i) {
    std::vector<std::vector<Tensor>> in;
    for (int f : cfg_.layers[i].from_abs) {
      if (f < 0) in.push_back({x});
      else if (static_cast<size_t>(f) + 1 == i) in.push_back(prev);
      else in.push_back(saved[static_cast<size_t>(f)]);
    }
    return in;
  };
  const auto run_layer = [&](size_t i) {
    std::vector<Tensor> y = layers_[i]->run(inputs_of(i));
    if (observe) (*observe)(static_cast<int64_t>(i), *layers_[i], y);
    if (keep_[i]) saved[i] = y;
    prev = std::move(y);
  };
  if (!observe && overlap_head(x)) {
    // Layers up to the head's first input as usual; then the calling thread computes the rest of
    // the layers while the head's chains start, level by level, as their inputs appear.
    const std::vector<int>& from = cfg_.layers.back().from_abs;
    const size_t head_i = layers_.size() - 1, first = static_cast<size_t>(*std::min_element(from.begin(), from.end()));
    for (size_t i = 0; i <= first; ++i) run_layer(i);
    const size_t n = from.size();
    std::vector<Tensor> xs(n);
    std::vector<Detect::LevelBuffers> bufs(n);
    std::vector<std::atomic<int>> ready(n);  // 0: not yet, 1: xs[j] and bufs[j] set, -1: failed
    for (auto& r : ready) r.store(0);
    // Input j's map and raw buffer, once layer `layer` (the last one run, or a saved one) is done.
    const auto publish = [&](size_t layer) {
      for (size_t j = 0; j < n; ++j)
        if (static_cast<size_t>(from[j]) == layer) {
          xs[j] = (keep_[layer] ? saved[layer] : prev).at(0);
          bufs[j] = head_->level_buffers(j, xs[j]);
          ready[j].store(1, std::memory_order_release);
        }
    };
    for (size_t l = 0; l < first; ++l)
      if (keep_[l]) publish(l);
    publish(first);
    // The chains in the order their inputs appear (chain_order within a layer): a dual head lists
    // its auxiliary levels, computed last, first.
    std::vector<int64_t> order = head_->chain_order();
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return from[static_cast<size_t>(a / 2)] < from[static_cast<size_t>(b / 2)]; });
    std::atomic<size_t> next{0};
    // Takes the next chain (in `order`) until none is left, waiting for its input; in the blocked
    // scope of the forward (t_block is per thread; a chain on a plain input lays out by it).
    const auto chains = [&] {
      BlockedScope task_scope(block);
      for (size_t t; (t = next.fetch_add(1)) < order.size();) {
        const int64_t k = order[t];
        const auto j = static_cast<size_t>(k / 2);
        int r;
        while ((r = ready[j].load(std::memory_order_acquire)) == 0) spin_pause();
        if (r < 0) return;  // the layers failed: their error is rethrown
        head_->chain(k).forward_into(xs[j], k % 2 ? bufs[j].cls : bufs[j].box);
      }
    };
    ops::run_concurrently({[&] {
                             BlockedScope task_scope(block);  // this task may run on another thread
                             try {
                               for (size_t i = first + 1; i < head_i; ++i) {
                                 run_layer(i);
                                 publish(i);
                               }
                             } catch (...) {
                               for (auto& r : ready) {
                                 int expected = 0;
                                 r.compare_exchange_strong(expected, -1);
                               }
                               throw;
                             }
                             chains();
                           },
                           chains});
    g_head_overlaps++;
    std::vector<Tensor> raws(n);
    for (size_t j = 0; j < n; ++j) raws[j] = bufs[j].raw;
    return head_->finish(raws, xs[0]);
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i].get() == head_) {
      std::vector<Tensor> xs;
      for (auto& v : inputs_of(i)) xs.push_back(v.at(0));
      return head_->forward(xs);
    }
    run_layer(i);
  }
  Y9_THROW(engine::InternalError, "Model::forward: no detection head reached");
}

}  // namespace graph
