// Kernels that tests/mindspore/test_mindspore.py runs through real MindSpore and through aotbench, and exports.
//
//   AttrMix   out = x * f + offset, float32; Init reads one attribute of each of the eight kinds (b, i, f, s, iv,
//             fv, i2, f2) and folds them into `offset`, so a value read wrongly changes every output element.
//             Uses std::cout without including <iostream> (MindSpore's header includes it; so does aotbench's).
//   Scan      prefix sums along the last axis, for float32, float64, int32 and int64; the running sums go
//             through a workspace of one double per row (asked for in Init, in bytes); InferShape: the input's.
//   RowStats  two outputs, the sums and the maxima of each row of a float32 matrix; the two-output InferShape.
#include <cstdint>
#include <string>
#include <vector>

#include "custom_aot_extra.h"

namespace {

class MixData : public AotKernelData {
 public:
  float scale = 0.0f;
  float offset = 0.0f;
};

int64_t Count(int ndims, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndims; i++) n *= shape[i];
  return n;
}

template <typename T>
void PrefixSums(const T *in, T *out, double *running, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++) running[r] = 0.0;
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c = 0; c < cols; c++) {
      running[r] += static_cast<double>(in[r * cols + c]);
      out[r * cols + c] = static_cast<T>(running[r]);
    }
  }
}

}  // namespace

extern "C" int AttrMixInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  auto *data = new MixData;
  data->scale = extra->Attr<float>("scale");
  float offset = static_cast<float>(extra->Attr<int64_t>("bias"));
  if (extra->Attr<bool>("negate")) offset = -offset;
  offset += static_cast<float>(extra->Attr<std::string>("label").size());
  for (int64_t v : extra->Attr<std::vector<int64_t>>("steps")) offset += static_cast<float>(v);
  for (float v : extra->Attr<std::vector<float>>("weights")) offset += v;
  for (const auto &row : extra->Attr<std::vector<std::vector<int64_t>>>("grid"))
    for (int64_t v : row) offset += static_cast<float>(v);
  for (const auto &row : extra->Attr<std::vector<std::vector<float>>>("table"))
    for (float v : row) offset += v;
  data->offset = offset;
  if (extra->HasAttr("verbose")) std::cout << "AttrMix: offset " << offset << std::endl;
  extra->SetKernelData(data);
  return 0;
}

extern "C" int AttrMix(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                       void *extra_void) {
  auto *extra = static_cast<AotExtra *>(extra_void);
  const auto *data = static_cast<const MixData *>(extra->KernelData());
  const float *x = static_cast<const float *>(params[0]);
  float *out = static_cast<float *>(params[1]);
  int64_t n = Count(ndims[0], shapes[0]);
  for (int64_t i = 0; i < n; i++) out[i] = x[i] * data->scale + data->offset;
  return 0;
}

extern "C" int ScanInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  int64_t rows = ndims[0] == 0 ? 1 : Count(ndims[0] - 1, shapes[0]);
  extra->SetWorkSpace({static_cast<size_t>(rows) * sizeof(double)});
  return 0;
}

extern "C" std::vector<int64_t> ScanInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  return std::vector<int64_t>(shapes[0], shapes[0] + ndims[0]);
}

extern "C" int Scan(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                    void *extra) {
  int64_t cols = ndims[0] == 0 ? 1 : shapes[0][ndims[0] - 1];
  int64_t rows = ndims[0] == 0 ? 1 : Count(ndims[0] - 1, shapes[0]);
  auto *running = static_cast<double *>(params[2]);
  std::string dtype = dtypes[0];
  if (dtype == "float32") {
    PrefixSums(static_cast<const float *>(params[0]), static_cast<float *>(params[1]), running, rows, cols);
  } else if (dtype == "float64") {
    PrefixSums(static_cast<const double *>(params[0]), static_cast<double *>(params[1]), running, rows, cols);
  } else if (dtype == "int32") {
    PrefixSums(static_cast<const int32_t *>(params[0]), static_cast<int32_t *>(params[1]), running, rows, cols);
  } else if (dtype == "int64") {
    PrefixSums(static_cast<const int64_t *>(params[0]), static_cast<int64_t *>(params[1]), running, rows, cols);
  } else {
    return 2;
  }
  return 0;
}

extern "C" std::vector<std::vector<int64_t>> RowStatsInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  return {{shapes[0][0]}, {shapes[0][0]}};
}

extern "C" int RowStats(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                        void *extra) {
  const float *x = static_cast<const float *>(params[0]);
  float *sums = static_cast<float *>(params[1]);
  float *maxima = static_cast<float *>(params[2]);
  int64_t rows = shapes[0][0], cols = shapes[0][1];
  for (int64_t r = 0; r < rows; r++) {
    float s = 0.0f, m = x[r * cols];
    for (int64_t c = 0; c < cols; c++) {
      s += x[r * cols + c];
      if (x[r * cols + c] > m) m = x[r * cols + c];
    }
    sums[r] = s;
    maxima[r] = m;
  }
  return 0;
}

// InitSpy   records how its host calls Init: out = {number of Init calls so far, input 0's last dim as the
//           latest Init saw it (-1 when unknown)}, int64, shape {2}. A workspace of 4 bytes per element of that
//           dim (4 when it is unknown), so the host has a workspace to keep or renew.
namespace {
int64_t init_calls = 0;
int64_t init_last_dim = 0;
}  // namespace

extern "C" int InitSpyInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  init_calls += 1;
  init_last_dim = shapes[0][ndims[0] - 1];
  extra->SetWorkSpace({init_last_dim > 0 ? static_cast<size_t>(init_last_dim) * 4 : 4});
  return 0;
}

extern "C" std::vector<int64_t> InitSpyInferShape(int *ndims, int64_t **shapes, AotExtra *extra) { return {2}; }

extern "C" int InitSpy(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                       void *extra) {
  auto *out = static_cast<int64_t *>(params[1]);
  out[0] = init_calls;
  out[1] = init_last_dim;
  return 0;
}
