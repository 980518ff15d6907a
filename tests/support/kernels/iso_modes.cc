// Test kernels for tests/run/test_isolate.py (crash isolation).
//
//   IsoFault  two float32 inputs x, y of the same shape; two outputs: sum = x + alpha * y, prod = x * y, with
//             alpha the float attribute "alpha". The string call argument "mode" chooses what F does:
//               ok      compute the outputs
//               noisy   print "iso-noisy-marker" to stderr, then compute
//               segv    write through a null pointer (SIGSEGV)
//               abort   abort() (SIGABRT)
//               fpe     integer division by zero (SIGFPE on x86; volatile so the optimizer keeps it)
//               bus     raise(SIGBUS)
//               stack   unbounded recursion (stack overflow, SIGSEGV)
//               hang    loop forever
//               status  return 7
//               throw   throw std::runtime_error("iso-throw: " + mode)
//   IsoFaultInferShape gives both outputs the shape of x.
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "custom_aot_extra.h"

namespace {

volatile int g_zero = 0;
volatile int64_t g_sink = 0;

int64_t Recurse(int64_t depth) {
  volatile char pad[1024];
  pad[0] = static_cast<char>(depth);
  pad[1023] = pad[0];
  return Recurse(depth + 1) + pad[1023];  // not a tail call
}

}  // namespace

extern "C" std::vector<std::vector<int64_t>> IsoFaultInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  std::vector<int64_t> s(shapes[0], shapes[0] + ndims[0]);
  return {s, s};
}

extern "C" int IsoFault(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                        void *extra_ptr) {
  AotExtra *extra = static_cast<AotExtra *>(extra_ptr);
  const std::string mode = extra->Attr<std::string>("mode");
  const float alpha = extra->Attr<float>("alpha");
  if (mode == "segv") {
    volatile int *p = nullptr;
    *p = 1;
  } else if (mode == "abort") {
    std::abort();
  } else if (mode == "fpe") {
    volatile int one = 1;
    g_sink = one / g_zero;
  } else if (mode == "bus") {
    std::raise(SIGBUS);
  } else if (mode == "stack") {
    g_sink = Recurse(0);
  } else if (mode == "hang") {
    for (;;) g_sink = g_sink + 1;
  } else if (mode == "status") {
    return 7;
  } else if (mode == "throw") {
    throw std::runtime_error("iso-throw: " + mode);
  } else if (mode == "noisy") {
    std::fprintf(stderr, "iso-noisy-marker\n");
  } else if (mode != "ok") {
    throw std::invalid_argument("unknown mode " + mode);
  }
  const float *x = static_cast<const float *>(params[0]);
  const float *y = static_cast<const float *>(params[1]);
  float *sum = static_cast<float *>(params[2]);
  float *prod = static_cast<float *>(params[3]);
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; ++d) n *= shapes[0][d];
  for (int64_t i = 0; i < n; ++i) {
    sum[i] = x[i] + alpha * y[i];
    prod[i] = x[i] * y[i];
  }
  return 0;
}
