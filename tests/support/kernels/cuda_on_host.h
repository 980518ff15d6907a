// A STAND-IN for the CUDA runtime, so that a CUDA example's host function and its SIMPLE kernels (no
// __syncthreads, no warp shuffles, no shared memory) run on the host, one thread after another, where no GPU
// exists. tests/run/test_cuda_examples_on_host.py rewrites each `kernel<<<grid, block, ...>>>(args)` into
// `aotb_run_grid(kernel, grid, block, args)`. Kernels that need threads to cooperate abort if they are run.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define __global__
#define __device__
#define __shared__ static
#define __launch_bounds__(...)

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct float4 {
  float x, y, z, w;
};
typedef void *cudaStream_t;
enum cudaError_t { cudaSuccess = 0 };

static dim3 threadIdx, blockIdx, blockDim, gridDim;
static int aotb_grids_run = 0;  // how many launches ran (the test reads it through AotbGridsRun)

inline void __syncthreads() {
  std::fprintf(stderr, "cuda_on_host.h: __syncthreads needs cooperating threads; this kernel cannot run here\n");
  std::abort();
}
inline float __shfl_down_sync(unsigned, float, int) {
  std::fprintf(stderr, "cuda_on_host.h: warp shuffles need cooperating threads; this kernel cannot run here\n");
  std::abort();
}
inline cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t) {
  std::memset(p, value, n);
  return cudaSuccess;
}

template <typename Kernel, typename... Args>
void aotb_run_grid(Kernel kernel, dim3 grid, dim3 block, Args... args) {
  gridDim = grid;
  blockDim = block;
  for (unsigned bz = 0; bz < grid.z; bz++)
    for (unsigned by = 0; by < grid.y; by++)
      for (unsigned bx = 0; bx < grid.x; bx++)
        for (unsigned tz = 0; tz < block.z; tz++)
          for (unsigned ty = 0; ty < block.y; ty++)
            for (unsigned tx = 0; tx < block.x; tx++) {
              blockIdx = dim3(bx, by, bz);
              threadIdx = dim3(tx, ty, tz);
              kernel(args...);
            }
  aotb_grids_run++;
}

extern "C" int AotbGridsRun() { return aotb_grids_run; }
