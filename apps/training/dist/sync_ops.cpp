// All-reduces inside forward/backward (apps/training/dist/sync_ops.h).
#include "apps/training/dist/sync_ops.h"

#include <cmath>
#include <cstdio>

#include "apps/training/dist/allreduce.h"

namespace training::dist {

namespace {
void reduce_doubles(void* state, double* sums, int64_t n) {
  all_reduce(*static_cast<Communicator*>(state), sums, n, engine::DType::F64, ReduceOp::Sum);
}
}  // namespace

kernels::BatchNormSync batchnorm_sync(Communicator& comm) { return kernels::BatchNormSync{&reduce_doubles, &comm}; }

std::function<void(engine::Tensor&)> loss_sums_reduce(Communicator& comm) {
  return [&comm](engine::Tensor& sums) {
    Y9_CHECK_SHAPE(sums.dtype() == engine::DType::F64 && sums.is_contiguous(), "loss sums must be dense F64, got ",
                   sums.str());
    if (sums.device().is_cpu()) {
      const double* p = sums.data<double>();
      for (int64_t i = 0; i < sums.numel(); ++i)
        if (!std::isfinite(p[i])) {
          std::fprintf(stderr, "%s: the loss of this rank's batch is not finite (sum %lld = %g)\n", comm.who().c_str(),
                       static_cast<long long>(i), p[i]);
          break;
        }
    }
    all_reduce(comm, sums, ReduceOp::Sum);
  };
}

}  // namespace training::dist
