// The small all-reduces inside forward and backward of data-parallel training: synchronised
// BatchNorm statistics (--sync-bn) and the loss's global normalisation. Both run on the training
// thread's communicator (not the gradient reducer's), in F64.
#pragma once
#include <functional>

#include "apps/training/dist/communicator.h"
#include "engine/tensor.h"
#include "kernels/common/batch_norm.h"

namespace training::dist {

/// A BatchNormSync (kernels/common/batch_norm.h) whose reduction is an all-reduce (sum, F64) over
/// `comm`; `comm` must outlive it. For graph::Model::set_batchnorm_sync.
kernels::BatchNormSync batchnorm_sync(Communicator& comm);

/// The loss's reduce_sums hook (ops::YoloLossConfig): sums the [K, 4] F64 raw loss sums over
/// `comm` in place. A rank whose own sums are not finite says so on stderr (naming itself) before
/// the reduction; the reduced sums are then not finite on every rank, so every rank sees the same
/// non-finite loss and skips the step with the others.
std::function<void(engine::Tensor&)> loss_sums_reduce(Communicator& comm);

}  // namespace training::dist
