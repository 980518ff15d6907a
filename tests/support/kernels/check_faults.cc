// Test kernels for tests/tools/test_check.py (check mode). Each misbehaves the way its string attribute "mode" says.
//
//   Fault   one input x, one output of x's shape. The output's dtype is the op's out_dtype: float32 gets
//           2 * x, int32 gets (int)(10 * x), bool gets x > 0. Modes:
//             ok            every element written, nothing else
//             past_end      also writes the int attribute "extra" floats (1.0f) right after the output's end
//             before_start  also writes 1.0f at out[-1] (the 4 bytes before the start)
//             unwritten     skips every element whose flat index i has i % 3 == 1 (any output dtype)
//             ws_floats     Init asks for n bytes (the element count); F writes n floats into workspace 0
//             ws_doubles    Init asks for n bytes (the element count); F writes n doubles into workspace 0
//             ws_overrun    Init asks for 4n bytes; F writes n + 1 floats into workspace 0 (4 bytes too many)
//             ws_poison     Init asks for 4n bytes; F writes only the first n/2 floats, then reads all n
//             ws_unguarded  Init asks for 4n bytes computed from the dims without a -1 guard; correct F
//             mismatch      out = 2x, plus the float attribute "delta" at every flat index i % 4 == 0
//             status        F returns 7
//           Init guards against -1 dims (no workspace then) in every mode but ws_unguarded.
//   Two     inputs x, y; outputs out0 = x + y, out1 = x * y (both float32, x's shape). Mode "ok", or
//           "skip1": out1's flat index 0 is never written.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "custom_aot_extra.h"

namespace {

int64_t Numel(int ndims, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndims; ++d) n *= shape[d];
  return n;
}

class FaultData : public AotKernelData {
 public:
  std::string mode;
  int64_t extra = 0;
  float delta = 0.0f;
};

}  // namespace

extern "C" std::vector<int64_t> FaultInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  return std::vector<int64_t>(shapes[0], shapes[0] + ndims[0]);
}

extern "C" int FaultInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  auto *data = new FaultData;
  data->mode = extra->Attr<std::string>("mode");
  data->extra = extra->Attr<int64_t>("extra");
  data->delta = extra->Attr<float>("delta");
  extra->SetKernelData(data);
  const std::string &mode = data->mode;
  if (mode == "ws_unguarded") {
    size_t n = 1;
    for (int d = 0; d < ndims[0]; ++d) n *= shapes[0][d];  // -1 wraps around
    extra->SetWorkSpace({n * sizeof(float)});
    return 0;
  }
  for (int d = 0; d < ndims[0]; ++d) {
    if (shapes[0][d] < 0) return 0;  // graph mode with unknown dims: ask for nothing yet
  }
  const size_t n = static_cast<size_t>(Numel(ndims[0], shapes[0]));
  if (mode == "ws_floats" || mode == "ws_doubles") {
    extra->SetWorkSpace({n});  // the bug under test: an element count, not bytes
  } else if (mode == "ws_overrun" || mode == "ws_poison") {
    extra->SetWorkSpace({n * sizeof(float)});
  }
  return 0;
}

extern "C" int Fault(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                     void *extra_void) {
  auto *data = static_cast<FaultData *>(static_cast<AotExtra *>(extra_void)->KernelData());
  const std::string &mode = data->mode;
  if (mode == "status") return 7;
  const float *x = static_cast<const float *>(params[0]);
  const int64_t n = Numel(ndims[0], shapes[0]);
  std::vector<float> value(x, x + n);
  for (auto &v : value) v *= 2.0f;

  if (mode == "ws_floats" || mode == "ws_overrun") {
    float *ws = static_cast<float *>(params[2]);
    const int64_t count = mode == "ws_overrun" ? n + 1 : n;
    for (int64_t i = 0; i < count; ++i) ws[i] = i < n ? value[i] : 1.0f;
    for (int64_t i = 0; i < n; ++i) value[i] = ws[i];
  } else if (mode == "ws_doubles") {
    double *ws = static_cast<double *>(params[2]);
    for (int64_t i = 0; i < n; ++i) ws[i] = value[i];
    for (int64_t i = 0; i < n; ++i) value[i] = static_cast<float>(ws[i]);
  } else if (mode == "ws_poison") {
    float *ws = static_cast<float *>(params[2]);
    for (int64_t i = 0; i < n / 2; ++i) ws[i] = value[i];
    for (int64_t i = 0; i < n; ++i) value[i] = ws[i];
  } else if (mode == "mismatch") {
    for (int64_t i = 0; i < n; i += 4) value[i] += data->delta;
  }

  const std::string out_dtype = dtypes[1];
  for (int64_t i = 0; i < n; ++i) {
    if (mode == "unwritten" && i % 3 == 1) continue;
    if (out_dtype == "float32") {
      static_cast<float *>(params[1])[i] = value[i];
    } else if (out_dtype == "int32") {
      static_cast<int32_t *>(params[1])[i] = static_cast<int32_t>(10.0f * x[i]);
    } else if (out_dtype == "bool") {
      static_cast<bool *>(params[1])[i] = x[i] > 0.0f;
    } else {
      return 3;
    }
  }
  float *out = static_cast<float *>(params[1]);
  if (mode == "past_end") {
    for (int64_t k = 0; k < data->extra; ++k) out[n + k] = 1.0f;
  } else if (mode == "before_start") {
    out[-1] = 1.0f;
  }
  return 0;
}

extern "C" int Two(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                   void *extra_void) {
  const std::string mode = static_cast<AotExtra *>(extra_void)->Attr<std::string>("mode");
  const float *x = static_cast<const float *>(params[0]);
  const float *y = static_cast<const float *>(params[1]);
  float *out0 = static_cast<float *>(params[2]);
  float *out1 = static_cast<float *>(params[3]);
  const int64_t n = Numel(ndims[0], shapes[0]);
  for (int64_t i = 0; i < n; ++i) out0[i] = x[i] + y[i];
  for (int64_t i = mode == "skip1" ? 1 : 0; i < n; ++i) out1[i] = x[i] * y[i];
  return 0;
}
