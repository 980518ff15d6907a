// Fused Add + ReduceSum on the GPU: out = (x1 + x2).sum(axis) for two 2-D float32 tensors of one shape, with
// the attributes and InferShape of add_reduce.cc (axis 0 or 1, keep_dim). One pass over the inputs, adding in
// registers: 8 bytes read per element, nothing written but the output (and, for axis=0, a few partial rows).
//   axis=1 (row sums): one block of 256 threads per row; each thread strides over the row (float4 loads when
//     rows are a multiple of 4 long), then the block reduces through warp shuffles and a 32-float shared array.
//   axis=0 (column sums): a column per thread is coalesced but gives too few threads for a wide GPU, so the
//     rows are cut into at most kMaxChunks chunks, as many as it takes to give the first pass about
//     kTargetBlocks blocks: each block sums its chunk of rows for 256 columns into one partial row of the
//     workspace. The second pass adds the few partial rows of each column (128 threads a block, loads
//     unrolled), so it is short next to the first. Deterministic: no atomics.
// Init asks for that workspace, in bytes, and for nothing when a dim is unknown (-1, graph mode), where a
// size computed from -1 would be absurd. Error codes: 1 inputs not two 2-D float32 tensors, 2 axis not 0 or 1,
// 3 shapes differ.
#include <cstdint>
#include <cstring>
#include <vector>

#include "custom_aot_extra.h"

namespace {

constexpr int kThreads = 256;
constexpr int kSumThreads = 128;       // second pass (axis=0): threads per block, one column each
constexpr int64_t kTargetBlocks = 2048;  // first pass (axis=0): blocks to aim for, several per multiprocessor
constexpr int64_t kMaxChunks = 32;       // partial rows at most: what the second pass reads per column

// How the rows are cut for axis=0: `chunks` partial rows of `rows_per_chunk` rows each (the last may be short).
struct ColumnChunks {
  int64_t chunks, rows_per_chunk;
};

ColumnChunks column_chunks(int64_t rows, int64_t cols) {
  const int64_t col_blocks = (cols + kThreads - 1) / kThreads;
  int64_t chunks = (kTargetBlocks + col_blocks - 1) / col_blocks;
  if (chunks > kMaxChunks) chunks = kMaxChunks;
  if (chunks > rows) chunks = rows;
  if (chunks < 1) chunks = 1;
  const int64_t per = (rows + chunks - 1) / chunks;
  return {(rows + per - 1) / per, per};  // no empty chunk
}

// Rows whose length is a multiple of 4 are read as float4 (16-byte loads: every row then starts 16-byte aligned).
template <bool Vec4>
__global__ void row_sums(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ out,
                         int64_t cols) {
  const int64_t row = blockIdx.x;
  const float *ra = a + row * cols, *rb = b + row * cols;
  float acc = 0.0f;
  if (Vec4) {
    const auto *va = reinterpret_cast<const float4 *>(ra), *vb = reinterpret_cast<const float4 *>(rb);
    for (int64_t j = threadIdx.x; j < cols / 4; j += kThreads) {
      const float4 u = va[j], v = vb[j];
      acc += (u.x + v.x) + (u.y + v.y) + (u.z + v.z) + (u.w + v.w);
    }
  } else {
    for (int64_t j = threadIdx.x; j < cols; j += kThreads) acc += ra[j] + rb[j];
  }
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  __shared__ float warp_sums[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    acc = threadIdx.x < kThreads / 32 ? warp_sums[threadIdx.x] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_down_sync(0xffffffffu, acc, offset);
    if (threadIdx.x == 0) out[row] = acc;
  }
}

__global__ void column_partials(const float *__restrict__ a, const float *__restrict__ b,
                                float *__restrict__ partial, int64_t rows, int64_t cols, int64_t rows_per_chunk) {
  const int64_t col = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (col >= cols) return;
  const int64_t first = blockIdx.y * rows_per_chunk;
  const int64_t last = first + rows_per_chunk < rows ? first + rows_per_chunk : rows;
  float acc = 0.0f;
#pragma unroll 8
  for (int64_t i = first; i < last; i++) acc += a[i * cols + col] + b[i * cols + col];
  partial[blockIdx.y * cols + col] = acc;
}

__global__ void add_partials(const float *__restrict__ partial, float *__restrict__ out, int64_t chunks,
                             int64_t cols) {
  const int64_t col = blockIdx.x * static_cast<int64_t>(kSumThreads) + threadIdx.x;
  if (col >= cols) return;
  float acc = 0.0f;
#pragma unroll 8
  for (int64_t k = 0; k < chunks; k++) acc += partial[k * cols + col];
  out[col] = acc;
}

}  // namespace

extern "C" int AddReduceInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  const int64_t rows = ndims[0] == 2 ? shapes[0][0] : -1, cols = ndims[0] == 2 ? shapes[0][1] : -1;
  size_t bytes = 0;
  if (rows > 0 && cols > 0 && extra->Attr<int64_t>("axis") == 0)
    bytes = column_chunks(rows, cols).chunks * cols * sizeof(float);
  extra->SetWorkSpace({bytes});  // in BYTES; nothing when a dim is unknown
  return 0;
}

extern "C" std::vector<int64_t> AddReduceInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  if (shapes[0][0] == -2) return {-2};
  const int64_t axis = extra->Attr<int64_t>("axis");
  if (extra->Attr<bool>("keep_dim")) return axis == 0 ? std::vector<int64_t>{1, shapes[0][1]}
                                                      : std::vector<int64_t>{shapes[0][0], 1};
  return {shapes[0][1 - axis]};
}

extern "C" int AddReduce(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                         void *extra_void) {
  if (nparam < 4 || ndims[0] != 2 || ndims[1] != 2) return 1;
  if (std::strcmp(dtypes[0], "float32") != 0 || std::strcmp(dtypes[1], "float32") != 0) return 1;
  if (shapes[1][0] != shapes[0][0] || shapes[1][1] != shapes[0][1]) return 3;
  const int64_t axis = static_cast<AotExtra *>(extra_void)->Attr<int64_t>("axis");
  if (axis != 0 && axis != 1) return 2;
  const int64_t rows = shapes[0][0], cols = shapes[0][1];
  const auto *a = static_cast<const float *>(params[0]);
  const auto *b = static_cast<const float *>(params[1]);
  auto *out = static_cast<float *>(params[2]);
  auto s = static_cast<cudaStream_t>(stream);
  const int64_t kept = axis == 0 ? cols : rows;
  if (kept == 0) return 0;
  if (rows == 0 || cols == 0) return cudaMemsetAsync(out, 0, kept * sizeof(float), s) == cudaSuccess ? 0 : 4;
  if (axis == 1) {
    if (cols % 4 == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0)
      row_sums<true><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(a, b, out, cols);
    else
      row_sums<false><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(a, b, out, cols);
  } else {
    auto *partial = static_cast<float *>(params[3]);
    const ColumnChunks plan = column_chunks(rows, cols);
    const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(plan.chunks));
    column_partials<<<grid, kThreads, 0, s>>>(a, b, partial, rows, cols, plan.rows_per_chunk);
    add_partials<<<static_cast<unsigned>((cols + kSumThreads - 1) / kSumThreads), kSumThreads, 0, s>>>(
        partial, out, plan.chunks, cols);
  }
  return 0;
}
