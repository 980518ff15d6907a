// A kernel that prints nothing (tests/run/test_trust2_prints.py): its library references no output function, so its
// calls are not captured.  Quiet: y = 2x for one float32 input.
#include <cstdint>

#include "custom_aot_extra.h"

extern "C" int Quiet(int, void **params, int *ndims, int64_t **shapes, const char **, void *, void *) {
  const float *x = static_cast<const float *>(params[0]);
  float *y = static_cast<float *>(params[1]);
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; ++d) n *= shapes[0][d];
  for (int64_t i = 0; i < n; ++i) y[i] = 2 * x[i];
  return 0;
}
