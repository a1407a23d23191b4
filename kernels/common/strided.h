// Strided layouts as the kernels see them (the type lives in engine/strided_layout.h so that the
// backend interface can name it).
#pragma once
#include "engine/strided_layout.h"

namespace kernels {
using engine::kMaxDims;
using engine::strided_offset;
using engine::StridedLayout;
}  // namespace kernels
