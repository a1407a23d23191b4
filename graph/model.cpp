// Model construction from a resolved config, weight initialisation, counts, the analytic
// GFLOPs trace and the official-style summary table. No ops are called here.
#include "graph/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/rng.h"

namespace graph {

namespace {

std::shared_ptr<UnaryBlock> make_unary(const LayerSpec& L, Act act) {
  const auto& a = L.args;  // [c1, c2, ...] for the conv-like blocks
  auto ai = [&](size_t k, int64_t dflt) { return k < a.size() && a[k].is_int() ? a[k].i : dflt; };
  const std::string& t = L.type;
  if (t == "Conv") {
    int64_t p = (a.size() > 4 && a[4].is_int()) ? a[4].i : -1;
    Act conv_act = act;
    if (a.size() > 7 && a[7].kind == Arg::Kind::Bool && !a[7].b) conv_act = Act::Identity;
    return std::make_shared<Conv>(a[0].i, a[1].i, ai(2, 1), ai(3, 1), p, ai(5, 1), ai(6, 1), conv_act);
  }
  if (t == "AConv") return std::make_shared<AConv>(a[0].i, a[1].i, act);
  if (t == "ADown") return std::make_shared<ADown>(a[0].i, a[1].i, act);
  if (t == "ELAN1") return std::make_shared<ELAN1>(a[0].i, a[1].i, a[2].i, a[3].i, act);
  if (t == "RepNCSPELAN4") return std::make_shared<RepNCSPELAN4>(a[0].i, a[1].i, a[2].i, a[3].i, ai(4, 1), act);
  if (t == "SPPELAN") return std::make_shared<SPPELAN>(a[0].i, a[1].i, a[2].i, act);
  if (t == "Silence") return std::make_shared<Silence>();
  if (t == "Upsample") return std::make_shared<Upsample>(a[1].is_int() ? a[1].i : static_cast<int64_t>(a[1].f));
  return nullptr;
}

// Official str(m)[8:-2] of the module class, for the summary's module column.
std::string official_type(const std::string& t) {
  if (t == "Upsample") return "torch.nn.modules.upsampling.Upsample";
  if (head_branches(t) > 0) return "models.yolo." + t;
  return "models.common." + t;
}

std::string from_repr(const LayerSpec& L) {
  if (!L.from_is_list) return std::to_string(L.from[0]);
  std::string s = "[";
  for (size_t k = 0; k < L.from.size(); ++k) s += (k ? ", " : "") + std::to_string(L.from[k]);
  return s + "]";
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

// --- construction ----------------------------------------------------------------------------------

void Model::build_layer(const LayerSpec& L) {
  std::shared_ptr<Block> b;
  const int nb = head_branches(L.type);
  if (nb > 0) {
    std::vector<int64_t> chl;
    for (const auto& x : L.args[1].list) chl.push_back(x.i);
    auto d = std::make_shared<Detect>(L.args[0].i, chl, nb, act_);
    head_ = d.get();
    b = d;
  } else if (L.type == "Concat") {
    b = std::make_shared<Concat>(L.args.empty() ? 1 : L.args[0].i);
  } else if (L.type == "CBLinear") {
    std::vector<int64_t> c2s;
    for (const auto& x : L.args[1].list) c2s.push_back(x.i);
    b = std::make_shared<CBLinear>(L.args[0].i, c2s);
  } else if (L.type == "CBFuse") {
    std::vector<int64_t> idx;
    for (const auto& x : L.args[0].list) idx.push_back(x.i);
    b = std::make_shared<CBFuse>(idx);
  } else if (L.n > 1) {
    auto rep = std::make_shared<Sequential>();
    for (int k = 0; k < L.n; ++k) rep->add(make_unary(L, act_));
    b = rep;
  } else {
    b = make_unary(L, act_);
  }
  Y9_ASSERT(b != nullptr, "no builder for module ", L.type);
  layers_.push_back(b);
  seq_->push_back(b);
}

Model::Model(ModelConfig cfg, const BuildOptions& opts) : cfg_(std::move(cfg)) {
  act_ = parse_activation(cfg_.activation, cfg_.source);
  seq_ = register_module("model", std::make_shared<ModuleList>("Sequential"));
  for (const LayerSpec& L : cfg_.layers) {
    try {
      build_layer(L);
    } catch (const engine::InternalError&) {
      throw;
    } catch (const engine::Error& e) {
      Y9_THROW(engine::ConfigError, cfg_.source, ": layer ", L.index, " (", L.module, "): ", e.message());
    }
  }
  Y9_ASSERT(head_ != nullptr, "model without a detection head");
  keep_.assign(layers_.size(), false);
  for (int i : cfg_.save) keep_[static_cast<size_t>(i)] = true;

  // Strides: the official builder probes with a 256x256 image and sets stride = 256 / H_level.
  std::vector<std::vector<Dims>> dims;
  try {
    dims = trace(256, 256);
  } catch (const engine::ShapeError& e) {
    Y9_THROW(engine::ConfigError, cfg_.source, ": the layers do not fit together at 256x256: ", e.message());
  }
  const auto& head_dims = dims.back();
  for (int64_t l = 0; l < head_->nl; ++l) head_->stride[static_cast<size_t>(l)] = 256.0 / static_cast<double>(head_dims[static_cast<size_t>(l)].h);

  if (opts.init) {
    init_weights(*this, opts.seed);
  } else {
    head_->bias_init();
  }
}

std::shared_ptr<Model> Model::from_yaml(const std::string& path, int64_t nc_override, const BuildOptions& opts) {
  return std::make_shared<Model>(load_model_config(path, nc_override), opts);
}

// --- initialisation ----------------------------------------------------------------------------------

void init_weights(Model& model, uint64_t seed) {
  engine::autograd::NoGradGuard no_grad;
  for (auto& [name, mod] : model.named_modules()) {
    if (auto* c = dynamic_cast<Conv2d*>(mod)) {
      if (!c->weight.requires_grad()) continue;  // the DFL conv keeps its fixed 0..15 weights
      const double fan_in = static_cast<double>((c->c1 / c->g) * c->k * c->k);
      const double bound = 1.0 / std::sqrt(fan_in);
      for (Tensor* t : {&c->weight, &c->bias}) {
        if (!t->defined()) continue;
        // One Philox stream per parameter, keyed by its name: independent of build order.
        engine::Generator gen(seed, fnv1a(name + (t == &c->weight ? ".weight" : ".bias")));
        engine::uniform_(*t, gen, -bound, bound);
      }
    } else if (auto* bn = dynamic_cast<BatchNorm2d*>(mod)) {
      bn->weight.fill_(1.0);
      bn->bias.fill_(0.0);
      bn->running_mean.fill_(0.0);
      bn->running_var.fill_(1.0);
      bn->num_batches_tracked.fill_(0.0);
    }
  }
  model.head()->bias_init();
}

// --- counts -------------------------------------------------------------------------------------------

int64_t Model::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

int64_t Model::num_trainable() const {
  int64_t n = 0;
  for (const auto& [name, t] : named_parameters())
    if (t.requires_grad()) n += t.numel();
  return n;
}

int64_t Model::num_buffer_elements() const {
  int64_t n = 0;
  for (const auto& [name, t] : named_buffers()) n += t.numel();
  return n;
}

int64_t Model::layer_parameters(int64_t i) const {
  int64_t n = 0;
  for (const auto& [name, t] : layer(i)->named_parameters()) n += t.numel();
  return n;
}

int64_t Model::num_modules_official() {
  // Ours mirror the official containers one to one; add what we do not materialise as modules:
  // an nn.Identity per act=False Conv, an nn.MaxPool2d per SP, and the two shared class-level
  // default activations (Conv.default_act, RepConvN.default_act) counted once each.
  int64_t n = 0;
  bool conv_act = false, rep_act = false;
  for (auto& [name, m] : named_modules()) {
    ++n;
    if (auto* c = dynamic_cast<Conv*>(m)) {
      if (c->act == Act::Identity) ++n;
      else conv_act = true;
    }
    if (dynamic_cast<RepConvN*>(m)) rep_act = true;
    if (dynamic_cast<SP*>(m)) ++n;
  }
  return n + (conv_act ? 1 : 0) + (rep_act ? 1 : 0);
}

// --- trace / GFLOPs ------------------------------------------------------------------------------

std::vector<std::vector<Dims>> Model::trace(int64_t img_h, int64_t img_w, double* macs_out,
                                             std::vector<double>* layer_macs) const {
  const Dims input{cfg_.ch_in, img_h, img_w};
  std::vector<std::vector<Dims>> out;
  double macs = 0.0;
  if (layer_macs) layer_macs->clear();
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerSpec& L = cfg_.layers[i];
    std::vector<std::vector<Dims>> in;
    for (int f : L.from_abs) in.push_back(f < 0 ? std::vector<Dims>{input} : out[static_cast<size_t>(f)]);
    const double before = macs;
    try {
      out.push_back(layers_[i]->trace(in, macs));
    } catch (const engine::ShapeError& e) {
      Y9_THROW(engine::ShapeError, "layer ", i, " (", L.module, "): ", e.message());
    }
    if (layer_macs) layer_macs->push_back(macs - before);
  }
  if (macs_out) *macs_out = macs;
  return out;
}

double Model::gflops(int64_t img_h, int64_t img_w) const {
  double macs = 0.0;
  trace(img_h, img_w, &macs);
  return 2.0 * macs / 1e9;
}

// --- summary --------------------------------------------------------------------------------------

int64_t Model::grid_stride() const {
  const auto& st = strides();
  return std::max<int64_t>(32, st.empty() ? 32 : static_cast<int64_t>(*std::max_element(st.begin(), st.end())));
}

std::string Model::summary(const std::string& name, int64_t img) {
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line, "\n%3s%18s%3s%10s  %-40s%-30s\n", "", "from", "n", "params", "module", "arguments");
  os << line;
  for (int64_t i = 0; i < num_layers(); ++i) {
    const LayerSpec& L = cfg_.layers[static_cast<size_t>(i)];
    std::string args = "[";
    for (size_t k = 0; k < L.args.size(); ++k) args += (k ? ", " : "") + L.args[k].repr();
    args += "]";
    std::snprintf(line, sizeof line, "%3lld%18s%3d%10lld  %-40s%-30s\n", static_cast<long long>(i),
                  from_repr(L).c_str(), L.n, static_cast<long long>(layer_parameters(i)),
                  official_type(L.type).c_str(), args.c_str());
    os << line;
  }
  // Official model_info: FLOPs of a stride x stride input scaled to img x img, so any --img works
  // (equal to gflops(img, img) when img is a multiple of the largest stride).
  const int64_t s = grid_stride();
  const double scale = static_cast<double>(img) / static_cast<double>(s);
  std::snprintf(line, sizeof line, "%s summary: %lld layers, %lld parameters, %lld gradients, %.1f GFLOPs\n",
                name.c_str(), static_cast<long long>(num_modules_official()),
                static_cast<long long>(num_parameters()), static_cast<long long>(num_trainable()),
                gflops(s, s) * scale * scale);
  os << line;
  return os.str();
}

int64_t Model::set_batchnorm_sync(const kernels::BatchNormSync* sync) {
  int64_t n = 0;
  for (auto& [name, m] : named_modules())
    if (auto* bn = dynamic_cast<BatchNorm2d*>(m)) {
      bn->sync = sync;
      ++n;
    }
  return n;
}

}  // namespace graph
