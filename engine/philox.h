// Philox4x32-10 counter-based RNG ("Parallel Random Numbers: As Easy as 1, 2, 3", Salmon et al.,
// SC 2011; Random123). Pure Y9_HD functions, so CPU and CUDA produce identical streams: element
// i of a fill draws lane i%4 of block (offset + i/4) under key (seed).
#pragma once
#include <cstdint>

#include "engine/hd.h"

namespace engine {

struct Philox4x32 {
  uint32_t v[4];
};

namespace philox_detail {
constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
Y9_HD void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}
}  // namespace philox_detail

/// One Philox4x32-10 block: 10 rounds over counter `c` with 64-bit key (k0, k1).
Y9_HD Philox4x32 philox4x32_10(Philox4x32 c, uint32_t k0, uint32_t k1) {
  using namespace philox_detail;
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kM0, c.v[0], hi0, lo0);
    mulhilo(kM1, c.v[2], hi1, lo1);
    Philox4x32 n;
    n.v[0] = hi1 ^ c.v[1] ^ k0;
    n.v[1] = lo1;
    n.v[2] = hi0 ^ c.v[3] ^ k1;
    n.v[3] = lo0;
    c = n;
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

/// The 32-bit draw number `i` of the stream (seed, stream_id, offset): block counter
/// (offset + i/4, stream_id) with key = seed, lane i%4. `stream_id` separates purposes
/// (weights, sampler, augmentation, ...) so streams never overlap.
Y9_HD uint32_t philox_draw(uint64_t seed, uint64_t stream_id, uint64_t offset, uint64_t i) {
  uint64_t block = offset + i / 4;
  Philox4x32 c{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                static_cast<uint32_t>(stream_id), static_cast<uint32_t>(stream_id >> 32)}};
  Philox4x32 r = philox4x32_10(c, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return r.v[i % 4];
}

/// Uniform float in [0, 1) from 32 random bits (24 significant bits, never 1.0).
Y9_HD float uint_to_unit_float(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }
/// Uniform float in (0, 1] (safe for log in Box-Muller).
Y9_HD float uint_to_unit_float_open0(uint32_t x) { return (static_cast<float>(x >> 8) + 1.0f) * (1.0f / 16777216.0f); }

}  // namespace engine
