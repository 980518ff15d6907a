// Fused Add + ReduceSum: out = (x1 + x2).sum(axis), keep_dim as in add_reduce.cc (same attributes, same
// InferShape), but in ONE pass and with no workspace.
//
// Why it is fast: add_reduce.cc, like numpy's `(x1 + x2).sum(axis)`, writes x1 + x2 to a temporary and reads
// it back: 16 bytes or more per element (read x1 and x2, write the temporary, read it again; numpy also faults
// in a fresh temporary on every call). This kernel reads each input once, sequentially, and adds in registers:
// 8 bytes per element plus the output, so at 4096x4096 it runs at the memory's streaming-read bandwidth.
//   axis=1 (row sums): 32 independent partial sums per row (a plain loop that g++ turns into 2-4 vector
//     registers of adds in flight, AVX-512 or AVX), combined pairwise at the end of the row.
//   axis=0 (column sums): rows are added into the output row (one row per pass, two for rows wider than 4096);
//     the output stays in L1/L2 while the inputs stream through once, front to back.
// Every partial sum is written out explicitly (plain loops with independent accumulators, GCC/clang vector
// extensions), so the compiler never has to reassociate and -ffast-math is NOT needed. Flags: the documented
// command plus `-O3 -march=native`, i.e. aotbench.Custom(..., flags=["-O3", "-march=native"]); without them it
// is correct, only slower (SSE2, or no vectors at all at the documented -O0). Single-threaded, no intrinsics.
//
// Error codes (returned by CustomKernel): 1 inputs not two 2-D float32 tensors (or no output), 2 axis not 0 or
// 1, 3 x1 and x2 of different shapes, 4 the output is not float32 with the reduced number of elements.
#include <cstring>
#include <vector>

#include "custom_aot_extra.h"

namespace {

constexpr int kLanes = 32;  // partial sums per row: 2 AVX-512, 4 AVX or 8 SSE registers of independent adds

// out[i] = sum_j a[i, j] + b[i, j]. acc[k] sums the columns j = k (mod kLanes); the inner k loop is what g++
// turns into vector adds, and since every acc[k] is its own sum that needs no reassociation (no -ffast-math).
void row_sums(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ out, int64_t rows,
              int64_t cols) {
  for (int64_t i = 0; i < rows; i++, a += cols, b += cols) {
    float acc[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= cols; j += kLanes)
      for (int k = 0; k < kLanes; k++) acc[k] += a[j + k] + b[j + k];
    float tail = 0.0f;
    for (; j < cols; j++) tail += a[j] + b[j];
    for (int half = kLanes / 2; half > 0; half /= 2)  // combine the partial sums pairwise
      for (int k = 0; k < half; k++) acc[k] += acc[k + half];
    out[i] = acc[0] + tail;
  }
}

// axis=0 uses explicit 8-float vectors: g++'s own vectorisation of the plain row loop (which it also
// unrolls-and-jams across rows) measured 2x slower for rows of 256-1024 floats. Loads and stores go through
// memcpy (numpy data is only 4-byte aligned) and no function takes a vector, so there is no ABI warning when
// the file is built without -march.
typedef float Vec8 __attribute__((vector_size(8 * sizeof(float))));
constexpr int64_t kVec = 8;

// out[j] += (a0[j] + b0[j]) (+ (a1[j] + b1[j]) when TwoRows)
template <bool TwoRows>
void add_rows(float *__restrict__ out, const float *__restrict__ a0, const float *__restrict__ b0,
              const float *__restrict__ a1, const float *__restrict__ b1, int64_t cols) {
  int64_t j = 0;
  for (; j + kVec <= cols; j += kVec) {
    Vec8 o, x, y;
    std::memcpy(&o, out + j, sizeof o);
    std::memcpy(&x, a0 + j, sizeof x);
    std::memcpy(&y, b0 + j, sizeof y);
    Vec8 row = x + y;
    if (TwoRows) {
      std::memcpy(&x, a1 + j, sizeof x);
      std::memcpy(&y, b1 + j, sizeof y);
      row += x + y;
    }
    o += row;
    std::memcpy(out + j, &o, sizeof o);
  }
  for (; j < cols; j++) out[j] += TwoRows ? (a0[j] + b0[j]) + (a1[j] + b1[j]) : a0[j] + b0[j];
}

// Above this many columns the output row (16 KiB) no longer stays in L1 beside the input streams, and adding
// two rows per pass, which halves the output's loads and stores, measured faster (10-20% at 32768 columns);
// below it one row per pass is (up to 2x at 256-1024 columns).
constexpr int64_t kTwoRowCols = 4096;

// out[j] = sum_i a[i, j] + b[i, j]: rows are accumulated into the output, so the inputs are read in order.
// At 4096 columns this is 15-25% slower than row_sums: between two uses of an output line, 32 KiB of input and
// 16 KiB of output pass through a 32 KiB L1, so the output row goes to L2 and back once per pass. Blocking the
// columns would keep it in L1 but reads the inputs out of order, which measured far slower (DRAM pages).
void col_sums(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ out, int64_t rows,
              int64_t cols) {
  std::memset(out, 0, cols * sizeof(float));
  int64_t i = 0;
  if (cols > kTwoRowCols)
    for (; i + 2 <= rows; i += 2)
      add_rows<true>(out, a + i * cols, b + i * cols, a + (i + 1) * cols, b + (i + 1) * cols, cols);
  for (; i < rows; i++) add_rows<false>(out, a + i * cols, b + i * cols, nullptr, nullptr, cols);
}

}  // namespace

class AddReduceData : public AotKernelData {
 public:
  int64_t axis = 0;
  bool keep_dim = false;
};

extern "C" int CustomKernelInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  auto *data = new AddReduceData;  // no workspace: nothing is materialised
  data->axis = extra->Attr<int64_t>("axis");
  data->keep_dim = extra->Attr<bool>("keep_dim");
  extra->SetKernelData(data);
  return 0;
}

extern "C" std::vector<int64_t> CustomKernelInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  if (ndims[0] >= 1 && shapes[0][0] == -2) return {-2};  // unknown rank in, unknown rank out
  int64_t axis = extra->Attr<int64_t>("axis");
  bool keep_dim = extra->Attr<bool>("keep_dim");
  // A rank or axis the kernel refuses still gets a shape (read within bounds), so that the kernel's own check
  // reports it with its error code.
  if (ndims[0] != 2 || (axis != 0 && axis != 1)) return {1};
  if (keep_dim) return axis == 0 ? std::vector<int64_t>{1, shapes[0][1]} : std::vector<int64_t>{shapes[0][0], 1};
  return {shapes[0][1 - axis]};
}

extern "C" int CustomKernel(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                            void *stream, void *extra_void) {
  if (nparam < 3 || ndims[0] != 2 || ndims[1] != 2) return 1;
  if (std::strcmp(dtypes[0], "float32") != 0 || std::strcmp(dtypes[1], "float32") != 0) return 1;
  if (shapes[1][0] != shapes[0][0] || shapes[1][1] != shapes[0][1]) return 3;
  auto *data = static_cast<AddReduceData *>(static_cast<AotExtra *>(extra_void)->KernelData());
  if (data->axis != 0 && data->axis != 1) return 2;
  const int64_t rows = shapes[0][0], cols = shapes[0][1];
  int64_t out_elements = 1;  // the output must hold exactly one value per kept index (out_shape= can differ)
  for (int i = 0; i < ndims[2]; i++) out_elements *= shapes[2][i];
  if (std::strcmp(dtypes[2], "float32") != 0 || out_elements != (data->axis == 0 ? cols : rows)) return 4;

  const float *x1 = static_cast<const float *>(params[0]);
  const float *x2 = static_cast<const float *>(params[1]);
  float *out = static_cast<float *>(params[2]);
  if (data->axis == 1) {
    row_sums(x1, x2, out, rows, cols);
  } else {
    col_sums(x1, x2, out, rows, cols);
  }
  return 0;
}
