// Kernels that print, for tests/test_trust2_prints.py. Each takes one float32 input x and gives one float32
// output of x's shape.
//   PrintK     y = 2x, printf("k") without a newline
//   CoutK      y = 2x, std::cout << "c" << x.size << std::endl
//   PrintNaN   y = 2x but the last element is never written (the guarded first call runs a second time);
//              prints "n<size>\n"
//   PrintFail  printf("f\n"), then returns 1 (a KernelError)
//   PrintMany  y = 2x, one line "line <i>\n" per element (megabytes for a large x)
//   PrintInit  y = 2x; its Init prints "init\n" (once per signature)
//   PrintCrash printf("before the crash\n"), then writes through a null pointer (SIGSEGV)
// A kernel that prints nothing is in trust2_quiet.cc: whether a library can print is decided per library.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "custom_aot_extra.h"

static int64_t size_of(int *ndims, int64_t **shapes) {
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; ++d) n *= shapes[0][d];
  return n;
}

extern "C" int PrintK(int, void **params, int *ndims, int64_t **shapes, const char **, void *, void *) {
  const float *x = static_cast<const float *>(params[0]);
  float *y = static_cast<float *>(params[1]);
  for (int64_t i = 0, n = size_of(ndims, shapes); i < n; ++i) y[i] = 2 * x[i];
  std::printf("k");
  return 0;
}

extern "C" int CoutK(int, void **params, int *ndims, int64_t **shapes, const char **, void *, void *) {
  const float *x = static_cast<const float *>(params[0]);
  float *y = static_cast<float *>(params[1]);
  int64_t n = size_of(ndims, shapes);
  for (int64_t i = 0; i < n; ++i) y[i] = 2 * x[i];
  std::cout << "c" << n << std::endl;
  return 0;
}

extern "C" int PrintNaN(int, void **params, int *ndims, int64_t **shapes, const char **, void *, void *) {
  const float *x = static_cast<const float *>(params[0]);
  float *y = static_cast<float *>(params[1]);
  int64_t n = size_of(ndims, shapes);
  for (int64_t i = 0; i + 1 < n; ++i) y[i] = 2 * x[i];
  std::printf("n%lld\n", static_cast<long long>(n));
  return 0;
}

extern "C" int PrintFail(int, void **, int *, int64_t **, const char **, void *, void *) {
  std::printf("f\n");
  return 1;
}

extern "C" int PrintMany(int, void **params, int *ndims, int64_t **shapes, const char **, void *, void *) {
  const float *x = static_cast<const float *>(params[0]);
  float *y = static_cast<float *>(params[1]);
  for (int64_t i = 0, n = size_of(ndims, shapes); i < n; ++i) {
    y[i] = 2 * x[i];
    std::printf("line %lld\n", static_cast<long long>(i));
  }
  return 0;
}

extern "C" int PrintInitInit(int *, int64_t **, const char **, AotExtra *) {
  std::printf("init\n");
  return 0;
}

extern "C" int PrintInit(int, void **params, int *ndims, int64_t **shapes, const char **, void *, void *) {
  const float *x = static_cast<const float *>(params[0]);
  float *y = static_cast<float *>(params[1]);
  for (int64_t i = 0, n = size_of(ndims, shapes); i < n; ++i) y[i] = 2 * x[i];
  return 0;
}

extern "C" int PrintCrash(int, void **, int *, int64_t **, const char **, void *, void *) {
  std::printf("before the crash\n");
  *static_cast<volatile int *>(nullptr) = 1;
  return 0;
}
