// saxpy on the GPU: out = a * x + y for float32 tensors of any shape (the same number of elements), the
// attribute a a float. Memory-bound: 12 bytes move per element (read x and y, write out), so its speed is
// judged against a device-to-device copy (bench/gpu_check.py).
//
// Each thread handles four consecutive floats with one 16-byte load per input (cupy allocations are 256-byte
// aligned, so the float4 view is aligned when the tensors start at an allocation), in a grid-stride loop; a
// scalar kernel does the last n % 4 elements (or all of them, for tensors that are not 16-byte aligned).
// Error codes: 1 inputs not two float32 tensors of one size.
#include <cstdint>
#include <cstring>

#include "custom_aot_extra.h"

namespace {

__global__ void saxpy4(float a, const float4 *__restrict__ x, const float4 *__restrict__ y,
                       float4 *__restrict__ out, int64_t n4) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float4 u = x[i], v = y[i];
    out[i] = make_float4(a * u.x + v.x, a * u.y + v.y, a * u.z + v.z, a * u.w + v.w);
  }
}

__global__ void saxpy_tail(float a, const float *x, const float *y, float *out, int64_t start, int64_t n) {
  const int64_t i = start + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i];
}

int64_t elements(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  return n;
}

}  // namespace

extern "C" int Saxpy(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                     void *extra) {
  if (nparam < 3 || std::strcmp(dtypes[0], "float32") != 0 || std::strcmp(dtypes[1], "float32") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  if (elements(ndims[1], shapes[1]) != n) return 1;
  if (n == 0) return 0;  // a grid of zero blocks is a launch error: there is simply nothing to do
  const float a = static_cast<AotExtra *>(extra)->Attr<float>("a");
  const auto *x = static_cast<const float *>(params[0]);
  const auto *y = static_cast<const float *>(params[1]);
  auto *out = static_cast<float *>(params[2]);
  auto s = static_cast<cudaStream_t>(stream);
  // float4 needs 16-byte aligned tensors (true of any cupy allocation); otherwise the scalar kernel does it all
  const bool aligned = (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y) |
                        reinterpret_cast<uintptr_t>(out)) % 16 == 0;
  const int64_t n4 = aligned ? n / 4 : 0;
  if (n4 > 0) {
    const int threads = 256;
    const int64_t blocks = (n4 + threads - 1) / threads;
    saxpy4<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), threads, 0, s>>>(
        a, reinterpret_cast<const float4 *>(x), reinterpret_cast<const float4 *>(y), reinterpret_cast<float4 *>(out),
        n4);
  }
  const int64_t rest = n - n4 * 4;
  if (rest > 0) {
    const int64_t blocks = (rest + 255) / 256;
    saxpy_tail<<<static_cast<unsigned>(blocks), 256, 0, s>>>(a, x, y, out, n4 * 4, n);
  }
  return 0;
}
