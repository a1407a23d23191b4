// CUDA-on-CPU emulator: the runtime API (cuda_runtime_api.h) plus the device-side language
// (qualifiers, dim3, threadIdx..., __syncthreads, warp intrinsics, atomics; cuda_emu/device.h),
// as <cuda_runtime.h> gives both under nvcc.
#pragma once
#include "cuda_runtime_api.h"
#include "cuda_emu/device.h"
