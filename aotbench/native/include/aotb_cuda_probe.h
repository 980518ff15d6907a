// Pre-included into every gpu kernel library aotbench builds (nvcc --pre-include): lets aotbench read the CUDA
// runtime's last error as the kernel's own code sees it. nvcc links the CUDA runtime statically, so each kernel
// library has its own copy, and a failed launch (a grid or block the device refuses, too much shared memory) is
// recorded only there, where no other library's cudaGetLastError can see it.
#ifndef AOTB_CUDA_PROBE_H
#define AOTB_CUDA_PROBE_H
#include <cuda_runtime.h>

// Returns the last error (and clears it, as cudaGetLastError does) with its name and description.
extern "C" __attribute__((visibility("default"))) int aotb_cuda_last_error(const char **name, const char **text) {
  cudaError_t error = cudaGetLastError();
  if (name) *name = cudaGetErrorName(error);
  if (text) *text = cudaGetErrorString(error);
  return static_cast<int>(error);
}
#endif
