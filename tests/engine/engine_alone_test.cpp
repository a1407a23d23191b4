// engine/ linked ALONE (this binary links y9_engine and GoogleTest, nothing else; see the
// *_alone_test rule in CMakeLists.txt): the engine's tensors, views and autograd work without any
// kernels library, an op that needs a kernel fails with a clear error instead of a link error, and
// a backend plugs in through the registry at run time: the test registers a tiny CPU backend
// (context factory + two entries) and the same tensor methods then run on it.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/core_kernels.h"
#include "engine/tensor.h"

namespace {

using engine::DType;
using engine::Tensor;

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const engine::Error& e) {
    return e.what();
  }
  return "";
}

// A deliberately small F32-only backend: contiguous-or-strided fill and copy, no conversions.
void test_fill(engine::DeviceContext&, void* dst, DType dt, const engine::StridedLayout& l, double v) {
  int64_t n = 1;
  for (int d = 0; d < l.ndim; ++d) n *= l.sizes[d];
  for (int64_t i = 0; i < n; ++i) static_cast<float*>(dst)[engine::strided_offset(l, i)] = static_cast<float>(v);
}
void test_copy(engine::DeviceContext&, void* dst, DType, const engine::StridedLayout& dl, const void* src, DType st,
               const engine::StridedLayout& sl) {
  ASSERT_EQ(st, DType::F32);
  int64_t n = 1;
  for (int d = 0; d < dl.ndim; ++d) n *= dl.sizes[d];
  for (int64_t i = 0; i < n; ++i)
    static_cast<float*>(dst)[engine::strided_offset(dl, i)] =
        static_cast<const float*>(src)[engine::strided_offset(sl, i)];
}

struct Counter {  // per-context state: counts constructions
  explicit Counter(engine::DeviceContext&) { ++made; }
  static inline int made = 0;
  int value = 0;
};

}  // namespace

TEST(EngineAlone, TensorsAndViewsWithoutKernels) {
  // No kernels library is linked: the CPU slot exists but is empty.
  EXPECT_FALSE(engine::backend_slot(engine::DeviceType::CPU).present());
  EXPECT_TRUE(engine::present_backends().empty());
  // Storage, views and host copies need no kernel.
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor v = t.transpose(0, 1).slice(0, 1, 3);
  EXPECT_EQ(v.shape(), (engine::Shape{2, 2}));
  EXPECT_EQ(v.stride(0), 1);
  EXPECT_EQ(static_cast<float*>(v.data_ptr())[0], 2.f);
  EXPECT_EQ(t.reshape({3, 2}).numel(), 6);
  // A method that needs a kernel says what is missing.
  const std::string msg = what_of([&] { t.fill_(0.0); });
  EXPECT_NE(msg.find("no cpu backend in this build"), std::string::npos) << msg;
}

TEST(EngineAlone, ABackendPlugsInThroughTheRegistry) {
  engine::Backend& cpu = engine::backend_slot(engine::DeviceType::CPU);
  cpu.set_context_factory([](engine::Device d) { return std::make_unique<engine::DeviceContext>(d); });
  cpu.add(engine::kFillStrided, &test_fill, engine::DTypeSet{DType::F32});
  cpu.add(engine::kCopyStrided, &test_copy, engine::DTypeSet{DType::F32});
  EXPECT_TRUE(cpu.present());
  ASSERT_EQ(engine::present_backends().size(), 1u);
  EXPECT_TRUE(cpu.supports(engine::kFillStrided, DType::F32));
  EXPECT_FALSE(cpu.supports(engine::kFillStrided, DType::F64));
  EXPECT_EQ(cpu.entries(), (std::vector<std::string>{"copy_strided", "fill_strided"}));

  // Tensor methods now run on the plugged-in backend.
  Tensor z = Tensor::full({2, 3}, 2.5);
  for (float x : z.to_vector<float>()) EXPECT_EQ(x, 2.5f);
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor c = a.transpose(0, 1).contiguous();  // strided copy through test_copy
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));

  // An unsupported dtype names the entry, the dtype, the backend and what it does support.
  const std::string msg = what_of([] { Tensor::full({2}, 1.0, DType::F64); });
  EXPECT_NE(msg.find("fill_strided: not supported for dtype f64 on cpu (supported: f32)"), std::string::npos) << msg;
  // An entry the backend lacks: "no cpu kernel yet".
  const std::string msg2 = what_of([&] { Tensor(a).mul_(2.0); });
  EXPECT_NE(msg2.find("scale_strided: not supported for dtype f32 on cpu (no cpu kernel yet)"), std::string::npos)
      << msg2;
  // Unsupported combinations are ShapeErrors (a bad argument of the op).
  EXPECT_THROW(Tensor::full({2}, 1.0, DType::F64), engine::NotSupportedError);
  EXPECT_THROW(Tensor::full({2}, 1.0, DType::F64), engine::ShapeError);
  // The CUDA slot is not present here (its kernels library is not linked).
  const std::string msg3 = what_of([] { Tensor::zeros({1}, DType::F32, engine::Device::cuda(0)); });
  EXPECT_FALSE(msg3.empty());

  // The table lists the entries per backend.
  const std::string table = engine::backend_table();
  EXPECT_NE(table.find("fill_strided"), std::string::npos) << table;
  EXPECT_NE(table.find("cuda (not built)"), std::string::npos) << table;
  // Registering an entry twice is an internal error.
  EXPECT_THROW(cpu.add(engine::kFillStrided, &test_fill, engine::DTypeSet{DType::F32}), engine::InternalError);
}

TEST(EngineAlone, DTypeSetsAndContexts) {
  engine::DTypeSet s{DType::F32, DType::BF16};
  EXPECT_TRUE(s.has(DType::F32));
  EXPECT_FALSE(s.has(DType::F64));
  EXPECT_EQ(s.str(), "f32, bf16");
  EXPECT_EQ(engine::DTypeSet{}.str(), "-");
  EXPECT_EQ((s | engine::DTypeSet{DType::F64}).str(), "f32, f64, bf16");
  // A CPU context: null streams, events complete at once, per-context state created once.
  engine::DeviceContext ctx(engine::Device::cpu());
  EXPECT_EQ(ctx.stream(engine::StreamKind::Communication), nullptr);
  engine::Event ev;
  ctx.record(ev);
  ctx.wait(ev, engine::StreamKind::Communication);
  ctx.synchronize(ev);
  ctx.state<Counter>().value = 7;
  EXPECT_EQ(ctx.state<Counter>().value, 7);
  EXPECT_EQ(Counter::made, 1);
}
