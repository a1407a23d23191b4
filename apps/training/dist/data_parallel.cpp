// Data-parallel glue (apps/training/dist/data_parallel.h).
#include "apps/training/dist/data_parallel.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "apps/training/dist/allreduce.h"
#include "apps/training/dist/launch.h"
#include "apps/training/dist/mpi_comm.h"
#include "apps/training/dist/sync_ops.h"

namespace training::dist {

std::unique_ptr<DataParallel> DataParallel::from_launcher() {
  const LaunchInfo li = detect_launch();
  if (li.launcher == Launcher::Single) return nullptr;
  // A launcher with one process still counts (official RANK 0: seed + 1).
  return std::make_unique<DataParallel>(make_world(li), li.local_rank);
}

DataParallel::DataParallel(std::unique_ptr<Communicator> world, int local_rank)
    : world_(std::move(world)), local_rank_(local_rank), bn_sync_(::training::dist::batchnorm_sync(*world_)) {}

DataParallel::~DataParallel() { reducer_.reset(); }

void DataParallel::broadcast(engine::Tensor& t, int root) {
  Y9_CHECK(t.defined() && t.is_contiguous() && t.device() == world_->device(), "broadcast: tensor ",
           t.defined() ? t.str() : "undefined", " must be dense on ", world_->device().str());
  if (world_size() > 1) world_->broadcast(t.data_ptr(), static_cast<size_t>(t.numel()) * engine::dtype_size(t.dtype()), root);
}

std::string DataParallel::broadcast_string(const std::string& s, int root) {
  if (world_size() == 1) return s;
  uint64_t n = s.size();
  world_->broadcast(&n, sizeof n, root);
  std::string out = rank() == root ? s : std::string(n, '\0');
  if (n > 0) world_->broadcast(out.data(), n, root);
  return out;
}

std::vector<std::string> DataParallel::all_gather_bytes(const std::string& mine) {
  const int W = world_size();
  if (W == 1) return {mine};
  std::vector<uint64_t> sizes(static_cast<size_t>(W));
  const uint64_t n = mine.size();
  world_->all_gather(&n, sizeof n, sizes.data());
  uint64_t mx = 0;
  for (uint64_t s : sizes) mx = std::max(mx, s);
  std::string padded = mine;
  padded.resize(mx);
  std::string all(mx * static_cast<size_t>(W), '\0');
  if (mx > 0) world_->all_gather(padded.data(), mx, all.data());
  std::vector<std::string> out;
  for (int r = 0; r < W; ++r) out.push_back(all.substr(static_cast<size_t>(r) * mx, sizes[static_cast<size_t>(r)]));
  return out;
}

void DataParallel::sum(std::vector<double>& v) {
  if (world_size() > 1 && !v.empty())
    all_reduce(*world_, v.data(), static_cast<int64_t>(v.size()), engine::DType::F64, ReduceOp::Sum);
}

bool DataParallel::any(bool flag) {
  if (world_size() == 1) return flag;
  double v = flag ? 1.0 : 0.0;
  all_reduce(*world_, &v, 1, engine::DType::F64, ReduceOp::Sum);
  return v > 0.0;
}

void DataParallel::attach_reducer(ParamStore& store, const ReducerOptions& opts, Tracer* tracer) {
  if (world_size() == 1) return;
  reducer_ = std::make_unique<GradReducer>(store, world_->duplicate(), opts, tracer);
}

std::function<void(engine::Tensor&)> DataParallel::loss_reduce() {
  if (world_size() == 1) return {};
  return loss_sums_reduce(*world_);
}

int64_t per_rank_batch(int64_t global_batch, int world_size) {
  if (global_batch % world_size == 0) return global_batch / world_size;
  const int64_t lo = global_batch / world_size * world_size, hi = lo + world_size;
  Y9_THROW(engine::ConfigError, "--batch ", global_batch, " is the global batch and must divide by the ", world_size,
           " ranks; use --batch ", lo > 0 ? std::to_string(lo) + " or " : std::string(), hi);
}

}  // namespace training::dist
