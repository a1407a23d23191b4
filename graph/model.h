// The detection model: a module graph built from a ModelConfig (official models/yolo.py:
// DetectionModel + parse_model), with official state_dict names ("model.<i>.<...>"), seeded
// PyTorch-default weight initialisation, strides, parameter counts, analytic GFLOPs and the
// official-style layer summary. The forward pass is in graph/forward.cpp (needs ops/).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "graph/config.h"
#include "graph/modules.h"

namespace graph {

/// How to build a model.
struct BuildOptions {
  uint64_t seed = 0;   ///< weight-initialisation seed (graph::init_weights)
  bool init = true;    ///< false: leave conv weights uninitialised (shape-only uses: counting, summaries)
};

/// Output of Model::forward. Training mode: `raw` only. Eval mode: also `decoded`.
/// raw[b][l] = branch b (0 = first head branch; for DualDDetect 0 = auxiliary, 1 = main), level l
/// (P3, P4, P5): [B, 64 + nc, H_l, W_l]. decoded[b] = [B, 4 + nc, A]: cx, cy, w, h in input
/// pixels, then sigmoid class scores (spec 2.16, 8).
using ModelOutput = HeadOutput;

class Model : public Module {
 public:
  /// Builds every layer of `cfg` (channel widths resolved by the parser), sets the strides from
  /// an analytic trace at 256x256 (official stride probe), initialises weights (PyTorch defaults
  /// from a seeded counter-based generator, BN gamma 1 / beta 0 / running 0,1, DFL 0..15) and runs
  /// the head's bias_init. Throws engine::ConfigError on an unsupported activation.
  explicit Model(ModelConfig cfg, const BuildOptions& opts = {});
  /// load_model_config(path, nc_override) + the constructor.
  static std::shared_ptr<Model> from_yaml(const std::string& path, int64_t nc_override = -1,
                                          const BuildOptions& opts = {});

  std::string type_name() const override { return "DetectionModel"; }
  const ModelConfig& config() const { return cfg_; }
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  Block* layer(int64_t i) const { return layers_.at(static_cast<size_t>(i)).get(); }
  Detect* head() const { return head_; }
  int64_t nc() const { return cfg_.nc; }
  /// Strides of the head levels in pixels ([8, 16, 32] for every shipped model).
  const std::vector<double>& strides() const { return head_->stride; }
  /// Grid size in pixels that image sides must be multiples of: max(32, largest stride)
  /// (official gs = max(int(model.stride.max()), 32) in train_dual.py and model_info).
  int64_t grid_stride() const;

  /// Elements of all parameters (trainable + frozen DFL weights), as sum(p.numel()).
  int64_t num_parameters() const;
  /// Elements of parameters that require gradients ("gradients" in the official summary).
  int64_t num_trainable() const;
  /// Elements of all buffers (BN running stats and num_batches_tracked).
  int64_t num_buffer_elements() const;
  /// Parameter elements of layer i (the "params" column).
  int64_t layer_parameters(int64_t i) const;
  /// Modules as counted by the official summary (len(list(model.modules())): shared default
  /// activations counted once, nn.Identity and nn.MaxPool2d children included).
  int64_t num_modules_official();
  /// Makes every BatchNorm2d synchronise its training statistics across data-parallel ranks with
  /// `sync` (official torch.nn.SyncBatchNorm.convert_sync_batchnorm), or stop with nullptr.
  /// Returns the number of BatchNorm2d layers. `sync` must outlive the training.
  int64_t set_batchnorm_sync(const kernels::BatchNormSync* sync);

  /// 2 x multiply-accumulates of every convolution (incl. the DFL convs of eval mode) for one
  /// image of img_h x img_w pixels, in units of 1e9 (the params.json "gflops_640" convention;
  /// bias adds, BN, activations, pooling are not counted). Throws engine::ShapeError when a
  /// concatenation or fusion sees mismatched sizes (sides not multiples of 32).
  double gflops(int64_t img_h, int64_t img_w) const;
  /// Output dims of every layer for an input of img_h x img_w (pieces for CBLinear); `macs` (may be
  /// null): the multiply-accumulates of the whole model, `layer_macs` (may be null): those of each
  /// layer, in layer order. Throws engine::ShapeError naming the layer whose inputs do not fit.
  std::vector<std::vector<Dims>> trace(int64_t img_h, int64_t img_w, double* macs = nullptr,
                                       std::vector<double>* layer_macs = nullptr) const;

  /// The official parse_model table (index, from, n, params, module, arguments) followed by
  /// "<name> summary: L layers, P parameters, G gradients, F GFLOPs" (F at img x img).
  std::string summary(const std::string& name, int64_t img = 640);

  /// Forward pass (graph/forward.cpp). x [B, ch_in, H, W] float32 RGB in [0, 1], H and W
  /// multiples of 32. Training mode returns raw maps; eval mode also decodes (spec 8).
  /// When blocked_forward(x) holds, the layers keep their activations in the CPU's blocked
  /// channel layout (ops::to_blocked; issue 15 item 1) from the first convolution to the head,
  /// whose raw maps come back plain NCHW: the outputs, and in training the gradients, are those of
  /// the plain forward up to float rounding (oneDNN's blocked convolutions may round differently;
  /// tested).
  ///
  /// Batch-1 CPU inference on 2 threads with a small map (the head's largest level at most
  /// Detect::kInterOpMaxPixels cells) also overlaps the head with the layers before it, where
  /// head_overlap() allows (see HeadOverlap): once the input of a
  /// head level is computed, its box and class chains may start on another thread while the
  /// calling thread computes the rest, one op at a time on one thread each (the head levels come
  /// from the neck's last layers, which at batch 1 leave the second thread mostly idle). The
  /// outputs do not change: the same ops on the same inputs, and a forward convolution's bits do
  /// not depend on its thread count (Detect::inter_op).
  ModelOutput forward(const Tensor& x);
  /// Whether forward(x) runs in the blocked layout: x is CPU F32, the CPU has a channel block
  /// (ops::channel_block), and blocked_training() is on when the model is in train mode or grad
  /// mode is on, blocked_inference() otherwise. The observed forward below always runs plain.
  bool blocked_forward(const Tensor& x) const;

  /// Called by the observed forward after each layer before the head: (layer index i, the layer
  /// (type_name() as the official m.type), its outputs: one tensor [B, C, H, W], or the pieces of
  /// a CBLinear). The tensors are the forward's own (do not modify them).
  using LayerObserver = std::function<void(int64_t i, const Block& layer, const std::vector<Tensor>& outputs)>;
  /// The same forward, calling `observe` after every layer except the detection head (official
  /// _forward_once with visualize: feature_visualization(x, m.type, m.i), which skips Detect).
  /// The plain forward above passes no observer and pays one null test per layer.
  ModelOutput forward(const Tensor& x, const LayerObserver& observe);

 private:
  ModelOutput forward_impl(const Tensor& x, const LayerObserver* observe);
  /// Whether forward_impl(x) overlaps the head with the layers before it (see forward).
  bool overlap_head(const Tensor& x) const;
  /// Whether the layers between the head's first input and the head do at most
  /// kOverlapMaxTailShare of the head's multiply-accumulates for an img_h x img_w input (the
  /// analytic trace; remembered per size).
  bool light_tail(int64_t img_h, int64_t img_w) const;
  /// Measured at 128 px on 2 cores, overlap on against off: gelan-t (tail 0.16 of the head) 10-20%
  /// faster, yolov9-t (0.22) 5-10%; gelan-s (0.45) and yolov9-s (0.62) no faster or up to 5% slower
  /// (their later layers have convolutions large enough to split well over both threads).
  static constexpr double kOverlapMaxTailShare = 0.3;
  struct TailCache {  // (img_h, img_w) -> light_tail
    std::mutex mu;
    std::map<std::pair<int64_t, int64_t>, bool> light;
  };
  std::shared_ptr<TailCache> tail_cache_ = std::make_shared<TailCache>();
  /// Builds the module of one layer spec and appends it (constructor step).
  void build_layer(const LayerSpec& L);

  ModelConfig cfg_;
  Act act_ = Act::SiLU;
  std::shared_ptr<ModuleList> seq_;
  std::vector<std::shared_ptr<Block>> layers_;
  Detect* head_ = nullptr;
  std::vector<bool> keep_;  ///< layer outputs read later (the save list)
};

/// Turns the blocked layout of CPU inference (Model::blocked_forward in eval mode with grad mode
/// off) on or off for the process; on unless the environment sets Y9_CPU_BLOCKED=0 (benchmarks and
/// tests compare both).
void set_blocked_inference(bool on);
bool blocked_inference();
/// The same for CPU training (Model::blocked_forward in train mode or with grad mode on); on
/// unless the environment sets Y9_CPU_BLOCKED_TRAIN=0.
void set_blocked_training(bool on);
bool blocked_training();
/// Lets the blocked forward's 3x3 stride-1 convolutions (inference and training, with their backward)
/// use the Winograd algorithm (ops::conv2d_blocked, kernels::Conv2dShape::winograd), or not; on unless
/// the environment sets Y9_CPU_WINOGRAD=0.
void set_cpu_winograd(bool on);
bool cpu_winograd();
/// How many model forwards ran in the blocked layout so far (process-wide): tests and benchmarks
/// check that the blocked path ran.
int64_t blocked_forwards();
/// Whether a batch-1 CPU inference forward starts the detection head's conv chains of a level as
/// soon as that level's input exists, on the second thread, while the first computes the layers
/// of the later levels (Model::forward; issue 15 (d)): Off; Auto (the default) where the layers
/// after the head's first input are light (Model::kOverlapMaxTailShare); Always wherever the rest
/// of the conditions hold (tests and benchmarks). The environment sets the process's initial mode:
/// Y9_CPU_HEAD_OVERLAP=0 Off, =always Always, else Auto.
enum class HeadOverlap { Off, Auto, Always };
void set_head_overlap(HeadOverlap mode);
HeadOverlap head_overlap();
/// How many model forwards overlapped their head so far (process-wide; tests check the path ran).
int64_t head_overlaps();

/// Re-initialises weights like a freshly built official model: every Conv2d weight and bias
/// ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (PyTorch kaiming_uniform(a=sqrt(5)) default; fan_in =
/// c1/g*k*k), BN weight 1, bias 0, running_mean 0, running_var 1, num_batches_tracked 0, DFL
/// weights 0..15, then the head's bias_init. Values come from the engine's Philox generator
/// (engine::uniform_, on the parameter's device) with one stream per parameter keyed by
/// (seed, FNV-1a of the parameter name): bitwise reproducible on CPU and CUDA, independent of
/// build order and thread count. (The official stride probe's BN side effect, spec 3, is not
/// reproduced here.)
void init_weights(Model& model, uint64_t seed);

}  // namespace graph
