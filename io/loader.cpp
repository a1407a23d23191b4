// DataLoader worker threads, prefetch queue, collate and the distributed sampler.
#include "io/loader.h"

#include <algorithm>
#include <numeric>

#include "engine/error.h"

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

Batch collate(const std::vector<Sample>& samples, const std::vector<std::string>& paths) {
  Y9_CHECK_SHAPE(!samples.empty(), "collate: empty batch");
  const int64_t B = static_cast<int64_t>(samples.size());
  const int H = samples[0].img.rows, W = samples[0].img.cols;
  Batch b;
  b.images = engine::Tensor::empty({B, 3, H, W}, engine::DType::U8);
  uint8_t* dst = b.images.data<uint8_t>();
  int64_t n = 0;
  for (const auto& s : samples) n += static_cast<int64_t>(s.labels.size());
  b.targets = engine::Tensor::empty({n, 6}, engine::DType::F32);
  float* t = b.targets.data<float>();
  const size_t plane = static_cast<size_t>(H) * W;
  for (int64_t i = 0; i < B; ++i) {
    const cv::Mat& im = samples[i].img;
    Y9_CHECK_SHAPE(im.rows == H && im.cols == W && im.type() == CV_8UC3, "collate: sample ", i, " is ", im.cols,
                   "x", im.rows, ", batch is ", W, "x", H);
    // BGR HWC -> RGB CHW: cv::split (SIMD deinterleave) straight into the batch planes.
    cv::Mat planes[3] = {cv::Mat(H, W, CV_8U, dst + (i * 3 + 2) * plane),   // B
                         cv::Mat(H, W, CV_8U, dst + (i * 3 + 1) * plane),   // G
                         cv::Mat(H, W, CV_8U, dst + (i * 3 + 0) * plane)};  // R
    cv::split(im, planes);
    for (const auto& l : samples[i].labels) {
      t[0] = static_cast<float>(i);
      std::copy(l.begin(), l.end(), t + 1);
      t += 6;
    }
    b.indices.push_back(samples[i].index);
  }
  b.paths = paths;
  return b;
}

DataLoader::DataLoader(std::shared_ptr<const AugmentedDataset> ds, LoaderOptions opts)
    : ds_(std::move(ds)), opts_(opts) {
  Y9_CHECK(ds_ != nullptr, "DataLoader: null dataset");
  Y9_CHECK(opts_.batch_size > 0, "DataLoader: batch_size must be > 0");
  Y9_CHECK(opts_.workers >= 0 && opts_.prefetch > 0, "DataLoader: workers >= 0 and prefetch > 0 required");
  opts_.batch_size = static_cast<int>(std::min<int64_t>(opts_.batch_size, ds_->size()));  // official min(batch, n)
  if (ds_->options().rect) opts_.shuffle = false;
}

DataLoader::~DataLoader() { stop(); }

int64_t DataLoader::num_batches() const {
  const int64_t n = static_cast<int64_t>(order_.size());
  return opts_.drop_last ? n / opts_.batch_size : (n + opts_.batch_size - 1) / opts_.batch_size;
}

Batch DataLoader::make_batch(int64_t b) const {
  const int64_t lo = b * opts_.batch_size, hi = std::min<int64_t>(lo + opts_.batch_size, order_.size());
  const int64_t B = hi - lo;
  Batch out;
  std::vector<float> targets;
  int H = 0, W = 0;
  for (int64_t i = lo; i < hi; ++i) {
    // Each sample's deferred HSV/flips are applied while it is written into the batch planes
    // (one pass, while its warped image is still in cache), then the image is released.
    PixelOps ops;
    Sample s = ds_->get(order_[i], epoch_, &ops);
    if (i == lo) {
      H = s.img.rows;
      W = s.img.cols;
      out.images = engine::Tensor::empty({B, 3, H, W}, engine::DType::U8);
    }
    Y9_CHECK_SHAPE(s.img.rows == H && s.img.cols == W && s.img.type() == CV_8UC3, "collate: sample ", i - lo, " is ",
                   s.img.cols, "x", s.img.rows, ", batch is ", W, "x", H);
    const size_t plane = static_cast<size_t>(H) * W;
    uint8_t* dst = out.images.data<uint8_t>() + static_cast<size_t>(i - lo) * 3 * plane;
    finish_to_planes(s.img, ops, dst, dst + plane, dst + 2 * plane);
    for (const auto& l : s.labels) {
      targets.push_back(static_cast<float>(i - lo));
      targets.insert(targets.end(), l.begin(), l.end());
    }
    out.indices.push_back(s.index);
    out.paths.push_back(ds_->records()[order_[i]].image_path);
  }
  const int64_t n = static_cast<int64_t>(targets.size() / 6);
  out.targets = engine::Tensor::empty({n, 6}, engine::DType::F32);
  std::copy(targets.begin(), targets.end(), out.targets.data<float>());
  return out;
}

void DataLoader::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
  workers_.clear();
  ready_.clear();
  stopping_ = false;
}

void DataLoader::worker_loop() {
  for (;;) {
    int64_t b;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] {
        return stopping_ || error_ || next_to_make_ >= num_batches() || next_to_make_ < next_to_give_ + opts_.prefetch;
      });
      if (stopping_ || error_ || next_to_make_ >= num_batches()) return;
      b = next_to_make_++;
    }
    try {
      Batch batch = make_batch(b);
      std::lock_guard<std::mutex> lk(mu_);
      ready_.emplace(b, std::move(batch));
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = std::current_exception();
    }
    cv_.notify_all();
  }
}

void DataLoader::start_epoch(int epoch) {
  stop();
  epoch_ = epoch;
  order_ = distributed_indices(ds_->size(), opts_.rank, opts_.world_size, opts_.shuffle, opts_.seed, epoch);
  next_to_make_ = next_to_give_ = 0;
  error_ = nullptr;
  for (int i = 0; i < opts_.workers; ++i) workers_.emplace_back([this] { worker_loop(); });
}

bool DataLoader::next(Batch& out) {
  if (next_to_give_ >= num_batches()) return false;
  if (opts_.workers == 0) {
    out = make_batch(next_to_give_++);
    return true;
  }
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return error_ || ready_.count(next_to_give_) > 0; });
  if (error_) std::rethrow_exception(error_);
  auto it = ready_.find(next_to_give_);
  out = std::move(it->second);
  ready_.erase(it);
  next_to_give_++;
  lk.unlock();
  cv_.notify_all();
  return true;
}

}  // namespace io
