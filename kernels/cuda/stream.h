// cudaStream_t for headers that .cpp files include: the CUDA runtime API header needs no nvcc.
// current_stream / memcpy_any are declared in engine/cuda_runtime.h (implemented there).
#pragma once
#include <cuda_runtime_api.h>
