// nvcc fixture: out = a * x + y on the device; uses shared memory so ptxas reports it. Init asks for a
// workspace of one float per element; InferShape (host) returns the first input's shape.
#include <cstdint>
#include <vector>
#include "custom_aot_extra.h"

__global__ void axpy_kernel(float a, const float *x, const float *y, float *out, int64_t n) {
  __shared__ float tile[256];
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  tile[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  if (i < n) out[i] = a * tile[threadIdx.x] + y[i];
}

extern "C" int AxpyInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  size_t n = 1;
  for (int d = 0; d < ndims[0]; d++) n *= shapes[0][d];
  extra->SetWorkSpace({n * sizeof(float)});
  return 0;
}

extern "C" std::vector<int64_t> AxpyInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  if (extra->Attr<bool>("transpose") && ndims[0] == 2) return {shapes[0][1], shapes[0][0]};
  return std::vector<int64_t>(shapes[0], shapes[0] + ndims[0]);
}

extern "C" int Axpy(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                    void *extra) {
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; d++) n *= shapes[0][d];
  const float a = static_cast<AotExtra *>(extra)->Attr<float>("a");
  axpy_kernel<<<(n + 255) / 256, 256, 0, static_cast<cudaStream_t>(stream)>>>(
      a, static_cast<const float *>(params[0]), static_cast<const float *>(params[1]), static_cast<float *>(params[2]), n);
  return 0;
}
