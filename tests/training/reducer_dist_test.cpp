// Data-parallel gradients under mpirun (2, 3, 4 ranks): yolov9-t with synchronised BatchNorm,
// the globally normalised loss and the bucketed gradient reducer gives, on every rank, the
// gradients of one process on the whole batch: ||g_dp - g_1||_2 / ||g_1||_2 <= 1e-6 in FP32, and
// the largest elementwise difference within 4x the FP32 noise floor measured in the same run (one
// process on the same batch with its images in reverse order differs from itself by about
// 4e-6 of the largest gradient, in the first convolution's weight gradient, a 4096-term sum per
// element); also with gradient accumulation, tiny buckets, no overlap, and FP16/BF16 on the wire
// (within their rounding).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "apps/training/dist/reducer.h"
#include "apps/training/dist/sync_ops.h"
#include "apps/training/param_store.h"
#include "engine/autograd.h"
#include "graph/model.h"
#include "ops/ops.h"
#include "ops/yolo_loss.h"
#include "tests/dist_util.h"
#include "tests/testutil.h"

namespace {

using engine::DType;
using engine::Tensor;
using training::dist::Communicator;

constexpr int64_t kPerRank = 2, kImg = 64, kNc = 3;

std::string cfg() { return std::string(Y9_SOURCE_DIR) + "/configs/models/yolov9-t.yaml"; }

// The global batch: images (seeded, identical on every rank) and targets [N, 6].
struct GlobalBatch {
  Tensor images;   // [B, 3, kImg, kImg] F32
  Tensor targets;  // [N, 6] image index in the global batch
};

GlobalBatch make_batch(int64_t B, uint64_t seed) {
  GlobalBatch g;
  g.images = testutil::random_tensor({B, 3, kImg, kImg}, seed, 0.0, 1.0, DType::F32);
  std::vector<double> t;
  for (int64_t b = 0; b < B; ++b)
    for (int k = 0; k < 1 + static_cast<int>(b % 3); ++k) {
      // Large boxes: at initialisation the predicted boxes are ~15 grid cells wide, so only large
      // targets give IoUs (and target scores) big enough for target_scores_sum to exceed its
      // floor of 1 on some ranks, which the global normalisation must then get right.
      const double cx = 0.45 + 0.03 * k + 0.02 * static_cast<double>(b % 4), cy = 0.5 - 0.02 * k;
      const double w = b % 2 ? 0.95 - 0.1 * k : 0.3, h = b % 2 ? 0.9 - 0.05 * k : 0.25;
      t.insert(t.end(), {static_cast<double>(b), static_cast<double>((b + k) % kNc), cx, cy, w, h});
    }
  g.targets = Tensor::from_vector(t, {static_cast<int64_t>(t.size() / 6), 6}).to(DType::F32);
  return g;
}

// This rank's slice of the global batch (targets re-indexed).
GlobalBatch shard(const GlobalBatch& g, int rank) {
  GlobalBatch s;
  s.images = g.images.narrow(0, rank * kPerRank, kPerRank).contiguous();
  std::vector<float> t = g.targets.to_vector<float>(), out;
  for (size_t i = 0; i + 5 < t.size(); i += 6) {
    const int64_t b = static_cast<int64_t>(t[i]);
    if (b < rank * kPerRank || b >= (rank + 1) * kPerRank) continue;
    out.push_back(static_cast<float>(b - rank * kPerRank));
    out.insert(out.end(), t.begin() + static_cast<long>(i) + 1, t.begin() + static_cast<long>(i) + 6);
  }
  s.targets = Tensor::from_vector(out, {static_cast<int64_t>(out.size() / 6), 6});
  return s;
}

struct Replica {
  std::shared_ptr<graph::Model> model;
  std::unique_ptr<training::ParamStore> store;
};

Replica make_model() {
  Replica s;
  s.model = graph::Model::from_yaml(cfg(), kNc);
  s.model->train(true);
  s.store = std::make_unique<training::ParamStore>(s.model->named_parameters());
  return s;
}

void forward_backward(graph::Model& m, const GlobalBatch& b, const ops::YoloLossConfig& lc) {
  graph::ModelOutput out = m.forward(b.images);
  ops::YoloLossResult L = ops::yolo_loss(out.raw, b.targets, lc);
  L.total.backward();
}

// Gradient differences over the whole buffer: max |a - b| / max |a| (max_rel) and
// ||a - b||_2 / ||a||_2 (l2_rel), with the parameter holding the largest difference.
struct Diff {
  double max_rel = 0, l2_rel = 0;
  std::string worst;
};

Diff grad_diff(const training::ParamStore& ref, const training::ParamStore& got) {
  const std::vector<float> a = ref.grads().flat.to_vector<float>(), b = got.grads().flat.to_vector<float>();
  double amax = 0, dmax = 0, a2 = 0, d2 = 0;
  size_t imax = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - b[i]);
    amax = std::max(amax, static_cast<double>(std::abs(a[i])));
    a2 += static_cast<double>(a[i]) * a[i];
    d2 += d * d;
    if (d > dmax) dmax = d, imax = i;
  }
  Diff r;
  r.max_rel = amax > 0 ? dmax / amax : dmax;
  r.l2_rel = a2 > 0 ? std::sqrt(d2 / a2) : std::sqrt(d2);
  for (size_t k = 0; k < ref.size(); ++k) {
    const auto& s = ref.segment(k);
    if (static_cast<int64_t>(imax) >= s.offset && static_cast<int64_t>(imax) < s.offset + s.numel) r.worst = ref.name(k);
  }
  return r;
}

// The batch with its images in reverse order (targets re-indexed): the same gradient in exact
// arithmetic, summed in another order in FP32.
GlobalBatch reversed(const GlobalBatch& g) {
  const int64_t B = g.images.size(0);
  GlobalBatch r;
  std::vector<Tensor> imgs;
  for (int64_t b = B; b-- > 0;) imgs.push_back(g.images.narrow(0, b, 1));
  r.images = ops::concat(imgs, 0).contiguous();
  std::vector<float> t = g.targets.to_vector<float>();
  for (size_t i = 0; i + 5 < t.size(); i += 6) t[i] = static_cast<float>(B - 1) - t[i];
  r.targets = Tensor::from_vector(t, {static_cast<int64_t>(t.size() / 6), 6});
  return r;
}

struct Case {
  training::dist::ReducerOptions opts;
  int micro_steps = 1;
  double l2_tol = 1e-6;  ///< on ||g_dp - g_1||_2 / ||g_1||_2
  double max_tol = 0;    ///< on max |g_dp - g_1| / max |g_1|; 0: 4x the FP32 noise floor measured
};

void run_case(const Case& c) {
  Communicator& world = dist_test::world();
  const int W = world.world_size();
  const int64_t B = kPerRank * W;
  std::vector<GlobalBatch> batches;
  for (int k = 0; k < c.micro_steps; ++k) batches.push_back(make_batch(B, 100 + static_cast<uint64_t>(k)));

  // One process on the whole batch (every rank computes it, from the same initial weights).
  Replica ref = make_model();
  ops::YoloLossConfig lc = ops::YoloLossConfig::dual(kNc);
  for (const auto& gb : batches) forward_backward(*ref.model, gb, lc);

  // This rank's share, synchronised.
  Replica dp = make_model();
  auto bn = training::dist::batchnorm_sync(world);
  EXPECT_GT(dp.model->set_batchnorm_sync(&bn), 0);
  training::dist::GradReducer reducer(*dp.store, world.duplicate(), c.opts);
  ops::YoloLossConfig dl = lc;
  dl.reduce_sums = training::dist::loss_sums_reduce(world);
  dl.loss_batch = B;
  for (int k = 0; k < c.micro_steps; ++k) {
    reducer.begin_backward(k + 1 == c.micro_steps);
    forward_backward(*dp.model, shard(batches[static_cast<size_t>(k)], world.rank()), dl);
    reducer.finish_backward();
  }
  const Diff d = grad_diff(*ref.store, *dp.store);
  // The FP32 noise floor: one process on the same batch in reverse image order.
  Replica rev = make_model();
  for (const auto& gb : batches) forward_backward(*rev.model, reversed(gb), lc);
  const Diff floor = grad_diff(*ref.store, *rev.store);
  const double max_tol = c.max_tol > 0 ? c.max_tol : 4 * std::max(floor.max_rel, 1e-7);
  EXPECT_LE(d.l2_rel, c.l2_tol) << "rank " << world.rank() << ": ||g_dp - g_1|| / ||g_1|| = " << d.l2_rel;
  EXPECT_LE(d.max_rel, max_tol) << "rank " << world.rank() << ": max |g_dp - g_1| / max |g_1| = " << d.max_rel
                                << " (worst in " << d.worst << "); FP32 noise floor (one process, images reversed) "
                                << floor.max_rel << " in " << floor.worst;
  // Synchronised BatchNorm: the running statistics equal those of the whole batch.
  const auto rb = ref.model->named_buffers(), db = dp.model->named_buffers();
  ASSERT_EQ(rb.size(), db.size());
  for (size_t i = 0; i < rb.size(); ++i)
    if (rb[i].first.find("running_") != std::string::npos)
      ASSERT_TRUE(testutil::all_close(db[i].second, rb[i].second, 1e-5, 1e-6)) << rb[i].first;
  if (world.rank() == 0)
    std::printf("[ reducer ] %d ranks, %zu buckets, %d micro-steps, wire %s: vs one process: L2 %.3g, max %.3g (%s); "
                "FP32 floor (one process, images reversed): L2 %.3g, max %.3g (%s)\n",
                W, reducer.buckets().size(), c.micro_steps, engine::dtype_name(c.opts.grad_dtype), d.l2_rel, d.max_rel,
                d.worst.c_str(), floor.l2_rel, floor.max_rel, floor.worst.c_str());
}

TEST(GradReducer, EqualsOneProcessOnTheWholeBatch) { run_case({}); }

TEST(GradReducer, AccumulationSyncsOnlyTheUpdatingStep) {
  Case c;
  c.micro_steps = 2;
  run_case(c);
}

TEST(GradReducer, TinyBucketsAndNoOverlap) {
  Case c;
  c.opts.bucket_mb = 0.05;
  c.opts.first_bucket_mb = 0.01;
  run_case(c);
  c.opts.overlap = false;
  c.opts.algo = training::dist::AllReduceAlgo::Library;
  run_case(c);
}

TEST(GradReducer, CompressedWire) {
  Case c;
  c.opts.grad_dtype = DType::BF16;
  c.l2_tol = c.max_tol = 1e-2;  // 8-bit mantissa
  run_case(c);
  c.opts.grad_dtype = DType::F16;
  c.l2_tol = c.max_tol = 2e-3;  // 11-bit mantissa
  run_case(c);
}

TEST(GradReducer, BucketsCoverEveryTrainableParameterInReverseOrder) {
  Replica s = make_model();
  training::dist::ReducerOptions o;
  o.bucket_mb = 0.5;
  training::dist::GradReducer r(*s.store, dist_test::world().duplicate(), o);
  std::vector<size_t> seen;
  int64_t prev_offset = INT64_MAX;
  for (const auto& b : r.buckets()) {
    EXPECT_LE(b.offset + b.numel, prev_offset) << "buckets must go from the end of the buffer to the start";
    prev_offset = b.offset;
    seen.insert(seen.end(), b.params.begin(), b.params.end());
  }
  ASSERT_EQ(seen.size(), s.store->size());
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], s.store->size() - 1 - i);
  const double first_mb = static_cast<double>(r.buckets()[0].numel) * 4 / 1048576.0;
  EXPECT_LT(first_mb, 1.0 + 0.6) << "the first bucket is capped near 1 MiB";
}

}  // namespace
