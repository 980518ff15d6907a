// Test kernel for tests/notebook/test_widgets.py (the explore panel).
//   Scale: one float32 input x of any shape; output y = x * scale, with the float attribute "scale".
//   When the int attribute "crash_above" is >= 0 and x has more elements than that, it writes through a null
//   pointer (SIGSEGV): the panel of an isolated op must survive it.
#include <cstdint>

#include "custom_aot_extra.h"

extern "C" int Scale(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                     void *extra_ptr) {
  AotExtra *extra = static_cast<AotExtra *>(extra_ptr);
  const float scale = extra->Attr<float>("scale");
  const int64_t crash_above = extra->Attr<int64_t>("crash_above");
  int64_t n = 1;
  for (int i = 0; i < ndims[0]; i++) n *= shapes[0][i];
  if (crash_above >= 0 && n > crash_above) {
    volatile float *p = nullptr;
    *p = 1.0f;
  }
  const float *x = static_cast<const float *>(params[0]);
  float *y = static_cast<float *>(params[1]);
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
  return 0;
}
