// The CUDA caching allocator's stream awareness with the real CUDA runtime (label gpu; skips
// without a usable GPU; under the emulator it runs in both thread orders): a block used on the
// communication stream (engine::record_stream) is not handed out again before that stream's work
// is done; blocks are reused only on the stream they were allocated for; the out-of-memory error
// names the request, what the process holds and the device's free/total memory.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#if defined(Y9_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

#include "engine/allocator.h"
#include "engine/backend.h"
#include "engine/error.h"
#include "engine/storage.h"
#include "engine/tensor.h"
#include "tests/testutil.h"

namespace {

#if defined(Y9_WITH_CUDA)
// Host function that keeps its stream busy until the test releases it, so that the event the
// allocator records behind it is not complete on a real GPU either (under the emulator queued
// work runs only when the stream is synchronised).
void wait_for_flag(void* flag) {
  auto* f = static_cast<std::atomic<bool>*>(flag);
  while (!f->load(std::memory_order_acquire)) {
  }
}
#endif

// A size class no other test of this binary uses (the allocator is process-wide).
constexpr int64_t kFloats = 123 * 128;  // 62976 bytes: class 123 * 512

}  // namespace

TEST(AllocatorCuda, RecordStreamDelaysReuseUntilTheStreamIsDone) {
  Y9_SKIP_WITHOUT_GPU();
#if defined(Y9_WITH_CUDA)
  const engine::Device dev = engine::Device::cuda(0);
  engine::DeviceContext& ctx = engine::backend(engine::DeviceType::CUDA).context(dev);
  auto comm = static_cast<cudaStream_t>(ctx.stream(engine::StreamKind::Communication));
  engine::Allocator* alloc = engine::cuda_allocator(0);

  void* first = nullptr;
  // Static, and set on every way out: a real GPU's host thread may still be spinning on it.
  static std::atomic<bool> release{false};
  release.store(false);
  struct Release {
    ~Release() { release.store(true, std::memory_order_release); }
  } release_on_exit;
  {
    engine::Tensor t = engine::Tensor::empty({kFloats}, engine::DType::F32, dev);  // compute stream
    first = t.data_ptr();
    // Work on the communication stream that reads the tensor (an all-reduce, say).
    ASSERT_EQ(cudaLaunchHostFunc(comm, &wait_for_flag, &release), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(t.data_ptr(), 0, kFloats * sizeof(float), comm), cudaSuccess);
    engine::record_stream(t, engine::StreamKind::Communication);
  }  // freed here: an event is recorded on the communication stream
  const int64_t misses = alloc->stats().num_misses;
  engine::Tensor u = engine::Tensor::empty({kFloats}, engine::DType::F32, dev);  // kept alive below
  EXPECT_NE(u.data_ptr(), first) << "block reused before the communication stream finished with it";
  EXPECT_EQ(alloc->stats().num_misses, misses + 1);
  release.store(true, std::memory_order_release);
  ctx.synchronize(engine::StreamKind::Communication);  // the event completes
  {
    engine::Tensor v = engine::Tensor::empty({kFloats}, engine::DType::F32, dev);
    EXPECT_EQ(v.data_ptr(), first) << "block not reused after the event completed";
  }
  {
    // Without record_stream the compute stream's own order suffices: reuse is immediate.
    engine::Tensor w = engine::Tensor::empty({kFloats}, engine::DType::F32, dev);
    EXPECT_EQ(w.data_ptr(), first);
  }
  EXPECT_EQ(alloc->stats().num_misses, misses + 1);
#endif
}

TEST(AllocatorCuda, BlocksAreReusedOnlyOnTheirStream) {
  Y9_SKIP_WITHOUT_GPU();
  const engine::Device dev = engine::Device::cuda(0);
  const size_t n = 77 * 512;  // a size class of its own
  void* up = nullptr;
  {
    engine::Storage s(n, dev, engine::StreamKind::HostToDevice);
    up = s.data();
  }
  {
    engine::Storage c(n, dev);  // compute: must not take the upload stream's block
    EXPECT_NE(c.data(), up);
  }
  {
    engine::Storage s(n, dev, engine::StreamKind::HostToDevice);
    EXPECT_EQ(s.data(), up);
  }
  // record_stream of memory the allocator does not own (a wrapped pointer) is a no-op; of a
  // pointer it never gave, an InternalError.
  int host = 0;
  engine::Tensor blob = engine::Tensor::from_blob(&host, {1}, engine::DType::I32, engine::Device::cpu());
  EXPECT_NO_THROW(engine::record_stream(blob, engine::StreamKind::Communication));
  EXPECT_THROW(engine::cuda_allocator(0)->record_stream(&host, engine::StreamKind::Communication),
               engine::InternalError);
}

TEST(AllocatorCuda, OutOfMemoryMessage) {
  Y9_SKIP_WITHOUT_GPU();
  const size_t huge = size_t(1) << 50;  // 1 PiB: more than any device
  try {
    engine::Storage s(huge, engine::Device::cuda(0));
    FAIL() << "a 1 PiB allocation succeeded";
  } catch (const engine::OutOfMemoryError& e) {
    const std::string m = e.message();
    EXPECT_NE(m.find("cuda:0 out of memory: tried to allocate 1073741824.00 MiB (1125899906842624 bytes"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("this process holds"), std::string::npos) << m;
    EXPECT_NE(m.find("the device has"), std::string::npos) << m;
    EXPECT_NE(m.find("--batch"), std::string::npos) << m;
  }
  // The device is still usable.
  engine::Tensor t = engine::Tensor::zeros({16}, engine::DType::F32, engine::Device::cuda(0));
  EXPECT_EQ(t.to_vector<float>()[0], 0.0f);
}
