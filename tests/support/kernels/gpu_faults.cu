// gpu fixture: out = x + 1, or one of the faults a gpu kernel under development makes, chosen by the int
// attribute "mode": 0 correct; 1 a block of 2048 threads (the launch is refused: cudaErrorInvalidConfiguration);
// 2 a write 1 GiB past the output (an illegal address: sticky, run it in a subprocess); 3 a write of one float
// just past the end (no fault, but check mode's guard and memcheck see it); 4 a shared-memory race (no
// __syncthreads between the write and the neighbour's read: racecheck sees it).
#include <cstdint>
#include "custom_aot_extra.h"

__global__ void add_one(const float *x, float *out, int64_t n, int64_t extra) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = x[i] + 1.0f;
  if (i == n - 1 && extra) out[n - 1 + extra] = 0.0f;
}

__global__ void racy_shift(const float *x, float *out, int64_t n) {
  __shared__ float tile[256];
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  tile[threadIdx.x] = i < n ? x[i] : 0.0f;
  // missing __syncthreads(): the neighbour's element may not be written yet
  float next = tile[(threadIdx.x + 1) % 256];
  if (i < n) out[i] = next - tile[(threadIdx.x + 1) % 256] + x[i] + 1.0f;
}

extern "C" int GpuFaults(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                         void *extra) {
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; d++) n *= shapes[0][d];
  const int64_t mode = static_cast<AotExtra *>(extra)->Attr<int64_t>("mode");
  const auto *x = static_cast<const float *>(params[0]);
  auto *out = static_cast<float *>(params[1]);
  auto s = static_cast<cudaStream_t>(stream);
  const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  if (mode == 1) add_one<<<blocks, 2048, 0, s>>>(x, out, n, 0);
  else if (mode == 2) add_one<<<blocks, 256, 0, s>>>(x, out, n, int64_t(1) << 28);
  else if (mode == 3) add_one<<<blocks, 256, 0, s>>>(x, out, n, 1);
  else if (mode == 4) racy_shift<<<blocks, 256, 0, s>>>(x, out, n);
  else add_one<<<blocks, 256, 0, s>>>(x, out, n, 0);
  return 0;
}
