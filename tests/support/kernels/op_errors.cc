// Test kernels for tests/test_errors.py.
//
//   Fail     out = 2 * x (float32) when the string attribute "mode" is "ok"; otherwise it fails the way "mode"
//            says, so one op (with "mode" as a call argument) exercises every error path and then a valid call:
//              status        F returns the int attribute "code"
//              init_status   Init returns "code"
//              throw_f / throw_init / throw_infer
//                            std::runtime_error("<where>: " + the string attribute "token") from F / Init / InferShape
//              throw_int     F throws 42 (not a std::exception)
//              missing_attr  Init reads Attr<int64_t>("no_such_attr")
//              mistyped      Init reads the int attribute "count" as Attr<float>
//              missing_attr_f / mistyped_f
//                            the same reads (Attr<int64_t>("no_such_attr"), Attr<float>("count")) in F
//   NoInfer  out = x (float32), and no InferShape.
//   Mangled  has C++ linkage on purpose (its exported symbol is mangled).
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "custom_aot_extra.h"

namespace {

int64_t Numel(int ndims, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndims; ++d) n *= shape[d];
  return n;
}

std::string Mode(AotExtra *extra) { return extra->Attr<std::string>("mode"); }

}  // namespace

extern "C" std::vector<int64_t> FailInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  if (Mode(extra) == "throw_infer") throw std::runtime_error("FailInferShape: " + extra->Attr<std::string>("token"));
  return std::vector<int64_t>(shapes[0], shapes[0] + ndims[0]);
}

extern "C" int FailInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  const std::string mode = Mode(extra);
  if (mode == "init_status") return static_cast<int>(extra->Attr<int64_t>("code"));
  if (mode == "throw_init") throw std::runtime_error("FailInit: " + extra->Attr<std::string>("token"));
  if (mode == "missing_attr") return static_cast<int>(extra->Attr<int64_t>("no_such_attr"));
  if (mode == "mistyped") return static_cast<int>(extra->Attr<float>("count"));
  return 0;
}

extern "C" int Fail(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                    void *extra_void) {
  auto *extra = static_cast<AotExtra *>(extra_void);
  const std::string mode = Mode(extra);
  if (mode == "status") return static_cast<int>(extra->Attr<int64_t>("code"));
  if (mode == "throw_f") throw std::runtime_error("Fail: " + extra->Attr<std::string>("token"));
  if (mode == "throw_int") throw 42;
  if (mode == "missing_attr_f") return static_cast<int>(extra->Attr<int64_t>("no_such_attr"));
  if (mode == "mistyped_f") return static_cast<int>(extra->Attr<float>("count"));
  if (mode != "ok") return -1;
  if (nparam != 2 || std::strcmp(dtypes[0], "float32") != 0 || std::strcmp(dtypes[1], "float32") != 0) return -2;
  const float *x = static_cast<const float *>(params[0]);
  float *out = static_cast<float *>(params[1]);
  for (int64_t i = 0, n = Numel(ndims[0], shapes[0]); i < n; ++i) out[i] = 2.0f * x[i];
  return 0;
}

extern "C" int NoInfer(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                       void *extra) {
  if (nparam != 2 || std::strcmp(dtypes[0], "float32") != 0) return 1;
  std::memcpy(params[1], params[0], static_cast<size_t>(Numel(ndims[0], shapes[0])) * sizeof(float));
  return 0;
}

int Mangled(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
            void *extra) {
  return 0;
}
