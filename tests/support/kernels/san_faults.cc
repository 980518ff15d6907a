// sanitizer fixture: mode 0 computes out = x + 1 correctly; mode 1 overflows a heap buffer (ASan); mode 2
// overflows a signed int (UBSan). The mode is the call argument `mode`.
#include <climits>
#include <cstdint>
#include "custom_aot_extra.h"

extern "C" int Faulty(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                      void *extra) {
  const float *x = static_cast<const float *>(params[0]);
  float *out = static_cast<float *>(params[1]);
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; d++) n *= shapes[0][d];
  const int64_t mode = static_cast<AotExtra *>(extra)->Attr<int64_t>("mode");
  if (mode == 1) {
    float *scratch = new float[n];
    for (int64_t i = 0; i <= n; i++) scratch[i] = x[i % n];  // heap-buffer-overflow at i == n
    delete[] scratch;
  }
  if (mode == 2) {
    volatile int big = INT_MAX;
    int sum = big + static_cast<int>(n);  // signed integer overflow
    out[0] = static_cast<float>(sum);
  }
  for (int64_t i = 0; i < n; i++) out[i] = x[i] + 1.0f;
  return 0;
}
