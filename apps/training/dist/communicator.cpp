// Communicator base (apps/training/dist/communicator.h): scratch memory and the device context.
#include "apps/training/dist/communicator.h"

namespace training::dist {

Communicator::Communicator(int rank, int world_size) : rank_(rank), world_(world_size) {
  Y9_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "communicator: rank ", rank, " is not in [0, ",
           world_size, ")");
}

Communicator::~Communicator() = default;

void* Communicator::scratch(size_t bytes) {
  if (!scratch_.defined() || static_cast<size_t>(scratch_.numel()) < bytes) {
    // On a GPU the Communication stream may still use the old block, which belongs to the compute
    // stream: record_stream (below, when it was made) makes the caching allocator wait for the
    // Communication stream's work queued at the free before reusing it, without blocking the host.
    // The new block's first use is ordered after the compute stream's work.
    const bool streams = !device().is_cpu();
    scratch_ = engine::Tensor();
    scratch_ = engine::Tensor::empty({static_cast<int64_t>(std::max<size_t>(bytes, 256))}, engine::DType::U8, device());
    if (streams) {
      engine::record_stream(scratch_, engine::StreamKind::Communication);
      engine::Event ready;
      context().record(ready, engine::StreamKind::Compute);
      context().wait(ready, engine::StreamKind::Communication);
    }
  }
  return scratch_.data_ptr();
}

engine::DeviceContext& Communicator::context() const { return engine::backend(device().type).context(device()); }

std::string Communicator::who() const { return "rank " + std::to_string(rank_) + "/" + std::to_string(world_); }

}  // namespace training::dist
