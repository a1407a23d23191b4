// Bucketed gradient reducer (apps/training/dist/reducer.h).
#include "apps/training/dist/reducer.h"

#include <chrono>
#include <cstdio>

#include "kernels/common/comm.h"

namespace training::dist {

using engine::DType;
using clock_type = std::chrono::steady_clock;

namespace {
double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}
}  // namespace

GradReducer::GradReducer(ParamStore& store, std::unique_ptr<Communicator> comm, ReducerOptions opts, Tracer* tracer)
    : store_(store), comm_(std::move(comm)), opts_(opts), tracer_(tracer) {
  Y9_CHECK(comm_ != nullptr, "GradReducer: no communicator");
  Y9_CHECK(opts_.bucket_mb > 0 && opts_.first_bucket_mb > 0, "--bucket-mb ", opts_.bucket_mb,
           " must be > 0 (first bucket ", opts_.first_bucket_mb, " MiB)");
  Y9_CHECK(opts_.grad_dtype == DType::F32 || opts_.grad_dtype == DType::F16 || opts_.grad_dtype == DType::BF16,
           "--grad-dtype must be fp32, fp16 or bf16, got ", engine::dtype_name(opts_.grad_dtype));
  const engine::Tensor& g = store_.grads().flat;
  Y9_CHECK(g.dtype() == DType::F32, "GradReducer: the gradient buffer must be F32, got ", g.str());
  Y9_CHECK(g.device() == comm_->device(), "GradReducer: gradients on ", g.device().str(), " but the ",
           comm_->backend(), " communicator moves ", comm_->device().str(), " buffers");
  // Buckets in reverse registration order; each a contiguous range of the buffer.
  const size_t n = store_.size();
  bucket_of_.assign(n, -1);
  const int64_t esz = static_cast<int64_t>(engine::dtype_size(g.dtype()));
  Bucket cur;
  int64_t lo = 0, hi = 0;
  auto close = [&] {
    if (cur.params.empty()) return;
    cur.offset = lo;
    cur.numel = hi - lo;
    buckets_.push_back(std::move(cur));
    cur = Bucket();
  };
  for (size_t k = n; k-- > 0;) {
    const engine::FlatSegment& s = store_.segment(k);
    if (cur.params.empty()) hi = s.offset + s.numel;
    lo = s.offset;
    cur.params.push_back(k);
    if (store_.trainable(k)) ++cur.trainable;
    const double cap_mb = buckets_.empty() ? opts_.first_bucket_mb : opts_.bucket_mb;
    if (static_cast<double>((hi - lo) * esz) >= cap_mb * 1024.0 * 1024.0) close();
  }
  close();
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t k : buckets_[b].params)
      if (store_.trainable(k)) bucket_of_[k] = static_cast<int>(b);
  remaining_.assign(buckets_.size(), 0);
  ready_flag_.assign(buckets_.size(), false);
  ready_.resize(buckets_.size());
  done_.resize(buckets_.size());
  if (opts_.grad_dtype != DType::F32) wire_ = engine::Tensor::empty({g.numel()}, opts_.grad_dtype, g.device());
  alive_ = std::make_shared<std::atomic<GradReducer*>>(this);
  if (opts_.overlap)
    for (size_t k = 0; k < n; ++k)
      if (store_.trainable(k))
        store_.param(k).register_grad_ready_hook([alive = alive_, k](const engine::Tensor&) {
          if (GradReducer* r = alive->load()) r->on_grad_ready(k);
        });
  thread_ = std::thread([this] { worker(); });
}

GradReducer::~GradReducer() {
  if (alive_) alive_->store(nullptr);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    syncing_ = false;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GradReducer::begin_backward(bool sync) {
  std::lock_guard<std::mutex> lock(mu_);
  Y9_CHECK(!syncing_, "GradReducer: begin_backward before the previous synced backward was finished");
  if (error_) std::rethrow_exception(error_);
  syncing_ = sync;
  if (!sync) return;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    remaining_[b] = buckets_[b].trainable;
    ready_flag_[b] = false;
  }
  next_launch_ = 0;
  finished_ = 0;
  // Buckets without trainable parameters are skipped alike on every rank.
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (buckets_[b].trainable == 0) ready_flag_[b] = true;
}

void GradReducer::on_grad_ready(size_t param) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!syncing_) return;
  const int b = bucket_of_[param];
  if (b < 0 || ready_flag_[static_cast<size_t>(b)]) return;
  if (--remaining_[static_cast<size_t>(b)] > 0) return;
  ready_flag_[static_cast<size_t>(b)] = true;
  launch_ready_locked();
  lock.unlock();
  cv_.notify_all();
}

void GradReducer::launch_ready_locked() {
  engine::DeviceContext& ctx = comm_->context();
  while (next_launch_ < buckets_.size() && ready_flag_[next_launch_]) {
    const size_t b = next_launch_++;
    if (buckets_[b].trainable == 0) {
      ++finished_;
      continue;
    }
    ctx.record(ready_[b], engine::StreamKind::Compute);  // the gradients so far
    queue_.push_back(b);
  }
}

void GradReducer::finish_backward() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!syncing_) return;
  const auto t0 = clock_type::now();
  for (size_t b = 0; b < buckets_.size(); ++b) ready_flag_[b] = true;  // gradients that never came: zeros
  launch_ready_locked();
  cv_.notify_all();
  cv_.wait(lock, [&] { return finished_ == buckets_.size() || error_ != nullptr; });
  syncing_ = false;
  if (error_) {
    // The worker may still hold buckets; drop them (the run ends with this error).
    queue_.clear();
    std::rethrow_exception(error_);
  }
  engine::DeviceContext& ctx = comm_->context();
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (buckets_[b].trainable > 0) ctx.wait(done_[b], engine::StreamKind::Compute);
  stats_.wait_s += seconds_since(t0);
}

void GradReducer::worker() {
  for (;;) {
    size_t b;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      b = queue_.front();
      queue_.pop_front();
    }
    try {
      reduce_bucket(b);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
      cv_.notify_all();
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++finished_;
    }
    cv_.notify_all();
  }
}

void GradReducer::reduce_bucket(size_t b) {
  const Bucket& bk = buckets_[b];
  engine::DeviceContext& ctx = comm_->context();
  const auto t0 = clock_type::now();
  const int64_t ts = tracer_ ? tracer_->now_us() : 0;
  ctx.wait(ready_[b], engine::StreamKind::Communication);
  float* g = store_.grads().flat.data<float>() + bk.offset;
  AllReduceAlgo ran;
  const DType wire = opts_.grad_dtype;
  if (wire == DType::F32) {
    ran = all_reduce(*comm_, g, bk.numel, DType::F32, opts_.op, opts_.algo, opts_.allreduce);
  } else {
    // Scale by 1/W before rounding so that the FP16 sum stays in range; scale back after.
    const double W = comm_->world_size();
    void* w = static_cast<char*>(wire_.data_ptr()) + bk.offset * static_cast<int64_t>(engine::dtype_size(wire));
    auto c = engine::kernel(kernels::kCommCompress, wire, comm_->device());
    c.fn(c.ctx, wire, g, w, bk.numel, 1.0 / W);
    ran = all_reduce(*comm_, w, bk.numel, wire, ReduceOp::Sum, opts_.algo, opts_.allreduce);
    auto d = engine::kernel(kernels::kCommDecompress, wire, comm_->device());
    d.fn(d.ctx, wire, w, g, bk.numel, opts_.op == ReduceOp::Avg ? 1.0 : W);
  }
  ctx.record(done_[b], engine::StreamKind::Communication);
  const double dt = seconds_since(t0);
  if (tracer_ && tracer_->active())
    tracer_->complete("all-reduce bucket " + std::to_string(b), "communication", ts, tracer_->now_us() - ts,
                      {{"bucket", b},
                       {"MiB", static_cast<double>(bk.numel) * engine::dtype_size(wire) / 1048576.0},
                       {"params", bk.params.size()},
                       {"algorithm", allreduce_algo_name(ran)}});
  std::lock_guard<std::mutex> lock(mu_);
  stats_.comm_s += dt;
  stats_.bytes += bk.numel * static_cast<int64_t>(engine::dtype_size(wire));
  ++stats_.reductions;
}

ReducerStats GradReducer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void GradReducer::reset_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = ReducerStats();
}

}  // namespace training::dist
