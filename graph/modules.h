// The YOLOv9 building blocks (official models/common.py and models/yolo.py of WongKinYiu/yolov9,
// commit 5b1ea9a; spec: shared/spec/model.md section 2). Constructors create the parameters with
// their official names and shapes (values are set by graph::init_weights); trace() computes
// output sizes and multiply-accumulates analytically; forward() is defined in
// graph/forward.cpp on top of ops/ops.h. All tensors are NCHW float32.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/module.h"
#include "kernels/common/batch_norm.h"

namespace graph {

/// Activation applied by Conv / RepConvN. The official default is SiLU; a model YAML's
/// `activation: nn.ReLU()` replaces it (models/yolo.py: parse_model).
enum class Act { SiLU, ReLU, Identity };

/// Parses an official `activation:` value ("nn.SiLU()", "nn.ReLU()", "nn.Identity()"); empty
/// text means SiLU. Throws engine::ConfigError for anything else (e.g. nn.LeakyReLU(0.1), which
/// the ops layer does not provide).
Act parse_activation(const std::string& text, const std::string& source);

/// The layer interface of a model row: a block that maps the outputs of its `from` layers to
/// one output (a list of pieces for CBLinear). trace() is the analytic shape/MAC pass.
class Block : public Module {
 public:
  /// in[k] = output dims of the k-th `from` entry (several pieces for a CBLinear output).
  /// Returns the output dims (pieces for CBLinear; the raw head maps for detection heads).
  virtual std::vector<Dims> trace(const std::vector<std::vector<Dims>>& in, double& macs) const = 0;
  /// The row's forward pass: in[k] = the outputs of the k-th `from` entry (one tensor, or the
  /// pieces of a CBLinear) -> this row's outputs (one tensor, or pieces for CBLinear). Dispatched
  /// by a virtual call (graph/forward.cpp). Detection heads return HeadOutput through
  /// Detect::forward instead; calling run on one throws engine::InternalError.
  virtual std::vector<Tensor> run(const std::vector<std::vector<Tensor>>& in) const;
};

/// Row blocks with one tensor in and one out.
class UnaryBlock : public Block {
 public:
  std::vector<Dims> trace(const std::vector<std::vector<Dims>>& in, double& macs) const override {
    return {trace1(in.at(0).at(0), macs)};
  }
  virtual Dims trace1(const Dims& in, double& macs) const = 0;
  /// The block's forward pass: x [N, C, H, W] -> [N, C', H', W'] (graph/forward.cpp).
  virtual Tensor forward(const Tensor& x) const = 0;
  /// forward(x) written into `out`, a view of forward(x)'s shape, dtype and device (a channel slice
  /// of a concat buffer: the blocks that concatenate write their pieces in place at batch 1 in
  /// inference, see concat_in_place in graph/forward.cpp). Inference only: nothing is recorded
  /// for autograd. This default copies forward(x) into out (Tensor::copy_); a fused Conv, RepConvN
  /// and Conv2d write a contiguous out directly (ops::conv2d_silu_into, ops::conv2d_into), and
  /// Sequential passes out to its last block. Same values either way. Throws forward's errors and
  /// engine::ShapeError when out's shape differs.
  virtual void forward_into(const Tensor& x, const Tensor& out) const;
  std::vector<Tensor> run(const std::vector<std::vector<Tensor>>& in) const override {
    return {forward(in.at(0).at(0))};
  }
};

/// How many concat buffers the blocks filled in place so far (process-wide; see
/// UnaryBlock::forward_into): tests and benchmarks check that the in-place path ran.
int64_t in_place_concats();

/// nn.Sequential of one-in-one-out blocks, children named 0..n-1 (also the n > 1 repeat of a row).
class Sequential : public UnaryBlock {
 public:
  std::string type_name() const override { return "Sequential"; }
  Dims trace1(const Dims& in, double& macs) const override;
  Tensor forward(const Tensor& x) const override;
  void forward_into(const Tensor& x, const Tensor& out) const override;
  void add(std::shared_ptr<UnaryBlock> b) {
    items.push_back(b);
    register_module(std::to_string(items.size() - 1), b);
  }
  std::vector<std::shared_ptr<UnaryBlock>> items;
};

// --- leaves --------------------------------------------------------------------------------------

/// nn.Conv2d: weight [c2, c1/groups, k, k], optional bias [c2].
class Conv2d : public UnaryBlock {
 public:
  Conv2d(int64_t c1, int64_t c2, int64_t k, int64_t s, int64_t p, int64_t g, int64_t d, bool bias,
         bool trainable = true);
  std::string type_name() const override { return "Conv2d"; }
  /// x [N, c1, H, W] -> [N, c2, Ho, Wo], Ho = (H + 2p - d(k-1) - 1)/s + 1.
  Tensor forward(const Tensor& x) const override;
  /// silu(forward(x)) (ops::conv2d_silu: one fused kernel when no gradient is needed); the
  /// forward of a fused Conv / RepConvN with the SiLU activation.
  Tensor forward_silu(const Tensor& x) const;
  void forward_into(const Tensor& x, const Tensor& out) const override;
  /// forward_silu(x) written into out (as forward_into).
  void forward_silu_into(const Tensor& x, const Tensor& out) const;
  /// Output dims; adds c2 * Ho * Wo * (c1/g) * k * k to `macs`.
  Dims trace1(const Dims& in, double& macs) const override;
  /// Sets the bias to `b` [c2] (copied), registering the parameter "bias" (trainable like the
  /// weight) when the conv had none. Used by the inference fusions.
  void set_bias(const Tensor& b);
  int64_t c1, c2, k, s, p, g, d;
  Tensor weight, bias;  ///< bias undefined when absent
};

/// nn.BatchNorm2d with the official overrides eps = 1e-3, momentum = 0.03 (initialize_weights).
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t c);
  std::string type_name() const override { return "BatchNorm2d"; }
  /// Training mode: batch statistics, updates running stats and num_batches_tracked in place.
  Tensor forward(const Tensor& x) const;
  /// silu(forward(x)) through ops::batch_norm_silu (fused where the backend has it: the same bits,
  /// without keeping the normalised x for the backward).
  Tensor forward_silu(const Tensor& x) const;
  int64_t c;
  double eps = 1e-3, momentum = 0.03;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  /// Synchronised BatchNorm across data-parallel ranks (--sync-bn; Model::set_batchnorm_sync);
  /// nullptr: this batch only. Not owned.
  const kernels::BatchNormSync* sync = nullptr;
};

// --- blocks (spec section 2) -----------------------------------------------------------------------

/// Conv(c1, c2, k=1, s=1, p=None, g=1, d=1, act): act(bn(conv(x))), conv without bias, autopad.
class Conv : public UnaryBlock {
 public:
  /// p < 0 means autopad: (d*(k-1)+1)/2.
  Conv(int64_t c1, int64_t c2, int64_t k = 1, int64_t s = 1, int64_t p = -1, int64_t g = 1, int64_t d = 1,
       Act act = Act::SiLU);
  std::string type_name() const override { return "Conv"; }
  /// act(bn(conv(x))); after fuse() act(conv(x) + bias).
  Tensor forward(const Tensor& x) const override;
  void forward_into(const Tensor& x, const Tensor& out) const override;
  Dims trace1(const Dims& in, double& macs) const override { return conv->trace1(in, macs); }
  /// Folds the BN into the conv (official utils/torch_utils.py: fuse_conv_and_bn; spec 6.1):
  /// W' = W * gamma/sqrt(var+eps) per output channel, b' = beta - gamma*mean/sqrt(var+eps),
  /// computed in double and stored in the conv's dtype; removes the child "bn" so the state
  /// names become conv.weight, conv.bias. No-op when already fused.
  void fuse();
  std::shared_ptr<Conv2d> conv;
  std::shared_ptr<BatchNorm2d> bn;  ///< null after fuse()
  Act act;
};

/// RepConvN(c1, c2, 3, s): act(Conv3x3_noact(x) + Conv1x1_noact(x)); names conv1, conv2.
class RepConvN : public UnaryBlock {
 public:
  RepConvN(int64_t c1, int64_t c2, int64_t s = 1, int64_t g = 1, Act act = Act::SiLU);
  std::string type_name() const override { return "RepConvN"; }
  /// act(conv1(x) + conv2(x)); after fuse() act(conv(x)).
  Tensor forward(const Tensor& x) const override;
  void forward_into(const Tensor& x, const Tensor& out) const override;
  Dims trace1(const Dims& in, double& macs) const override;
  /// Folds both branches into one 3x3 conv with bias (official RepConvN.fuse_convs /
  /// get_equivalent_kernel_bias; spec 6.2): each branch BN-folded as in Conv::fuse, the 1x1
  /// kernel zero-padded to 3x3 at the centre tap, kernels and biases added. Registers the child
  /// "conv" and removes conv1/conv2. No-op when already fused.
  void fuse();
  std::shared_ptr<Conv> conv1, conv2;  ///< null after fuse()
  std::shared_ptr<Conv2d> conv;        ///< the fused 3x3 conv (null before fuse())
  Act act;
};

/// RepNBottleneck(c1, c2, shortcut, g, e): x + cv2(cv1(x)) when shortcut and c1 == c2.
class RepNBottleneck : public UnaryBlock {
 public:
  RepNBottleneck(int64_t c1, int64_t c2, bool shortcut, double e, Act act);
  std::string type_name() const override { return "RepNBottleneck"; }
  Tensor forward(const Tensor& x) const override;
  Dims trace1(const Dims& in, double& macs) const override;
  std::shared_ptr<RepConvN> cv1;
  std::shared_ptr<Conv> cv2;
  bool add;
};

/// RepNCSP(c1, c2, n): cv3(cat(m(cv1(x)), cv2(x))), hidden c_ = int(c2 * 0.5).
class RepNCSP : public UnaryBlock {
 public:
  RepNCSP(int64_t c1, int64_t c2, int64_t n, Act act);
  std::string type_name() const override { return "RepNCSP"; }
  Tensor forward(const Tensor& x) const override;
  Dims trace1(const Dims& in, double& macs) const override;
  std::shared_ptr<Conv> cv1, cv2, cv3;
  std::shared_ptr<Sequential> m;  ///< n x RepNBottleneck
};

/// RepNCSPELAN4(c1, c2, c3, c4, c5): GELAN block (spec 2.7).
class RepNCSPELAN4 : public UnaryBlock {
 public:
  RepNCSPELAN4(int64_t c1, int64_t c2, int64_t c3, int64_t c4, int64_t c5, Act act);
  std::string type_name() const override { return "RepNCSPELAN4"; }
  Dims trace1(const Dims& in, double& macs) const override;
  Tensor forward(const Tensor& x) const override;
  int64_t c;  ///< c3 / 2
  std::shared_ptr<Conv> cv1, cv4;
  std::shared_ptr<Sequential> cv2, cv3;  ///< Sequential(RepNCSP, Conv)
};

/// ELAN1(c1, c2, c3, c4) (spec 2.8).
class ELAN1 : public UnaryBlock {
 public:
  ELAN1(int64_t c1, int64_t c2, int64_t c3, int64_t c4, Act act);
  std::string type_name() const override { return "ELAN1"; }
  Dims trace1(const Dims& in, double& macs) const override;
  Tensor forward(const Tensor& x) const override;
  int64_t c;
  std::shared_ptr<Conv> cv1, cv2, cv3, cv4;
};

/// AConv(c1, c2): Conv(c1, c2, 3, 2, 1)(avgpool2x2_s1(x)) (spec 2.2).
class AConv : public UnaryBlock {
 public:
  AConv(int64_t c1, int64_t c2, Act act);
  std::string type_name() const override { return "AConv"; }
  Dims trace1(const Dims& in, double& macs) const override;
  Tensor forward(const Tensor& x) const override;
  std::shared_ptr<Conv> cv1;
};

/// ADown(c1, c2) (spec 2.3).
class ADown : public UnaryBlock {
 public:
  ADown(int64_t c1, int64_t c2, Act act);
  std::string type_name() const override { return "ADown"; }
  Dims trace1(const Dims& in, double& macs) const override;
  Tensor forward(const Tensor& x) const override;
  int64_t c;  ///< c2 / 2
  std::shared_ptr<Conv> cv1, cv2;
};

/// SP(k=5, s=1): max pooling with padding k/2 (no parameters; holds an nn.MaxPool2d officially).
class SP : public UnaryBlock {
 public:
  explicit SP(int64_t k = 5, int64_t s = 1) : k(k), s(s) {}
  std::string type_name() const override { return "SP"; }
  Dims trace1(const Dims& in, double&) const override {
    return {in.c, (in.h + 2 * (k / 2) - k) / s + 1, (in.w + 2 * (k / 2) - k) / s + 1};
  }
  Tensor forward(const Tensor& x) const override;
  int64_t k, s;
};

/// SPPELAN(c1, c2, c3) (spec 2.9).
class SPPELAN : public UnaryBlock {
 public:
  SPPELAN(int64_t c1, int64_t c2, int64_t c3, Act act);
  std::string type_name() const override { return "SPPELAN"; }
  Dims trace1(const Dims& in, double& macs) const override;
  Tensor forward(const Tensor& x) const override;
  int64_t c;
  std::shared_ptr<Conv> cv1, cv5;
  std::shared_ptr<SP> cv2, cv3, cv4;
};

/// Concat(dimension=1) of the input list, in `from` order.
class Concat : public Block {
 public:
  explicit Concat(int64_t d = 1) : d(d) {}
  std::string type_name() const override { return "Concat"; }
  std::vector<Dims> trace(const std::vector<std::vector<Dims>>& in, double& macs) const override;
  Tensor forward(const std::vector<Tensor>& xs) const;
  std::vector<Tensor> run(const std::vector<std::vector<Tensor>>& in) const override;
  int64_t d;
};

/// nn.Upsample(None, scale, 'nearest').
class Upsample : public UnaryBlock {
 public:
  explicit Upsample(int64_t scale) : scale(scale) {}
  std::string type_name() const override { return "Upsample"; }
  Dims trace1(const Dims& in, double&) const override { return {in.c, in.h * scale, in.w * scale}; }
  Tensor forward(const Tensor& x) const override;
  int64_t scale;
};

/// Silence: identity.
class Silence : public UnaryBlock {
 public:
  std::string type_name() const override { return "Silence"; }
  Dims trace1(const Dims& in, double&) const override { return in; }
  Tensor forward(const Tensor& x) const override { return x; }
};

/// CBLinear(c1, c2s): one 1x1 conv with bias to sum(c2s) channels, split into pieces (spec 2.12).
class CBLinear : public Block {
 public:
  CBLinear(int64_t c1, std::vector<int64_t> c2s);
  std::string type_name() const override { return "CBLinear"; }
  std::vector<Dims> trace(const std::vector<std::vector<Dims>>& in, double& macs) const override;
  std::vector<Tensor> forward(const Tensor& x) const;
  std::vector<Tensor> run(const std::vector<std::vector<Tensor>>& in) const override { return forward(in.at(0).at(0)); }
  std::vector<int64_t> c2s;
  std::shared_ptr<Conv2d> conv;
};

/// CBFuse(idx): x + sum_i nearest_resize(t_i[idx[i]]) (spec 2.13).
class CBFuse : public Block {
 public:
  explicit CBFuse(std::vector<int64_t> idx) : idx(std::move(idx)) {}
  std::string type_name() const override { return "CBFuse"; }
  std::vector<Dims> trace(const std::vector<std::vector<Dims>>& in, double& macs) const override;
  /// routed[i] = pieces of the i-th CBLinear input; x = the last input.
  Tensor forward(const std::vector<std::vector<Tensor>>& routed, const Tensor& x) const;
  /// in = the routed CBLinear pieces, then the map to fuse into (last).
  std::vector<Tensor> run(const std::vector<std::vector<Tensor>>& in) const override;
  std::vector<int64_t> idx;
};

/// DFL(c1=16): fixed 1x1 conv with weights 0..15 (frozen parameter) (spec 2.15).
class DFL : public Module {
 public:
  explicit DFL(int64_t c1 = 16);
  std::string type_name() const override { return "DFL"; }
  /// x [B, 4*c1, A] (side-major bins) -> [B, 4, A] expected distances in bins.
  Tensor forward(const Tensor& x) const;
  int64_t c1;
  std::shared_ptr<Conv2d> conv;
};

/// Output of a detection head.
struct HeadOutput {
  /// raw[b][l]: branch b, level l, [B, 64+nc, H_l, W_l] (box distribution logits, class logits).
  std::vector<std::vector<Tensor>> raw;
  /// eval mode only: decoded[b] = [B, 4+nc, A] (cx, cy, w, h in input pixels; sigmoid scores).
  std::vector<Tensor> decoded;
};

/// DDetect (branches = 1), DualDDetect (2), TripleDDetect (3): spec 2.16/2.17. Branch b has box
/// convs cv{2+2b}, class convs cv{3+2b} and DFL dfl / dfl2 / dfl3; the widths of branch b come
/// from its first input.
class Detect : public Block {
 public:
  Detect(int64_t nc, std::vector<int64_t> ch, int branches, Act act);
  std::string type_name() const override;
  std::vector<Dims> trace(const std::vector<std::vector<Dims>>& in, double& macs) const override;
  /// xs: branches*nl maps in `from` order. Training: raw only; eval: raw + decoded.
  /// When inter_op(xs), the box and class conv chains run concurrently (ops::run_concurrently).
  HeadOutput forward(const std::vector<Tensor>& xs) const;
  /// Whether forward(xs) runs its 2 x branches x nl conv chains concurrently, one per CPU thread
  /// (ops::run_concurrently), instead of one after the other with each conv split over the
  /// threads. Only in eval mode on the CPU, with grad disabled (inference; training keeps its
  /// order and its multi-threaded primitives) and more than one thread available
  /// (ops::concurrent_threads), and only where it pays (measured on 2 cores, fused models, batch 1):
  ///  - small maps, at most kInterOpMaxPixels cells (batch x H x W) in the largest level xs[0],
  ///    where a conv has too little work to split (gelan-t at 128 px, 16 x 16 cells: head 3.85 ->
  ///    2.92 ms), when inter_op_speedup > 1.2;
  ///  - larger maps when the chains balance almost perfectly, inter_op_speedup >= 0.95 x threads
  ///    (yolov9-s's dual head, 2.0 on 2 threads: head 131.6 -> 113.6 ms at 640 px; gelan-t's
  ///    single head, 1.67, went from 46.8 to 51.4 ms there, so it stays split).
  /// The outputs do not change: a forward convolution's bits do not depend on the thread count of
  /// its primitive (tests/ops/parallel_test.cpp), and the other ops of the chains are elementwise.
  /// False when xs is not nl x branches maps [B, C, H, W] (forward reports that).
  bool inter_op(const std::vector<Tensor>& xs) const;
  static constexpr int64_t kInterOpMaxPixels = 1024;
  static constexpr double kInterOpMinSpeedup = 0.95;  ///< per thread, for maps above kInterOpMaxPixels
  /// The speed-up over one thread of running the chains concurrently on `threads` threads (>= 1),
  /// from their multiply-accumulates (Sequential::trace1 x batch): total / makespan, where each
  /// chain in chain_order() goes to the thread that frees first (run_concurrently's dynamic
  /// schedule). 1 when there is no work. Throws engine::ShapeError when xs is not nl x branches
  /// maps [B, C, H, W].
  double inter_op_speedup(const std::vector<Tensor>& xs, int threads) const;
  /// The chains in the order the concurrent head starts them: 2 * (b * nl + l) + (1 for the class
  /// chain, 0 for the box chain), level by level (the largest maps first), class chain first.
  std::vector<int64_t> chain_order() const;
  /// bias_init(): box biases 1.0, class biases ln(5 / nc / (640/s)^2) (spec 2.16). Needs strides.
  void bias_init();

  // The pieces of forward, for a forward whose levels arrive one at a time (Model::forward's
  // overlapped head):
  /// Input i's raw map as one buffer [1, box + class channels, H, W] in x's layout (batch-1
  /// in-place inference), with the box and class chains' output views into it.
  struct LevelBuffers {
    Tensor raw, box, cls;
  };
  LevelBuffers level_buffers(size_t i, const Tensor& x) const;
  /// The conv chain k of chain_order(): input k / 2's box (k even) or class (k odd) Sequential.
  const Sequential& chain(int64_t k) const;
  /// The head's output from the raw maps of every input (in xs order; plain or blocked): raw
  /// plain, and in eval mode decoded (anchors from raws' level sizes). x0 is input 0 (batch size,
  /// device).
  HeadOutput finish(const std::vector<Tensor>& raws, const Tensor& x0) const;

  int64_t nc, nl, reg_max = 16, no;
  int branches;
  std::vector<double> stride;  ///< pixels per cell of each level (set by the model builder)
  std::vector<int64_t> box_width, cls_width;  ///< per branch (c2/c4/c6 and c3/c5/c7)
  std::vector<std::shared_ptr<ModuleList>> box;   ///< per branch: ModuleList of Sequential(Conv, Conv g4, Conv2d g4)
  std::vector<std::shared_ptr<ModuleList>> cls;   ///< per branch: ModuleList of Sequential(Conv, Conv, Conv2d)
  /// Per branch and level, the Sequential of box / class convs (typed access to box[b]->at(l)).
  std::vector<std::vector<std::shared_ptr<Sequential>>> box_seq, cls_seq;
  std::vector<std::shared_ptr<DFL>> dfl;
};

}  // namespace graph
