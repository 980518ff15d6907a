// Buggy kernels and launches a learner writes, for tests/run/test_emulator_corpus.py: the emulator stops each with
// the CUDA error a GPU would give (a divergent __syncthreads, which would hang a GPU, with cudaErrorLaunchFailure),
// except HugeBlockChecked, whose host function sees the refused launch and returns its own code.
// Each host function takes one float32 tensor (ignored) and writes an output of the same shape; the test finds
// the lines it expects in the error messages by their `// line: ...` comments.
#include <cassert>
#include <cstdint>

#include "custom_aot_extra.h"

namespace {

__global__ void divergent_barrier(float *out) {
  if (threadIdx.x < 64) {
    out[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f;
    __syncthreads();  // line: first barrier
  } else {
    out[blockIdx.x * blockDim.x + threadIdx.x] = 2.0f;
    __syncthreads();  // line: second barrier
  }
}

__global__ void fill(float *out) { out[blockIdx.x * blockDim.x + threadIdx.x] = 3.0f; }

__global__ void asserting(float *out) {
  out[threadIdx.x] = 0.0f;
  if (threadIdx.x == 3) assert(false);  // line: assert
}

__global__ void partial_warp_shuffle(float *out) {
  float v = static_cast<float>(threadIdx.x);
  v += __shfl_down_sync(0xffffffffu, v, 16);  // line: shuffle
  out[threadIdx.x] = v;
}

}  // namespace

extern "C" int DivergentBarrier(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                                void *stream, void *extra) {
  divergent_barrier<<<2, 128, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<float *>(params[1]));
  return 0;
}

// A block of 2048 threads, more than any GPU runs; the host function does not look at cudaGetLastError.
extern "C" int HugeBlockUnchecked(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                                  void *stream, void *extra) {
  fill<<<1, 2048, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<float *>(params[1]));
  return 0;
}

// The same launch, checked: the host function returns its own error code 7.
extern "C" int HugeBlockChecked(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                                void *stream, void *extra) {
  fill<<<1, 2048, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<float *>(params[1]));
  if (cudaGetLastError() != cudaSuccess) return 7;
  return 0;
}

extern "C" int DeviceAssert(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                            void *stream, void *extra) {
  asserting<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<float *>(params[1]));
  return 0;
}

extern "C" int PartialWarpShuffle(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                                  void *stream, void *extra) {
  partial_warp_shuffle<<<1, 48, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<float *>(params[1]));
  return 0;
}
