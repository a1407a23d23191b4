// Construction (parameter names and shapes) and the analytic shape/MAC trace of the YOLOv9
// blocks. No op is called here, so this file links without ops/ (forwards: graph/forward.cpp).
#include "graph/modules.h"

#include <algorithm>
#include <cmath>

#include "engine/autograd.h"
#include "engine/error.h"
#include "graph/config.h"

namespace graph {

Act parse_activation(const std::string& text, const std::string& source) {
  if (text.empty() || text == "nn.SiLU()") return Act::SiLU;
  if (text == "nn.ReLU()") return Act::ReLU;
  if (text == "nn.Identity()") return Act::Identity;
  Y9_THROW(engine::ConfigError, source, ": unsupported activation '", text,
           "' (supported: nn.SiLU(), nn.ReLU(), nn.Identity())");
}

// --- containers and leaves ----------------------------------------------------------------------

Dims Sequential::trace1(const Dims& in, double& macs) const {
  Dims d = in;
  for (const auto& b : items) d = b->trace1(d, macs);
  return d;
}

Conv2d::Conv2d(int64_t c1_, int64_t c2_, int64_t k_, int64_t s_, int64_t p_, int64_t g_, int64_t d_, bool with_bias,
               bool trainable)
    : c1(c1_), c2(c2_), k(k_), s(s_), p(p_), g(g_), d(d_) {
  Y9_CHECK_T(engine::ConfigError, g > 0 && c1 % g == 0 && c2 % g == 0, "Conv2d: groups ", g,
             " must divide channels ", c1, " -> ", c2);
  Y9_CHECK_T(engine::ConfigError, c1 > 0 && c2 > 0 && k > 0 && s > 0 && p >= 0 && d > 0, "Conv2d: bad arguments c1 ", c1,
             " c2 ", c2, " kernel ", k, " stride ", s, " padding ", p, " dilation ", d);
  weight = register_parameter("weight", Tensor::empty({c2, c1 / g, k, k}), trainable);
  if (with_bias) bias = register_parameter("bias", Tensor::zeros({c2}), trainable);
}

Dims Conv2d::trace1(const Dims& in, double& macs) const {
  Y9_CHECK_SHAPE(in.c == c1, "Conv2d trace: expected ", c1, " input channels, got ", in.c);
  const int64_t ho = (in.h + 2 * p - d * (k - 1) - 1) / s + 1;
  const int64_t wo = (in.w + 2 * p - d * (k - 1) - 1) / s + 1;
  Y9_CHECK_SHAPE(in.h + 2 * p - d * (k - 1) - 1 >= 0 && in.w + 2 * p - d * (k - 1) - 1 >= 0 && ho > 0 && wo > 0,
                 "a ", k, "x", k, " convolution (stride ", s, ", padding ", p, ", dilation ", d, ") does not fit its ",
                 in.h, "x", in.w, " input");
  macs += static_cast<double>(c2) * static_cast<double>(ho * wo) * static_cast<double>((c1 / g) * k * k);
  return {c2, ho, wo};
}

BatchNorm2d::BatchNorm2d(int64_t c_) : c(c_) {
  weight = register_parameter("weight", Tensor::ones({c}));
  bias = register_parameter("bias", Tensor::zeros({c}));
  running_mean = register_buffer("running_mean", Tensor::zeros({c}));
  running_var = register_buffer("running_var", Tensor::ones({c}));
  num_batches_tracked = register_buffer("num_batches_tracked", Tensor::zeros({}, engine::DType::I64));
}

// --- blocks -----------------------------------------------------------------------------------------

Conv::Conv(int64_t c1, int64_t c2, int64_t k, int64_t s, int64_t p, int64_t g, int64_t d, Act act_) : act(act_) {
  if (p < 0) p = (d > 1 ? d * (k - 1) + 1 : k) / 2;  // autopad
  conv = register_module("conv", std::make_shared<Conv2d>(c1, c2, k, s, p, g, d, false));
  bn = register_module("bn", std::make_shared<BatchNorm2d>(c2));
}

RepConvN::RepConvN(int64_t c1, int64_t c2, int64_t s, int64_t g, Act act_) : act(act_) {
  conv1 = register_module("conv1", std::make_shared<Conv>(c1, c2, 3, s, 1, g, 1, Act::Identity));
  conv2 = register_module("conv2", std::make_shared<Conv>(c1, c2, 1, s, 0, g, 1, Act::Identity));
}

Dims RepConvN::trace1(const Dims& in, double& macs) const {
  if (conv) return conv->trace1(in, macs);
  Dims out = conv1->trace1(in, macs);
  conv2->trace1(in, macs);
  return out;
}

RepNBottleneck::RepNBottleneck(int64_t c1, int64_t c2, bool shortcut, double e, Act act) {
  const auto c_ = static_cast<int64_t>(static_cast<double>(c2) * e);
  cv1 = register_module("cv1", std::make_shared<RepConvN>(c1, c_, 1, 1, act));
  cv2 = register_module("cv2", std::make_shared<Conv>(c_, c2, 3, 1, -1, 1, 1, act));
  add = shortcut && c1 == c2;
}

Dims RepNBottleneck::trace1(const Dims& in, double& macs) const { return cv2->trace1(cv1->trace1(in, macs), macs); }

RepNCSP::RepNCSP(int64_t c1, int64_t c2, int64_t n, Act act) {
  const auto c_ = static_cast<int64_t>(static_cast<double>(c2) * 0.5);
  cv1 = register_module("cv1", std::make_shared<Conv>(c1, c_, 1, 1, -1, 1, 1, act));
  cv2 = register_module("cv2", std::make_shared<Conv>(c1, c_, 1, 1, -1, 1, 1, act));
  cv3 = register_module("cv3", std::make_shared<Conv>(2 * c_, c2, 1, 1, -1, 1, 1, act));
  m = register_module("m", std::make_shared<Sequential>());
  for (int64_t k = 0; k < n; ++k) m->add(std::make_shared<RepNBottleneck>(c_, c_, true, 1.0, act));
}

Dims RepNCSP::trace1(const Dims& in, double& macs) const {
  Dims a = m->trace1(cv1->trace1(in, macs), macs);
  Dims b = cv2->trace1(in, macs);
  return cv3->trace1({a.c + b.c, a.h, a.w}, macs);
}

RepNCSPELAN4::RepNCSPELAN4(int64_t c1, int64_t c2, int64_t c3, int64_t c4, int64_t c5, Act act) : c(c3 / 2) {
  cv1 = register_module("cv1", std::make_shared<Conv>(c1, c3, 1, 1, -1, 1, 1, act));
  cv2 = register_module("cv2", std::make_shared<Sequential>());
  cv2->add(std::make_shared<RepNCSP>(c3 / 2, c4, c5, act));
  cv2->add(std::make_shared<Conv>(c4, c4, 3, 1, -1, 1, 1, act));
  cv3 = register_module("cv3", std::make_shared<Sequential>());
  cv3->add(std::make_shared<RepNCSP>(c4, c4, c5, act));
  cv3->add(std::make_shared<Conv>(c4, c4, 3, 1, -1, 1, 1, act));
  cv4 = register_module("cv4", std::make_shared<Conv>(c3 + 2 * c4, c2, 1, 1, -1, 1, 1, act));
}

Dims RepNCSPELAN4::trace1(const Dims& in, double& macs) const {
  Dims y = cv1->trace1(in, macs);
  Dims y2 = cv2->trace1({y.c / 2, y.h, y.w}, macs);
  Dims y3 = cv3->trace1(y2, macs);
  return cv4->trace1({y.c + y2.c + y3.c, y.h, y.w}, macs);
}

ELAN1::ELAN1(int64_t c1, int64_t c2, int64_t c3, int64_t c4, Act act) : c(c3 / 2) {
  cv1 = register_module("cv1", std::make_shared<Conv>(c1, c3, 1, 1, -1, 1, 1, act));
  cv2 = register_module("cv2", std::make_shared<Conv>(c3 / 2, c4, 3, 1, -1, 1, 1, act));
  cv3 = register_module("cv3", std::make_shared<Conv>(c4, c4, 3, 1, -1, 1, 1, act));
  cv4 = register_module("cv4", std::make_shared<Conv>(c3 + 2 * c4, c2, 1, 1, -1, 1, 1, act));
}

Dims ELAN1::trace1(const Dims& in, double& macs) const {
  Dims y = cv1->trace1(in, macs);
  Dims y2 = cv2->trace1({y.c / 2, y.h, y.w}, macs);
  Dims y3 = cv3->trace1(y2, macs);
  return cv4->trace1({y.c + y2.c + y3.c, y.h, y.w}, macs);
}

AConv::AConv(int64_t c1, int64_t c2, Act act) {
  cv1 = register_module("cv1", std::make_shared<Conv>(c1, c2, 3, 2, 1, 1, 1, act));
}

Dims AConv::trace1(const Dims& in, double& macs) const {
  return cv1->trace1({in.c, in.h - 1, in.w - 1}, macs);  // avg_pool2d(2, 1, 0)
}

ADown::ADown(int64_t c1, int64_t c2, Act act) : c(c2 / 2) {
  cv1 = register_module("cv1", std::make_shared<Conv>(c1 / 2, c, 3, 2, 1, 1, 1, act));
  cv2 = register_module("cv2", std::make_shared<Conv>(c1 / 2, c, 1, 1, 0, 1, 1, act));
}

Dims ADown::trace1(const Dims& in, double& macs) const {
  const Dims pooled{in.c / 2, in.h - 1, in.w - 1};
  Dims a = cv1->trace1(pooled, macs);
  Dims mp{pooled.c, (pooled.h + 2 - 3) / 2 + 1, (pooled.w + 2 - 3) / 2 + 1};  // max_pool2d(3, 2, 1)
  Dims b = cv2->trace1(mp, macs);
  return {a.c + b.c, a.h, a.w};
}

SPPELAN::SPPELAN(int64_t c1, int64_t c2, int64_t c3, Act act) : c(c3) {
  cv1 = register_module("cv1", std::make_shared<Conv>(c1, c3, 1, 1, -1, 1, 1, act));
  cv2 = register_module("cv2", std::make_shared<SP>(5));
  cv3 = register_module("cv3", std::make_shared<SP>(5));
  cv4 = register_module("cv4", std::make_shared<SP>(5));
  cv5 = register_module("cv5", std::make_shared<Conv>(4 * c3, c2, 1, 1, -1, 1, 1, act));
}

Dims SPPELAN::trace1(const Dims& in, double& macs) const {
  Dims y = cv1->trace1(in, macs);
  return cv5->trace1({4 * y.c, y.h, y.w}, macs);
}

std::vector<Dims> Concat::trace(const std::vector<std::vector<Dims>>& in, double&) const {
  Dims out = in.at(0).at(0);
  out.c = 0;
  for (const auto& x : in) {
    Y9_CHECK_SHAPE(x.at(0).h == out.h && x.at(0).w == out.w, "Concat: spatial sizes differ: ", x.at(0).h, "x",
                   x.at(0).w, " vs ", out.h, "x", out.w);
    out.c += x.at(0).c;
  }
  return {out};
}

CBLinear::CBLinear(int64_t c1, std::vector<int64_t> c2s_) : c2s(std::move(c2s_)) {
  int64_t total = 0;
  for (int64_t c : c2s) total += c;
  conv = register_module("conv", std::make_shared<Conv2d>(c1, total, 1, 1, 0, 1, 1, true));
}

std::vector<Dims> CBLinear::trace(const std::vector<std::vector<Dims>>& in, double& macs) const {
  Dims y = conv->trace1(in.at(0).at(0), macs);
  std::vector<Dims> out;
  for (int64_t c : c2s) out.push_back({c, y.h, y.w});
  return out;
}

std::vector<Dims> CBFuse::trace(const std::vector<std::vector<Dims>>& in, double&) const {
  const Dims x = in.back().at(0);
  for (size_t i = 0; i + 1 < in.size(); ++i) {
    const Dims& piece = in[i].at(static_cast<size_t>(idx.at(i)));
    Y9_CHECK_SHAPE(piece.c == x.c, "CBFuse: routed piece has ", piece.c, " channels, map has ", x.c);
    Y9_CHECK_SHAPE(piece.h > 0 && x.h % piece.h == 0 && x.w % piece.w == 0, "CBFuse: routed piece ", piece.h, "x",
                   piece.w, " does not divide the map ", x.h, "x", x.w, " by an integer factor");
  }
  return {x};
}

DFL::DFL(int64_t c1_) : c1(c1_) {
  conv = register_module("conv", std::make_shared<Conv2d>(c1, 1, 1, 1, 0, 1, 1, false, /*trainable=*/false));
  std::vector<float> w(static_cast<size_t>(c1));
  for (int64_t k = 0; k < c1; ++k) w[static_cast<size_t>(k)] = static_cast<float>(k);
  engine::autograd::NoGradGuard no_grad;
  conv->weight.copy_(Tensor::from_vector(w, {1, c1, 1, 1}));
}

// --- detection heads -------------------------------------------------------------------------------

Detect::Detect(int64_t nc_, std::vector<int64_t> ch, int branches_, Act act)
    : nc(nc_), nl(static_cast<int64_t>(ch.size()) / branches_), no(nc_ + 16 * 4), branches(branches_) {
  Y9_CHECK_T(engine::ConfigError, nl >= 1 && static_cast<int64_t>(ch.size()) == nl * branches,
             "detection head: ", ch.size(), " inputs for ", branches, " branches");
  stride.assign(static_cast<size_t>(nl), 0.0);
  for (int b = 0; b < branches; ++b) {
    const int64_t first = ch[static_cast<size_t>(b * nl)];
    box_width.push_back(make_divisible(static_cast<double>(std::max<int64_t>({first / 4, reg_max * 4, 16})), 4));
    cls_width.push_back(std::max(first, std::min<int64_t>(nc * 2, 128)));
  }
  box_seq.resize(static_cast<size_t>(branches));
  cls_seq.resize(static_cast<size_t>(branches));
  // Registration order = official state_dict order: cv2, cv3, cv4, cv5, ..., then dfl, dfl2, ...
  for (int b = 0; b < branches; ++b) {
    const int64_t c2 = box_width[static_cast<size_t>(b)], c3 = cls_width[static_cast<size_t>(b)];
    auto bl = register_module("cv" + std::to_string(2 + 2 * b), std::make_shared<ModuleList>());
    auto cl = register_module("cv" + std::to_string(3 + 2 * b), std::make_shared<ModuleList>());
    for (int64_t l = 0; l < nl; ++l) {
      const int64_t x = ch[static_cast<size_t>(b * nl + l)];
      auto bs = std::make_shared<Sequential>();
      bs->add(std::make_shared<Conv>(x, c2, 3, 1, -1, 1, 1, act));
      bs->add(std::make_shared<Conv>(c2, c2, 3, 1, -1, 4, 1, act));
      bs->add(std::make_shared<Conv2d>(c2, 4 * reg_max, 1, 1, 0, 4, 1, true));
      auto cs = std::make_shared<Sequential>();
      cs->add(std::make_shared<Conv>(x, c3, 3, 1, -1, 1, 1, act));
      cs->add(std::make_shared<Conv>(c3, c3, 3, 1, -1, 1, 1, act));
      cs->add(std::make_shared<Conv2d>(c3, nc, 1, 1, 0, 1, 1, true));
      bl->push_back(bs);
      cl->push_back(cs);
      box_seq[static_cast<size_t>(b)].push_back(bs);
      cls_seq[static_cast<size_t>(b)].push_back(cs);
    }
    box.push_back(bl);
    cls.push_back(cl);
  }
  for (int b = 0; b < branches; ++b)
    dfl.push_back(register_module(b == 0 ? std::string("dfl") : "dfl" + std::to_string(b + 1),
                                  std::make_shared<DFL>(reg_max)));
}

std::string Detect::type_name() const {
  return branches == 1 ? "DDetect" : branches == 2 ? "DualDDetect" : "TripleDDetect";
}

std::vector<Dims> Detect::trace(const std::vector<std::vector<Dims>>& in, double& macs) const {
  std::vector<Dims> out;
  int64_t anchors = 0;
  for (int b = 0; b < branches; ++b)
    for (int64_t l = 0; l < nl; ++l) {
      const Dims& x = in.at(static_cast<size_t>(b * nl + l)).at(0);
      Dims bo = box_seq[static_cast<size_t>(b)][static_cast<size_t>(l)]->trace1(x, macs);
      Dims co = cls_seq[static_cast<size_t>(b)][static_cast<size_t>(l)]->trace1(x, macs);
      out.push_back({bo.c + co.c, bo.h, bo.w});
      if (b == 0) anchors += bo.h * bo.w;
    }
  // Eval mode runs each DFL: a 1x1 conv 16 -> 1 over (4, A) positions.
  macs += static_cast<double>(branches) * static_cast<double>(reg_max * 4 * anchors);
  return out;
}

void Detect::bias_init() {
  engine::autograd::NoGradGuard no_grad;
  for (int b = 0; b < branches; ++b)
    for (int64_t l = 0; l < nl; ++l) {
      const double s = stride[static_cast<size_t>(l)];
      Y9_ASSERT(s > 0, "Detect::bias_init before strides are known");
      auto* bconv = dynamic_cast<Conv2d*>(box_seq[static_cast<size_t>(b)][static_cast<size_t>(l)]->items.back().get());
      auto* cconv = dynamic_cast<Conv2d*>(cls_seq[static_cast<size_t>(b)][static_cast<size_t>(l)]->items.back().get());
      bconv->bias.fill_(1.0);
      cconv->bias.fill_(std::log(5.0 / static_cast<double>(nc) / std::pow(640.0 / s, 2.0)));
    }
}

}  // namespace graph
