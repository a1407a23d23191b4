// Conv+BN and RepConvN folding and the PGI re-parameterisation (graph/fuse.h).
#include "graph/fuse.h"

#include <cmath>
#include <map>

#include "engine/autograd.h"
#include "engine/error.h"
#include "graph/state.h"

namespace graph {

namespace {

std::vector<double> host(const Tensor& t) { return t.to_vector<double>(); }

// Copies host doubles into `dst` (any dtype/device) in place.
void assign(Tensor& dst, const std::vector<double>& v) {
  engine::autograd::NoGradGuard no_grad;
  dst.copy_(Tensor::from_vector(v, dst.shape()));
}

// BN folded into per-channel (scale, shift): scale = gamma/sqrt(var+eps), shift = beta - mean*scale.
void bn_affine(const BatchNorm2d& bn, std::vector<double>& scale, std::vector<double>& shift) {
  const auto g = host(bn.weight), b = host(bn.bias), m = host(bn.running_mean), v = host(bn.running_var);
  scale.resize(g.size());
  shift.resize(g.size());
  for (size_t c = 0; c < g.size(); ++c) {
    scale[c] = g[c] / std::sqrt(v[c] + bn.eps);
    shift[c] = b[c] - m[c] * scale[c];
  }
}

// Kernel (c2 x rest) and bias of a Conv with its BN folded.
void folded(const Conv& c, std::vector<double>& w, std::vector<double>& bias) {
  w = host(c.conv->weight);
  std::vector<double> scale, shift;
  bn_affine(*c.bn, scale, shift);
  const size_t per = w.size() / scale.size();
  for (size_t o = 0; o < scale.size(); ++o)
    for (size_t k = 0; k < per; ++k) w[o * per + k] *= scale[o];
  bias = shift;
  if (c.conv->bias.defined()) {
    const auto b0 = host(c.conv->bias);
    for (size_t o = 0; o < bias.size(); ++o) bias[o] += b0[o] * scale[o];
  }
}

}  // namespace

void Conv2d::set_bias(const Tensor& b) {
  Y9_CHECK_SHAPE(b.dim() == 1 && b.size(0) == c2, "Conv2d::set_bias: expected [", c2, "], got ", engine::shape_str(b.shape()));
  if (!bias.defined())
    bias = register_parameter("bias", Tensor::zeros({c2}, weight.dtype(), weight.device()), weight.requires_grad());
  engine::autograd::NoGradGuard no_grad;
  bias.copy_(b);
}

void Conv::fuse() {
  if (!bn) return;
  std::vector<double> w, b;
  folded(*this, w, b);
  assign(conv->weight, w);
  conv->set_bias(Tensor::from_vector(b, {conv->c2}));
  remove_module("bn");
  bn.reset();
}

void RepConvN::fuse() {
  if (conv) return;
  std::vector<double> k3, b3, k1, b1;
  folded(*conv1, k3, b3);
  folded(*conv2, k1, b1);
  const Conv2d& c3 = *conv1->conv;
  Y9_CHECK_SHAPE(c3.k == 3 && conv2->conv->k == 1, "RepConvN::fuse: expected 3x3 and 1x1 branches");
  const size_t n = static_cast<size_t>(c3.c2 * (c3.c1 / c3.g));  // (out, in/g) pairs
  for (size_t q = 0; q < n; ++q) k3[q * 9 + 4] += k1[q];          // 1x1 at the centre tap [1, 1]
  for (size_t o = 0; o < b3.size(); ++o) b3[o] += b1[o];
  auto fused = std::make_shared<Conv2d>(c3.c1, c3.c2, 3, c3.s, 1, c3.g, c3.d, true, c3.weight.requires_grad());
  assign(fused->weight, k3);
  assign(fused->bias, b3);
  remove_module("conv1");
  remove_module("conv2");
  conv1.reset();
  conv2.reset();
  conv = register_module("conv", fused);
}

int fuse(Module& m) {
  int n = 0;
  // RepConvN first: fusing removes its Conv children, so collect the Convs afterwards.
  std::vector<RepConvN*> reps;
  for (auto& [name, mod] : m.named_modules())
    if (auto* r = dynamic_cast<RepConvN*>(mod)) reps.push_back(r);
  for (RepConvN* r : reps) {
    n += r->conv ? 0 : 1;
    r->fuse();
  }
  // Collect before fusing: Conv::fuse destroys the BatchNorm2d children listed after it.
  std::vector<Conv*> convs;
  for (auto& [name, mod] : m.named_modules())
    if (auto* c = dynamic_cast<Conv*>(mod)) convs.push_back(c);
  for (Conv* c : convs) {
    n += c->bn ? 1 : 0;
    c->fuse();
  }
  // The weights are constant from here (no training after fusion): freezing the storages of every
  // convolution's weight (the folded ones, and the head's plain Conv2d layers) lets the inference
  // convolution keep them in its own layout (engine::Storage::freeze; a later write through a
  // Tensor in-place method, load_state_dict's copy_ for example, thaws them again).
  for (auto& [name, mod] : m.named_modules())
    if (auto* c = dynamic_cast<Conv2d*>(mod)) c->weight.storage()->freeze();
  return n;
}

// --- PGI re-parameterisation ----------------------------------------------------------------------

namespace {

std::string args_key(const LayerSpec& L) {
  std::string s = L.type + "|" + std::to_string(L.n) + "|";
  for (const Arg& a : L.args) s += a.repr() + ",";
  return s;
}

bool silence_of_image(const ModelConfig& c, int i) {
  if (i < 0) return true;
  const LayerSpec& L = c.layers[static_cast<size_t>(i)];
  return L.type == "Silence" && silence_of_image(c, L.from_abs.at(0));
}

}  // namespace

std::vector<std::pair<std::string, std::string>> pgi_mapping(const ModelConfig& gelan, const ModelConfig& dual) {
  std::vector<int> map(gelan.layers.size(), -1);
  // Inputs compared after mapping: the image (or a Silence of it) is -1.
  auto gnorm = [&](int f) { return silence_of_image(gelan, f) ? -1 : map[static_cast<size_t>(f)]; };
  auto dnorm = [&](int f) { return silence_of_image(dual, f) ? -1 : f; };
  std::vector<std::pair<std::string, std::string>> head, trunk;
  int j = 0;
  for (size_t i = 0; i < gelan.layers.size(); ++i) {
    const LayerSpec& G = gelan.layers[i];
    const int gb = head_branches(G.type);
    bool found = false;
    for (; j < static_cast<int>(dual.layers.size()) && !found; ++j) {
      const LayerSpec& D = dual.layers[static_cast<size_t>(j)];
      const int db = head_branches(D.type);
      if (gb > 0) {
        // Single-branch head <- the last (main) branch of the dual head.
        if (gb != 1 || db < 1 || D.from_abs.size() % static_cast<size_t>(db) != 0) continue;
        const size_t nl = D.from_abs.size() / static_cast<size_t>(db);
        if (G.from_abs.size() != nl || G.args.at(0).i != D.args.at(0).i) continue;
        bool ok = true;
        for (size_t l = 0; l < nl; ++l)
          ok = ok && gnorm(G.from_abs[l]) == dnorm(D.from_abs[D.from_abs.size() - nl + l]) &&
               G.args.at(1).list.at(l).i == D.args.at(1).list.at(D.from_abs.size() - nl + l).i;
        if (!ok) continue;
        const int b = db - 1;
        const std::string gp = "model." + std::to_string(i) + ".", dp = "model." + std::to_string(j) + ".";
        head.emplace_back(gp + "cv2.", dp + "cv" + std::to_string(2 + 2 * b) + ".");
        head.emplace_back(gp + "cv3.", dp + "cv" + std::to_string(3 + 2 * b) + ".");
        head.emplace_back(gp + "dfl.", dp + (b == 0 ? std::string("dfl.") : "dfl" + std::to_string(b + 1) + "."));
      } else {
        if (db > 0 || args_key(G) != args_key(D) || G.from_abs.size() != D.from_abs.size()) continue;
        bool ok = true;
        for (size_t k = 0; k < G.from_abs.size(); ++k) ok = ok && gnorm(G.from_abs[k]) == dnorm(D.from_abs[k]);
        if (!ok) continue;
        trunk.emplace_back("model." + std::to_string(i) + ".", "model." + std::to_string(j) + ".");
      }
      map[i] = j;
      found = true;
    }
    Y9_CHECK_T(engine::ConfigError, found, gelan.source, ": layer ", i, " (", G.type,
               ") has no counterpart in ", dual.source, " (PGI re-parameterisation)");
  }
  head.insert(head.end(), trunk.begin(), trunk.end());
  return head;
}

std::shared_ptr<Model> reparameterize(const Model& dual, const ModelConfig& gelan_cfg) {
  Y9_CHECK_T(engine::ConfigError, gelan_cfg.nc == dual.nc(), "reparameterize: ", gelan_cfg.source, " has nc ",
             gelan_cfg.nc, ", the dual model ", dual.nc());
  LoadOptions lo;
  lo.rename = pgi_mapping(gelan_cfg, dual.config());
  BuildOptions bo;
  bo.init = false;
  auto g = std::make_shared<Model>(gelan_cfg, bo);
  std::map<std::string, Tensor> src;
  for (auto& [name, t] : dual.state_dict()) src.emplace(name, t);
  load_state_dict(*g, src, lo);
  g->eval();
  return g;
}

}  // namespace graph
