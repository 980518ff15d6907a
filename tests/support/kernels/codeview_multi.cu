// Kernels for tests/tools/test_codeview.py's ptxas report: one with __launch_bounds__, and two of one name in two
// namespaces (whose report cannot be put on one line). Scale: out = 2 * x, float32.
#include <cstdint>

#include "custom_aot_extra.h"

__global__ void __launch_bounds__(128) bounded(const float *x, float *out, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = 2.0f * x[i];
}

namespace first {
__global__ void twin(float *out, int64_t n) {
  if (threadIdx.x == 0 && n > 0) out[0] += 0.0f;
}
}  // namespace first

namespace second {
__global__ void twin(float *out, int64_t n) {
  if (threadIdx.x == 0 && n > 1) out[1] += 0.0f;
}
}  // namespace second

extern "C" int Scale(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                     void *extra) {
  int64_t n = shapes[0][0];
  auto s = static_cast<cudaStream_t>(stream);
  bounded<<<static_cast<unsigned>((n + 127) / 128), 128, 0, s>>>(static_cast<const float *>(params[0]),
                                                                 static_cast<float *>(params[1]), n);
  first::twin<<<1, 32, 0, s>>>(static_cast<float *>(params[1]), n);
  second::twin<<<1, 32, 0, s>>>(static_cast<float *>(params[1]), n);
  return 0;
}
