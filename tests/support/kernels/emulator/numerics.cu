// A learner's number-format and runtime-call kernels, run on aotbench's CUDA emulator by
// tests/run/test_emulator_corpus.py: half and bfloat16, math intrinsics, device printf, and an op that zeroes
// its output and an Init-sized workspace with cudaMemsetAsync before accumulating into them with atomics.
#include <cstdint>
#include <cstdio>
#include <cstring>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "custom_aot_extra.h"

namespace {

int64_t elements(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  return n;
}

unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

// 10. out = a x + y in half precision: pairs as __half2 (converted to float2, computed in float, rounded back),
// the odd last element as a __half.
__global__ void half_axpy(const __half2 *x, const __half2 *y, __half2 *out, int64_t pairs, float a) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= pairs) return;
  const float2 u = __half22float2(x[i]), v = __half22float2(y[i]);
  out[i] = __floats2half2_rn(a * u.x + v.x, a * u.y + v.y);
}

__global__ void half_axpy_last(const __half *x, const __half *y, __half *out, int64_t last, float a) {
  out[last] = __float2half_rn(a * __half2float(x[last]) + __half2float(y[last]));
}

// 11. bfloat16 to float and float to bfloat16 (round to nearest even).
__global__ void bf16_to_float(const __nv_bfloat16 *x, float *out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __bfloat162float(x[i]);
}

__global__ void float_to_bf16(const float *x, __nv_bfloat16 *out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16_rn(x[i]);
}

// 22. Math intrinsics: out[i] = {__expf(x), __fdividef(x, y), rsqrtf(y), fmaf(x, y, 1), __saturatef(x)} for
// x in any range, y > 0; and the bit intrinsics of ints: {__popc, __clz, __ffs}.
__global__ void float_intrinsics(const float *x, const float *y, float *out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float u = x[i], v = y[i];
  float *o = out + 5 * i;
  o[0] = __expf(u);
  o[1] = __fdividef(u, v);
  o[2] = rsqrtf(v);
  o[3] = fmaf(u, v, 1.0f);
  o[4] = __saturatef(u);
}

__global__ void bit_intrinsics(const int *x, int *out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int v = x[i];
  out[3 * i] = __popc(static_cast<unsigned>(v));
  out[3 * i + 1] = __clz(v);
  out[3 * i + 2] = __ffs(v);
}

// 20. Device printf from the first two threads of every block (and each block's index in the output).
__global__ void hello(int *out, int tag) {
  if (threadIdx.x < 2) printf("tag %d block %d thread %d of %d\n", tag, blockIdx.x, threadIdx.x, blockDim.x);
  if (threadIdx.x == 0) out[blockIdx.x] = blockIdx.x;
}

// 21. The mean weight of each bin: the weights summed into the output (zeroed first) with float atomicAdd, the
// counts into the workspace (zeroed first) with integer atomicAdd, then each bin divided by its count.
__global__ void bin_accumulate(const int *bins, const float *weights, float *sums, unsigned *counts, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  atomicAdd(&sums[bins[i]], weights[i]);
  atomicAdd(&counts[bins[i]], 1u);
}

__global__ void bin_mean(float *sums, const unsigned *counts, int nbins) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b < nbins && counts[b] > 0) sums[b] = sums[b] / counts[b];
}

}  // namespace

extern "C" int HalfAxpy(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                        void *extra) {
  if (nparam != 3 || std::strcmp(dtypes[0], "float16") != 0 || std::strcmp(dtypes[1], "float16") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  if (elements(ndims[1], shapes[1]) != n) return 1;
  if ((reinterpret_cast<uintptr_t>(params[0]) | reinterpret_cast<uintptr_t>(params[1]) |
       reinterpret_cast<uintptr_t>(params[2])) % 4 != 0)
    return 3;  // __half2 needs 4-byte alignment
  const float a = static_cast<AotExtra *>(extra)->Attr<float>("a");
  auto s = static_cast<cudaStream_t>(stream);
  const int64_t pairs = n / 2;
  if (pairs > 0)
    half_axpy<<<blocks_for(pairs, 128), 128, 0, s>>>(static_cast<const __half2 *>(params[0]),
                                                     static_cast<const __half2 *>(params[1]),
                                                     static_cast<__half2 *>(params[2]), pairs, a);
  if (n % 2)
    half_axpy_last<<<1, 1, 0, s>>>(static_cast<const __half *>(params[0]), static_cast<const __half *>(params[1]),
                                   static_cast<__half *>(params[2]), n - 1, a);
  return 0;
}

extern "C" int Bf16ToFloat(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                           void *stream, void *extra) {
  if (nparam != 2 || std::strcmp(dtypes[0], "bfloat16") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  if (n == 0) return 0;
  bf16_to_float<<<blocks_for(n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const __nv_bfloat16 *>(params[0]), static_cast<float *>(params[1]), n);
  return 0;
}

extern "C" int FloatToBf16(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                           void *stream, void *extra) {
  if (nparam != 2 || std::strcmp(dtypes[0], "float32") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  if (n == 0) return 0;
  float_to_bf16<<<blocks_for(n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float *>(params[0]), static_cast<__nv_bfloat16 *>(params[1]), n);
  return 0;
}

extern "C" int FloatIntrinsics(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                               void *stream, void *extra) {
  if (nparam != 3 || std::strcmp(dtypes[0], "float32") != 0 || std::strcmp(dtypes[1], "float32") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  if (n == 0) return 0;
  float_intrinsics<<<blocks_for(n, 96), 96, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float *>(params[0]), static_cast<const float *>(params[1]), static_cast<float *>(params[2]),
      n);
  return 0;
}

extern "C" int BitIntrinsics(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                             void *stream, void *extra) {
  if (nparam != 2 || std::strcmp(dtypes[0], "int32") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  if (n == 0) return 0;
  bit_intrinsics<<<blocks_for(n, 96), 96, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const int *>(params[0]), static_cast<int *>(params[1]), n);
  return 0;
}

extern "C" int Hello(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                     void *extra) {
  if (nparam != 2) return 1;
  const int64_t blocks = shapes[1][0];
  const int tag = static_cast<int>(static_cast<AotExtra *>(extra)->Attr<int64_t>("tag"));
  if (blocks == 0) return 0;
  hello<<<static_cast<unsigned>(blocks), 40, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<int *>(params[1]),
                                                                                     tag);
  return cudaDeviceSynchronize() == cudaSuccess ? 0 : 2;
}

extern "C" int BinMeanInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  const int64_t nbins = extra->Attr<int64_t>("nbins");
  extra->SetWorkSpace({static_cast<size_t>(nbins > 0 ? nbins : 0) * sizeof(unsigned)});
  return 0;
}

extern "C" int BinMean(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                       void *extra) {
  // params: bins (int32), weights (float32), out (float32, nbins), then the workspace (nbins unsigned counts)
  if (nparam != 4 || std::strcmp(dtypes[0], "int32") != 0 || std::strcmp(dtypes[1], "float32") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  const int nbins = static_cast<int>(static_cast<AotExtra *>(extra)->Attr<int64_t>("nbins"));
  if (shapes[2][0] != nbins || elements(ndims[1], shapes[1]) != n) return 3;
  auto s = static_cast<cudaStream_t>(stream);
  auto *sums = static_cast<float *>(params[2]);
  auto *counts = static_cast<unsigned *>(params[3]);
  if (cudaMemsetAsync(sums, 0, nbins * sizeof(float), s) != cudaSuccess) return 2;
  if (cudaMemsetAsync(counts, 0, nbins * sizeof(unsigned), s) != cudaSuccess) return 2;
  if (n > 0)
    bin_accumulate<<<blocks_for(n, 128), 128, 0, s>>>(static_cast<const int *>(params[0]),
                                                      static_cast<const float *>(params[1]), sums, counts, n);
  bin_mean<<<blocks_for(nbins, 64), 64, 0, s>>>(sums, counts, nbins);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
