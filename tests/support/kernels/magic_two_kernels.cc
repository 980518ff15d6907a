// A %%aot_kernel cell for tests/notebook/test_magic.py with TWO kernel functions, so the magic must be told which one
// (--func). Each has Init and InferShape companions, which are never candidates; the commented-out kernels and
// the string that mentions one are not candidates either.
#include <cstdint>
#include <vector>

#include "custom_aot_extra.h"

static const char *kNote = "extern \"C\" int MagicFake(int, void **, int *, int64_t **, const char **, void *, void *) {";

// extern "C" int MagicOld(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream, void *extra) { return 0; }
/*
extern "C" int MagicOlder(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                          void *stream, void *extra) {
  return 0;
}
*/

static int64_t Elements(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

extern "C" int MagicPlusInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) { return 0; }

extern "C" std::vector<int64_t> MagicPlusInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  return std::vector<int64_t>(shapes[0], shapes[0] + ndims[0]);
}

extern "C" int MagicPlus(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                         void *extra) {
  const float *x = static_cast<const float *>(params[0]);
  const float *y = static_cast<const float *>(params[1]);
  float *out = static_cast<float *>(params[2]);
  for (int64_t i = 0, n = Elements(ndims[0], shapes[0]); i < n; i++) out[i] = x[i] + y[i];
  return 0;
}

extern "C" int MagicTimesInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) { return 0; }

extern "C" std::vector<int64_t> MagicTimesInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  return std::vector<int64_t>(shapes[0], shapes[0] + ndims[0]);
}

extern "C" int MagicTimes(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                          void *extra) {
  const float *x = static_cast<const float *>(params[0]);
  const float *y = static_cast<const float *>(params[1]);
  float *out = static_cast<float *>(params[2]);
  for (int64_t i = 0, n = Elements(ndims[0], shapes[0]); i < n; i++) out[i] = x[i] * y[i];
  return 0;
}
