// The CUDA runtime calls a kernel's host function makes, for the emulator (included by aotbench_cuda_emu.h).
// Device memory IS host memory here: the op's arrays are numpy arrays, cudaMalloc is an aligned malloc, a copy of
// any kind is a memcpy. Launches run to the end before they return, so every synchronisation is immediate. The
// device is the one aotbench declares (cudaGetDeviceProperties): "aotbench CUDA emulator", compute capability
// 9.0, one multiprocessor per usable CPU core, with a GPU's launch limits (1024 threads per block, 48 KiB of
// dynamic shared memory unless cudaFuncSetAttribute raises it, up to 227 KiB).
#pragma once

enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorAssert = 710,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotSupported = 801,
  cudaErrorUnknown = 999,
};
typedef enum cudaError cudaError_t;
struct CUstream_st;
typedef CUstream_st *cudaStream_t;
struct CUevent_st;
typedef CUevent_st *cudaEvent_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};
enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxBlockDimX = 2,
  cudaDevAttrMaxBlockDimY = 3,
  cudaDevAttrMaxBlockDimZ = 4,
  cudaDevAttrMaxGridDimX = 5,
  cudaDevAttrMaxGridDimY = 6,
  cudaDevAttrMaxGridDimZ = 7,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrWarpSize = 10,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  int regsPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int clockRate;
  size_t totalConstMem;
  int major;
  int minor;
  int multiProcessorCount;
  int maxThreadsPerMultiProcessor;
  size_t sharedMemPerMultiprocessor;
  size_t sharedMemPerBlockOptin;
  int regsPerMultiprocessor;
  int l2CacheSize;
  int memoryBusWidth;
  int memoryClockRate;
  int concurrentKernels;
  int maxBlocksPerMultiProcessor;
};

extern "C" {
AOTB_EMU_API cudaError_t cudaGetLastError();
AOTB_EMU_API cudaError_t cudaPeekAtLastError();
AOTB_EMU_API const char *cudaGetErrorString(cudaError_t error);
AOTB_EMU_API const char *cudaGetErrorName(cudaError_t error);
AOTB_EMU_API cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
AOTB_EMU_API cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device);
AOTB_EMU_API cudaError_t cudaMalloc(void **pointer, size_t bytes);
AOTB_EMU_API cudaError_t cudaMallocHost(void **pointer, size_t bytes);
AOTB_EMU_API cudaError_t cudaMallocManaged(void **pointer, size_t bytes, unsigned flags = 1);
AOTB_EMU_API cudaError_t cudaFree(void *pointer);
AOTB_EMU_API cudaError_t cudaFreeHost(void *pointer);
AOTB_EMU_API cudaError_t aotb_emu_set_max_dynamic_shared(int bytes);
AOTB_EMU_API cudaError_t aotb_emu_check_stream(const void *stream);
}

inline cudaError_t cudaGetDeviceCount(int *count) {
  *count = 1;
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int *device) {
  *device = 0;
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
inline cudaError_t cudaDeviceSynchronize() { return cudaPeekAtLastError(); }
inline cudaError_t cudaThreadSynchronize() { return cudaPeekAtLastError(); }
inline cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  const cudaError_t bad = aotb_emu_check_stream(stream);
  return bad != cudaSuccess ? bad : cudaPeekAtLastError();
}
inline cudaError_t cudaStreamQuery(cudaStream_t stream) { return aotb_emu_check_stream(stream); }
inline cudaError_t cudaStreamCreate(cudaStream_t *stream) {
  *stream = nullptr;  // every stream is the one in-order queue
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned) { return cudaStreamCreate(stream); }
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaMemset(void *p, int value, size_t bytes) {
  std::memset(p, value, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t stream = nullptr) {
  const cudaError_t bad = aotb_emu_check_stream(stream);
  if (bad != cudaSuccess) return bad;
  std::memset(p, value, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
  if (static_cast<int>(kind) < 0 || static_cast<int>(kind) > 4) return cudaErrorInvalidMemcpyDirection;
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                                   cudaStream_t stream = nullptr) {
  const cudaError_t bad = aotb_emu_check_stream(stream);
  return bad != cudaSuccess ? bad : cudaMemcpy(dst, src, bytes, kind);
}
inline cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                size_t height, cudaMemcpyKind kind) {
  for (size_t r = 0; r < height; r++)
    std::memmove(static_cast<char *>(dst) + r * dpitch, static_cast<const char *>(src) + r * spitch, width);
  return static_cast<int>(kind) < 0 || static_cast<int>(kind) > 4 ? cudaErrorInvalidMemcpyDirection : cudaSuccess;
}
inline cudaError_t cudaMallocAsync(void **pointer, size_t bytes, cudaStream_t) { return cudaMalloc(pointer, bytes); }
inline cudaError_t cudaFreeAsync(void *pointer, cudaStream_t) { return cudaFree(pointer); }
template <class T>
inline cudaError_t cudaMemcpyToSymbol(T &symbol, const void *src, size_t bytes, size_t offset = 0,
                                      cudaMemcpyKind = cudaMemcpyHostToDevice) {
  if (offset + bytes > sizeof(T)) return cudaErrorInvalidValue;
  std::memcpy(reinterpret_cast<char *>(&symbol) + offset, src, bytes);
  return cudaSuccess;
}
template <class T>
inline cudaError_t cudaMemcpyToSymbolAsync(T &symbol, const void *src, size_t bytes, size_t offset = 0,
                                           cudaMemcpyKind kind = cudaMemcpyHostToDevice, cudaStream_t = nullptr) {
  return cudaMemcpyToSymbol(symbol, src, bytes, offset, kind);
}
template <class T>
inline cudaError_t cudaMemcpyFromSymbol(void *dst, const T &symbol, size_t bytes, size_t offset = 0,
                                        cudaMemcpyKind = cudaMemcpyDeviceToHost) {
  if (offset + bytes > sizeof(T)) return cudaErrorInvalidValue;
  std::memcpy(dst, reinterpret_cast<const char *>(&symbol) + offset, bytes);
  return cudaSuccess;
}
template <class T>
inline cudaError_t cudaGetSymbolAddress(void **pointer, T &symbol) {
  *pointer = &symbol;
  return cudaSuccess;
}
// The opt-in applies to every kernel of the library (the emulator cannot tell a kernel's address from its launch).
template <class F>
inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) return aotb_emu_set_max_dynamic_shared(value);
  return cudaSuccess;
}
template <class F>
inline cudaError_t cudaFuncSetCacheConfig(F, int) { return cudaSuccess; }
inline cudaError_t cudaEventCreate(cudaEvent_t *event) {
  *event = nullptr;
  return cudaSuccess;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned) { return cudaEventCreate(event); }
inline cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t = nullptr) { return cudaSuccess; }
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0) { return cudaSuccess; }
template <class T>
inline cudaError_t cudaEventElapsedTime(float *, T, T) {
  static_assert(aotb_emu::always_false<T>::value,
                "cudaEventElapsedTime: the emulator has no GPU clock; time the op from Python (aotbench.bench)");
  return cudaErrorNotSupported;
}
template <class F>
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, F, int block_size, size_t) {
  *blocks = block_size > 0 ? std::max(1, 2048 / block_size) : 0;
  return cudaSuccess;
}
template <class... T>
inline cudaError_t cudaLaunchKernel(T...) {
  static_assert(aotb_emu::always_false<std::tuple<T...>>::value,
                "cudaLaunchKernel is not emulated: launch with kernel<<<grid, block, shared, stream>>>(args)");
  return cudaErrorNotSupported;
}
template <class... T>
inline cudaError_t cudaLaunchCooperativeKernel(T...) {
  static_assert(aotb_emu::always_false<std::tuple<T...>>::value,
                "cooperative launches (grid-wide sync) are not emulated by aotbench");
  return cudaErrorNotSupported;
}
