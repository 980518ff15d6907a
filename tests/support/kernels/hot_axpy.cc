// hot-path fixture: out = a * x + y for any dtype with the same element size as the inputs' (float32, or
// 16-bit types, which are summed as raw uint16 bit patterns: out = x + y bits), attribute a (float).
#include <cstdint>
#include <cstring>
#include "custom_aot_extra.h"

extern "C" int Axpy(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                    void *extra_void) {
  AotExtra *extra = static_cast<AotExtra *>(extra_void);
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; d++) n *= shapes[0][d];
  if (std::strcmp(dtypes[0], "float32") == 0) {
    const float a = extra->Attr<float>("a");
    const float *x = static_cast<const float *>(params[0]), *y = static_cast<const float *>(params[1]);
    float *out = static_cast<float *>(params[2]);
    for (int64_t i = 0; i < n; i++) out[i] = a * x[i] + y[i];
    return 0;
  }
  if (std::strcmp(dtypes[0], "bfloat16") == 0) {
    const uint16_t *x = static_cast<const uint16_t *>(params[0]), *y = static_cast<const uint16_t *>(params[1]);
    uint16_t *out = static_cast<uint16_t *>(params[2]);
    for (int64_t i = 0; i < n; i++) out[i] = static_cast<uint16_t>(x[i] ^ y[i]);
    return 0;
  }
  return 7;
}
