// Test kernels for tests/op/test_bad_input.py: values that must be refused before any allocation or call.
//
//   Echo      out = x (float32); InferShape returns the input shape as it arrives (an overflowed dim shows).
//   Ranked    InferShape returns a shape of int attribute "rank" ones; out[0] = 7.
//   Sized     InferShape returns {int attribute "n"}; Init asks for a workspace of int attribute "ws" bytes;
//             out = 1. Every call of Sized, SizedInit and SizedInferShape is counted (trust_calls()).
//   Rows      reads attribute "rows" as std::vector<std::vector<int64_t>> (int attribute "mode" 0), as
//             std::vector<std::vector<float>> (1) or as a flat std::vector<int64_t> (2), and writes
//             [number of rows, total elements] as int64 (a flat vector counts as one row).
#include <cstdint>
#include <vector>

#include "custom_aot_extra.h"

namespace {
int64_t g_calls = 0;
}  // namespace

extern "C" int64_t trust_calls() { return g_calls; }

extern "C" std::vector<int64_t> EchoInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  return std::vector<int64_t>(shapes[0], shapes[0] + ndims[0]);
}

extern "C" int Echo(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                    void *extra) {
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; ++d) n *= shapes[0][d];
  const float *x = static_cast<const float *>(params[0]);
  float *out = static_cast<float *>(params[1]);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i];
  return 0;
}

extern "C" std::vector<int64_t> RankedInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  return std::vector<int64_t>(static_cast<size_t>(extra->Attr<int64_t>("rank")), 1);
}

extern "C" int Ranked(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                      void *extra) {
  static_cast<float *>(params[1])[0] = 7.0f;
  return 0;
}

extern "C" std::vector<int64_t> SizedInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  ++g_calls;
  return {extra->Attr<int64_t>("n")};
}

extern "C" int SizedInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  ++g_calls;
  extra->SetWorkSpace({static_cast<size_t>(extra->Attr<int64_t>("ws"))});
  return 0;
}

extern "C" int Sized(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                     void *extra) {
  ++g_calls;
  for (int64_t i = 0; i < shapes[1][0]; ++i) static_cast<float *>(params[1])[i] = 1.0f;
  return 0;
}

extern "C" int Rows(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                    void *extra) {
  auto *e = static_cast<AotExtra *>(extra);
  int64_t rows = 0, total = 0;
  const int64_t mode = e->Attr<int64_t>("mode");
  if (mode == 1) {
    for (const auto &row : e->Attr<std::vector<std::vector<float>>>("rows")) ++rows, total += row.size();
  } else if (mode == 0) {
    for (const auto &row : e->Attr<std::vector<std::vector<int64_t>>>("rows")) ++rows, total += row.size();
  } else {
    rows = 1, total = static_cast<int64_t>(e->Attr<std::vector<int64_t>>("rows").size());
  }
  int64_t *out = static_cast<int64_t *>(params[1]);
  out[0] = rows;
  out[1] = total;
  return 0;
}
