// Test kernels for tests/op/test_op.py and tests/spec/test_reg.py: several entry points in one library, so one compile
// serves many tests.
//
//   Probe   reports what it receives: nparam, the workspace count and, per params entry (inputs, outputs and
//           workspaces), ndims, the id of its dtype string, its address modulo 64, its element count and up to
//           four dims (-1 past ndims). Its Init asks for the workspaces listed in the optional int-vector
//           attribute "ws" (bytes), counts its calls, and attaches kernel data whose destructor counts too;
//           both counters are exported as plain C functions for ctypes. F writes 0xA5 over every workspace's
//           requested size. Output: int64, at least kProbeWords elements (pass out_shape=(kProbeWords,)).
//   SumAll  output = sum of every element of every float64 input (0-d and zero-size inputs allowed); its
//           InferShape returns {} so the output is 0-d.
//   SumDiff two inputs of the same shape, two outputs: x + y and x - y, any supported dtype in and out; its
//           InferShape is the multi-output form.
//   AddCast x + y converted to the output dtype (single-output InferShape: the shape of x).
//   BadInfer its InferShape answers -1 even for concrete inputs.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "custom_aot_extra.h"

namespace {

const char *const kDtypeNames[] = {"float16", "float32", "float64", "int8",   "int16",  "int32",     "int64",    "uint8",
                                   "uint16",  "uint32",  "uint64",  "bool",   "bfloat16", "complex64", "complex128"};
constexpr int kNumDtypes = sizeof(kDtypeNames) / sizeof(kDtypeNames[0]);
constexpr int kMaxParams = 24;
constexpr int kWordsPerParam = 8;
constexpr int64_t kProbeWords = 2 + kMaxParams * kWordsPerParam;

int64_t g_init_calls = 0;
int64_t g_destructs = 0;

int DtypeId(const char *name) {
  if (name == nullptr) return -2;
  for (int k = 0; k < kNumDtypes; ++k) {
    if (std::strcmp(name, kDtypeNames[k]) == 0) return k;
  }
  return -1;
}

int64_t Numel(int ndims, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndims; ++d) n *= shape[d];  // ndims == 0: never dereferenced
  return n;
}

class ProbeData : public AotKernelData {
 public:
  ~ProbeData() override { ++g_destructs; }
};

// Elementwise load/store by dtype string, through double (enough for the values the tests use).
bool Load(const char *dtype, const void *p, int64_t i, double *v) {
  if (!std::strcmp(dtype, "float32")) *v = static_cast<const float *>(p)[i];
  else if (!std::strcmp(dtype, "float64")) *v = static_cast<const double *>(p)[i];
  else if (!std::strcmp(dtype, "int8")) *v = static_cast<const int8_t *>(p)[i];
  else if (!std::strcmp(dtype, "int16")) *v = static_cast<const int16_t *>(p)[i];
  else if (!std::strcmp(dtype, "int32")) *v = static_cast<const int32_t *>(p)[i];
  else if (!std::strcmp(dtype, "int64")) *v = static_cast<double>(static_cast<const int64_t *>(p)[i]);
  else if (!std::strcmp(dtype, "uint8")) *v = static_cast<const uint8_t *>(p)[i];
  else if (!std::strcmp(dtype, "uint16")) *v = static_cast<const uint16_t *>(p)[i];
  else if (!std::strcmp(dtype, "uint32")) *v = static_cast<const uint32_t *>(p)[i];
  else if (!std::strcmp(dtype, "uint64")) *v = static_cast<double>(static_cast<const uint64_t *>(p)[i]);
  else if (!std::strcmp(dtype, "bool")) *v = static_cast<const bool *>(p)[i] ? 1.0 : 0.0;
  else if (!std::strcmp(dtype, "bfloat16")) {
    uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t *>(p)[i]) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    *v = f;
  } else {
    return false;
  }
  return true;
}

bool Store(const char *dtype, void *p, int64_t i, double v) {
  if (!std::strcmp(dtype, "float32")) static_cast<float *>(p)[i] = static_cast<float>(v);
  else if (!std::strcmp(dtype, "float64")) static_cast<double *>(p)[i] = v;
  else if (!std::strcmp(dtype, "int8")) static_cast<int8_t *>(p)[i] = static_cast<int8_t>(v);
  else if (!std::strcmp(dtype, "int16")) static_cast<int16_t *>(p)[i] = static_cast<int16_t>(v);
  else if (!std::strcmp(dtype, "int32")) static_cast<int32_t *>(p)[i] = static_cast<int32_t>(v);
  else if (!std::strcmp(dtype, "int64")) static_cast<int64_t *>(p)[i] = static_cast<int64_t>(v);
  else if (!std::strcmp(dtype, "uint8")) static_cast<uint8_t *>(p)[i] = static_cast<uint8_t>(v);
  else if (!std::strcmp(dtype, "uint16")) static_cast<uint16_t *>(p)[i] = static_cast<uint16_t>(v);
  else if (!std::strcmp(dtype, "uint32")) static_cast<uint32_t *>(p)[i] = static_cast<uint32_t>(v);
  else if (!std::strcmp(dtype, "uint64")) static_cast<uint64_t *>(p)[i] = static_cast<uint64_t>(v);
  else if (!std::strcmp(dtype, "bool")) static_cast<bool *>(p)[i] = v != 0.0;
  else return false;
  return true;
}

}  // namespace

extern "C" int64_t op_probe_words() { return kProbeWords; }
extern "C" int64_t op_probe_init_count() { return g_init_calls; }
extern "C" int64_t op_probe_destruct_count() { return g_destructs; }

// ---------------------------------------------------------------------------------------------------- Probe
extern "C" int ProbeInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  ++g_init_calls;
  std::vector<size_t> ws;
  if (extra->HasAttr("ws")) {
    for (int64_t b : extra->Attr<std::vector<int64_t>>("ws")) ws.push_back(static_cast<size_t>(b));
  }
  extra->SetWorkSpace(ws);
  extra->SetKernelData(new ProbeData);
  return 0;
}

extern "C" int Probe(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                     void *extra_void) {
  auto *extra = static_cast<AotExtra *>(extra_void);
  const std::vector<size_t> &ws = extra->WorkSpace();
  const int n_ws = static_cast<int>(ws.size());
  const int out_index = nparam - n_ws - 1;
  if (out_index < 0 || nparam > kMaxParams) return 3;
  if (std::strcmp(dtypes[out_index], "int64") != 0 || Numel(ndims[out_index], shapes[out_index]) < kProbeWords) {
    return 4;
  }
  if (dynamic_cast<ProbeData *>(extra->KernelData()) == nullptr) return 5;
  for (int k = 0; k < n_ws; ++k) std::memset(params[nparam - n_ws + k], 0xA5, ws[k]);

  int64_t *out = static_cast<int64_t *>(params[out_index]);
  for (int64_t i = 0; i < kProbeWords; ++i) out[i] = -7;
  out[0] = nparam;
  out[1] = n_ws;
  for (int k = 0; k < nparam; ++k) {
    int64_t *rec = out + 2 + k * kWordsPerParam;
    rec[0] = ndims[k];
    rec[1] = DtypeId(dtypes[k]);
    rec[2] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(params[k]) % 64);
    rec[3] = Numel(ndims[k], shapes[k]);
    for (int d = 0; d < 4; ++d) rec[4 + d] = d < ndims[k] ? shapes[k][d] : -1;
  }
  return 0;
}

// --------------------------------------------------------------------------------------------------- SumAll
extern "C" std::vector<int64_t> SumAllInferShape(int *ndims, int64_t **shapes, AotExtra *extra) { return {}; }

extern "C" int SumAll(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                      void *extra) {
  const int n_in = nparam - 1;
  if (n_in < 0 || std::strcmp(dtypes[n_in], "float64") != 0 || ndims[n_in] != 0) return 1;
  double total = 0.0;
  for (int k = 0; k < n_in; ++k) {
    if (std::strcmp(dtypes[k], "float64") != 0) return 2;
    const double *x = static_cast<const double *>(params[k]);
    const int64_t n = Numel(ndims[k], shapes[k]);
    for (int64_t i = 0; i < n; ++i) total += x[i];
  }
  *static_cast<double *>(params[n_in]) = total;
  return 0;
}

// -------------------------------------------------------------------------------------------------- SumDiff
extern "C" std::vector<std::vector<int64_t>> SumDiffInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  std::vector<int64_t> s(shapes[0], shapes[0] + ndims[0]);
  return {s, s};
}

extern "C" int SumDiff(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                       void *extra) {
  if (nparam != 4) return 1;
  const int64_t n = Numel(ndims[0], shapes[0]);
  if (Numel(ndims[1], shapes[1]) != n || Numel(ndims[2], shapes[2]) != n || Numel(ndims[3], shapes[3]) != n) return 2;
  for (int64_t i = 0; i < n; ++i) {
    double x, y;
    if (!Load(dtypes[0], params[0], i, &x) || !Load(dtypes[1], params[1], i, &y)) return 3;
    if (!Store(dtypes[2], params[2], i, x + y) || !Store(dtypes[3], params[3], i, x - y)) return 4;
  }
  return 0;
}

// -------------------------------------------------------------------------------------------------- AddCast
extern "C" std::vector<int64_t> AddCastInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  if (ndims[0] == 1 && shapes[0][0] == -2) return {-2};
  return std::vector<int64_t>(shapes[0], shapes[0] + ndims[0]);
}

extern "C" int AddCast(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                       void *extra) {
  if (nparam != 3) return 1;
  const int64_t n = Numel(ndims[2], shapes[2]);
  if (Numel(ndims[0], shapes[0]) != n || Numel(ndims[1], shapes[1]) != n) return 2;
  for (int64_t i = 0; i < n; ++i) {
    double x, y;
    if (!Load(dtypes[0], params[0], i, &x) || !Load(dtypes[1], params[1], i, &y)) return 3;
    if (!Store(dtypes[2], params[2], i, x + y)) return 4;
  }
  return 0;
}

// ------------------------------------------------------------------------------------------------- BadInfer
extern "C" std::vector<int64_t> BadInferInferShape(int *ndims, int64_t **shapes, AotExtra *extra) { return {-1}; }

extern "C" int BadInfer(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                        void *extra) {
  return 0;
}
