// A learner's scans, histogram and softmax, run on aotbench's CUDA emulator by
// tests/run/test_emulator_corpus.py. The scans are segmented: each block scans its own blockDim.x elements.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "custom_aot_extra.h"

namespace {

int64_t elements(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  return n;
}

// 4. Inclusive scan (Hillis-Steele) of each block's segment in dynamic shared memory sized at launch: two
// buffers of blockDim.x floats, read from one and written to the other at every step.
__global__ void inclusive_scan(const float *x, float *out, int64_t n) {
  extern __shared__ float s[];
  const unsigned t = threadIdx.x, len = blockDim.x;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * len + t;
  float *from = s, *to = s + len;
  from[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (unsigned offset = 1; offset < len; offset *= 2) {
    to[t] = t >= offset ? from[t] + from[t - offset] : from[t];
    __syncthreads();
    float *swap = from;
    from = to;
    to = swap;
  }
  if (i < n) out[i] = from[t];
}

// 5. Exclusive int scan of each block's segment: an inclusive scan inside each warp with __shfl_up_sync, the
// warps' totals scanned by the first warp, each warp's prefix added back.
__device__ int warp_inclusive(int v, unsigned lane) {
  for (unsigned delta = 1; delta < 32; delta *= 2) {
    const int up = __shfl_up_sync(0xffffffffu, v, delta);
    if (lane >= delta) v += up;
  }
  return v;
}

__global__ void exclusive_scan(const int *x, int *out, int64_t n) {
  __shared__ int warp_totals[32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int mine = i < n ? x[i] : 0;
  const int inclusive = warp_inclusive(mine, lane);
  if (lane == 31) warp_totals[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const int total = lane < warps ? warp_totals[lane] : 0;
    const int scanned = warp_inclusive(total, lane);
    if (lane < warps) warp_totals[lane] = scanned - total;  // exclusive: what the warps before add up to
  }
  __syncthreads();
  if (i < n) out[i] = warp_totals[warp] + inclusive - mine;
}

// 8. Histogram of ints in [0, bins): each block counts into shared memory with atomicAdd, then adds its counts
// into the global histogram (zeroed by the host function first).
constexpr int kMaxBins = 256;

__global__ void histogram(const int *x, unsigned *hist, int64_t n, int bins) {
  __shared__ unsigned local[kMaxBins];
  for (int b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    atomicAdd(&local[x[i]], 1u);
  __syncthreads();
  for (int b = threadIdx.x; b < bins; b += blockDim.x)
    if (local[b]) atomicAdd(&hist[b], local[b]);
}

// 9. Softmax of each row, one warp per row (four rows per block): the row's max and the sum of exponentials by
// __shfl_xor_sync butterflies, every lane striding over the columns.
__global__ void warp_softmax(const float *x, float *out, int64_t rows, int64_t cols) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const unsigned lane = threadIdx.x % 32;
  if (row >= rows) return;  // the whole warp leaves together
  const float *in = x + row * cols;
  float m = -INFINITY;
  for (int64_t j = lane; j < cols; j += 32) m = fmaxf(m, in[j]);
  for (int mask = 16; mask > 0; mask >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, mask));
  float sum = 0.0f;
  for (int64_t j = lane; j < cols; j += 32) sum += expf(in[j] - m);
  for (int mask = 16; mask > 0; mask >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, mask);
  for (int64_t j = lane; j < cols; j += 32) out[row * cols + j] = expf(in[j] - m) / sum;
}

}  // namespace

extern "C" int InclusiveScan(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                             void *stream, void *extra) {
  if (nparam != 2 || std::strcmp(dtypes[0], "float32") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  const int threads = static_cast<int>(static_cast<AotExtra *>(extra)->Attr<int64_t>("threads"));
  if (n == 0) return 0;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  inclusive_scan<<<blocks, threads, 2 * threads * sizeof(float), static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float *>(params[0]), static_cast<float *>(params[1]), n);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

extern "C" int ExclusiveScan(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                             void *stream, void *extra) {
  if (nparam != 2 || std::strcmp(dtypes[0], "int32") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  const int threads = static_cast<int>(static_cast<AotExtra *>(extra)->Attr<int64_t>("threads"));
  if (threads % 32 != 0) return 3;  // whole warps: the shuffles name all 32 lanes
  if (n == 0) return 0;
  exclusive_scan<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0,
                   static_cast<cudaStream_t>(stream)>>>(static_cast<const int *>(params[0]),
                                                        static_cast<int *>(params[1]), n);
  return 0;
}

extern "C" int Histogram(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                         void *extra) {
  if (nparam != 2 || std::strcmp(dtypes[0], "int32") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  const int bins = static_cast<int>(static_cast<AotExtra *>(extra)->Attr<int64_t>("bins"));
  if (bins < 1 || bins > kMaxBins || shapes[1][0] != bins) return 3;
  auto s = static_cast<cudaStream_t>(stream);
  auto *hist = static_cast<unsigned *>(params[1]);
  if (cudaMemsetAsync(hist, 0, bins * sizeof(unsigned), s) != cudaSuccess) return 2;
  if (n == 0) return 0;
  const int64_t wanted = (n + 127) / 128;
  histogram<<<static_cast<unsigned>(wanted < 12 ? wanted : 12), 128, 0, s>>>(static_cast<const int *>(params[0]),
                                                                               hist, n, bins);
  return 0;
}

extern "C" int WarpSoftmax(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                           void *stream, void *extra) {
  if (nparam != 2 || ndims[0] != 2 || std::strcmp(dtypes[0], "float32") != 0) return 1;
  const int64_t rows = shapes[0][0], cols = shapes[0][1];
  if (rows == 0 || cols == 0) return 0;
  warp_softmax<<<static_cast<unsigned>((rows + 3) / 4), 128, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float *>(params[0]), static_cast<float *>(params[1]), rows, cols);
  return 0;
}
