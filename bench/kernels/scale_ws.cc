// bench kernel: ScaleWs, out[i] = 2 * x[i] through a workspace of n floats (Init asks for it): what a call
// with scratch memory costs. Kept apart from scale.cc so that its header does not weigh on the cache-hit and
// cold-build rows.
#include <cstdint>

#include "custom_aot_extra.h"

extern "C" int ScaleWsInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; d++) n *= shapes[0][d];
  extra->SetWorkSpace({static_cast<size_t>(n) * sizeof(float)});
  return 0;
}

extern "C" int ScaleWs(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                       void *extra) {
  const float *x = static_cast<const float *>(params[0]);
  float *out = static_cast<float *>(params[1]);
  float *ws = static_cast<float *>(params[2]);
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; d++) n *= shapes[0][d];
  for (int64_t i = 0; i < n; i++) ws[i] = 2.0f * x[i];
  for (int64_t i = 0; i < n; i++) out[i] = ws[i];
  return 0;
}
