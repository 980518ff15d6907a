// out = 3 * x, launched DELIBERATELY on the legacy default stream (no stream in <<<...>>>), as kernels under
// development often are: a plain call still waits for it (aotbench synchronizes the device), and a CUDA-graph
// capture must refuse it with an error instead of timing an empty graph. bench/gpu_check.py's probe.
#include <cstdint>

#include "custom_aot_extra.h"

__global__ void triple(const float *x, float *out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = 3.0f * x[i];
}

extern "C" int LegacyScale(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                           void *stream, void *extra) {
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; d++) n *= shapes[0][d];
  if (n == 0) return 0;
  triple<<<static_cast<unsigned>((n + 255) / 256), 256>>>(static_cast<const float *>(params[0]),
                                                          static_cast<float *>(params[1]), n);
  return 0;
}
