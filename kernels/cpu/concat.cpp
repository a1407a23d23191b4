// concat forward/backward as a list of (dst, src, count) row copies, cut into ~64K-element
// chunks so that a batch-1 concat (outer == 1, YOLO's case) still spreads over threads.
#include "kernels/common/concat.h"
#include "kernels/cpu/dispatch.h"

#include <cstring>
#include <vector>

namespace kernels::cpu {

namespace {

struct CopyTask {
  int64_t dst, src, count;  // element offsets / count
  int piece;
};

constexpr int64_t kChunk = 65536;

template <typename T, bool kForward>
void run(T* big, const T* const* pieces_c, T* const* pieces_m, const int64_t* sizes, int n, int64_t outer,
         int64_t inner) {
  int64_t total = 0;
  for (int k = 0; k < n; ++k) total += sizes[k];
  std::vector<CopyTask> tasks;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t col = 0;
    for (int k = 0; k < n; ++k) {
      const int64_t len = sizes[k] * inner;
      if (!kForward && pieces_m[k] == nullptr) {
        col += len;
        continue;
      }
      for (int64_t s = 0; s < len; s += kChunk) {
        int64_t c = len - s < kChunk ? len - s : kChunk;
        tasks.push_back({o * total * inner + col + s, o * len + s, c, k});
      }
      col += len;
    }
  }
  const int64_t nt = static_cast<int64_t>(tasks.size());
#pragma omp parallel for schedule(static) if (nt > 1 && total * inner * outer > 32768)
  for (int64_t i = 0; i < nt; ++i) {
    const CopyTask& t = tasks[static_cast<size_t>(i)];
    if constexpr (kForward) {
      std::memcpy(big + t.dst, pieces_c[t.piece] + t.src, static_cast<size_t>(t.count) * sizeof(T));
    } else {
      std::memcpy(pieces_m[t.piece] + t.src, big + t.dst, static_cast<size_t>(t.count) * sizeof(T));
    }
  }
}

}  // namespace

template <typename T>
void concat_forward_cpu(T* out, const T* const* ins, const int64_t* sizes, int n, int64_t outer, int64_t inner) {
  run<T, true>(out, ins, nullptr, sizes, n, outer, inner);
}

template <typename T>
void concat_backward_cpu(const T* dy, T* const* dxs, const int64_t* sizes, int n, int64_t outer, int64_t inner) {
  run<T, false>(const_cast<T*>(dy), nullptr, dxs, sizes, n, outer, inner);
}

namespace {

void concat_fwd(engine::DeviceContext&, engine::DType dt, void* out, const void* const* ins, const int64_t* sizes,
                int n, int64_t outer, int64_t inner) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    concat_forward_cpu(static_cast<T*>(out), reinterpret_cast<const T* const*>(ins), sizes, n, outer, inner);
  });
}

void concat_bwd(engine::DeviceContext&, engine::DType dt, const void* dy, void* const* dxs, const int64_t* sizes,
                int n, int64_t outer, int64_t inner) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    concat_backward_cpu(static_cast<const T*>(dy), reinterpret_cast<T* const*>(dxs), sizes, n, outer, inner);
  });
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  b.add(kConcatForward, &concat_fwd, engine::kF32F64);
  b.add(kConcatBackward, &concat_bwd, engine::kF32F64);
}

}  // namespace kernels::cpu
