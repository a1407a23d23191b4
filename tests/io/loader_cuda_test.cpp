// DataLoader with pin_memory on a CUDA machine (label gpu; skips without a usable GPU): batch
// tensors live in page-locked host memory from engine::pinned_host_allocator(), whose blocks are
// reused from batch to batch, and the batches equal the unpinned ones.
#include <gtest/gtest.h>

#if defined(Y9_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

#include "engine/pinned_allocator.h"
#include "io/loader.h"
#include "tests/io/tiny_dataset.h"
#include "tests/testutil.h"

namespace {
std::shared_ptr<io::AugmentedDataset> make_ds(const tiny::TempDir& d, int n) {
  std::vector<io::ImageRecord> recs = tiny::loader_records(d.path, n);
  io::AugmentOptions o;
  o.img_size = 64;
  o.seed = 3;
  o.hyp.mixup = 0;  // at most 4 boxes per mosaic sample: targets stay in one size class
  o.hyp.copy_paste = 0;
  return std::make_shared<io::AugmentedDataset>(recs, o);
}

// Whether cudaPointerGetAttributes reports `p` as page-locked host memory known to CUDA.
bool is_pinned(const void* p) {
#if defined(Y9_WITH_CUDA)
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
#else
  (void)p;
  return false;
#endif
}
}  // namespace

TEST(LoaderCuda, PinnedBatchesAndBlockReuse) {
  Y9_SKIP_WITHOUT_GPU();
  engine::Allocator* pinned = engine::pinned_host_allocator();
  ASSERT_NE(pinned, nullptr);
  EXPECT_TRUE(pinned->device().is_cpu());
  tiny::TempDir d("loader_cuda");
  auto ds = make_ds(d, 11);

  io::LoaderOptions o;
  o.batch_size = 4;
  o.seed = 5;
  o.pin_memory = false;
  o.workers = 0;
  io::DataLoader plain(ds, o);
  plain.start_epoch(0);
  io::Batch ref;
  ASSERT_TRUE(plain.next(ref));
  EXPECT_FALSE(is_pinned(ref.images.data_ptr()));

  for (int workers : {0, 2}) {
    o.pin_memory = true;
    o.workers = workers;
    io::DataLoader dl(ds, o);
    dl.start_epoch(0);
    io::Batch b;
    ASSERT_TRUE(dl.next(b));
    EXPECT_TRUE(is_pinned(b.images.data_ptr())) << "workers " << workers;
    if (b.targets.numel() > 0) EXPECT_TRUE(is_pinned(b.targets.data_ptr()));
    EXPECT_TRUE(b.images.device().is_cpu());
    EXPECT_EQ(b.images.to_vector<uint8_t>(), ref.images.to_vector<uint8_t>());
    EXPECT_EQ(b.targets.to_vector<float>(), ref.targets.to_vector<float>());
    // The batch copies to the GPU like any CPU tensor.
    EXPECT_EQ(b.images.to(engine::Device::cuda(0)).to(engine::Device::cpu()).to_vector<uint8_t>(),
              ref.images.to_vector<uint8_t>());
    while (dl.next(b)) {}
  }

  // Reuse: after a warm-up epoch, further epochs allocate every batch from cached pinned blocks.
  o.workers = 0;  // deterministic number of live batches (the held one and the new one)
  io::DataLoader dl(ds, o);
  io::Batch b;
  dl.start_epoch(0);
  while (dl.next(b)) {}
  const engine::AllocatorStats warm = pinned->stats();
  for (int e = 1; e < 4; ++e) {
    dl.start_epoch(e);
    while (dl.next(b)) {}
  }
  const engine::AllocatorStats after = pinned->stats();
  EXPECT_GE(after.num_allocs - warm.num_allocs, 3 * dl.num_batches());  // images (+ targets) per batch
  EXPECT_EQ(after.num_misses, warm.num_misses) << "pinned blocks were not reused";
  EXPECT_GT(after.cached_bytes + after.live_bytes, 0);
}
