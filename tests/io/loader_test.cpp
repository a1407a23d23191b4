// DataLoader: collate layout, distributed sampler shards, and the persistent-worker pipeline:
// identical batches for any workers/prefetch across epochs, start_epoch keep/restart rules,
// the epochs limit, error placement, prompt shutdown, plain CPU memory without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include "engine/allocator.h"
#include "engine/pinned_allocator.h"
#include "io/loader.h"
#include "tests/io/tiny_dataset.h"

namespace {
std::shared_ptr<io::AugmentedDataset> make_ds(const tiny::TempDir& d, int n, bool augment = true, int img_size = 32) {
  std::vector<io::ImageRecord> recs = tiny::loader_records(d.path, n);
  io::AugmentOptions o;
  o.img_size = img_size;
  o.augment = augment;
  o.seed = 11;
  return std::make_shared<io::AugmentedDataset>(recs, o);
}

// Everything observable of one batch.
struct Flat {
  std::vector<uint8_t> img;
  std::vector<float> tgt;
  std::vector<int64_t> idx;
  engine::Shape shape;
  bool operator==(const Flat& o) const { return img == o.img && tgt == o.tgt && idx == o.idx && shape == o.shape; }
};
Flat flat(const io::Batch& b) { return {b.images.to_vector<uint8_t>(), b.targets.to_vector<float>(), b.indices, b.images.shape()}; }

using Epoch = std::vector<Flat>;
Epoch drain(io::DataLoader& dl) {
  Epoch e;
  io::Batch b;
  while (dl.next(b)) e.push_back(flat(b));
  return e;
}

io::LoaderOptions opts(int workers, int prefetch, int epochs = 0) {
  io::LoaderOptions o;
  o.batch_size = 4;
  o.workers = workers;
  o.prefetch = prefetch;
  o.seed = 9;
  o.epochs = epochs;
  return o;
}

// Reference: workers = 0, a fresh loader started directly at `epoch`.
Epoch reference(const std::shared_ptr<io::AugmentedDataset>& ds, int epoch) {
  io::DataLoader dl(ds, opts(0, 1));
  dl.start_epoch(epoch);
  return drain(dl);
}

// Polls `pred` for up to 10 s (never asserts on timing; only waits for an effect).
template <typename F>
bool wait_for(F pred) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}
}  // namespace

TEST(Sampler, EqualShardsCoverAll) {
  for (int world : {1, 2, 3}) {
    std::multiset<int64_t> all;
    size_t len = 0;
    for (int r = 0; r < world; ++r) {
      auto idx = io::distributed_indices(10, r, world, true, 5, 2);
      if (r == 0) len = idx.size();
      EXPECT_EQ(idx.size(), len);
      all.insert(idx.begin(), idx.end());
    }
    for (int64_t i = 0; i < 10; ++i) EXPECT_GE(all.count(i), 1u);
    EXPECT_EQ(all.size(), len * world);
  }
  EXPECT_NE(io::distributed_indices(20, 0, 1, true, 5, 0), io::distributed_indices(20, 0, 1, true, 5, 1));
  EXPECT_THROW(io::distributed_indices(10, 2, 2, true, 0, 0), engine::Error);
}

TEST(Collate, LayoutAndTargets) {
  io::Sample a, b;
  a.img = cv::Mat(2, 3, CV_8UC3, cv::Scalar(1, 2, 3));  // B=1, G=2, R=3
  b.img = cv::Mat(2, 3, CV_8UC3, cv::Scalar(4, 5, 6));
  a.labels = {{2, 0.1f, 0.2f, 0.3f, 0.4f}};
  b.labels = {{0, 0.5f, 0.5f, 0.1f, 0.1f}, {1, 0.6f, 0.6f, 0.2f, 0.2f}};
  auto batch = io::collate({a, b}, {"a", "b"});
  EXPECT_EQ(batch.images.shape(), (engine::Shape{2, 3, 2, 3}));
  auto px = batch.images.to_vector<uint8_t>();
  EXPECT_EQ(px[0], 3);   // image 0, channel R
  EXPECT_EQ(px[12], 1);  // image 0, channel B
  EXPECT_EQ(px[18], 6);  // image 1, channel R
  EXPECT_EQ(batch.targets.shape(), (engine::Shape{3, 6}));
  auto t = batch.targets.to_vector<float>();
  EXPECT_EQ(t[0], 0);
  EXPECT_EQ(t[1], 2);
  EXPECT_FLOAT_EQ(t[5], 0.4f);
  EXPECT_EQ(t[6], 1);
  EXPECT_EQ(t[12], 1);
  EXPECT_EQ(t[13], 1);
  io::Sample c;
  c.img = cv::Mat(3, 3, CV_8UC3);
  EXPECT_THROW(io::collate({a, c}, {"a", "c"}), engine::ShapeError);
}

TEST(DataLoader, SameBatchesForAnyWorkerCount) {
  tiny::TempDir d("loader");
  auto ds = make_ds(d, 11);
  std::vector<std::vector<uint8_t>> ref_img;
  std::vector<std::vector<float>> ref_tgt;
  for (int workers : {0, 1, 3}) {
    io::LoaderOptions o;
    o.batch_size = 4;
    o.workers = workers;
    o.prefetch = 2;
    o.seed = 9;
    io::DataLoader dl(ds, o);
    dl.start_epoch(1);
    EXPECT_EQ(dl.num_batches(), 3);
    io::Batch b;
    int k = 0;
    std::set<int64_t> seen;
    while (dl.next(b)) {
      EXPECT_EQ(b.images.size(2), 32);
      for (auto i : b.indices) seen.insert(i);
      auto img = b.images.to_vector<uint8_t>();
      auto tgt = b.targets.to_vector<float>();
      if (workers == 0) {
        ref_img.push_back(img);
        ref_tgt.push_back(tgt);
      } else {
        EXPECT_EQ(img, ref_img[k]) << "workers=" << workers << " batch " << k;
        EXPECT_EQ(tgt, ref_tgt[k]);
      }
      ++k;
    }
    EXPECT_EQ(k, 3);
    EXPECT_EQ(b.images.size(0), 3);  // last batch smaller (drop_last false)
    EXPECT_EQ(seen.size(), 11u);
    dl.start_epoch(2);  // restart mid-way and abandon: destructor must join cleanly
    ASSERT_TRUE(dl.next(b));
  }
}

TEST(DataLoader, IdenticalBatchesAcrossEpochsForAnyWorkersAndPrefetch) {
  tiny::TempDir d("loader_epochs");
  auto ds = make_ds(d, 11);
  std::vector<Epoch> ref;
  for (int e = 0; e < 3; ++e) ref.push_back(reference(ds, e));
  ASSERT_EQ(ref[0].size(), 3u);
  EXPECT_FALSE(ref[0] == ref[1]);  // epochs differ, so mixing them up would be caught
  EXPECT_FALSE(ref[1] == ref[2]);
  for (int workers : {0, 1, 2, 3})
    for (int prefetch : {1, 4}) {
      io::DataLoader dl(ds, opts(workers, prefetch));
      dl.start_epoch(0);  // twice, as apps/train.cpp does (num_batches, then the loop)
      EXPECT_EQ(dl.num_batches(), 3);
      for (int e = 0; e < 3; ++e) {
        dl.start_epoch(e);
        EXPECT_TRUE(drain(dl) == ref[static_cast<size_t>(e)]) << "workers " << workers << " prefetch " << prefetch
                                                               << " epoch " << e;
      }
      EXPECT_EQ(dl.stats().discarded, 0) << "consecutive epochs must keep the prefetched batches";
    }
}

TEST(DataLoader, PrefetchRunsIntoNextEpochBoundedAndKept) {
  tiny::TempDir d("loader_ahead");
  auto ds = make_ds(d, 11);
  const Epoch ref1 = reference(ds, 1);
  for (int prefetch : {1, 2, 4}) {
    io::DataLoader dl(ds, opts(2, prefetch));
    dl.start_epoch(0);
    ASSERT_TRUE(wait_for([&] { return dl.stats().claimed >= prefetch; }));
    dl.start_epoch(0);  // same epoch, nothing taken: keeps the produced batches
    EXPECT_EQ(dl.stats().discarded, 0);
    drain(dl);  // 3 batches taken
    // Epoch 1 is produced ahead before start_epoch(1), but never more than `prefetch` batches.
    const int64_t expect = 3 + std::min<int64_t>(prefetch, 3 + 3);
    ASSERT_TRUE(wait_for([&] { return dl.stats().claimed >= expect; })) << "prefetch " << prefetch;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(dl.stats().claimed, expect) << "prefetch bound exceeded, prefetch " << prefetch;
    EXPECT_GE(dl.stats().max_epoch_claimed, 1);
    dl.start_epoch(1);
    EXPECT_EQ(dl.stats().discarded, 0);
    EXPECT_TRUE(drain(dl) == ref1) << "prefetch " << prefetch;
  }
}

// The default prefetch (LoaderOptions::prefetch = 0) is 2 batches per worker, at least 4: every
// worker can be making a batch (each makes a whole one), as with PyTorch's prefetch_factor 2. A
// fixed 4 kept 12 of 16 workers idle on a 16-core machine. Nothing is taken here, so the claims
// stop exactly at the bound.
TEST(DataLoader, DefaultPrefetchIsTwoBatchesPerWorker) {
  tiny::TempDir d("loader_default_prefetch");
  auto ds = make_ds(d, 11);  // 3 batches of 4 per epoch; unbounded epochs: claims run on ahead
  for (int workers : {1, 2, 8}) {
    io::LoaderOptions o = opts(workers, 0);
    io::DataLoader dl(ds, o);
    dl.start_epoch(0);
    const int64_t bound = std::max(4, 2 * workers);
    ASSERT_TRUE(wait_for([&] { return dl.stats().claimed >= bound; })) << "workers " << workers;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(dl.stats().claimed, bound) << "workers " << workers;
    EXPECT_TRUE(drain(dl) == reference(ds, 0)) << "workers " << workers;
  }
  EXPECT_THROW(io::DataLoader(ds, opts(2, -1)), engine::Error);
}

TEST(DataLoader, JumpAbandonAndRepeatGiveExactEpochs) {
  tiny::TempDir d("loader_jump");
  auto ds = make_ds(d, 11);
  const Epoch ref0 = reference(ds, 0), ref1 = reference(ds, 1), ref5 = reference(ds, 5);
  for (int workers : {0, 2}) {
    io::DataLoader dl(ds, opts(workers, 4));
    io::Batch b;
    dl.start_epoch(0);
    ASSERT_TRUE(dl.next(b));
    EXPECT_TRUE(flat(b) == ref0[0]);
    dl.start_epoch(5);  // jump (resume) after abandoning epoch 0 halfway
    EXPECT_TRUE(drain(dl) == ref5) << "workers " << workers;
    dl.start_epoch(0);  // backwards
    ASSERT_TRUE(dl.next(b));
    ASSERT_TRUE(dl.next(b));
    EXPECT_TRUE(flat(b) == ref0[1]);
    dl.start_epoch(1);  // abandon epoch 0 after 2 of 3 batches, then the next epoch
    EXPECT_TRUE(drain(dl) == ref1) << "workers " << workers;
    dl.start_epoch(1);  // repeat a finished epoch: restarts it
    EXPECT_TRUE(drain(dl) == ref1) << "workers " << workers;
    if (workers > 0) EXPECT_GT(dl.stats().discarded, 0);
  }
}

TEST(DataLoader, EpochsLimitStopsProduction) {
  tiny::TempDir d("loader_limit");
  auto ds = make_ds(d, 11);
  for (int workers : {0, 2}) {
    io::DataLoader dl(ds, opts(workers, 4, /*epochs*/ 2));
    dl.start_epoch(0);
    EXPECT_EQ(drain(dl).size(), 3u);
    dl.start_epoch(1);
    EXPECT_EQ(drain(dl).size(), 3u);
    // Give the workers time to (wrongly) run into epoch 2; they must stay idle.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(dl.stats().claimed, 6) << "workers " << workers;
    EXPECT_EQ(dl.stats().max_epoch_claimed, 1);
    dl.start_epoch(2);  // accepted (num_batches stays valid), but produces nothing
    EXPECT_EQ(dl.num_batches(), 3);
    io::Batch b;
    EXPECT_THROW(dl.next(b), engine::Error);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(dl.stats().max_epoch_claimed, 1);
  }
  // The evaluator's case: a single epoch, nothing produced past it.
  io::DataLoader one(ds, opts(3, 4, /*epochs*/ 1));
  one.start_epoch(0);
  EXPECT_EQ(drain(one).size(), 3u);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(one.stats().claimed, 3);
}

TEST(DataLoader, WorkerErrorIsRethrown) {
  tiny::TempDir d("loader_err");
  auto ds = make_ds(d, 4, /*augment*/ false);  // validation: an unreadable image is never replaced
  std::filesystem::remove(d.path / "i2.png");
  io::LoaderOptions o;
  o.batch_size = 1;
  o.workers = 2;
  o.shuffle = false;
  io::DataLoader dl(ds, o);
  dl.start_epoch(0);
  io::Batch b;
  EXPECT_THROW({ while (dl.next(b)) {} }, engine::IoError);
}

TEST(DataLoader, UnreadableImagesAreReplacedWhileTraining) {
  // Issue 12, bad input: images damaged after the scan (one emptied, one cut inside its header, one
  // removed) in a training run (default augmentation): one warning per file naming it, every batch full, the
  // replacement deterministic (the same batches with 0 and 3 workers), and validation (augment off)
  // still stops at the unreadable image. (A damaged image's index may still be delivered: a mosaic
  // whose warp never samples that tile does not decode it.)
  tiny::TempDir d("loader_replace");
  auto ds = make_ds(d, 24);
  auto val = make_ds(d, 24, /*augment*/ false);  // (writes the same images again: before the damage)
  const std::vector<unsigned char> good = tiny::read_bytes(d.path / "i4.png");
  tiny::write_bytes(d.path / "i4.png", std::vector<unsigned char>(good.begin(), good.begin() + 30));  // in the header
  tiny::write_bytes(d.path / "i7.png", {});
  std::filesystem::remove(d.path / "i9.png");
  Epoch ref;
  for (int workers : {0, 3}) {
    io::LoaderOptions o;
    o.batch_size = 4;
    o.workers = workers;
    o.seed = 5;
    io::DataLoader dl(ds, o);
    testing::internal::CaptureStdout();
    dl.start_epoch(0);
    Epoch e;
    ASSERT_NO_THROW(e = drain(dl));
    const std::string out = testing::internal::GetCapturedStdout();
    ASSERT_EQ(e.size(), 6u);
    for (const Flat& f : e) {
      EXPECT_EQ(f.idx.size(), 4u);
      EXPECT_EQ(f.shape[0], 4);
    }
    for (const char* f : {"i4.png", "i7.png", "i9.png"}) {
      const size_t at = out.find(f);
      ASSERT_NE(at, std::string::npos) << "no warning naming " << f << ":\n" << out;
      EXPECT_EQ(out.find(f, out.find('\n', at)), std::string::npos) << "warned twice about " << f << ":\n" << out;
    }
    EXPECT_NE(out.find("WARNING "), std::string::npos) << out;
    EXPECT_NE(out.find("sample replaced by "), std::string::npos) << out;
    if (workers == 0) ref = e;
    else EXPECT_TRUE(e == ref) << "replacement depends on the worker count";
  }
  io::LoaderOptions o;
  o.batch_size = 4;
  o.workers = 0;
  o.shuffle = false;
  io::DataLoader dl(val, o);
  dl.start_epoch(0);
  io::Batch b;
  EXPECT_THROW({ while (dl.next(b)) {} }, engine::IoError);
}

TEST(DataLoader, ImagesChangedSinceTheScanAreReplacedInRectBatches) {
  // An image whose size changed after the scan (a valid file: its batch shape and labels are the
  // scan's) is an error on the CPU path as on the GPU path, which plans from the scanned size: in
  // --rect training it is replaced by the next sample of its batch, with a warning naming it.
  tiny::TempDir d("loader_rect_changed");
  std::vector<io::ImageRecord> recs = tiny::loader_records(d.path, 8);
  io::AugmentOptions ao;
  ao.img_size = 32;
  ao.augment = true;
  ao.rect = true;
  ao.batch_size = 4;
  ao.seed = 3;
  auto ds = std::make_shared<io::AugmentedDataset>(recs, ao);
  tiny::write_image(d.path / "i2.png", tiny::make_image(90, 12, 5));  // was 40 x 40
  io::LoaderOptions o;
  o.batch_size = 4;
  o.workers = 0;
  io::DataLoader dl(ds, o);
  testing::internal::CaptureStdout();
  dl.start_epoch(0);
  Epoch e;
  ASSERT_NO_THROW(e = drain(dl));
  const std::string out = testing::internal::GetCapturedStdout();
  ASSERT_EQ(e.size(), 2u);
  for (const Flat& f : e) EXPECT_EQ(f.idx.size(), 4u);
  EXPECT_NE(out.find("i2.png changed since the scan"), std::string::npos) << out;
  EXPECT_NE(out.find("sample replaced by"), std::string::npos) << out;
}

TEST(DataLoader, WorkerErrorAtItsBatchInItsEpoch) {
  tiny::TempDir d("loader_err_pos");
  auto ds = make_ds(d, 4, /*augment*/ false);  // no mosaic: batch k reads image k only
  std::filesystem::remove(d.path / "i2.png");
  for (int workers : {0, 1, 3}) {
    io::LoaderOptions o;
    o.batch_size = 1;
    o.workers = workers;
    o.prefetch = 4;
    o.shuffle = false;
    io::DataLoader dl(ds, o);
    io::Batch b;
    for (int e = 0; e < 2; ++e) {  // epoch 1's error (prefetched ahead) surfaces in epoch 1 only
      dl.start_epoch(e);
      ASSERT_TRUE(dl.next(b));
      EXPECT_EQ(b.indices, std::vector<int64_t>{0});
      ASSERT_TRUE(dl.next(b));
      EXPECT_EQ(b.indices, std::vector<int64_t>{1});
      EXPECT_THROW(dl.next(b), engine::IoError) << "workers " << workers << " epoch " << e;
      ASSERT_TRUE(dl.next(b));  // the failed batch counts as consumed
      EXPECT_EQ(b.indices, std::vector<int64_t>{3});
      EXPECT_FALSE(dl.next(b));
    }
    // An abandoned epoch's pending error is dropped with it.
    dl.start_epoch(2);
    ASSERT_TRUE(dl.next(b));
    ASSERT_TRUE(wait_for([&] { return workers == 0 || dl.stats().claimed >= 2 * 4 + 4; }));
    dl.start_epoch(3);
    ASSERT_TRUE(dl.next(b));
    EXPECT_EQ(b.indices, std::vector<int64_t>{0});
  }
}

TEST(DataLoader, DestructorReturnsPromptlyWithWorkersBlocked) {
  tiny::TempDir d("loader_dtor");
  auto ds = make_ds(d, 11);
  double worst = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto dl = std::make_unique<io::DataLoader>(ds, opts(3, 1));
    dl->start_epoch(0);
    ASSERT_TRUE(wait_for([&] { return dl->stats().claimed >= 1; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // queue full: workers wait
    EXPECT_EQ(dl->stats().claimed, 1);
    const auto t0 = std::chrono::steady_clock::now();
    dl.reset();
    worst = std::max(worst, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  EXPECT_LT(worst, 1.0);
  // Destroyed while producing large batches: workers abandon them between samples.
  auto big = make_ds(d, 11, true, 256);
  io::LoaderOptions o = opts(2, 4);
  o.batch_size = 11;
  auto dl = std::make_unique<io::DataLoader>(big, o);
  dl->start_epoch(0);
  const auto t0 = std::chrono::steady_clock::now();
  dl.reset();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
}

TEST(DataLoader, PinMemoryWithoutGpuGivesPlainCpuBatches) {
  if (engine::pinned_host_allocator() != nullptr) GTEST_SKIP() << "a GPU is usable: covered by loader_cuda_test";
  tiny::TempDir d("loader_pin");
  auto ds = make_ds(d, 11);
  io::LoaderOptions o = opts(0, 1);
  o.pin_memory = true;
  io::DataLoader dl(ds, o);
  dl.start_epoch(0);
  io::Batch b;
  const int64_t before = engine::cpu_allocator()->stats().live_bytes;
  ASSERT_TRUE(dl.next(b));
  const int64_t after = engine::cpu_allocator()->stats().live_bytes;
  EXPECT_TRUE(b.images.device().is_cpu());
  // The batch tensors come from the ordinary CPU allocator.
  EXPECT_EQ(after - before, static_cast<int64_t>(b.images.numel() + b.targets.numel() * 4));
  EXPECT_TRUE(flat(b) == reference(ds, 0)[0]);
}
