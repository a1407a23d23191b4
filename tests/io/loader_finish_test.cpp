// The loader applies each sample's HSV jitter and flips while writing the batch planes
// (AugmentedDataset::get with deferred PixelOps + io::finish_to_planes). Its batches must equal,
// byte for byte, collate() of the fully finished samples from AugmentedDataset::get.
#include <gtest/gtest.h>

#include "io/loader.h"
#include "tests/io/tiny_dataset.h"

TEST(DataLoader, DeferredPixelOpsEqualFinishedSamples) {
  tiny::TempDir d("loader_finish");
  std::vector<io::ImageRecord> recs;
  for (int i = 0; i < 9; ++i) {
    io::ImageRecord r;
    r.image_path = (d.path / ("f" + std::to_string(i) + ".png")).string();
    tiny::write_image(r.image_path, tiny::make_image(40 + 7 * i, 48 - 2 * i, i));
    r.width = 40 + 7 * i;
    r.height = 48 - 2 * i;
    r.labels = {{static_cast<float>(i % 3), 0.4f, 0.55f, 0.5f, 0.4f}};
    recs.push_back(r);
  }
  io::AugmentOptions ao;
  ao.img_size = 64;
  ao.seed = 5;
  ao.hyp.flipud = 0.5;  // every flip combination occurs
  ao.hyp.fliplr = 0.5;
  ao.hyp.mixup = 0.5;
  ao.hyp.mosaic = 0.7;  // some plain letterboxed samples too
  auto ds = std::make_shared<io::AugmentedDataset>(recs, ao);
  for (int workers : {0, 2}) {
    io::LoaderOptions o;
    o.batch_size = 4;
    o.workers = workers;
    o.seed = 3;
    io::DataLoader dl(ds, o);
    for (int epoch : {0, 1}) {
      dl.start_epoch(epoch);
      io::Batch b;
      int batches = 0;
      while (dl.next(b)) {
        std::vector<io::Sample> samples;
        for (int64_t idx : b.indices) samples.push_back(ds->get(idx, epoch));
        io::Batch ref = io::collate(samples, b.paths);
        ASSERT_EQ(b.images.shape(), ref.images.shape());
        EXPECT_EQ(b.images.to_vector<uint8_t>(), ref.images.to_vector<uint8_t>())
            << "workers " << workers << " epoch " << epoch << " batch " << batches;
        EXPECT_EQ(b.targets.to_vector<float>(), ref.targets.to_vector<float>());
        ++batches;
      }
      EXPECT_EQ(batches, 3);
    }
  }
}
