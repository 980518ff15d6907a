// A learner's reductions, run on aotbench's CUDA emulator by tests/run/test_emulator_corpus.py: a shared-memory
// tree, warp shuffles with shared partials, a butterfly all-reduce, cooperative groups, ballots, the counting
// barriers and the atomics. n is the first input's element count (a tensor of any shape is read flat).
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>

#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

#include "custom_aot_extra.h"

namespace cg = cooperative_groups;

namespace {

int64_t elements(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  return n;
}

unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

// 1. One float sum per block of 256: static shared memory, a tree of halving strides, a barrier after each step.
__global__ void block_tree_sum(const float *x, float *out, int64_t n) {
  __shared__ float s[256];
  const unsigned t = threadIdx.x;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (t < stride) s[t] += s[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// 2. The int sum of everything: each warp adds with __shfl_down_sync, lane 0 leaves the warp's sum in shared
// memory, the first warp adds those, and thread 0 adds the block's sum into the output (zeroed first).
__device__ int warp_sum(int v) {
  for (int offset = warpSize / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void warp_shuffle_sum(const int *x, int *out, int64_t n) {
  __shared__ int partial[32];
  int v = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    v += x[i];
  const unsigned lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (blockDim.x + warpSize - 1) / warpSize ? partial[lane] : 0;
    v = warp_sum(v);
    if (lane == 0) atomicAdd(out, v);
  }
}

// 3. Every element gets the max of its warp's 32 elements: a __shfl_xor_sync butterfly, so every lane ends with
// the result. Lanes past the end take part with -inf (nobody returns before the shuffles).
__global__ void butterfly_max(const float *x, float *out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  float v = i < n ? x[i] : -INFINITY;
  for (int mask = 16; mask > 0; mask >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, mask));
  if (i < n) out[i] = v;
}

// 12. One int sum per block of 128 with cooperative groups: cg::reduce over each 32-thread tile, the tiles' sums
// in shared memory after block.sync(), then the first tile adds them with tile.shfl_down.
__global__ void cg_block_sum(const int *x, int *out, int64_t n) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
  __shared__ int tile_sums[4];
  const int64_t i = static_cast<int64_t>(blockIdx.x) * block.size() + block.thread_rank();
  const int v = cg::reduce(tile, i < n ? x[i] : 0, cg::plus<int>());
  if (tile.thread_rank() == 0) tile_sums[tile.meta_group_rank()] = v;
  block.sync();
  if (tile.meta_group_rank() == 0) {
    int s = tile.thread_rank() < tile.meta_group_size() ? tile_sums[tile.thread_rank()] : 0;
    for (unsigned offset = tile.size() / 2; offset > 0; offset /= 2) s += tile.shfl_down(s, offset);
    if (tile.thread_rank() == 0) out[blockIdx.x] = s;
  }
}

// 13. How many elements of each block of 256 are > 0: a ballot per warp, __popc of it, the warps' counts
// added in shared memory.
__global__ void ballot_count(const float *x, int *out, int64_t n) {
  __shared__ int count;
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const unsigned votes = __ballot_sync(0xffffffffu, i < n && x[i] > 0.0f);
  if (threadIdx.x % warpSize == 0) atomicAdd(&count, __popc(votes));
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = count;
}

// 14. Per block of 100 threads (not a whole number of warps): out[b][0] = how many elements are > 0
// (__syncthreads_count), out[b][1] = whether any is above `limit` (__syncthreads_or).
__global__ void barrier_votes(const float *x, int *out, int64_t n, float limit) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const float v = i < n ? x[i] : 0.0f;
  const int positive = __syncthreads_count(v > 0.0f);
  const int any_above = __syncthreads_or(v > limit);
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = positive;
    out[2 * blockIdx.x + 1] = any_above;
  }
}

// 15. Atomics into four ints: atomicMax and atomicMin of the ints, the max of the floats by an atomicCAS loop
// (kept as its bits), and atomicInc with a wrap-around limit counting every element.
__device__ float atomic_max_float(float *address, float value) {
  int *bits = reinterpret_cast<int *>(address);
  int old = *bits, assumed;
  do {
    assumed = old;
    if (__int_as_float(assumed) >= value) break;
    old = atomicCAS(bits, assumed, __float_as_int(value));
  } while (old != assumed);
  return __int_as_float(old);
}

__global__ void atomics(const int *x, const float *y, int *out, int64_t n, unsigned wrap) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  atomicMax(&out[0], x[i]);
  atomicMin(&out[1], x[i]);
  atomic_max_float(reinterpret_cast<float *>(&out[2]), y[i]);
  atomicInc(reinterpret_cast<unsigned *>(&out[3]), wrap);
}

}  // namespace

extern "C" int BlockTreeSum(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                            void *stream, void *extra) {
  if (nparam != 2 || std::strcmp(dtypes[0], "float32") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  if (n == 0) return 0;
  block_tree_sum<<<blocks_for(n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float *>(params[0]), static_cast<float *>(params[1]), n);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

extern "C" int WarpShuffleSum(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                              void *stream, void *extra) {
  if (nparam != 2 || std::strcmp(dtypes[0], "int32") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  auto s = static_cast<cudaStream_t>(stream);
  int *out = static_cast<int *>(params[1]);
  if (cudaMemsetAsync(out, 0, sizeof(int), s) != cudaSuccess) return 2;
  if (n == 0) return 0;
  const int threads = 192;  // six warps
  const unsigned blocks = blocks_for(n, threads) < 7 ? blocks_for(n, threads) : 7;  // the loop strides the rest
  warp_shuffle_sum<<<blocks, threads, 0, s>>>(static_cast<const int *>(params[0]), out, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

extern "C" int ButterflyMax(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                            void *stream, void *extra) {
  if (nparam != 2 || std::strcmp(dtypes[0], "float32") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  if (n == 0) return 0;
  butterfly_max<<<blocks_for(n, 64), 64, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float *>(params[0]), static_cast<float *>(params[1]), n);
  return 0;
}

extern "C" int CgBlockSum(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                          void *stream, void *extra) {
  if (nparam != 2 || std::strcmp(dtypes[0], "int32") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  if (n == 0) return 0;
  cg_block_sum<<<blocks_for(n, 128), 128, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const int *>(params[0]), static_cast<int *>(params[1]), n);
  return 0;
}

extern "C" int BallotCount(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                           void *stream, void *extra) {
  if (nparam != 2 || std::strcmp(dtypes[0], "float32") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  if (n == 0) return 0;
  ballot_count<<<blocks_for(n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float *>(params[0]), static_cast<int *>(params[1]), n);
  return 0;
}

extern "C" int BarrierVotes(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                            void *stream, void *extra) {
  if (nparam != 2 || std::strcmp(dtypes[0], "float32") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  if (n == 0) return 0;
  const float limit = static_cast<AotExtra *>(extra)->Attr<float>("limit");
  barrier_votes<<<blocks_for(n, 100), 100, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float *>(params[0]), static_cast<int *>(params[1]), n, limit);
  return 0;
}

extern "C" int Atomics(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                       void *extra) {
  if (nparam != 3 || std::strcmp(dtypes[0], "int32") != 0 || std::strcmp(dtypes[1], "float32") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  if (elements(ndims[1], shapes[1]) != n) return 1;
  const unsigned wrap = static_cast<unsigned>(static_cast<AotExtra *>(extra)->Attr<int64_t>("wrap"));
  auto s = static_cast<cudaStream_t>(stream);
  int *out = static_cast<int *>(params[2]);
  const float lowest = -INFINITY;
  int start[4] = {INT_MIN, INT_MAX, 0, 0};
  std::memcpy(&start[2], &lowest, sizeof(float));
  if (cudaMemcpyAsync(out, start, sizeof(start), cudaMemcpyHostToDevice, s) != cudaSuccess) return 2;
  if (n == 0) return 0;
  atomics<<<blocks_for(n, 128), 128, 0, s>>>(static_cast<const int *>(params[0]),
                                             static_cast<const float *>(params[1]), out, n, wrap);
  return cudaStreamSynchronize(s) == cudaSuccess ? 0 : 2;  // `start` is on this stack frame
}
