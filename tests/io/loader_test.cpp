// DataLoader: collate layout, determinism across worker counts, distributed sampler shards.
#include <gtest/gtest.h>

#include <set>

#include "io/loader.h"
#include "tests/io/tiny_dataset.h"

namespace {
std::shared_ptr<io::AugmentedDataset> make_ds(const tiny::TempDir& d, int n) {
  std::vector<io::ImageRecord> recs;
  for (int i = 0; i < n; ++i) {
    io::ImageRecord r;
    r.image_path = (d.path / ("i" + std::to_string(i) + ".png")).string();
    tiny::write_image(r.image_path, tiny::make_image(30 + 5 * i, 40, i));
    r.width = 30 + 5 * i;
    r.height = 40;
    if (i % 4) r.labels = {{static_cast<float>(i % 2), 0.5f, 0.5f, 0.6f, 0.6f}};
    recs.push_back(r);
  }
  io::AugmentOptions o;
  o.img_size = 32;
  o.seed = 11;
  return std::make_shared<io::AugmentedDataset>(recs, o);
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

TEST(DataLoader, WorkerErrorIsRethrown) {
  tiny::TempDir d("loader_err");
  auto ds = make_ds(d, 4);
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
