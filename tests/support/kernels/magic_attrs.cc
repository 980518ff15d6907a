// A %%aot_kernel cell for tests/notebook/test_magic.py: MagicAttrs reads four attributes in F, each with the exact C++ type
// aotbench gives the Python literal (a mistyped read raises AttrError), and writes what it read into its float64
// output (pass --out-shape (9,) --out-dtype np.float64):
//   [axis (int64_t), keep_dim (bool), len(paddings), paddings[0], paddings[1] (std::vector<float>),
//    len(mode), mode[0], mode[last] (std::string), sum of input x (float32, so the input matters)]
#include <cstdint>
#include <string>
#include <vector>

#include "custom_aot_extra.h"

extern "C" int MagicAttrs(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                          void *stream, void *extra_void) {
  auto *extra = static_cast<AotExtra *>(extra_void);
  const float *x = static_cast<const float *>(params[0]);
  double *out = static_cast<double *>(params[1]);
  int64_t n = 1;
  for (int i = 0; i < ndims[0]; i++) n *= shapes[0][i];

  const int64_t axis = extra->Attr<int64_t>("axis");
  const bool keep_dim = extra->Attr<bool>("keep_dim");
  const std::vector<float> paddings = extra->Attr<std::vector<float>>("paddings");
  const std::string mode = extra->Attr<std::string>("mode");
  if (paddings.size() < 2 || mode.empty()) return 3;

  double sum = 0.0;
  for (int64_t i = 0; i < n; i++) sum += x[i];
  out[0] = static_cast<double>(axis);
  out[1] = keep_dim ? 1.0 : 0.0;
  out[2] = static_cast<double>(paddings.size());
  out[3] = paddings[0];
  out[4] = paddings[1];
  out[5] = static_cast<double>(mode.size());
  out[6] = static_cast<double>(static_cast<unsigned char>(mode.front()));
  out[7] = static_cast<double>(static_cast<unsigned char>(mode.back()));
  out[8] = sum;
  return 0;
}
