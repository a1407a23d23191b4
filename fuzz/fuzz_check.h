// Shared by the fuzz targets: an invariant that must hold for any input. A violation aborts, so
// libFuzzer records the input as a crash.
#pragma once
#include <cstdio>
#include <cstdlib>

#define Y9_FUZZ_CHECK(cond)                                                       \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "fuzz invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                               \
    }                                                                             \
  } while (0)
