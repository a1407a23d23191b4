// The generic op sweep (in the spirit of ggml's test-backend-ops): every row exercises one or more
// kernel entries of the backend table through the public op (or, for the fused optimizer
// entries, the entry itself). For every backend present, every floating dtype that ALL of the
// row's entries claim, and every row, the forward result is compared with the reference (the
// CPU backend in F64 where the entries have F64, else an independent host computation), and
// the gradient with finite differences (CPU F64) or with the CPU F64 autograd gradient (other
// backends and dtypes). A combination a backend does not claim is reported as "not supported",
// not failed; a backend whose device is absent (CUDA here) is reported as skipped. The sweep also
// fails when a registered entry has no row, so a new kernel needs a row here (and nothing else:
// new backends and dtypes plug in without new test code).
#include <gtest/gtest.h>
#include <opencv2/imgproc.hpp>
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/core_kernels.h"
#include "engine/layout.h"
#include "engine/rng.h"
#include "kernels/common/amp.h"
#include "kernels/common/augment.h"
#include "kernels/common/box_loss.h"
#include "kernels/common/comm.h"
#include "kernels/common/nms.h"
#include "kernels/common/optim.h"
#include "kernels/common/rng.h"
#include "kernels/cpu/nms.h"
#include "ops/cbfuse.h"
#include "ops/ciou.h"
#include "ops/dfl.h"
#include "ops/nms.h"
#include "ops/autocast.h"
#include "ops/ops.h"
#include "ops/tal.h"
#include "ops/yolo_loss.h"
#include "tests/testutil.h"

namespace {

using engine::Device;
using engine::DType;
using engine::Tensor;
using Inputs = std::vector<Tensor>;

/// One input of a row: its F64 master value, whether it takes the swept dtype (else it keeps
/// the master's dtype) and whether the op is differentiated with respect to it.
struct Input {
  Tensor master;
  bool follows_dtype = true;
  bool differentiable = true;
};

enum class GradMode {
  None,        ///< forward only (non-differentiable ops, in-place methods, fused steps)
  FiniteDiff,  ///< CPU F64: central differences; elsewhere: vs the CPU F64 autograd gradient
  Reference,   ///< backward deliberately not the exact derivative (CIoU's constant alpha):
               ///< only compared with the CPU F64 autograd gradient
};

struct Row {
  std::string name;
  std::vector<std::string> entries;  ///< every kernel entry the row needs (all must claim the dtype)
  std::function<std::vector<Input>()> inputs;
  std::function<Tensor(const Inputs&)> f;  ///< the op under test (inputs on the swept device/dtype)
  GradMode grad = GradMode::FiniteDiff;
  /// Optional reference computed independently of the kernels (for entries without F64); gets
  /// the inputs as F64 CPU tensors, returns the expected output (compared in F64).
  std::function<Tensor(const Inputs&)> reference;
  double fd_eps = 1e-6, fd_rtol = 1e-5, fd_atol = 1e-7;
};

/// Gradient recording on in its scope (a row that differentiates inside its op), restored after.
struct GradOn {
  GradOn() : prev(engine::autograd::grad_enabled()) { engine::autograd::set_grad_enabled(true); }
  ~GradOn() { engine::autograd::set_grad_enabled(prev); }
  GradOn(const GradOn&) = delete;
  GradOn& operator=(const GradOn&) = delete;
  bool prev;
};

Tensor rnd(const engine::Shape& s, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return testutil::random_tensor(s, seed, lo, hi, DType::F64);
}

/// Tolerances (rtol, atol) of a dtype against an F64 reference; F32 allows for float accumulation
/// over a few hundred terms (conv, matmul, softmax), F16/BF16 for one rounding of each operand.
std::pair<double, double> tol(DType dt) {
  switch (dt) {
    case DType::F64: return {1e-9, 1e-11};
    case DType::F32: return {2e-4, 2e-5};
    case DType::F16: return {1e-2, 1e-2};
    case DType::BF16: return {5e-2, 5e-2};
    default: return {0, 0};
  }
}

// --- rows -----------------------------------------------------------------------------------------

std::vector<Row> rows() {
  std::vector<Row> r;
  auto in = [](Tensor t, bool diff = true) { return Input{std::move(t), true, diff}; };
  auto fixed = [](Tensor t) { return Input{std::move(t), false, false}; };

  // Core entries (engine/core_kernels.h).
  r.push_back({"copy (permute + contiguous)", {"copy_strided"}, [=] { return std::vector<Input>{in(rnd({3, 4, 5}, 1))}; },
               [](const Inputs& x) { return x[0].permute({2, 0, 1}).contiguous(); }});
  r.push_back({"copy (dtype conversion)", {"copy_strided"}, [=] { return std::vector<Input>{in(rnd({7, 5}, 2))}; },
               [](const Inputs& x) { return x[0].to(DType::F64).to(x[0].dtype()); }});
  r.push_back({"fill", {"fill_strided", "binary_forward", "binary_backward"},
               [=] { return std::vector<Input>{in(rnd({4, 6}, 3))}; },
               [](const Inputs& x) {
                 Tensor c = Tensor::full({4, 6}, 1.5, x[0].dtype(), x[0].device());
                 c.slice(1, 0, 6, 2).fill_(-0.5);  // strided fill
                 return ops::mul(x[0], c);
               }});
  r.push_back({"axpy (add_)", {"axpy_strided", "copy_strided"},
               [=] { return std::vector<Input>{in(rnd({5, 6}, 4), false), in(rnd({6}, 5), false)}; },
               [](const Inputs& x) {
                 engine::autograd::NoGradGuard ng;
                 Tensor y = x[0].clone();
                 y.add_(x[1], -0.75);  // broadcast source
                 return y;
               },
               GradMode::None});
  r.push_back({"scale (mul_)", {"scale_strided", "copy_strided"}, [=] { return std::vector<Input>{in(rnd({5, 6}, 6), false)}; },
               [](const Inputs& x) {
                 engine::autograd::NoGradGuard ng;
                 Tensor y = x[0].clone();
                 y.transpose(0, 1).mul_(1.3);
                 return y;
               },
               GradMode::None});
  r.push_back({"sum / mean", {"sum_rows"}, [=] { return std::vector<Input>{in(rnd({3, 4, 5}, 7))}; },
               [](const Inputs& x) {
                 return ops::add(ops::add(ops::sum(x[0], {1}), ops::mean(x[0], {1}, true).reshape({3, 5})),
                                 ops::sum(ops::mean(x[0], {0, 2}).reshape({1, 4}), {1}, true));
               }});
  r.push_back({"uniform_fill / normal_fill", {"uniform_fill", "normal_fill"},
               [=] { return std::vector<Input>{in(rnd({1}, 0), false)}; },  // only says which device
               [](const Inputs& x) {
                 // Draws in F32 on the swept device into the two halves of one buffer (no other
                 // entry involved, so the row runs wherever the fills exist).
                 Tensor out = Tensor::empty({2002}, DType::F32, x[0].device());
                 engine::Generator g(42, 7);
                 Tensor u = out.narrow(0, 0, 1001), n = out.narrow(0, 1001, 1001);
                 engine::uniform_(u, g, -2.0, 3.0);
                 engine::normal_(n, g, 0.5, 2.0);
                 return out;
               },
               GradMode::None,
               [](const Inputs&) {
                 std::vector<double> v;
                 const uint64_t off_u = 0, off_n = (1001 + 3) / 4;
                 for (uint64_t i = 0; i < 1001; ++i) v.push_back(kernels::philox_uniform_elem(42, 7, off_u, i, -2.f, 3.f));
                 for (uint64_t i = 0; i < 1001; ++i) v.push_back(kernels::philox_normal_elem(42, 7, off_n, i, 0.5f, 2.f));
                 return Tensor::from_vector(v, {2002});
               }});

  // Pointwise ops.
  for (const char* op : {"add", "sub", "mul", "div"}) {
    const std::string o = op;
    r.push_back({std::string(op) + " (broadcast)", {"binary_forward", "binary_backward", "sum_rows"},
                 [=] { return std::vector<Input>{in(rnd({3, 1, 5}, 10)), in(rnd({4, 1}, 11, 0.5, 2.0))}; },
                 [o](const Inputs& x) {
                   if (o == "add") return ops::add(x[0], x[1]);
                   if (o == "sub") return ops::sub(x[0], x[1]);
                   if (o == "mul") return ops::mul(x[0], x[1]);
                   return ops::div(x[0], x[1]);
                 }});
  }
  struct U {
    const char* name;
    std::function<Tensor(const Tensor&)> f;
    double lo, hi;
  };
  for (const U& u : std::vector<U>{{"add_scalar", [](const Tensor& t) { return ops::add_scalar(t, 0.7); }, -1, 1},
                                   {"mul_scalar", [](const Tensor& t) { return ops::mul_scalar(t, -1.3); }, -1, 1},
                                   {"neg", [](const Tensor& t) { return ops::neg(t); }, -1, 1},
                                   {"exp", [](const Tensor& t) { return ops::exp(t); }, -1, 1},
                                   {"log", [](const Tensor& t) { return ops::log(t); }, 0.5, 2},
                                   {"sqrt", [](const Tensor& t) { return ops::sqrt(t); }, 0.5, 2},
                                   {"pow_scalar", [](const Tensor& t) { return ops::pow_scalar(t, 2.5); }, 0.5, 2},
                                   {"clamp", [](const Tensor& t) { return ops::clamp(t, -0.4, 0.3); }, -1, 1},
                                   {"silu", [](const Tensor& t) { return ops::silu(t); }, -4, 4},
                                   {"sigmoid", [](const Tensor& t) { return ops::sigmoid(t); }, -4, 4},
                                   {"relu", [](const Tensor& t) { return ops::relu(t); }, -1, 1},
                                   {"leaky_relu", [](const Tensor& t) { return ops::leaky_relu(t, 0.1); }, -1, 1}}) {
    auto f = u.f;
    const double lo = u.lo, hi = u.hi;
    // A transposed (strided) input exercises the strided iterator.
    r.push_back({u.name, {"unary_forward", "unary_backward"}, [=] { return std::vector<Input>{in(rnd({5, 7}, 20, lo, hi))}; },
                 [f](const Inputs& x) { return f(x[0].transpose(0, 1)); }});
  }
  r.push_back({"bce_with_logits", {"bce_with_logits_forward", "bce_with_logits_backward", "sum_rows"},
               [=] { return std::vector<Input>{in(rnd({4, 6}, 30, -4, 4)), in(rnd({6}, 31, 0, 1))}; },
               [](const Inputs& x) { return ops::bce_with_logits(x[0], x[1]); }});

  // Convolution, normalisation, spatial, shape, linear algebra.
  r.push_back({"conv2d (groups, stride, dilation, bias)",
               {"conv2d_forward", "conv2d_backward_data", "conv2d_backward_weights"},
               [=] { return std::vector<Input>{in(rnd({2, 4, 7, 6}, 40)), in(rnd({6, 2, 3, 3}, 41)), in(rnd({6}, 42))}; },
               [](const Inputs& x) { return ops::conv2d(x[0], x[1], x[2], {2, 1}, {1, 2}, {1, 2}, 2); }});
  r.push_back({"conv2d (1x1, no bias)", {"conv2d_forward", "conv2d_backward_data", "conv2d_backward_weights"},
               [=] { return std::vector<Input>{in(rnd({1, 3, 5, 5}, 43)), in(rnd({4, 3, 1, 1}, 44))}; },
               [](const Inputs& x) { return ops::conv2d(x[0], x[1], Tensor()); }});
  // Both backward directions in one call (kConv2dBackward, where a backend has it: ops::conv2d's
  // backward then takes it instead of the two entries above).
  r.push_back({"conv2d backward in one call (groups, stride, dilation, bias)", {"conv2d_forward", "conv2d_backward"},
               [=] { return std::vector<Input>{in(rnd({2, 4, 7, 6}, 140)), in(rnd({6, 2, 3, 3}, 141)), in(rnd({6}, 142))}; },
               [](const Inputs& x) { return ops::conv2d(x[0], x[1], x[2], {2, 1}, {1, 2}, {1, 2}, 2); }});
  // The blocked training convolution under BF16 autocast (the CPU's --amp bf16): the forward keeps
  // its BF16 copy of x for the backward weights (kConv2dForwardKeepInput). Output: y and dw (for
  // dy = 1, exact in BF16) flattened; reference: F64 on the BF16-rounded x and w where this CPU
  // has native BF16 (ops::cpu_bf16_convolutions), on x and w themselves elsewhere.
  r.push_back({"conv2d blocked, BF16 math, x kept for dw", {"conv2d_forward_keep_input", "conv2d_backward"},
               [=] { return std::vector<Input>{in(rnd({2, 16, 6, 5}, 143), false), in(rnd({16, 16, 3, 3}, 144), false)}; },
               [](const Inputs& x) {
                 GradOn on;  // the sweep runs GradMode::None rows without gradients
                 Tensor w = x[1].detach().clone();
                 w.set_requires_grad(true);
                 Tensor y;
                 {
                   ops::AutocastGuard ac(DType::BF16);
                   y = ops::conv2d_blocked(ops::to_blocked(x[0], 16), w, Tensor(), {1, 1}, {1, 1}, {1, 1}, 1, false, 16);
                 }
                 y = ops::from_blocked(y);
                 ops::sum(y).backward();
                 return ops::concat({y.detach().reshape({-1}), w.grad().reshape({-1})}, 0);
               },
               GradMode::None,
               [](const Inputs& x) {
                 GradOn on;
                 const bool bf16 = ops::cpu_bf16_convolutions(Device::cpu());
                 const Tensor xr = bf16 ? x[0].to(DType::BF16).to(DType::F64) : x[0];
                 Tensor wr = (bf16 ? x[1].to(DType::BF16).to(DType::F64) : x[1]).detach();
                 wr.set_requires_grad(true);
                 Tensor y = ops::conv2d(xr, wr, Tensor(), {1, 1}, {1, 1});
                 ops::sum(y).backward();
                 return ops::concat({y.detach().reshape({-1}), wr.grad().reshape({-1})}, 0);
               }});
  r.push_back({"conv2d_bf16_math", {"conv2d_bf16_math"},
               [=] { return std::vector<Input>{in(rnd({1}, 145), false)}; },
               [](const Inputs& x) {
                 return Tensor::full({1}, ops::cpu_bf16_convolutions(x[0].device()) ? 1.0 : 0.0, x[0].dtype(),
                                     x[0].device());
               },
               GradMode::None,
               [](const Inputs& x) {  // oneDNN's avx512_core_bf16: AVX-512 F, BW, VL, DQ and BF16
                 // An ISA cap (ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA) leaves the answer to oneDNN.
                 if (std::getenv("ONEDNN_MAX_CPU_ISA") || std::getenv("DNNL_MAX_CPU_ISA"))
                   return Tensor::full({1}, ops::cpu_bf16_convolutions(Device::cpu()) ? 1.0 : 0.0, x[0].dtype());
#if defined(__x86_64__) || defined(_M_X64)
                 __builtin_cpu_init();
                 const bool want = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                                   __builtin_cpu_supports("avx512bf16");
#else
                 const bool want = false;
#endif
                 return Tensor::full({1}, want ? 1.0 : 0.0, x[0].dtype());
               }});
  // The fused inference form of a folded Conv block (no gradients), against the two-op graph.
  r.push_back({"conv2d_silu (inference, groups, stride, bias)",
               {"conv2d_bias_silu_forward"},
               [=] {
                 return std::vector<Input>{in(rnd({2, 4, 7, 6}, 45, -2, 2), false), in(rnd({6, 2, 3, 3}, 46), false),
                                           in(rnd({6}, 47), false)};
               },
               [](const Inputs& x) {
                 engine::autograd::NoGradGuard ng;
                 return ops::conv2d_silu(x[0], x[1], x[2], {2, 1}, {1, 2}, {1, 2}, 2);
               },
               GradMode::None,
               [](const Inputs& x) { return ops::silu(ops::conv2d(x[0], x[1], x[2], {2, 1}, {1, 2}, {1, 2}, 2)); }});
  r.push_back({"batch_norm (training)", {"batch_norm_forward", "batch_norm_backward"},
               [=] {
                 return std::vector<Input>{in(rnd({3, 4, 5, 2}, 50)), in(rnd({4}, 51, 0.5, 1.5)), in(rnd({4}, 52)),
                                           in(rnd({4}, 53), false), in(rnd({4}, 54, 0.5, 2), false)};
               },
               [](const Inputs& x) {
                 Tensor rm = x[3].clone(), rv = x[4].clone();  // updated in place: fresh per call
                 return ops::batch_norm(x[0], x[1], x[2], rm, rv, true, 0.03, 1e-3);
               }});
  r.push_back({"batch_norm (eval)", {"batch_norm_forward", "batch_norm_backward"},
               [=] {
                 return std::vector<Input>{in(rnd({2, 3, 4, 4}, 55)), in(rnd({3}, 56, 0.5, 1.5)), in(rnd({3}, 57)),
                                           in(rnd({3}, 58), false), in(rnd({3}, 59, 0.5, 2), false)};
               },
               [](const Inputs& x) { return ops::batch_norm(x[0], x[1], x[2], x[3], x[4], false, 0.03, 1e-3); }});
  r.push_back({"batch_norm_silu (training)", {"batch_norm_silu_forward", "batch_norm_silu_backward"},
               [=] {
                 // 8 x 9 maps: the fused path runs from 64 elements per (sample, channel).
                 return std::vector<Input>{in(rnd({2, 4, 8, 9}, 61)), in(rnd({4}, 62, 0.5, 1.5)), in(rnd({4}, 63)),
                                           in(rnd({4}, 64), false), in(rnd({4}, 65, 0.5, 2), false)};
               },
               [](const Inputs& x) {
                 Tensor rm = x[3].clone(), rv = x[4].clone();  // updated in place: fresh per call
                 return ops::batch_norm_silu(x[0], x[1], x[2], rm, rv, true, 0.03, 1e-3);
               }});
  r.push_back({"batch_norm_silu (eval)", {"batch_norm_silu_forward", "batch_norm_silu_backward"},
               [=] {
                 return std::vector<Input>{in(rnd({2, 3, 8, 8}, 66)), in(rnd({3}, 67, 0.5, 1.5)), in(rnd({3}, 68)),
                                           in(rnd({3}, 69), false), in(rnd({3}, 70, 0.5, 2), false)};
               },
               [](const Inputs& x) { return ops::batch_norm_silu(x[0], x[1], x[2], x[3], x[4], false, 0.03, 1e-3); }});
  r.push_back({"upsample_nearest", {"upsample_nearest_forward", "upsample_nearest_backward"},
               [=] { return std::vector<Input>{in(rnd({2, 3, 4, 5}, 60))}; },
               [](const Inputs& x) { return ops::upsample_nearest(x[0].transpose(2, 3), 2); }});
  r.push_back({"cbfuse", {"cbfuse_forward", "cbfuse_backward"},
               [=] {
                 return std::vector<Input>{in(rnd({2, 5, 2, 3}, 69)), in(rnd({2, 3, 4, 6}, 70)),
                                           in(rnd({2, 3, 6, 4}, 71))};
               },
               [](const Inputs& x) {  // a channel slice (factor 2), a contiguous piece (factor 1), strided x
                 return ops::cbfuse({ops::split(x[0], {1, 3, 1}, 1)[1], x[1]}, x[2].transpose(2, 3));
               }});
  r.push_back({"max_pool2d", {"max_pool2d_forward", "max_pool2d_backward"},
               [=] {
                 // Distinct multiples of 1/256 (i * 97 mod 511 is a permutation): exact in f16 and
                 // bf16. Random values would round to ties in some f16/bf16 windows, where the
                 // first maximum wins and the gradient moves away from the F64 reference's argmax.
                 std::vector<double> v(2 * 3 * 7 * 8);
                 for (size_t i = 0; i < v.size(); ++i) v[i] = double(int64_t(i * 97 % 511) - 255) / 256;
                 return std::vector<Input>{in(Tensor::from_vector(v, {2, 3, 7, 8}))};
               },
               [](const Inputs& x) { return ops::max_pool2d(x[0], 3, 2, 1); }});
  r.push_back({"avg_pool2d", {"avg_pool2d_forward", "avg_pool2d_backward"},
               [=] { return std::vector<Input>{in(rnd({2, 3, 7, 8}, 62))}; },
               [](const Inputs& x) { return ops::avg_pool2d(x[0], 2, 1, 0); }});
  // The blocked layout's spatial entries (CPU), through the ops on a blocked x, against the same op
  // on the plain x (forward), and differentiated (the backward entries and the layout conversions);
  // and the channel block query against its definition.
  for (int64_t block : {8, 16}) {
    const std::string b = std::to_string(block);
    r.push_back({"max_pool2d (blocked " + b + ")", {"blocked_pool2d"},
                 [=] { return std::vector<Input>{in(rnd({2, 32, 7, 8}, 90), false)}; },
                 [block](const Inputs& x) { return ops::from_blocked(ops::max_pool2d(ops::to_blocked(x[0], block), 3, 2, 1)); },
                 GradMode::None, [](const Inputs& x) { return ops::max_pool2d(x[0], 3, 2, 1); }});
    r.push_back({"avg_pool2d (blocked " + b + ")", {"blocked_pool2d"},
                 [=] { return std::vector<Input>{in(rnd({1, 16, 9, 6}, 91), false)}; },
                 [block](const Inputs& x) { return ops::from_blocked(ops::avg_pool2d(ops::to_blocked(x[0], block), 2, 1, 0)); },
                 GradMode::None, [](const Inputs& x) { return ops::avg_pool2d(x[0], 2, 1, 0); }});
    r.push_back({"upsample_nearest (blocked " + b + ")", {"blocked_upsample_nearest"},
                 [=] { return std::vector<Input>{in(rnd({2, 16, 3, 5}, 92), false)}; },
                 [block](const Inputs& x) { return ops::from_blocked(ops::upsample_nearest(ops::to_blocked(x[0], block), 2)); },
                 GradMode::None, [](const Inputs& x) { return ops::upsample_nearest(x[0], 2); }});
    r.push_back({"to_blocked / from_blocked (" + b + ")", {"blocked_reorder"},
                 [=] { return std::vector<Input>{in(rnd({2, 32, 3, 5}, 94))}; },
                 [block](const Inputs& x) { return ops::from_blocked(ops::to_blocked(x[0], block)); },
                 GradMode::FiniteDiff, [](const Inputs& x) { return x[0]; }});
    r.push_back({"avg_pool2d backward (blocked " + b + ")",
                 {"blocked_reorder", "blocked_pool2d", "blocked_avg_pool2d_backward"},
                 [=] { return std::vector<Input>{in(rnd({2, 16, 5, 6}, 95))}; },
                 [block](const Inputs& x) { return ops::from_blocked(ops::avg_pool2d(ops::to_blocked(x[0], block), 2, 1, 0)); },
                 GradMode::FiniteDiff, [](const Inputs& x) { return ops::avg_pool2d(x[0], 2, 1, 0); }});
    r.push_back({"upsample_nearest backward (blocked " + b + ")",
                 {"blocked_reorder", "blocked_upsample_nearest", "blocked_upsample_nearest_backward"},
                 [=] { return std::vector<Input>{in(rnd({1, 16, 3, 4}, 96))}; },
                 [block](const Inputs& x) { return ops::from_blocked(ops::upsample_nearest(ops::to_blocked(x[0], block), 2)); },
                 GradMode::FiniteDiff, [](const Inputs& x) { return ops::upsample_nearest(x[0], 2); }});
  }
  r.push_back({"preferred_channel_block", {"preferred_channel_block"},
               [=] { return std::vector<Input>{in(rnd({1}, 93), false)}; },
               [](const Inputs& x) {
                 return Tensor::full({1}, static_cast<double>(ops::channel_block(x[0].device())), x[0].dtype(),
                                     x[0].device());
               },
               GradMode::None,
               [](const Inputs& x) {  // 16 with AVX-512, 8 with AVX2, 0 elsewhere (on the CPU)
#if defined(__x86_64__) || defined(_M_X64)
                 __builtin_cpu_init();
                 const double want = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")
                                         ? 16
                                     : __builtin_cpu_supports("avx2") ? 8
                                                                      : 0;
#else
                 const double want = 0;
#endif
                 return Tensor::full({1}, want, x[0].dtype());
               }});
  r.push_back({"concat / split", {"concat_forward", "concat_backward"},
               [=] { return std::vector<Input>{in(rnd({2, 3, 4}, 63)), in(rnd({2, 5, 4}, 64))}; },
               [](const Inputs& x) {
                 Tensor c = ops::concat({x[0], x[1].transpose(0, 0)}, 1);
                 auto parts = ops::split(c, {6, 2}, 1);
                 return ops::concat({parts[1], parts[0]}, 1);
               }});
  r.push_back({"softmax / log_softmax", {"softmax_forward", "softmax_backward", "binary_forward", "binary_backward"},
               [=] { return std::vector<Input>{in(rnd({3, 5, 4}, 65, -3, 3))}; },
               [](const Inputs& x) { return ops::add(ops::softmax(x[0], 1), ops::log_softmax(x[0], -1)); }});
  r.push_back({"matmul (batched, broadcast)", {"matmul_forward", "sum_rows"},
               [=] { return std::vector<Input>{in(rnd({2, 3, 4}, 66)), in(rnd({4, 5}, 67))}; },
               [](const Inputs& x) { return ops::matmul(x[0], x[1]); }});

  // Loss pieces.
  auto boxes = [](uint64_t seed) {
    // xyxy boxes with x2 > x1, y2 > y1 (well away from degenerate ones).
    Tensor a = rnd({9, 2}, seed, 0, 10), wh = rnd({9, 2}, seed + 1, 1, 6);
    return ops::concat({a, ops::add(a, wh)}, 1).contiguous();
  };
  r.push_back({"ciou", {"ciou_forward", "ciou_backward"}, [=] { return std::vector<Input>{in(boxes(70)), in(boxes(72))}; },
               [](const Inputs& x) { return ops::ciou(x[0], x[1]); }, GradMode::Reference});
  r.push_back({"dfl", {"dfl_forward", "dfl_backward"},
               [=] { return std::vector<Input>{in(rnd({5, 4, 16}, 74, -2, 2)), fixed(rnd({5, 4}, 75, 0.2, 14.7))}; },
               [](const Inputs& x) { return ops::dfl(x[0], x[1].to(x[0].dtype()).to(x[0].device())); }});
  r.push_back({"tal_assign", {"tal_assign"},
               [=] {
                 // 2 images, 5x5 grid at stride 8 (A = 25), 2 gts in image 0, 1 in image 1.
                 Tensor ps = rnd({2, 25, 3}, 80, 0.05, 0.95), pb = rnd({2, 25, 4}, 81, 0, 1);
                 std::vector<double> anc;
                 for (int y = 0; y < 5; ++y)
                   for (int x = 0; x < 5; ++x) anc.insert(anc.end(), {8.0 * x + 4, 8.0 * y + 4});
                 Tensor gl = Tensor::from_vector<double>({0, 2, 1, 0}, {2, 2, 1});
                 Tensor gb = Tensor::from_vector<double>({2, 3, 25, 22, 14, 10, 39, 38, 5, 20, 30, 39, 0, 0, 0, 0}, {2, 2, 4});
                 Tensor mg = Tensor::from_vector<double>({1, 1, 1, 0}, {2, 2, 1});
                 // pd_bboxes near the gts: the anchors' own cells.
                 Tensor pbox = ops::add(ops::concat({Tensor::from_vector(anc, {25, 2}), Tensor::from_vector(anc, {25, 2})}, 1)
                                            .unsqueeze(0)
                                            .expand({2, 25, 4}),
                                        ops::mul_scalar(ops::sub(pb, Tensor::full({}, 0.5, DType::F64)), 8.0));
                 return std::vector<Input>{in(ps, false), in(pbox.contiguous(), false), in(Tensor::from_vector(anc, {25, 2}), false),
                                           in(gl, false), in(gb, false), in(mg, false)};
               },
               [](const Inputs& x) {
                 ops::TalConfig cfg;
                 cfg.topk = 4;
                 cfg.num_classes = 3;
                 ops::TalResult t = ops::tal_assign(x[0], x[1], x[2], x[3], x[4], x[5], cfg);
                 const DType dt = x[0].dtype();
                 // Packed on the host: the row checks tal_assign, not the device's concat/convert.
                 const Device h = Device::cpu();
                 return ops::concat({t.target_labels.to(h).to(dt).reshape({2, 25, 1}), t.target_bboxes.to(h),
                                     t.target_scores.to(h), t.fg_mask.to(h).to(dt).reshape({2, 25, 1}),
                                     t.target_gt_idx.to(h).to(dt).reshape({2, 25, 1})},
                                    2);
               },
               GradMode::None});
  {
    // 32x32 input: levels 4x4, 2x2, 1x1 of 64 + 3 channels; two targets in image 0. The
    // assignment is a constant of the loss (official no_grad assigner): it is computed once at
    // the unperturbed F64 point and frozen (converted to each swept dtype and device), so finite
    // differences see the loss as the backward does.
    auto frozen = std::make_shared<std::vector<ops::TalResult>>();
    const Tensor targets = Tensor::from_vector<double>({0, 1, 0.5, 0.5, 0.5, 0.4, 0, 0, 0.25, 0.3, 0.3, 0.35}, {2, 6});
    r.push_back({"yolo_loss (decode, branch loss, frozen assignment)",
                 {"yolo_decode", "yolo_branch_loss_forward", "yolo_loss_finish", "yolo_branch_loss_backward",
                  "copy_strided"},
                 [=] {
                   std::vector<Input> v{in(rnd({1, 67, 4, 4}, 90, -2, 2)), in(rnd({1, 67, 2, 2}, 91, -2, 2)),
                                        in(rnd({1, 67, 1, 1}, 92, -2, 2))};
                   engine::autograd::NoGradGuard ng;
                   *frozen = ops::yolo_loss({{v[0].master, v[1].master, v[2].master}}, targets,
                                            ops::YoloLossConfig::single(3))
                                 .assign;
                   return v;
                 },
                 [=](const Inputs& x) {
                   ops::YoloLossConfig cfg = ops::YoloLossConfig::single(3);
                   for (const ops::TalResult& t : *frozen) {
                     ops::TalResult c = t;
                     c.target_scores = t.target_scores.to(x[0].dtype()).to(x[0].device());
                     c.target_bboxes = t.target_bboxes.to(x[0].dtype()).to(x[0].device());
                     c.fg_mask = t.fg_mask.to(x[0].device());
                     cfg.fixed_assign.push_back(c);
                   }
                   return ops::yolo_loss({{x[0], x[1], x[2]}}, targets, cfg).total.reshape({1});
                 }});
  }

  // Fused optimizer, EMA and gradient-norm entries over flat buffers (F32): called directly, with
  // two ranges and a gap; the reference applies the shared element math on the host.
  struct Flat {
    static std::vector<kernels::FlatRange> ranges() { return {{0, 37}, {64, 70}}; }
    // The results of one step side by side, joined on the host (the row checks the step entry,
    // not concat, which a backend may lack).
    static Tensor join(const std::vector<Tensor>& ts) {
      std::vector<Tensor> h;
      for (const Tensor& t : ts) h.push_back(t.to(Device::cpu()));
      return ops::concat(h, 0);
    }
  };
  auto flat_inputs = [=](uint64_t seed) {
    return std::vector<Input>{in(rnd({134}, seed), false), in(rnd({134}, seed + 1), false), in(rnd({134}, seed + 2, 0, 1), false),
                              in(rnd({134}, seed + 3, 0, 1), false)};
  };
  auto host_ranges = [](const std::function<void(int64_t)>& f) {
    for (const auto& rg : Flat::ranges())
      for (int64_t i = rg.offset; i < rg.offset + rg.n; ++i) f(i);
  };
  r.push_back({"sgd_step", {"sgd_step"}, [=] { return flat_inputs(100); },
               [](const Inputs& x) {
                 Tensor p = x[0].clone(), buf = x[2].clone();
                 kernels::SgdScalars s{0.1f, 0.9f, 1.f, 0.01f, true, false};
                 auto k = engine::kernel(kernels::kSgdStep, DType::F32, p.device());
                 const auto rg = Flat::ranges();
                 k.fn(k.ctx, p.data<float>(), x[1].data<float>(), buf.data<float>(), rg.data(), 2, s);
                 return Flat::join({p, buf});
               },
               GradMode::None,
               [=](const Inputs& x) {
                 auto p = x[0].to_vector<float>(), g = x[1].to_vector<float>(), b = x[2].to_vector<float>();
                 kernels::SgdScalars s{0.1f, 0.9f, 1.f, 0.01f, true, false};
                 host_ranges([&](int64_t i) { kernels::sgd_update(p[i], g[i], b[i], s); });
                 p.insert(p.end(), b.begin(), b.end());
                 return Tensor::from_vector<float>(p, {268}).to(DType::F64);
               }});
  r.push_back({"adam_step (amsgrad)", {"adam_step"}, [=] { return flat_inputs(110); },
               [](const Inputs& x) {
                 Tensor p = x[0].clone(), m = x[2].clone(), v = x[3].clone(), vmax = x[3].clone();
                 kernels::AdamScalars s;
                 s.amsgrad = true;
                 s.decoupled = true;
                 s.decay_factor = 0.999f;
                 s.step_size = 0.01f;
                 s.bias_correction2_sqrt = 0.3f;
                 auto k = engine::kernel(kernels::kAdamStep, DType::F32, p.device());
                 const auto rg = Flat::ranges();
                 k.fn(k.ctx, p.data<float>(), x[1].data<float>(), m.data<float>(), v.data<float>(), vmax.data<float>(),
                      rg.data(), 2, s);
                 return Flat::join({p, m, v, vmax});
               },
               GradMode::None,
               [=](const Inputs& x) {
                 auto p = x[0].to_vector<float>(), g = x[1].to_vector<float>(), m = x[2].to_vector<float>(),
                      v = x[3].to_vector<float>(), vm = x[3].to_vector<float>();
                 kernels::AdamScalars s;
                 s.amsgrad = true;
                 s.decoupled = true;
                 s.decay_factor = 0.999f;
                 s.step_size = 0.01f;
                 s.bias_correction2_sqrt = 0.3f;
                 host_ranges([&](int64_t i) { kernels::adam_update(p[i], g[i], m[i], v[i], vm[i], s); });
                 for (auto* w : {&m, &v, &vm}) p.insert(p.end(), w->begin(), w->end());
                 return Tensor::from_vector<float>(p, {536}).to(DType::F64);
               }});
  r.push_back({"lion_step", {"lion_step"}, [=] { return flat_inputs(120); },
               [](const Inputs& x) {
                 Tensor p = x[0].clone(), m = x[2].clone();
                 kernels::LionScalars s{1e-3f, 0.9f, 0.99f, 0.1f, 0.01f, 0.9999f};
                 auto k = engine::kernel(kernels::kLionStep, DType::F32, p.device());
                 const auto rg = Flat::ranges();
                 k.fn(k.ctx, p.data<float>(), x[1].data<float>(), m.data<float>(), rg.data(), 2, s);
                 return Flat::join({p, m});
               },
               GradMode::None,
               [=](const Inputs& x) {
                 auto p = x[0].to_vector<float>(), g = x[1].to_vector<float>(), m = x[2].to_vector<float>();
                 kernels::LionScalars s{1e-3f, 0.9f, 0.99f, 0.1f, 0.01f, 0.9999f};
                 host_ranges([&](int64_t i) { kernels::lion_update(p[i], g[i], m[i], s); });
                 p.insert(p.end(), m.begin(), m.end());
                 return Tensor::from_vector<float>(p, {268}).to(DType::F64);
               }});
  r.push_back({"ema_update", {"ema_update"}, [=] { return flat_inputs(130); },
               [](const Inputs& x) {
                 Tensor e = x[0].clone();
                 auto k = engine::kernel(kernels::kEmaUpdate, DType::F32, e.device());
                 k.fn(k.ctx, e.data<float>(), x[1].data<float>(), e.numel(), 0.75f, 0.25f);
                 return e;
               },
               GradMode::None,
               [](const Inputs& x) {
                 auto e = x[0].to_vector<float>(), m = x[1].to_vector<float>();
                 for (size_t i = 0; i < e.size(); ++i) e[i] = kernels::ema_blend(e[i], m[i], 0.75f, 0.25f);
                 return Tensor::from_vector<float>(e, {134}).to(DType::F64);
               }});
  r.push_back({"comm_accumulate, comm_scale (the all-reduce's local reduction)", {"comm_accumulate", "comm_scale"},
               [=] { return std::vector<Input>{in(rnd({1037}, 150), false), in(rnd({1037}, 151), false)}; },
               [](const Inputs& x) {
                 Tensor d = x[0].clone();
                 auto& ctx = engine::backend(d.device().type).context(d.device());
                 ctx.synchronize(engine::StreamKind::Compute);  // the entries run on the Communication stream
                 auto acc = engine::kernel(kernels::kCommAccumulate, d.dtype(), d.device());
                 acc.fn(acc.ctx, d.dtype(), d.data_ptr(), x[1].data_ptr(), d.numel());
                 auto sc = engine::kernel(kernels::kCommScale, d.dtype(), d.device());
                 sc.fn(sc.ctx, d.dtype(), d.data_ptr(), d.numel(), 0.25);
                 ctx.synchronize(engine::StreamKind::Communication);
                 return d;
               },
               GradMode::None});
  r.push_back({"comm_compress, comm_decompress (gradient wire dtype)", {"comm_compress", "comm_decompress"},
               [=] { return std::vector<Input>{in(rnd({1037}, 152, -3, 3), false)}; },
               [](const Inputs& x) {
                 // The swept dtype is the wire dtype; the gradient side is F32.
                 const DType wire = x[0].dtype();
                 Tensor g = x[0].to(DType::F32).contiguous();
                 Tensor w = Tensor::empty({g.numel()}, wire, g.device());
                 Tensor back = Tensor::empty({g.numel()}, DType::F32, g.device());
                 auto& ctx = engine::backend(g.device().type).context(g.device());
                 ctx.synchronize(engine::StreamKind::Compute);
                 auto c = engine::kernel(kernels::kCommCompress, wire, g.device());
                 c.fn(c.ctx, wire, g.data<float>(), w.data_ptr(), g.numel(), 0.5);
                 auto d = engine::kernel(kernels::kCommDecompress, wire, g.device());
                 d.fn(d.ctx, wire, w.data_ptr(), back.data<float>(), g.numel(), 4.0);
                 ctx.synchronize(engine::StreamKind::Communication);
                 return back.to(wire);
               },
               GradMode::None,
               [](const Inputs& x) { return ops::mul(x[0].to(DType::F64), Tensor::full({}, 2.0, DType::F64)); }});
  // AMP loss scaling (kernels/common/amp.h): unscale over two ranges (finite values; an inf inside
  // a range sets found_inf; a NaN in the gap between the ranges does not), then the scale update
  // after a finite step (growth at the interval) and after an inf (back-off).
  r.push_back({"amp_unscale, amp_update_scale", {"amp_unscale", "amp_update_scale"},
               [=] { return std::vector<Input>{in(rnd({134}, 160), false)}; },
               [](const Inputs& x) {
                 const Device dev = x[0].device();
                 const auto rg = Flat::ranges();
                 auto un = engine::kernel(kernels::kAmpUnscale, DType::F32, dev);
                 auto up = engine::kernel(kernels::kAmpUpdateScale, DType::F32, dev);
                 Tensor inv = Tensor::full({1}, 0.25, DType::F32, dev);
                 std::vector<Tensor> found;
                 Tensor g1 = x[0].clone();
                 std::vector<float> host = x[0].to_vector<float>();
                 std::vector<float> h2 = host, h3 = host;
                 h2[100] = INFINITY;
                 h3[50] = NAN;  // in the gap: not checked
                 std::vector<Tensor> gs = {g1, Tensor::from_vector<float>(h2, {134}).to(dev),
                                           Tensor::from_vector<float>(h3, {134}).to(dev)};
                 for (Tensor& g : gs) {
                   found.push_back(Tensor::zeros({1}, DType::F32, dev));
                   un.fn(un.ctx, g.data<float>(), rg.data(), 2, inv.data<float>(), found.back().data<float>());
                 }
                 std::vector<Tensor> out = {g1};
                 for (int k = 0; k < 2; ++k) {
                   Tensor scale = Tensor::full({1}, 1024.0, DType::F32, dev);
                   Tensor tracker = Tensor::from_vector<int32_t>({1}, {1}).to(dev);
                   up.fn(up.ctx, scale.data<float>(), tracker.data<int32_t>(), found[static_cast<size_t>(k)].data<float>(),
                         2.0, 0.5, 2);
                   out.push_back(scale);
                   out.push_back(tracker.to(Device::cpu()).to(DType::F32));
                 }
                 out.insert(out.end(), found.begin(), found.end());
                 return Flat::join(out);
               },
               GradMode::None,
               [](const Inputs& x) {
                 auto g = x[0].to_vector<float>();
                 for (const auto& rg : Flat::ranges())
                   for (int64_t i = rg.offset; i < rg.offset + rg.n; ++i) g[i] = g[i] * 0.25f;
                 // finite: tracker 1 -> 2 == interval: scale 2048, tracker 0; inf: 512, 0.
                 for (float v : {2048.f, 0.f, 512.f, 0.f, 0.f, 1.f, 0.f}) g.push_back(v);
                 return Tensor::from_vector<float>(g, {141}).to(DType::F64);
               }});
  r.push_back({"sum_squares (per range)", {"sum_squares"}, [=] { return std::vector<Input>{in(rnd({70000}, 140), false)}; },
               [](const Inputs& x) {
                 const std::vector<kernels::FlatRange> rg = {{0, 5}, {5, 17000}, {17100, 52900}};
                 Tensor out = Tensor::empty({3}, DType::F64, x[0].device());
                 auto k = engine::kernel(kernels::kSumSquares, DType::F32, x[0].device());
                 k.fn(k.ctx, x[0].data<float>(), rg.data(), 3, out.data<double>());
                 return out;
               },
               GradMode::None,
               [](const Inputs& x) {
                 auto g = x[0].to_vector<float>();
                 std::vector<double> s(3, 0.0);
                 const std::vector<kernels::FlatRange> rg = {{0, 5}, {5, 17000}, {17100, 52900}};
                 for (size_t r = 0; r < 3; ++r)
                   for (int64_t i = rg[r].offset; i < rg[r].offset + rg[r].n; ++i) s[r] += double(g[i]) * g[i];
                 return Tensor::from_vector(s, {3});
               }});
  // Gradient clipping on the device: the norm from the per-range sums, then the clip kernel with a
  // max_norm below the norm (scales every element, the gap included) and one above (no change).
  r.push_back({"grad_norm_from_sums, clip_by_norm", {"sum_squares", "grad_norm_from_sums", "clip_by_norm"},
               [=] { return std::vector<Input>{in(rnd({134}, 170), false)}; },
               [](const Inputs& x) {
                 const Device dev = x[0].device();
                 const auto rg = Flat::ranges();
                 Tensor sums = Tensor::empty({2}, DType::F64, dev), norm = Tensor::empty({1}, DType::F32, dev);
                 auto ss = engine::kernel(kernels::kSumSquares, DType::F32, dev);
                 ss.fn(ss.ctx, x[0].data<float>(), rg.data(), 2, sums.data<double>());
                 auto gn = engine::kernel(kernels::kGradNormFromSums, DType::F32, dev);
                 gn.fn(gn.ctx, sums.data<double>(), 2, norm.data<float>());
                 auto cl = engine::kernel(kernels::kClipByNorm, DType::F32, dev);
                 Tensor a = x[0].clone(), b = x[0].clone();
                 cl.fn(cl.ctx, a.data<float>(), 134, norm.data<float>(), 0.5f);
                 cl.fn(cl.ctx, b.data<float>(), 134, norm.data<float>(), 100.f);
                 return Flat::join({norm, a, b});
               },
               GradMode::None,
               [](const Inputs& x) {
                 const auto g = x[0].to_vector<float>();
                 double sum = 0;
                 for (const auto& rg : Flat::ranges()) {
                   double s = 0;
                   for (int64_t i = rg.offset; i < rg.offset + rg.n; ++i) s += double(g[i]) * g[i];
                   const double n = static_cast<float>(std::sqrt(s));
                   sum += n * n;
                 }
                 const float norm = static_cast<float>(std::sqrt(sum));
                 const float coef = 0.5f / (norm + 1e-6f);
                 std::vector<float> out = {norm};
                 for (float v : g) out.push_back(v * coef);
                 out.insert(out.end(), g.begin(), g.end());
                 return Tensor::from_vector<float>(out, {269}).to(DType::F64);
               }});
  // Batched NMS (kernels/common/nms.h, F32 only): two images [4 + 3 classes + 2 mask coefficients,
  // 40 anchors], boxes scaled to pixels, multi-label; the kept rows of both images joined. The
  // reference runs the CPU twin image by image on the same F32 values.
  r.push_back({"non_max_suppression (batched)", {"nms_batched"},
               [=] { return std::vector<Input>{in(rnd({2, 9, 40}, 180, 0, 1), false)}; },
               [](const Inputs& x) {
                 Tensor scale = Tensor::from_vector<float>({200, 200, 40, 40, 1, 1, 1, 1, 1}, {1, 9, 1});
                 Tensor pred = ops::mul(x[0], scale.to(x[0].dtype()).to(x[0].device()));
                 ops::NmsOptions opt;
                 opt.conf_thres = 0.3;
                 opt.multi_label = true;
                 opt.nm = 2;
                 opt.max_det = 20;
                 return Flat::join(ops::non_max_suppression(pred, opt));
               },
               GradMode::None,
               [](const Inputs& x) {
                 const std::vector<float> scale = {200, 200, 40, 40, 1, 1, 1, 1, 1};
                 std::vector<float> p = x[0].to(DType::F32).to_vector<float>();
                 for (size_t i = 0; i < p.size(); ++i) p[i] *= scale[(i / 40) % 9];
                 kernels::NmsConfig cfg;
                 cfg.conf_thres = 0.3f;
                 cfg.multi_label = true;
                 cfg.max_det = 20;
                 std::vector<float> all, rows;
                 for (int64_t b = 0; b < 2; ++b) {
                   kernels::cpu::non_max_suppression_image_cpu(p.data() + b * 9 * 40, 40, 1, 3, 2, 40, nullptr, 0, cfg, rows);
                   all.insert(all.end(), rows.begin(), rows.end());
                 }
                 return Tensor::from_vector<float>(all, {static_cast<int64_t>(all.size()) / 8, 8}).to(DType::F64);
               }});
  // detect's letterbox undo (kernels/common/nms.h scale_boxes, F32 only): 30 rows of 6 values in
  // -100..740 (inside, outside and across a 640 x 427 image letterboxed to 640 x 448), in place;
  // columns 4 and 5 untouched. The reference writes the formula out on the host.
  r.push_back({"scale_boxes (detect)", {"scale_boxes"},
               [=] { return std::vector<Input>{in(rnd({30, 6}, 181, -100, 740), false)}; },
               [](const Inputs& x) {
                 Tensor d = x[0].to(DType::F32).contiguous().clone();
                 const double gain = 1.0;  // min(448 / 427, 640 / 640)
                 ops::scale_boxes_round_(d, gain, (640 - 640 * gain) / 2, (448 - 427 * gain) / 2, 427, 640);
                 return d;
               },
               GradMode::None,
               [](const Inputs& x) {
                 std::vector<float> v = x[0].to(DType::F32).to_vector<float>();
                 const double gain = 1.0, pw = 0.0, ph = (448 - 427 * gain) / 2;
                 for (size_t i = 0; i < v.size(); ++i) {
                   const int k = static_cast<int>(i % 6);
                   if (k >= 4) continue;
                   double d = (static_cast<double>(v[i]) - (k % 2 == 0 ? pw : ph)) / gain;
                   d = std::clamp(d, 0.0, k % 2 == 0 ? 640.0 : 427.0);
                   v[i] = std::nearbyint(static_cast<float>(d));
                 }
                 return Tensor::from_vector<float>(v, {30, 6}).to(DType::F64);
               }});
  // Device augmentation (kernels/common/augment.h: uint8 BGR tiles in, RGB planes out as
  // float(u8) / 255 in F32/F16/BF16; no F64): one 7 x 9 image, letterboxed to 8 x 12 (resized to
  // 5 x 6 at (3, 1)) and warped (an affine scale and shift with a 12 x 10 canvas around it), against
  // OpenCV itself (cv::resize INTER_LINEAR + 114 border; cv::warpAffine INTER_LINEAR, border 114).
  // The input tensor only carries the swept device and dtype; the pixels are fixed bytes.
  struct AugImage {
    std::vector<uint8_t> bgr;  // 7 x 9 x 3
    AugImage() {
      for (int i = 0; i < 7 * 9 * 3; ++i) bgr.push_back(static_cast<uint8_t>((i * 73 + 19) % 256));
    }
  };
  static const AugImage aug_image;
  auto planes = [](const cv::Mat& bgr) {  // HWC BGR uint8 -> [1, 3, H, W] RGB / 255 (F64)
    std::vector<double> v(static_cast<size_t>(3 * bgr.rows * bgr.cols));
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < bgr.rows; ++y)
        for (int x = 0; x < bgr.cols; ++x)
          v[static_cast<size_t>((c * bgr.rows + y) * bgr.cols + x)] =
              static_cast<double>(static_cast<float>(bgr.at<cv::Vec3b>(y, x)[2 - c]) / 255.0f);
    return Tensor::from_vector<double>(v, {1, 3, bgr.rows, bgr.cols});
  };
  auto bytes_on = [](const void* p, size_t n, Device d) {
    std::vector<uint8_t> v(n);
    std::memcpy(v.data(), p, n);
    return Tensor::from_vector(v, {static_cast<int64_t>(n)}, d);
  };
  const double aug_fwd[6] = {0.9, 0.1, 1.5, -0.05, 1.1, 0.5};  // output <- canvas (2 x 3)
  r.push_back({"letterbox (device augmentation)", {"letterbox"},
               [=] { return std::vector<Input>{Input{rnd({1}, 1), true, false}}; },
               [=](const Inputs& x) {
                 const Device dev = x[0].device();
                 const DType dt = x[0].dtype();
                 kernels::LetterboxSample l{0, 27, 7, 9, 6, 5, 1, 3};  // nw 6, nh 5, top 1, left 3
                 Tensor arena = bytes_on(aug_image.bgr.data(), aug_image.bgr.size(), dev);
                 Tensor prm = bytes_on(&l, sizeof l, dev);
                 Tensor out = Tensor::empty({1, 3, 8, 12}, dt, dev);
                 auto k = engine::kernel(kernels::kLetterbox, dt, dev);
                 k.fn(k.ctx, dt, static_cast<const uint8_t*>(arena.data_ptr()),
                      static_cast<const kernels::LetterboxSample*>(prm.data_ptr()), 1, 8, 12, kernels::AugLayout::ChwRgb,
                      out.data_ptr());
                 return out;
               },
               GradMode::None,
               [=](const Inputs&) {
                 cv::Mat src(7, 9, CV_8UC3, const_cast<uint8_t*>(aug_image.bgr.data())), rs, dst;
                 cv::resize(src, rs, cv::Size(6, 5), 0, 0, cv::INTER_LINEAR);
                 cv::copyMakeBorder(rs, dst, 1, 8 - 5 - 1, 3, 12 - 6 - 3, cv::BORDER_CONSTANT, cv::Scalar(114, 114, 114));
                 return planes(dst);
               }});
  r.push_back({"augment_warp (device augmentation)", {"augment_warp"},
               [=] { return std::vector<Input>{Input{rnd({1}, 2), true, false}}; },
               [=](const Inputs& x) {
                 const Device dev = x[0].device();
                 const DType dt = x[0].dtype();
                 kernels::AugSample a{};
                 kernels::AugWarp& w = a.warp[0];
                 w.ntiles = 1;
                 w.tile[0] = kernels::AugTile{0, 27, 7, 9, 2, 1, 9, 7, 2, 1};  // the image at (2, 1) of the canvas
                 w.src_w = 12, w.src_h = 10;
                 kernels::invert_affine_like_opencv(aug_fwd, w.inv);
                 w.inv[6] = 0, w.inv[7] = 0, w.inv[8] = 1;
                 a.nwarp = 1;
                 Tensor arena = bytes_on(aug_image.bgr.data(), aug_image.bgr.size(), dev);
                 Tensor prm = bytes_on(&a, sizeof a, dev);
                 Tensor out = Tensor::empty({1, 3, 11, 13}, dt, dev);
                 auto k = engine::kernel(kernels::kAugmentWarp, dt, dev);
                 k.fn(k.ctx, dt, static_cast<const uint8_t*>(arena.data_ptr()),
                      static_cast<const kernels::AugSample*>(prm.data_ptr()), 1, 11, 13, kernels::AugHsvModel{},
                      kernels::AugLayout::ChwRgb, out.data_ptr());
                 return out;
               },
               GradMode::None,
               [=](const Inputs&) {
                 cv::Mat src(7, 9, CV_8UC3, const_cast<uint8_t*>(aug_image.bgr.data())), dst;
                 cv::Mat canvas(10, 12, CV_8UC3, cv::Scalar(114, 114, 114));
                 src.copyTo(canvas(cv::Rect(2, 1, 9, 7)));
                 cv::Mat M = (cv::Mat_<double>(2, 3) << aug_fwd[0], aug_fwd[1], aug_fwd[2], aug_fwd[3], aug_fwd[4], aug_fwd[5]);
                 cv::warpAffine(canvas, dst, M, cv::Size(13, 11), cv::INTER_LINEAR, cv::BORDER_CONSTANT,
                                cv::Scalar(114, 114, 114));
                 return planes(dst);
               }});
  return r;
}

// --- the sweep ------------------------------------------------------------------------------------

const std::vector<DType> kDtypes = {DType::F64, DType::F32, DType::F16, DType::BF16};

bool row_supported(const Row& row, const engine::Backend& b, DType dt) {
  for (const auto& e : row.entries)
    if (!b.dtypes(e).has(dt)) return false;
  return true;
}

/// Inputs of a row on `dev` in `dt` (floating inputs that follow the dtype), as fresh leaves.
Inputs make_inputs(const std::vector<Input>& spec, DType dt, Device dev, bool with_grad) {
  Inputs out;
  for (const Input& i : spec) {
    Tensor t = (i.follows_dtype ? i.master.to(dt) : i.master).to(dev).detach().contiguous().clone().detach();
    if (with_grad && i.differentiable) t.set_requires_grad(true);
    out.push_back(t);
  }
  return out;
}

/// Gradients of sum(f(x) * W) with respect to the differentiable inputs (F64 on the CPU).
std::vector<Tensor> grads(const Row& row, const std::vector<Input>& spec, DType dt, Device dev, const Tensor& w64) {
  Inputs x = make_inputs(spec, dt, dev, true);
  Tensor out = row.f(x);
  out.backward(w64.to(out.dtype()).to(out.device()));
  std::vector<Tensor> g;
  for (size_t k = 0; k < spec.size(); ++k)
    if (spec[k].differentiable) g.push_back(x[k].grad().defined() ? x[k].grad().to(Device::cpu()).to(DType::F64) : Tensor());
  return g;
}

struct Report {
  std::map<std::string, std::map<std::string, std::string>> cells;  // row -> "backend dtype" -> status
};

}  // namespace

TEST(BackendOps, EveryEntryEveryBackendEveryDtype) {
  const auto all_rows = rows();
  // Coverage: every registered entry (of any backend slot, built or not) has a row.
  std::set<std::string> covered;
  for (const auto& row : all_rows) covered.insert(row.entries.begin(), row.entries.end());
  for (engine::DeviceType t : {engine::DeviceType::CPU, engine::DeviceType::CUDA})
    for (const auto& e : engine::backend_slot(t).entries())
      EXPECT_TRUE(covered.count(e)) << "kernel entry '" << e << "' (" << engine::backend_slot(t).name()
                                    << ") has no row in tests/ops/backend_ops_test.cpp";

  engine::Backend& cpu = engine::backend(engine::DeviceType::CPU);
  engine::Backend& cuda_slot = engine::backend_slot(engine::DeviceType::CUDA);
  const bool cuda_usable = cuda_slot.present() && engine::cuda_device_count() > 0;
  struct Col {
    engine::Backend* b;
    Device dev;
    bool usable;
  };
  const std::vector<Col> cols = {{&cpu, Device::cpu(), true}, {&cuda_slot, Device::cuda(0), cuda_usable}};

  int64_t ran = 0, not_supported = 0, skipped = 0;
  std::ostringstream table;
  table << "row | backend | f64 f32 f16 bf16\n";
  for (const Row& row : all_rows) {
    SCOPED_TRACE(row.name);
    const std::vector<Input> spec = row.inputs();
    // The reference: independent host computation, or the CPU backend in F64.
    const bool cpu_f64 = row_supported(row, cpu, DType::F64);
    Tensor ref;
    if (row.reference) {
      ref = row.reference(make_inputs(spec, DType::F64, Device::cpu(), false)).to(DType::F64);
    } else {
      ASSERT_TRUE(cpu_f64) << "a row without an independent reference needs the CPU F64 entries";
      engine::autograd::NoGradGuard ng;
      ref = row.f(make_inputs(spec, DType::F64, Device::cpu(), false)).to(DType::F64);
    }
    Tensor w64 = testutil::random_tensor(ref.shape(), 777, -1, 1, DType::F64);
    std::vector<Tensor> ref_grads;
    if (row.grad != GradMode::None && cpu_f64) ref_grads = grads(row, spec, DType::F64, Device::cpu(), w64);
    for (const Col& col : cols) {
      table << row.name << " | " << col.b->name() << " |";
      for (DType dt : kDtypes) {
        if (!row_supported(row, *col.b, dt)) {
          table << " n/s";
          ++not_supported;
          continue;
        }
        if (!col.usable) {
          table << " skip";
          ++skipped;
          continue;
        }
        SCOPED_TRACE(std::string(col.b->name()) + " " + engine::dtype_name(dt));
        const auto [rtol, atol] = tol(dt);
        Tensor got;
        {
          engine::autograd::NoGradGuard ng;
          got = row.f(make_inputs(spec, dt, col.dev, false)).to(Device::cpu()).to(DType::F64);
        }
        // Forward against the reference (an F32-only entry against its host reference exactly
        // like the F32 tolerance).
        EXPECT_TRUE(testutil::all_close(got, ref, rtol, atol));
        if (row.grad == GradMode::FiniteDiff && col.dev.is_cpu() && dt == DType::F64) {
          std::vector<Tensor> xs;
          std::vector<size_t> idx;
          for (size_t k = 0; k < spec.size(); ++k)
            if (spec[k].differentiable) idx.push_back(k);
          // gradcheck differentiates every input it gets: close over the non-differentiable ones.
          Inputs fixed_in = make_inputs(spec, DType::F64, Device::cpu(), false);
          auto f = [&](const Inputs& d) {
            Inputs full = fixed_in;
            for (size_t j = 0; j < idx.size(); ++j) full[idx[j]] = d[j];
            return row.f(full);
          };
          for (size_t k : idx) xs.push_back(fixed_in[k]);
          EXPECT_TRUE(testutil::gradcheck(f, xs, row.fd_eps, row.fd_rtol, row.fd_atol));
        } else if (row.grad != GradMode::None && !ref_grads.empty()) {
          const auto g = grads(row, spec, dt, col.dev, w64);
          for (size_t k = 0; k < g.size(); ++k) {
            if (!ref_grads[k].defined()) continue;
            ASSERT_TRUE(g[k].defined()) << "input " << k << " got no gradient";
            // Gradients sum more terms than forwards: twice the forward tolerance.
            EXPECT_TRUE(testutil::all_close(g[k], ref_grads[k], 2 * rtol, 2 * atol)) << "gradient of input " << k;
          }
        }
        table << " ok";
        ++ran;
      }
      table << "\n";
    }
  }
  std::printf("%s", table.str().c_str());
  std::printf("backend op sweep: %lld checks ran, %lld not supported, %lld skipped (CUDA %s)\n",
              static_cast<long long>(ran), static_cast<long long>(not_supported), static_cast<long long>(skipped),
              cuda_usable ? "present" : (cuda_slot.present() ? "built, no device" : "not built"));
  EXPECT_GT(ran, 0);
}
