// Host stand-in for a gpu kernel library (tests/run/test_gpu_path.py): the same entry points as nvcc_axpy.cu, but
// the "device" pointers are host memory (tests/support/host_cupy.py), so the gpu run path's host side runs without a
// GPU. out = a * x + y, computed through the workspace (a copy of x), so a wrong workspace pointer or size shows.
// It returns 5 when the stream handle is not the int attribute "stream" (unless that is -1), and with "refuse" set it leaves a
// launch error behind for aotb_cuda_last_error, as a CUDA launch that the device refused would.
#include <cstdint>
#include <cstring>
#include <vector>
#include "custom_aot_extra.h"

static int g_pending = 0;

extern "C" int aotb_cuda_last_error(const char **name, const char **text) {
  const int error = g_pending;
  g_pending = 0;
  *name = error ? "cudaErrorInvalidConfiguration" : "cudaSuccess";
  *text = error ? "invalid configuration argument" : "no error";
  return error;
}

static int64_t elements(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  return n;
}

// Init: the workspace holds a copy of x (bytes). InferShape: the output has x's shape.
extern "C" int AxpyInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  extra->SetWorkSpace({static_cast<size_t>(elements(ndims[0], shapes[0])) * sizeof(float)});
  return 0;
}

extern "C" std::vector<int64_t> AxpyInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  return {shapes[0], shapes[0] + ndims[0]};
}

extern "C" int Axpy(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                    void *extra_void) {
  auto *extra = static_cast<AotExtra *>(extra_void);
  const int64_t want = extra->Attr<int64_t>("stream");  // -1: any stream
  if (want != -1 && reinterpret_cast<intptr_t>(stream) != want) return 5;
  if (extra->Attr<bool>("refuse")) {
    g_pending = 9;
    return 0;
  }
  const int64_t n = elements(ndims[0], shapes[0]);
  const float a = extra->Attr<float>("a");
  auto *ws = static_cast<float *>(params[3]);
  std::memcpy(ws, params[0], n * sizeof(float));
  const auto *y = static_cast<const float *>(params[1]);
  auto *out = static_cast<float *>(params[2]);
  for (int64_t i = 0; i < n; i++) out[i] = a * ws[i] + y[i];
  return 0;
}
