// Built by tests/native/test_elf_abi.py into a shared library by hand, then loaded as a prebuilt "lib.so:Name".
// HdrAxpy: out = a * x + y (float32, same shape; a is a float attribute).
// HdrNotC has the kernel signature but no extern "C", so only its mangled name is exported.
#include <cstdint>
#include <cstring>

#include "custom_aot_extra.h"

extern "C" int HdrAxpy(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *,
                       void *extra_void) {
  if (nparam < 3 || std::strcmp(dtypes[0], "float32") != 0 || std::strcmp(dtypes[1], "float32") != 0) return 2;
  const float a = static_cast<AotExtra *>(extra_void)->Attr<float>("a");
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; d++) n *= shapes[0][d];
  const float *x = static_cast<const float *>(params[0]);
  const float *y = static_cast<const float *>(params[1]);
  float *out = static_cast<float *>(params[2]);
  for (int64_t i = 0; i < n; i++) out[i] = a * x[i] + y[i];
  return 0;
}

int HdrNotC(int, void **, int *, int64_t **, const char **, void *, void *) {
  return 0;
}
