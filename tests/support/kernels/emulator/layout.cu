// A learner's indexing kernels, run on aotbench's CUDA emulator by tests/run/test_emulator_corpus.py: a tiled
// transpose, a tiled matmul, 3-D grids, a grid-stride loop over float4, template kernels in a namespace and a
// convolution whose taps live in __constant__ memory.
#include <cstdint>
#include <cstring>
#include <vector>

#include "custom_aot_extra.h"

namespace {

int64_t elements(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  return n;
}

// 6. out (cols x rows) = x (rows x cols) transposed through a 32x33 shared tile (the extra column keeps the
// column reads off one bank); blocks of 32x8 threads, each thread moves four elements.
constexpr int kTile = 32, kRowsPerPass = 8;

__global__ void transpose(const float *x, float *out, int rows, int cols) {
  __shared__ float tile[kTile][kTile + 1];
  int c = blockIdx.x * kTile + threadIdx.x;
  int r = blockIdx.y * kTile + threadIdx.y;
  for (int k = 0; k < kTile; k += kRowsPerPass)
    if (c < cols && r + k < rows) tile[threadIdx.y + k][threadIdx.x] = x[(r + k) * cols + c];
  __syncthreads();
  c = blockIdx.y * kTile + threadIdx.x;  // now a column of out, i.e. a row of x
  r = blockIdx.x * kTile + threadIdx.y;
  for (int k = 0; k < kTile; k += kRowsPerPass)
    if (c < rows && r + k < cols) out[(r + k) * rows + c] = tile[threadIdx.x][threadIdx.y + k];
}

// 7. C (M x N) = A (M x K) B (K x N) with 16x16 tiles of A and B in shared memory, two barriers per tile.
constexpr int kMm = 16;

__global__ void matmul(const float *a, const float *b, float *c, int m, int n, int k) {
  __shared__ float ta[kMm][kMm];
  __shared__ float tb[kMm][kMm];
  const int row = blockIdx.y * kMm + threadIdx.y, col = blockIdx.x * kMm + threadIdx.x;
  float acc = 0.0f;
  for (int t = 0; t < k; t += kMm) {
    ta[threadIdx.y][threadIdx.x] = row < m && t + threadIdx.x < k ? a[row * k + t + threadIdx.x] : 0.0f;
    tb[threadIdx.y][threadIdx.x] = t + threadIdx.y < k && col < n ? b[(t + threadIdx.y) * n + col] : 0.0f;
    __syncthreads();
    for (int j = 0; j < kMm; j++) acc += ta[threadIdx.y][j] * tb[j][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = acc;
}

// 16. A 3-D grid of 3-D blocks: out[z][y][x] = x_in[z][y][x] + 10000 z + 100 y + x.
__global__ void index3d(const int *in, int *out, int depth, int height, int width) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  const int z = blockIdx.z * blockDim.z + threadIdx.z;
  if (x >= width || y >= height || z >= depth) return;
  const int64_t i = (static_cast<int64_t>(z) * height + y) * width + x;
  out[i] = in[i] + 10000 * z + 100 * y + x;
}

// 17. out = a x + b: a grid-stride loop over float4 (16-byte loads, make_float4 for the result), then the
// n % 4 last elements one by one by the first threads of the grid.
__global__ void affine4(const float *x, float *out, int64_t n, float a, float b) {
  const int64_t n4 = n / 4, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const float4 *x4 = reinterpret_cast<const float4 *>(x);
  float4 *out4 = reinterpret_cast<float4 *>(out);
  for (int64_t i = first; i < n4; i += stride) {
    const float4 v = x4[i];
    out4[i] = make_float4(fmaf(a, v.x, b), fmaf(a, v.y, b), fmaf(a, v.z, b), fmaf(a, v.w, b));
  }
  const int64_t tail = n4 * 4 + first;
  if (tail < n) out[tail] = fmaf(a, x[tail], b);
}

}  // namespace

// 18. A template kernel in a namespace: the sum of each block's BLOCK elements, for any T.
namespace learn {

template <typename T, int BLOCK = 128>
__global__ void __launch_bounds__(BLOCK) block_sum(const T *__restrict__ x, T *__restrict__ out, int64_t n) {
  __shared__ T s[BLOCK];
  const int64_t i = static_cast<int64_t>(blockIdx.x) * BLOCK + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : T(0);
  __syncthreads();
  for (int stride = BLOCK / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

}  // namespace learn

// 19. A 1-D filter whose taps (an attribute) are copied into __constant__ memory by the host function:
// out[i] = sum_k taps[k] x[i + k - taps/2], zeros outside x.
constexpr int kMaxTaps = 15;
__constant__ float c_taps[kMaxTaps];

__global__ void filter(const float *x, float *out, int64_t n, int taps) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc = 0.0f;
  for (int k = 0; k < taps; k++) {
    const int64_t j = i + k - taps / 2;
    if (j >= 0 && j < n) acc += c_taps[k] * x[j];
  }
  out[i] = acc;
}

extern "C" int Transpose(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                         void *extra) {
  if (nparam != 2 || ndims[0] != 2 || std::strcmp(dtypes[0], "float32") != 0) return 1;
  const int rows = static_cast<int>(shapes[0][0]), cols = static_cast<int>(shapes[0][1]);
  if (rows == 0 || cols == 0) return 0;
  const dim3 block(kTile, kRowsPerPass);
  const dim3 grid((cols + kTile - 1) / kTile, (rows + kTile - 1) / kTile);
  transpose<<<grid, block, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<const float *>(params[0]),
                                                                     static_cast<float *>(params[1]), rows, cols);
  return 0;
}

extern "C" int Matmul(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                      void *extra) {
  if (nparam != 3 || ndims[0] != 2 || ndims[1] != 2 || shapes[0][1] != shapes[1][0]) return 1;
  const int m = static_cast<int>(shapes[0][0]), k = static_cast<int>(shapes[0][1]);
  const int n = static_cast<int>(shapes[1][1]);
  if (m == 0 || n == 0) return 0;
  matmul<<<dim3((n + kMm - 1) / kMm, (m + kMm - 1) / kMm), dim3(kMm, kMm), 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float *>(params[0]), static_cast<const float *>(params[1]), static_cast<float *>(params[2]),
      m, n, k);
  return 0;
}

extern "C" int Index3d(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                       void *extra) {
  if (nparam != 2 || ndims[0] != 3 || std::strcmp(dtypes[0], "int32") != 0) return 1;
  const int d = static_cast<int>(shapes[0][0]), h = static_cast<int>(shapes[0][1]), w = static_cast<int>(shapes[0][2]);
  if (d == 0 || h == 0 || w == 0) return 0;
  const dim3 block(8, 4, 2);
  const dim3 grid((w + block.x - 1) / block.x, (h + block.y - 1) / block.y, (d + block.z - 1) / block.z);
  index3d<<<grid, block, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<const int *>(params[0]),
                                                                  static_cast<int *>(params[1]), d, h, w);
  return 0;
}

extern "C" int Affine4(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                       void *extra) {
  if (nparam != 2 || std::strcmp(dtypes[0], "float32") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  if ((reinterpret_cast<uintptr_t>(params[0]) | reinterpret_cast<uintptr_t>(params[1])) % 16 != 0) return 3;
  if (n == 0) return 0;
  auto *e = static_cast<AotExtra *>(extra);
  const int64_t blocks = (n / 4 + 127) / 128;
  affine4<<<static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 5 ? 5 : blocks)), 128, 0,
            static_cast<cudaStream_t>(stream)>>>(static_cast<const float *>(params[0]),
                                                 static_cast<float *>(params[1]), n, e->Attr<float>("a"),
                                                 e->Attr<float>("b"));
  return 0;
}

extern "C" int TemplateSumFloat(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                                void *stream, void *extra) {
  if (nparam != 2 || std::strcmp(dtypes[0], "float32") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  if (n == 0) return 0;
  const float *x = static_cast<const float *>(params[0]);
  float *out = static_cast<float *>(params[1]);
  // T deduced from the arguments, BLOCK its default
  learn::block_sum<<<static_cast<unsigned>((n + 127) / 128), 128, 0, static_cast<cudaStream_t>(stream)>>>(x, out, n);
  return 0;
}

extern "C" int TemplateSumInt(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                              void *stream, void *extra) {
  if (nparam != 2 || std::strcmp(dtypes[0], "int32") != 0) return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  if (n == 0) return 0;
  // both template arguments explicit
  learn::block_sum<int, 64><<<static_cast<unsigned>((n + 63) / 64), 64, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const int *>(params[0]), static_cast<int *>(params[1]), n);
  return 0;
}

extern "C" int ConstantFilter(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                              void *stream, void *extra) {
  if (nparam != 2 || std::strcmp(dtypes[0], "float32") != 0) return 1;
  const std::vector<float> taps = static_cast<AotExtra *>(extra)->Attr<std::vector<float>>("taps");
  if (taps.empty() || taps.size() > static_cast<size_t>(kMaxTaps)) return 3;
  if (cudaMemcpyToSymbol(c_taps, taps.data(), taps.size() * sizeof(float)) != cudaSuccess) return 2;
  const int64_t n = elements(ndims[0], shapes[0]);
  if (n == 0) return 0;
  filter<<<static_cast<unsigned>((n + 95) / 96), 96, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float *>(params[0]), static_cast<float *>(params[1]), n, static_cast<int>(taps.size()));
  return 0;
}
