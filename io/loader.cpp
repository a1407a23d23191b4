// DataLoader persistent worker threads, cross-epoch bounded prefetch, collate (optionally into
// pinned host memory) and the distributed sampler.
#include "io/loader.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include <opencv2/core.hpp>

#include "engine/backend.h"
#include "engine/error.h"
#include "engine/pinned_allocator.h"
#include "io/augment_device.h"

namespace io {

std::vector<int64_t> distributed_indices(int64_t n, int rank, int world_size, bool shuffle, uint64_t seed,
                                         int epoch) {
  Y9_CHECK(world_size > 0 && rank >= 0 && rank < world_size, "distributed sampler: rank ", rank,
           " not in [0, ", world_size, ")");
  Y9_CHECK(n > 0, "distributed sampler: empty dataset");
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  if (shuffle) {
    Rng rng(seed, static_cast<uint64_t>(epoch), 0, /*stream*/ 0x5A3F1E);  // same on every rank
    for (int64_t i = n - 1; i > 0; --i) std::swap(perm[i], perm[rng.randint(0, i)]);
  }
  const int64_t per = (n + world_size - 1) / world_size, total = per * world_size;
  for (int64_t i = n; i < total; ++i) perm.push_back(perm[(i - n) % n]);
  std::vector<int64_t> out;
  out.reserve(per);
  for (int64_t i = rank; i < total; i += world_size) out.push_back(perm[i]);
  return out;
}

namespace {
// Writes samples one at a time into a batch of B: image planes (BGR HWC -> RGB CHW with the
// sample's pixel ops applied, io::finish_to_planes) and target rows [i, class, cx, cy, w, h].
// The first sample fixes H x W; later ones must match (engine::ShapeError otherwise).
class BatchWriter {
 public:
  BatchWriter(int64_t batch, engine::Allocator* allocator) : B_(batch), allocator_(allocator) {
    out_.indices.reserve(static_cast<size_t>(batch));
    out_.paths.reserve(static_cast<size_t>(batch));
  }
  void add(const Sample& s, const PixelOps& ops, const std::string& path) {
    const int64_t i = static_cast<int64_t>(out_.indices.size());
    if (i == 0) {
      H_ = s.img.rows;
      W_ = s.img.cols;
      out_.images = engine::empty_from_allocator(allocator_, {B_, 3, H_, W_}, engine::DType::U8);
    }
    Y9_CHECK_SHAPE(i < B_ && s.img.rows == H_ && s.img.cols == W_ && s.img.type() == CV_8UC3, "collate: sample ", i,
                   " is ", s.img.cols, "x", s.img.rows, ", batch is ", W_, "x", H_, " (", B_, " samples)");
    const size_t plane = static_cast<size_t>(H_) * W_;
    uint8_t* dst = out_.images.data<uint8_t>() + static_cast<size_t>(i) * 3 * plane;
    finish_to_planes(s.img, ops, dst, dst + plane, dst + 2 * plane);
    for (const auto& l : s.labels) {
      targets_.push_back(static_cast<float>(i));
      targets_.insert(targets_.end(), l.begin(), l.end());
    }
    out_.indices.push_back(s.index);
    out_.paths.push_back(path);
  }
  Batch finish() {
    const int64_t n = static_cast<int64_t>(targets_.size() / 6);
    out_.targets = engine::empty_from_allocator(allocator_, {n, 6}, engine::DType::F32);
    std::copy(targets_.begin(), targets_.end(), out_.targets.data<float>());
    return std::move(out_);
  }

 private:
  int64_t B_;
  engine::Allocator* allocator_;
  int64_t H_ = 0, W_ = 0;
  std::vector<float> targets_;
  Batch out_;
};
}  // namespace

Batch collate(const std::vector<Sample>& samples, const std::vector<std::string>& paths,
              engine::Allocator* allocator) {
  Y9_CHECK_SHAPE(!samples.empty(), "collate: empty batch");
  Y9_CHECK_SHAPE(paths.size() == samples.size(), "collate: ", samples.size(), " samples but ", paths.size(),
                 " paths");
  BatchWriter w(static_cast<int64_t>(samples.size()), allocator);
  for (size_t i = 0; i < samples.size(); ++i) w.add(samples[i], PixelOps{}, paths[i]);
  return w.finish();
}

DataLoader::DataLoader(std::shared_ptr<const AugmentedDataset> ds, LoaderOptions opts)
    : ds_(std::move(ds)), opts_(opts) {
  Y9_CHECK(ds_ != nullptr, "DataLoader: null dataset");
  Y9_CHECK(ds_->size() > 0, "DataLoader: empty dataset");
  Y9_CHECK(opts_.batch_size > 0, "DataLoader: batch_size must be > 0");
  Y9_CHECK(opts_.workers >= 0 && opts_.prefetch >= 0, "DataLoader: workers >= 0 and prefetch >= 0 required");
  if (opts_.prefetch == 0) opts_.prefetch = std::max(4, 2 * opts_.workers);  // LoaderOptions::prefetch
  Y9_CHECK(opts_.epochs >= 0, "DataLoader: epochs must be >= 0 (0 = unbounded)");
  Y9_CHECK(opts_.world_size > 0 && opts_.rank >= 0 && opts_.rank < opts_.world_size, "DataLoader: rank ",
           opts_.rank, " not in [0, ", opts_.world_size, ")");
  opencv_single_threaded();  // official dataloaders.py: cv2.setNumThreads(0) at import
  opts_.batch_size = static_cast<int>(std::min<int64_t>(opts_.batch_size, ds_->size()));  // official min(batch, n)
  if (ds_->options().rect) opts_.shuffle = false;
  per_rank_ = (ds_->size() + opts_.world_size - 1) / opts_.world_size;  // distributed_indices' length
  nb_ = opts_.drop_last ? per_rank_ / opts_.batch_size : (per_rank_ + opts_.batch_size - 1) / opts_.batch_size;
  if (opts_.pin_memory) pinned_ = engine::pinned_host_allocator();  // nullptr without a usable GPU
  if (opts_.augment_device == LoaderOptions::AugmentDevice::Gpu)
    Y9_CHECK(opts_.device.is_cuda(), "DataLoader: --augment-device gpu needs a CUDA device, got ", opts_.device.str());
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
    generation_++;
  }
  work_cv_.notify_all();
  for (auto& w : workers_) w.join();
  if (inflight_arena_.defined()) {  // the last upload must finish reading the host arena
    try {
      engine::backend(engine::DeviceType::CUDA).context(opts_.device).synchronize(inflight_done_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "warning: DataLoader: waiting for the last upload failed: %s\n", e.what());
    }
  }
}

DataLoader::Order DataLoader::order_for(int epoch) const {
  return std::make_shared<const std::vector<int64_t>>(
      distributed_indices(ds_->size(), opts_.rank, opts_.world_size, opts_.shuffle, opts_.seed, epoch));
}

LoaderStats DataLoader::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

// ---------------------------------------------------------------------------------------------
// GPU augmentation: plans on the workers, pixels on the device

// One upload per batch: the arena holds the AugSample records, the LetterboxSample records, the
// decoded tiles and the letterbox output slots (written on the device), in this order.
struct DataLoader::DeviceWork {
  engine::Tensor arena;  ///< U8 host (pinned when available)
  int64_t n = 0, n_lb = 0;
  int64_t lb_records = 0;  ///< arena offset of the LetterboxSample records
  int64_t lb_out = 0;      ///< arena offset of the letterbox outputs (lb_h x lb_w x 3 each)
  int lb_h = 0, lb_w = 0;
  int h = 0, w = 0;        ///< output image size
};

namespace {
int64_t align64(int64_t v) { return (v + 63) / 64 * 64; }
}  // namespace

std::optional<DataLoader::Slot> DataLoader::make_plan_batch(const std::vector<int64_t>& order, int epoch, int64_t b,
                                                            uint64_t gen) const {
  const int64_t lo = b * opts_.batch_size, hi = std::min<int64_t>(lo + opts_.batch_size, order.size());
  const int s = ds_->options().img_size;
  const bool augment = ds_->options().augment;
  std::vector<SamplePlan> plans;
  std::vector<float> targets;
  Slot slot;
  slot.batch.indices.reserve(static_cast<size_t>(hi - lo));
  // Decode what the warps read. Affine mosaics: as the CPU fast path, only the part of each tile
  // inside the canvas region the warp can sample (warp_source_roi), region-limited JPEG decode;
  // the plan's tile then becomes that part (canvas rectangle av, origin at av's corner).
  // Perspective mosaics: whole tiles. Non-mosaic samples: the load_image output to letterbox.
  // Each sample is planned and decoded together, so that an unreadable image replaces its
  // sample exactly as on the CPU path (replacement()).
  std::vector<cv::Mat> decoded;
  std::vector<std::array<std::array<int64_t, 4>, 2>> tile_at;  // index into `decoded`
  std::vector<int64_t> image_at;
  auto decode = [&](int64_t index) {
    decoded.push_back(load_image(ds_->records()[index].image_path, s, augment).img);
    return static_cast<int64_t>(decoded.size() - 1);
  };
  // Plans and decodes the sample of dataset index `index` (appending to `decoded`); its plan,
  // tile and image slots are returned through the arguments.
  auto plan_and_decode = [&](int64_t index, SamplePlan& p, std::vector<float>& labels,
                             std::array<std::array<int64_t, 4>, 2>& tiles, int64_t& image) {
    PixelOps ops;
    const Sample smp = ds_->get(index, epoch, &ops, &p, /*pixels=*/false);
    for (const auto& l : smp.labels) labels.insert(labels.end(), l.begin(), l.end());
    image = -1;
    if (!p.mosaic) {
      image = decode(p.index);
      const ImageRecord& r = ds_->records()[p.index];
      check_loaded_size(r.image_path, decoded.back().size(), cv::Size(p.img_w, p.img_h), r.width, r.height, s);
      return;
    }
    for (int m = 0; m < p.nmosaic; ++m)
      for (int k = 0; k < 4; ++k) {
        tiles[m][k] = -1;
        MosaicPlan& mp = p.m[m];
        if (mp.dst[k].empty()) continue;
        if (!mp.perspective) {
          const cv::Rect a = mp.dst[k], av = a & warp_source_roi(mp.M, mp.canvas, mp.canvas, s, s);
          if (av.empty()) {
            mp.dst[k] = cv::Rect();
            continue;
          }
          const cv::Rect bv(av.x - mp.padw[k], av.y - mp.padh[k], av.width, av.height);
          decoded.emplace_back(av.height, av.width, CV_8UC3);
          ds_->decode_tile_region(mp.index[k], mp.w[k], mp.h[k], bv, decoded.back());
          tiles[m][k] = static_cast<int64_t>(decoded.size() - 1);
          mp.dst[k] = av;
          mp.h[k] = av.height, mp.w[k] = av.width;
          mp.padw[k] = av.x, mp.padh[k] = av.y;
          continue;
        }
        tiles[m][k] = decode(mp.index[k]);
        const ImageRecord& r = ds_->records()[mp.index[k]];
        check_loaded_size(r.image_path, decoded.back().size(), cv::Size(mp.w[k], mp.h[k]), r.width, r.height, s);
      }
  };
  for (int64_t i = lo; i < hi; ++i) {
    if (stopping_.load(std::memory_order_relaxed) || generation_.load(std::memory_order_relaxed) != gen)
      return std::nullopt;
    SamplePlan plan;
    std::vector<float> labels;
    std::array<std::array<int64_t, 4>, 2> tiles{};
    int64_t image = -1;
    int64_t index = order[i];
    std::exception_ptr first;  // the sample's own error, thrown when no replacement works
    std::vector<std::string> failures;
    for (int64_t t = 0;; ++t) {
      const size_t mark = decoded.size();
      try {
        plan = SamplePlan{};
        labels.clear();
        plan_and_decode(index, plan, labels, tiles, image);
        break;
      } catch (const engine::IoError& e) {
        decoded.resize(mark);  // drop the failed sample's tiles
        if (!first) first = std::current_exception();
        failures.push_back(e.message());
        index = replacement(order, lo, hi, i, t);
        if (index < 0) std::rethrow_exception(first);
      }
    }
    if (!failures.empty()) warn_replaced(failures, index);
    Y9_CHECK_SHAPE(plans.empty() || (plan.out_h == plans[0].out_h && plan.out_w == plans[0].out_w), "collate: sample ",
                   i - lo, " is ", plan.out_w, "x", plan.out_h, ", batch is ", plans[0].out_w, "x", plans[0].out_h);
    for (size_t k = 0; k < labels.size(); k += 5) {
      targets.push_back(static_cast<float>(i - lo));
      targets.insert(targets.end(), labels.begin() + k, labels.begin() + k + 5);
    }
    slot.batch.indices.push_back(index);
    slot.batch.paths.push_back(ds_->records()[index].image_path);
    plans.push_back(plan);
    tile_at.push_back(tiles);
    image_at.push_back(image);
  }
  auto work = std::make_shared<DeviceWork>();
  work->h = plans.empty() ? 0 : plans[0].out_h;
  work->w = plans.empty() ? 0 : plans[0].out_w;
  int64_t n_lb = 0;
  for (const SamplePlan& p : plans) n_lb += p.mosaic ? 0 : 1;
  work->n = static_cast<int64_t>(plans.size());
  work->n_lb = n_lb;
  work->lb_records = align64(work->n * static_cast<int64_t>(sizeof(kernels::AugSample)));
  std::vector<int64_t> offset(decoded.size());
  int64_t bytes = align64(work->lb_records + n_lb * static_cast<int64_t>(sizeof(kernels::LetterboxSample)));
  for (size_t d = 0; d < decoded.size(); ++d) {
    offset[d] = bytes;
    bytes += static_cast<int64_t>(decoded[d].total()) * 3;
  }
  for (size_t j = 0; j < plans.size(); ++j)
    if (!plans[j].mosaic) {  // one letterbox size per batch (the batch's shape): the output slots
      Y9_CHECK(work->lb_h == 0 || (plans[j].lb_h == work->lb_h && plans[j].lb_w == work->lb_w),
               "DataLoader: letterbox sizes differ within a batch (", plans[j].lb_w, "x", plans[j].lb_h, " vs ",
               work->lb_w, "x", work->lb_h, ")");
      work->lb_h = plans[j].lb_h;
      work->lb_w = plans[j].lb_w;
    }
  work->lb_out = bytes;
  bytes += n_lb * 3 * int64_t{work->lb_h} * work->lb_w;
  work->arena = engine::empty_from_allocator(pinned_, {std::max<int64_t>(bytes, 1)}, engine::DType::U8);
  uint8_t* base = work->arena.data<uint8_t>();
  for (size_t d = 0; d < decoded.size(); ++d) {
    const cv::Mat c = decoded[d].isContinuous() ? decoded[d] : decoded[d].clone();
    std::copy(c.data, c.data + c.total() * 3, base + offset[d]);
  }
  auto step_of = [&](int64_t d) { return 3 * static_cast<int64_t>(decoded[static_cast<size_t>(d)].cols); };
  int64_t lb_slot = 0;
  auto* records = reinterpret_cast<kernels::AugSample*>(base);
  auto* lb_records = reinterpret_cast<kernels::LetterboxSample*>(base + work->lb_records);
  for (size_t j = 0; j < plans.size(); ++j) {
    const SamplePlan& p = plans[j];
    if (!p.mosaic) {
      lb_records[lb_slot] = letterbox_sample(p, offset[image_at[j]], step_of(image_at[j]));
      const int64_t step = 3 * int64_t{work->lb_w};
      const kernels::AugWarp w0 = image_warp(p, work->lb_out + lb_slot++ * work->lb_h * step, step);
      records[j] = aug_sample(p, w0);
      continue;
    }
    std::array<kernels::AugWarp, 2> w{};
    for (int m = 0; m < p.nmosaic; ++m) {
      std::array<int64_t, 4> off{}, step{};
      for (int k = 0; k < 4; ++k)
        if (tile_at[j][m][k] >= 0) off[k] = offset[tile_at[j][m][k]], step[k] = step_of(tile_at[j][m][k]);
      w[m] = mosaic_warp(p.m[m], off, step);
    }
    records[j] = aug_sample(p, w[0], p.nmosaic == 2 ? &w[1] : nullptr);
  }
  const int64_t nt = static_cast<int64_t>(targets.size() / 6);
  slot.batch.targets = engine::empty_from_allocator(pinned_, {nt, 6}, engine::DType::F32);
  std::copy(targets.begin(), targets.end(), slot.batch.targets.data<float>());
  slot.work = std::move(work);
  return slot;
}

int64_t DataLoader::replacement(const std::vector<int64_t>& order, int64_t lo, int64_t hi, int64_t i,
                                int64_t t) const {
  constexpr int64_t kMaxReplacements = 8;
  const bool rect = ds_->options().rect;
  const int64_t n = ds_->size(), choices = rect ? hi - lo - 1 : n - 1;
  if (!ds_->options().augment || t >= std::min(kMaxReplacements, choices)) return -1;
  return rect ? order[static_cast<size_t>(lo + (i - lo + t + 1) % (hi - lo))] : (order[i] + t + 1) % n;
}

void DataLoader::warn_replaced(const std::vector<std::string>& failures, int64_t index) const {
  std::lock_guard<std::mutex> lk(warn_mu_);
  for (const std::string& msg : failures)
    if (warned_.insert(msg).second)
      std::printf("WARNING %s: sample replaced by %s\n", msg.c_str(), ds_->records()[index].image_path.c_str());
  std::fflush(stdout);
}

void DataLoader::render_on_device(Slot& slot) const {
  const DeviceWork& w = *slot.work;
  const engine::Device dev = opts_.device;
  auto& ctx = engine::backend(engine::DeviceType::CUDA).context(dev);
  // The previous batch's host arena may go back to the pinned pool once its upload is done.
  if (inflight_arena_.defined()) ctx.synchronize(inflight_done_);
  inflight_arena_ = w.arena;
  engine::Tensor arena = engine::upload_async(w.arena, dev, inflight_done_);
  uint8_t* base = static_cast<uint8_t*>(arena.data_ptr());
  if (w.n_lb > 0) {
    auto k = engine::kernel(kernels::kLetterbox, engine::DType::U8, dev);
    k.fn(k.ctx, engine::DType::U8, base, reinterpret_cast<const kernels::LetterboxSample*>(base + w.lb_records),
         w.n_lb, w.lb_h, w.lb_w, kernels::AugLayout::HwcBgrU8, base + w.lb_out);
  }
  slot.batch.images = engine::Tensor::empty({w.n, 3, w.h, w.w}, engine::DType::U8, dev);
  auto k = engine::kernel(kernels::kAugmentWarp, engine::DType::U8, dev);
  k.fn(k.ctx, engine::DType::U8, base, reinterpret_cast<const kernels::AugSample*>(base), w.n, w.h, w.w,
       aug_hsv_model(), kernels::AugLayout::ChwRgb, slot.batch.images.data_ptr());
  // The device arena is freed here while the launches may still run: the caching allocator
  // reuses its block only in the compute stream's order.
  slot.work.reset();
}

std::optional<DataLoader::Slot> DataLoader::make_batch(const std::vector<int64_t>& order, int epoch, int64_t b,
                                                       uint64_t gen) const {
  if (opts_.augment_device == LoaderOptions::AugmentDevice::Gpu) return make_plan_batch(order, epoch, b, gen);
  const int64_t lo = b * opts_.batch_size, hi = std::min<int64_t>(lo + opts_.batch_size, order.size());
  BatchWriter w(hi - lo, pinned_);
  for (int64_t i = lo; i < hi; ++i) {
    if (stopping_.load(std::memory_order_relaxed) || generation_.load(std::memory_order_relaxed) != gen)
      return std::nullopt;  // discarded or shutting down: stop early
    // Each sample's deferred HSV/flips are applied while it is written into the batch planes
    // (one pass, while its warped image is still in cache), then the image is released.
    PixelOps ops;
    Sample s;
    int64_t index = order[i];
    std::exception_ptr first;  // the sample's own error, thrown when no replacement works
    std::vector<std::string> failures;
    for (int64_t t = 0;; ++t) {
      try {
        ops = PixelOps{};
        s = ds_->get(index, epoch, &ops);
        break;
      } catch (const engine::IoError& e) {
        if (!first) first = std::current_exception();
        failures.push_back(e.message());
        index = replacement(order, lo, hi, i, t);
        if (index < 0) std::rethrow_exception(first);
      }
    }
    if (!failures.empty()) warn_replaced(failures, index);
    w.add(s, ops, ds_->records()[index].image_path);
  }
  Slot slot;
  slot.batch = w.finish();
  return slot;
}

bool DataLoader::can_claim_locked() const {
  if (!started_ || nb_ == 0 || outstanding_ >= opts_.prefetch) return false;
  return next_to_make_ < nb_ ? may_produce(make_epoch_) : may_produce(make_epoch_ + 1);
}

void DataLoader::worker_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    work_cv_.wait(lk, [&] { return stopping_ || fatal_ || can_claim_locked(); });
    if (stopping_ || fatal_) return;
    if (next_to_make_ >= nb_) {  // the epoch is fully claimed: continue with the next one
      try {
        make_order_ = order_for(make_epoch_ + 1);
      } catch (...) {
        fatal_ = std::current_exception();
        ready_cv_.notify_all();
        return;
      }
      ++make_epoch_;
      next_to_make_ = 0;
    }
    const int epoch = make_epoch_;
    const Order order = make_order_;
    const int64_t b = next_to_make_++;
    const uint64_t gen = generation_;
    ++outstanding_;
    ++stats_.claimed;
    stats_.max_epoch_claimed = std::max(stats_.max_epoch_claimed, epoch);
    lk.unlock();

    Slot slot;
    bool cancelled = false;
    try {
      std::optional<Slot> made = make_batch(*order, epoch, b, gen);
      if (made) slot = std::move(*made);
      else cancelled = true;
    } catch (...) {
      slot.error = std::current_exception();
    }

    lk.lock();
    // A restart since the claim reset outstanding_ and counted this batch as discarded.
    if (cancelled || gen != generation_) continue;
    ready_.emplace(std::make_pair(epoch, b), std::move(slot));
    ready_cv_.notify_all();
  }
}

void DataLoader::restart_locked(int epoch, std::map<std::pair<int, int64_t>, Slot>& dropped) {
  generation_++;
  stats_.discarded += outstanding_;  // queued and in-flight batches of the old stream
  dropped.swap(ready_);             // freed by the caller outside the lock
  outstanding_ = 0;
  make_epoch_ = epoch;
  make_order_ = order_for(epoch);
  next_to_make_ = 0;
  epoch_ = epoch;
  order_ = make_order_;
  next_to_give_ = 0;
  started_ = true;
}

void DataLoader::start_epoch(int epoch) {
  Y9_CHECK(epoch >= 0, "DataLoader::start_epoch: negative epoch ", epoch);
  std::map<std::pair<int, int64_t>, Slot> dropped;
  {
    std::lock_guard<std::mutex> lk(mu_);
    const bool same_untouched = started_ && epoch == epoch_ && next_to_give_ == 0;
    const bool continues = started_ && epoch == epoch_ + 1 && next_to_give_ >= nb_;
    if (same_untouched) return;
    if (continues) {  // the stream already runs into `epoch`: keep what is produced
      epoch_ = epoch;
      next_to_give_ = 0;
      order_ = make_epoch_ == epoch ? make_order_ : order_for(epoch);
      return;
    }
    restart_locked(epoch, dropped);
  }
  work_cv_.notify_all();
  if (workers_.empty())
    for (int i = 0; i < opts_.workers; ++i) workers_.emplace_back([this] { worker_loop(); });
}

bool DataLoader::next(Batch& out) {
  Slot slot;
  {
    std::unique_lock<std::mutex> lk(mu_);
    Y9_CHECK(started_, "DataLoader::next called before start_epoch");
    if (fatal_) std::rethrow_exception(fatal_);
    if (next_to_give_ >= nb_) return false;
    Y9_CHECK(may_produce(epoch_), "DataLoader::next: epoch ", epoch_, " is past LoaderOptions::epochs = ",
             opts_.epochs);
    if (opts_.workers == 0) {
      const int64_t b = next_to_give_++;
      const Order order = order_;
      const uint64_t gen = generation_;
      ++stats_.claimed;
      stats_.max_epoch_claimed = std::max(stats_.max_epoch_claimed, epoch_);
      const int epoch = epoch_;
      lk.unlock();
      Slot made = std::move(*make_batch(*order, epoch, b, gen));  // never cancelled: only we restart
      if (made.work) render_on_device(made);
      out = std::move(made.batch);
      return true;
    }
    const std::pair<int, int64_t> key{epoch_, next_to_give_};
    ready_cv_.wait(lk, [&] { return fatal_ || ready_.count(key) > 0; });
    if (fatal_) std::rethrow_exception(fatal_);
    auto it = ready_.find(key);
    slot = std::move(it->second);
    ready_.erase(it);
    next_to_give_++;
    outstanding_--;
  }
  work_cv_.notify_one();  // one more batch may be claimed
  if (slot.error) std::rethrow_exception(slot.error);
  if (slot.work) render_on_device(slot);  // the consumer's thread launches: stream order with its step
  out = std::move(slot.batch);  // the previous batch in `out` is freed here, outside the lock
  return true;
}

}  // namespace io
