// CUDA elementwise entries (binary, unary incl. activations, BCE; kernels/common/elementwise.h)
// against the shared element math run on the CPU (computed in float like the CPU twins, double for
// F64) on the same random input: F32/F16/BF16/F64, odd shapes, strided and broadcast views.
// Label gpu: skips without a device (fails with Y9_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <functional>

#include "kernels/common/elementwise.h"
#include "tests/kernels/cuda_parity.h"
#include "tests/testutil.h"

namespace {

using engine::DType;
using parity::HostBuf;
using parity::Mode;

// Output mode, then the input modes (broadcast only on inputs).
const std::vector<std::vector<Mode>> kModeSets = {
    {Mode::Contiguous, Mode::Contiguous, Mode::Contiguous, Mode::Contiguous},
    {Mode::Contiguous, Mode::Transposed, Mode::Broadcast, Mode::Step2},
    {Mode::Transposed, Mode::Step2, Mode::Contiguous, Mode::Broadcast},
    {Mode::Step2, Mode::Broadcast, Mode::Transposed, Mode::Contiguous}};

// Reference: out[i] = f(in_0[i], ...) over the output view, computed in C (float or double), then
// rounded to the dtype by the CPU twin's conversion; gaps of the output buffer keep their values.
template <typename C>
HostBuf reference(const HostBuf& out0, const parity::View& ov, const std::vector<HostBuf>& ins,
                  const std::vector<parity::View>& ivs, const std::function<C(const C*)>& f) {
  std::vector<double> out = parity::to_doubles(out0);
  std::vector<std::vector<double>> in;
  for (const auto& b : ins) in.push_back(parity::to_doubles(b));
  const int64_t n = [&] {
    int64_t k = 1;
    for (int d = 0; d < ov.layout.ndim; ++d) k *= ov.layout.sizes[d];
    return k;
  }();
  for (int64_t i = 0; i < n; ++i) {
    C v[3];
    for (size_t k = 0; k < ins.size(); ++k) v[k] = static_cast<C>(in[k][kernels::strided_offset(ivs[k].layout, i)]);
    out[kernels::strided_offset(ov.layout, i)] = static_cast<double>(f(v));
  }
  HostBuf d(DType::F64, out0.n);
  std::memcpy(d.data(), out.data(), out.size() * sizeof(double));
  return parity::convert(d, out0.dtype);
}

using Launch = std::function<void(void* out, DType, const kernels::StridedLayout&, const std::vector<const void*>&,
                                  const std::vector<kernels::StridedLayout>&)>;

struct Case {
  std::string name;
  int arity;
  std::vector<std::pair<double, double>> ranges;  // per input
  std::function<float(const float*)> ff;
  std::function<double(const double*)> fd;
  Launch launch;
};

// gtest prints the parameter in test names and failures: show the op name, not the bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

#define Y9_FN(expr_f, expr_d) \
  [](const float* v) { return expr_f; }, [](const double* v) { return expr_d; }

std::vector<Case> cases() {
  using namespace kernels;  // NOLINT: test-local, keeps the table short
  using U = UnaryOp;
  std::vector<Case> cs = {
      {"add", 2, {{-3, 3}, {-3, 3}}, Y9_FN(AddOp()(v[0], v[1]), AddOp()(v[0], v[1])), {}},
      {"sub", 2, {{-3, 3}, {-3, 3}}, Y9_FN(SubOp()(v[0], v[1]), SubOp()(v[0], v[1])), {}},
      {"mul", 2, {{-3, 3}, {-3, 3}}, Y9_FN(MulOp()(v[0], v[1]), MulOp()(v[0], v[1])), {}},
      {"div", 2, {{-3, 3}, {0.5, 2}}, Y9_FN(DivOp()(v[0], v[1]), DivOp()(v[0], v[1])), {}},
      {"mul_backward_a", 3, {{-3, 3}, {-3, 3}, {-2, 2}}, Y9_FN(mul_bwd_a(v[0], v[1], v[2]), mul_bwd_a(v[0], v[1], v[2])), {}},
      {"div_backward_b", 3, {{-3, 3}, {0.5, 2}, {-2, 2}}, Y9_FN(div_bwd_b(v[0], v[1], v[2]), div_bwd_b(v[0], v[1], v[2])), {}},
      {"silu", 1, {{-8, 8}}, Y9_FN(unary_fwd(U::Silu, v[0], 0.f, 0.f), unary_fwd(U::Silu, v[0], 0., 0.)), {}},
      {"silu_backward", 2, {{-8, 8}, {-2, 2}},
       Y9_FN(unary_bwd(U::Silu, v[0], 0.f, v[1], 0.f, 0.f), unary_bwd(U::Silu, v[0], 0., v[1], 0., 0.)), {}},
      {"sigmoid", 1, {{-8, 8}}, Y9_FN(unary_fwd(U::Sigmoid, v[0], 0.f, 0.f), unary_fwd(U::Sigmoid, v[0], 0., 0.)), {}},
      {"sigmoid_backward", 2, {{0, 1}, {-2, 2}},
       Y9_FN(unary_bwd(U::Sigmoid, 0.f, v[0], v[1], 0.f, 0.f), unary_bwd(U::Sigmoid, 0., v[0], v[1], 0., 0.)), {}},
      {"relu", 1, {{-3, 3}}, Y9_FN(unary_fwd(U::Relu, v[0], 0.f, 0.f), unary_fwd(U::Relu, v[0], 0., 0.)), {}},
      {"relu_backward", 2, {{-3, 3}, {-2, 2}},
       Y9_FN(unary_bwd(U::Relu, v[0], 0.f, v[1], 0.f, 0.f), unary_bwd(U::Relu, v[0], 0., v[1], 0., 0.)), {}},
      {"clamp", 1, {{-3, 3}}, Y9_FN(unary_fwd(U::Clamp, v[0], -1.f, 2.f), unary_fwd(U::Clamp, v[0], -1., 2.)), {}},
      {"exp", 1, {{-3, 3}}, Y9_FN(unary_fwd(U::Exp, v[0], 0.f, 0.f), unary_fwd(U::Exp, v[0], 0., 0.)), {}},
      {"bce_with_logits", 2, {{-8, 8}, {0, 1}}, Y9_FN(bce_with_logits_fwd(v[0], v[1]), bce_with_logits_fwd(v[0], v[1])), {}},
      {"bce_with_logits_backward", 3, {{-8, 8}, {0, 1}, {-2, 2}},
       Y9_FN(bce_with_logits_bwd_x(v[0], v[1], v[2]), bce_with_logits_bwd_x(v[0], v[1], v[2])), {}},
  };
  using L = kernels::StridedLayout;
  using P = std::vector<const void*>;
  using Ls = std::vector<L>;
  auto bin = [](BinaryOp op) {
    return [op](void* o, DType t, const L& ol, const P& p, const Ls& l) {
      parity::run_cuda(kBinaryForward, t, op, t, o, ol, p[0], l[0], p[1], l[1]);
    };
  };
  auto un = [](UnaryOp op, double p0, double p1) {
    return [=](void* o, DType t, const L& ol, const P& p, const Ls& l) {
      parity::run_cuda(kUnaryForward, t, op, t, p0, p1, o, ol, p[0], l[0]);
    };
  };
  // Backward with the saved tensor first: x for Silu/Relu, y for Sigmoid.
  auto un_bwd = [](UnaryOp op, bool saved_is_y) {
    return [=](void* o, DType t, const L& ol, const P& p, const Ls& l) {
      parity::run_cuda(kUnaryBackward, t, op, t, 0.0, 0.0, o, ol, saved_is_y ? nullptr : p[0], l[0],
                       saved_is_y ? p[0] : nullptr, l[0], p[1], l[1]);
    };
  };
  cs[0].launch = bin(BinaryOp::Add);
  cs[1].launch = bin(BinaryOp::Sub);
  cs[2].launch = bin(BinaryOp::Mul);
  cs[3].launch = bin(BinaryOp::Div);
  cs[4].launch = [](void* o, DType t, const L& ol, const P& p, const Ls& l) {
    parity::run_cuda(kBinaryBackward, t, BinaryOp::Mul, t, p[0], l[0], p[1], l[1], p[2], l[2], o, ol, nullptr, ol);
  };
  cs[5].launch = [](void* o, DType t, const L& ol, const P& p, const Ls& l) {
    parity::run_cuda(kBinaryBackward, t, BinaryOp::Div, t, p[0], l[0], p[1], l[1], p[2], l[2], nullptr, ol, o, ol);
  };
  cs[6].launch = un(U::Silu, 0, 0);
  cs[7].launch = un_bwd(U::Silu, false);
  cs[8].launch = un(U::Sigmoid, 0, 0);
  cs[9].launch = un_bwd(U::Sigmoid, true);
  cs[10].launch = un(U::Relu, 0, 0);
  cs[11].launch = un_bwd(U::Relu, false);
  cs[12].launch = un(U::Clamp, -1, 2);
  cs[13].launch = un(U::Exp, 0, 0);
  cs[14].launch = [](void* o, DType t, const L& ol, const P& p, const Ls& l) {
    parity::run_cuda(kBceWithLogitsForward, t, t, o, ol, p[0], l[0], p[1], l[1]);
  };
  cs[15].launch = [](void* o, DType t, const L& ol, const P& p, const Ls& l) {
    parity::run_cuda(kBceWithLogitsBackward, t, t, p[0], l[0], p[1], l[1], p[2], l[2], o, ol, nullptr, ol);
  };
  return cs;
}

class ElementwiseCuda : public ::testing::TestWithParam<Case> {};

TEST_P(ElementwiseCuda, MatchesCpuMath) {
  Y9_SKIP_WITHOUT_GPU();
#if defined(Y9_WITH_CUDA)
  const Case& c = GetParam();
  uint64_t seed = std::hash<std::string>()(c.name) % 100000;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64})
    for (const auto& shape : parity::shapes())
      for (const auto& modes : kModeSets) {
        SCOPED_TRACE(c.name + " " + engine::dtype_name(dt) + " out " + parity::mode_name(modes[0]) + " in0 " +
                     parity::mode_name(modes[1]) + " numel " + std::to_string(parity::numel(shape)));
        auto ov = parity::make_view(shape, modes[0]);
        HostBuf out = parity::random_buf(dt, ov.buffer_elems, seed++);
        std::vector<parity::View> ivs;
        std::vector<HostBuf> ins;
        for (int k = 0; k < c.arity; ++k) {
          ivs.push_back(parity::make_view(shape, modes[1 + k]));
          ins.push_back(parity::random_buf(dt, ivs.back().buffer_elems, seed++, c.ranges[k].first, c.ranges[k].second));
        }
        HostBuf ref = dt == DType::F64 ? reference<double>(out, ov, ins, ivs, c.fd) : reference<float>(out, ov, ins, ivs, c.ff);
        parity::DevBuf dout(out);
        std::vector<std::unique_ptr<parity::DevBuf>> dins;
        std::vector<const void*> ptrs;
        std::vector<kernels::StridedLayout> ls;
        for (int k = 0; k < c.arity; ++k) {
          dins.push_back(std::make_unique<parity::DevBuf>(ins[k]));
          ptrs.push_back(dins.back()->data());
          ls.push_back(ivs[k].layout);
        }
        c.launch(dout.data(), dt, ov.layout, ptrs, ls);
        EXPECT_TRUE(parity::close(dout.download(), ref, parity::tol_for(dt)));
      }
  // Unsupported dtype is a ShapeError (NotSupportedError from the table), not a silent no-op.
  HostBuf ib(DType::I32, 4);
  parity::DevBuf dib(ib);
  std::vector<const void*> ptrs(static_cast<size_t>(c.arity), dib.data());
  std::vector<kernels::StridedLayout> ls(static_cast<size_t>(c.arity), parity::row_major({4}));
  EXPECT_THROW(c.launch(dib.data(), DType::I32, parity::row_major({4}), ptrs, ls), engine::ShapeError);
#endif
}

INSTANTIATE_TEST_SUITE_P(Ops, ElementwiseCuda, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

}  // namespace
