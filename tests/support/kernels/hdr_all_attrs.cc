// Reads every one of the eight attribute types, keeps them in kernel data, uses two workspaces, and writes
// results from which tests/native/test_header.py recomputes every attribute value in Python.
//
// Attributes: flag (bool), k (int), alpha (float), tag (str), ivec (list of int, non-empty),
// fvec (list of float, non-empty), imat (list of lists of int), fmat (list of lists of float).
// Input:  x float32 (n,).
// Outputs: y      float64 (n,): (flag ? 1 : -1) * x[i] * alpha + fvec[i % |fvec|] + ivec[i % |ivec|]
//          ints   int64 (8,):  see HdrAllAttrs below
//          floats float64 (4,): see HdrAllAttrs below
// Workspaces: n doubles (the y terms) and 3 int64 accumulators, both sized in bytes.
//
// ints[0] says which custom_aot_extra.h was compiled in: 1 when the header beside this file defines
// HDR_INDEPENDENT_HEADER (the test's independent copy), 0 for aotbench's own.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "custom_aot_extra.h"

#ifdef HDR_INDEPENDENT_HEADER
constexpr int64_t kIndependentHeader = 1;
#else
constexpr int64_t kIndependentHeader = 0;
#endif

class HdrAllAttrsData : public AotKernelData {
 public:
  bool flag = false;
  int64_t k = 0;
  float alpha = 0.0f;
  std::string tag;
  std::vector<int64_t> ivec;
  std::vector<float> fvec;
  std::vector<std::vector<int64_t>> imat;
  std::vector<std::vector<float>> fmat;
};

extern "C" int HdrAllAttrsInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  if (ndims[0] != 1 || std::strcmp(dtypes[0], "float32") != 0) return 10;
  auto *d = new HdrAllAttrsData;
  d->flag = extra->Attr<bool>("flag");
  d->k = extra->Attr<int64_t>("k");
  d->alpha = extra->Attr<float>("alpha");
  d->tag = extra->Attr<std::string>("tag");
  d->ivec = extra->Attr<std::vector<int64_t>>("ivec");
  d->fvec = extra->Attr<std::vector<float>>("fvec");
  d->imat = extra->Attr<std::vector<std::vector<int64_t>>>("imat");
  d->fmat = extra->Attr<std::vector<std::vector<float>>>("fmat");
  extra->SetKernelData(d);
  extra->SetWorkSpace({static_cast<size_t>(shapes[0][0]) * sizeof(double), 3 * sizeof(int64_t)});
  return 0;
}

extern "C" int HdrAllAttrs(int nparam, void **params, int * /*ndims*/, int64_t **shapes, const char ** /*dtypes*/,
                           void * /*stream*/, void *extra_void) {
  auto *extra = static_cast<AotExtra *>(extra_void);
  auto *d = static_cast<HdrAllAttrsData *>(extra->KernelData());
  if (nparam != 6 || d == nullptr) return 11;  // x, y, ints, floats, two workspaces
  const int64_t n = shapes[0][0];
  const std::vector<size_t> &ws = extra->WorkSpace();
  if (ws.size() != 2 || ws[0] != static_cast<size_t>(n) * sizeof(double) || ws[1] != 3 * sizeof(int64_t)) return 12;
  if (d->ivec.empty() || d->fvec.empty()) return 13;
  if (extra->Attr<std::string>("tag") != d->tag) return 14;  // a read in F agrees with the one in Init

  const float *x = static_cast<const float *>(params[0]);
  double *y = static_cast<double *>(params[1]);
  int64_t *ints = static_cast<int64_t *>(params[2]);
  double *floats = static_cast<double *>(params[3]);
  double *terms = static_cast<double *>(params[4]);
  int64_t *acc = static_cast<int64_t *>(params[5]);

  const double sign = d->flag ? 1.0 : -1.0;
  for (int64_t i = 0; i < n; i++) terms[i] = sign * static_cast<double>(x[i]) * static_cast<double>(d->alpha);
  const int64_t nf = static_cast<int64_t>(d->fvec.size()), ni = static_cast<int64_t>(d->ivec.size());
  for (int64_t i = 0; i < n; i++) {
    y[i] = terms[i] + static_cast<double>(d->fvec[i % nf]) + static_cast<double>(d->ivec[i % ni]);
  }

  acc[0] = 0;  // sum of ivec
  for (int64_t v : d->ivec) acc[0] += v;
  acc[1] = 0;  // sum over imat of (row + 1) * (col + 1) * value
  for (size_t r = 0; r < d->imat.size(); r++) {
    for (size_t c = 0; c < d->imat[r].size(); c++) acc[1] += static_cast<int64_t>((r + 1) * (c + 1)) * d->imat[r][c];
  }
  acc[2] = 0;  // sum over the tag's bytes of (position + 1) * byte
  for (size_t i = 0; i < d->tag.size(); i++) {
    acc[2] += static_cast<int64_t>(i + 1) * static_cast<unsigned char>(d->tag[i]);
  }

  ints[0] = kIndependentHeader;
  ints[1] = d->k;
  ints[2] = acc[0];
  ints[3] = acc[1];
  ints[4] = static_cast<int64_t>(d->tag.size());
  ints[5] = acc[2];
  ints[6] = (extra->HasAttr("tag") ? 10 : 0) + (extra->HasAttr("no_such_attribute") ? 1 : 0);
  ints[7] = static_cast<int64_t>(d->imat.size()) * 100 + static_cast<int64_t>(d->fmat.size());

  double fsum = 0.0, fweighted = 0.0;
  for (float v : d->fvec) fsum += static_cast<double>(v);
  for (size_t r = 0; r < d->fmat.size(); r++) {
    for (size_t c = 0; c < d->fmat[r].size(); c++) {
      fweighted += static_cast<double>((r + 1) * (c + 1)) * static_cast<double>(d->fmat[r][c]);
    }
  }
  floats[0] = static_cast<double>(d->alpha);
  floats[1] = fsum;
  floats[2] = fweighted;
  floats[3] = d->flag ? 1.0 : 0.0;
  return 0;
}
