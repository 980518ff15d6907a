// Test kernels for tests/run/test_concurrency.py (threads, fork), test_guard.py (the guarded first call) and
// test_fast_math.py (floating-point mode).
//
//   Scratch   one float32 input x, one output of x's shape: copies x into workspace 0 (4 bytes per element, as
//             Init asks), sleeps the int attribute "sleep_us" microseconds so that other calls run meanwhile, then
//             writes out = 3 * workspace. Wrong results mean another call wrote into this call's workspace.
//   Tiny      out = x * y for float32 x and y of one shape: under flush-to-zero/denormals-are-zero a denormal
//             input gives 0, otherwise the exact product.
//   Copy      out = x, byte for byte, for any dtype (whatever bytes or NaNs x holds: a correct kernel).
//   Garbage   out = x + (bits of workspace[i] & 0xF) for float32 x: it never writes its workspace, so the
//             result is finite but depends on whatever that memory held.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "custom_aot_extra.h"

namespace {
int64_t Numel(int ndims, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndims; ++d) n *= shape[d];
  return n;
}
}  // namespace

extern "C" int ScratchInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  extra->SetWorkSpace({static_cast<size_t>(Numel(ndims[0], shapes[0])) * sizeof(float)});
  return 0;
}

extern "C" int Scratch(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                       void *extra) {
  const int64_t n = Numel(ndims[0], shapes[0]);
  const float *x = static_cast<const float *>(params[0]);
  float *out = static_cast<float *>(params[1]);
  float *ws = static_cast<float *>(params[2]);
  for (int64_t i = 0; i < n; ++i) ws[i] = x[i];
  usleep(static_cast<useconds_t>(static_cast<AotExtra *>(extra)->Attr<int64_t>("sleep_us")));
  for (int64_t i = 0; i < n; ++i) out[i] = 3.0f * ws[i];
  return 0;
}

extern "C" int Tiny(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                    void *extra) {
  const int64_t n = Numel(ndims[0], shapes[0]);
  const float *x = static_cast<const float *>(params[0]);
  const float *y = static_cast<const float *>(params[1]);
  float *out = static_cast<float *>(params[2]);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * y[i];
  return 0;
}

namespace {
int64_t ItemSize(const char *dtype) {
  const std::string d(dtype);
  if (d == "uint8" || d == "int8" || d == "bool") return 1;
  if (d == "float16" || d == "int16" || d == "uint16") return 2;
  if (d == "float64" || d == "int64" || d == "uint64") return 8;
  return 4;
}
}  // namespace

extern "C" int Copy(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                    void *extra) {
  std::memcpy(params[1], params[0], static_cast<size_t>(Numel(ndims[0], shapes[0]) * ItemSize(dtypes[0])));
  return 0;
}

extern "C" int GarbageInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  extra->SetWorkSpace({static_cast<size_t>(Numel(ndims[0], shapes[0])) * sizeof(float)});
  return 0;
}

extern "C" int Garbage(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                       void *extra) {
  const int64_t n = Numel(ndims[0], shapes[0]);
  const float *x = static_cast<const float *>(params[0]);
  float *out = static_cast<float *>(params[1]);
  const uint32_t *ws = static_cast<const uint32_t *>(params[2]);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] + static_cast<float>(ws[i] & 0xF);
  return 0;
}
