// Two loops for tests/tools/test_codeview.py: one GCC vectorizes at -O3, one it cannot (each step needs the last).
//   Loops   t = x * 1.5 + y (elementwise: vectorizable), then out[i] = t[i] + 0.25 * out[i-1] (a recurrence: not);
//           float32, any shape; InferShape: the output has x's shape.
#include <cstdint>
#include <vector>

#include "custom_aot_extra.h"

extern "C" std::vector<int64_t> LoopsInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  return std::vector<int64_t>(shapes[0], shapes[0] + ndims[0]);
}

extern "C" int Loops(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                     void *extra) {
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; d++) n *= shapes[0][d];
  const float *x = static_cast<const float *>(params[0]);
  const float *y = static_cast<const float *>(params[1]);
  float *out = static_cast<float *>(params[2]);
  const float a = 1.5f, decay = 0.25f;
  for (int64_t i = 0; i < n; i++) out[i] = x[i] * a + y[i];  // VECTORIZED_LOOP
  for (int64_t i = 1; i < n; i++) out[i] += decay * out[i - 1];  // RECURRENCE_LOOP
  return 0;
}
