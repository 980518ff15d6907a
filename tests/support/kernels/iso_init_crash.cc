// Test kernel for tests/run/test_isolate.py: out = 3 * x (float32); its Init writes through a null pointer
// (SIGSEGV) when x has exactly 4 elements, so a crash while planning a call can be isolated too.
#include <cstdint>

#include "custom_aot_extra.h"

extern "C" int IsoInitCrashInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; ++d) n *= shapes[0][d];
  if (n == 4) {
    volatile int *p = nullptr;
    *p = 4;
  }
  return 0;
}

extern "C" int IsoInitCrash(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                            void *stream, void *extra) {
  const float *x = static_cast<const float *>(params[0]);
  float *out = static_cast<float *>(params[1]);
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; ++d) n *= shapes[0][d];
  for (int64_t i = 0; i < n; ++i) out[i] = 3.0f * x[i];
  return 0;
}
