// Add + ReduceSum, the example of the aot tutorial, with its two bugs fixed:
//   1. the Add loop counts the elements of the INPUT (the tutorial used the output's shape, so most of the
//      workspace was never written);
//   2. the reduction writes as many values as the OUTPUT has (the tutorial used input 2's shape, so with
//      keep_dim=True it wrote 20 floats into a 5-float output).
// Attributes: axis (int, 0 or 1) and keep_dim (bool). Workspace: one float per input element, in bytes.
#include <cstring>
#include <vector>

#include "custom_aot_extra.h"

class AddReduceData : public AotKernelData {
 public:
  int64_t axis = 0;
  bool keep_dim = false;
};

extern "C" int CustomKernelInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  size_t elements = 1;
  for (int i = 0; i < ndims[0]; i++) elements *= shapes[0][i];
  extra->SetWorkSpace({elements * sizeof(float)});  // workspace sizes are in BYTES

  auto *data = new AddReduceData;
  data->axis = extra->Attr<int64_t>("axis");
  data->keep_dim = extra->Attr<bool>("keep_dim");
  extra->SetKernelData(data);
  return 0;
}

extern "C" std::vector<int64_t> CustomKernelInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  if (ndims[0] >= 1 && shapes[0][0] == -2) return {-2};  // unknown rank in, unknown rank out
  int64_t axis = extra->Attr<int64_t>("axis");
  bool keep_dim = extra->Attr<bool>("keep_dim");
  // A rank or axis the kernel refuses still gets a shape (read within bounds: shapes[0][1 - axis] would read
  // past the shape for axis -1, -2 or 2), so that the kernel's own check reports it with its error code.
  if (ndims[0] != 2 || (axis != 0 && axis != 1)) return {1};
  if (keep_dim) return axis == 0 ? std::vector<int64_t>{1, shapes[0][1]} : std::vector<int64_t>{shapes[0][0], 1};
  return {shapes[0][1 - axis]};
}

extern "C" int CustomKernel(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                            void *stream, void *extra_void) {
  // Validate what the kernel relies on: two 2-D float32 inputs of the same shape (a kernel that trusts its
  // inputs reads past a smaller second input). A non-zero return is reported as this kernel's error code.
  if (nparam < 4 || ndims[0] != 2 || ndims[1] != 2) return 1;
  if (std::strcmp(dtypes[0], "float32") != 0 || std::strcmp(dtypes[1], "float32") != 0) return 1;
  if (shapes[1][0] != shapes[0][0] || shapes[1][1] != shapes[0][1]) return 3;
  const float *x1 = static_cast<const float *>(params[0]);
  const float *x2 = static_cast<const float *>(params[1]);
  float *out = static_cast<float *>(params[2]);
  float *tmp = static_cast<float *>(params[3]);
  const int64_t rows = shapes[0][0], cols = shapes[0][1];

  for (int64_t i = 0; i < rows * cols; i++) tmp[i] = x1[i] + x2[i];

  auto *data = static_cast<AddReduceData *>(static_cast<AotExtra *>(extra_void)->KernelData());
  if (data->axis != 0 && data->axis != 1) return 2;  // unsupported axis: a user error code
  const int64_t kept = data->axis == 0 ? cols : rows;     // number of output values
  const int64_t reduced = data->axis == 0 ? rows : cols;  // values summed into each
  for (int64_t i = 0; i < kept; i++) {
    float sum = 0.0f;
    for (int64_t j = 0; j < reduced; j++) sum += data->axis == 0 ? tmp[j * cols + i] : tmp[i * cols + j];
    out[i] = sum;
  }
  return 0;
}
