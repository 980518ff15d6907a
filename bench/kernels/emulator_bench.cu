// bench kernels for bench/bench_emulator.py, run on aotbench's CUDA emulator (emulate=True). Every function takes
// one float32 tensor of any shape; n is its element count.
//
// Scale:      out[i] = 2 * x[i], one element per thread, 256-thread blocks, no barrier (the same work as
//             bench/kernels/scale.cc, the plain C++ loop it is compared with).
// BlockSum:   out[b] = the sum of x[256 b .. 256 b + 255] (zeros past n), a tree in static __shared__ memory with
//             exactly 8 __syncthreads per block: after the loads, then after each step of stride 128, 64, ..., 2;
//             thread 0 adds the last pair itself.
// BlockSum1024: the same with 1024-thread blocks (10 barriers per block): every thread of a block waits at each
//             barrier, so each one keeps a fiber of its own (what the fiber-stack memory figure measures).
// Error codes: 1 the input is not float32.
#include <cstdint>
#include <cstring>

namespace {

int64_t elements(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  return n;
}

__global__ void scale(const float *x, float *out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * x[i];
}

template <int THREADS>
__global__ void block_sum(const float *x, float *out, int64_t n) {
  __shared__ float s[THREADS];
  const unsigned t = threadIdx.x;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * THREADS + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (unsigned stride = THREADS / 2; stride > 1; stride >>= 1) {
    if (t < stride) s[t] += s[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0] + s[1];
}

template <int THREADS>
int launch_sum(void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream) {
  if (std::strcmp(dtypes[0], "float32") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  if (n == 0) return 0;
  const auto blocks = static_cast<unsigned>((n + THREADS - 1) / THREADS);
  block_sum<THREADS><<<blocks, THREADS, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float *>(params[0]), static_cast<float *>(params[1]), n);
  return 0;
}

}  // namespace

extern "C" int Scale(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                     void *extra) {
  if (std::strcmp(dtypes[0], "float32") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  if (n == 0) return 0;
  const auto blocks = static_cast<unsigned>((n + 255) / 256);
  scale<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<const float *>(params[0]),
                                                                static_cast<float *>(params[1]), n);
  return 0;
}

extern "C" int BlockSum(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                        void *extra) {
  return launch_sum<256>(params, ndims, shapes, dtypes, stream);
}

extern "C" int BlockSum1024(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                            void *stream, void *extra) {
  return launch_sum<1024>(params, ndims, shapes, dtypes, stream);
}
