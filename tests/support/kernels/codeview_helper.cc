// A kernel whose work is done by a helper from its own header (tests/tools/test_codeview.py):
//   Scaled  out = 3 * x, float32, any shape (out_shape given by the test).
#include <cstdint>

#include "custom_aot_extra.h"
#include "codeview_helper.h"

static int64_t count(int ndims, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndims; d++) n *= shape[d];
  return n;
}

extern "C" int Scaled(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                      void *extra) {
  scale_into(static_cast<float *>(params[1]), static_cast<const float *>(params[0]), count(ndims[0], shapes[0]),
             3.0f);
  return 0;
}
