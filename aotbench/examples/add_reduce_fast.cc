// Fused Add + ReduceSum: out = (x1 + x2).sum(axis), keep_dim as in add_reduce.cc (same attributes,
// same InferShape), but in ONE pass and with no workspace.
//
// Why it is fast: add_reduce.cc, like numpy's `(x1 + x2).sum(axis)`, writes x1 + x2 to a temporary
// and reads it back: 16 bytes or more per element (numpy also faults in a new temporary per call).
// This kernel reads each input once, in order, and adds in registers: 8 bytes per element plus the
// output, so at 4096x4096 it runs at the memory's streaming-read bandwidth.
//   axis=1 (row sums): 32 independent partial sums per row (a plain loop that g++ turns into 2-4
//     vector registers of adds in flight, AVX-512 or AVX), combined pairwise at the end of the row.
//   axis=0 (column sums): rows are added into the output row four rows per pass, so the output (in
//     L1/L2) is loaded and stored once per four rows, while the inputs stream front to back.
// Every partial sum is written out explicitly (independent accumulators, GCC/clang vector
// extensions), so the compiler never has to reassociate and -ffast-math is NOT needed. Flags: the
// documented command plus `-O3 -march=native`, i.e. flags=["-O3", "-march=native"]; without them
// it is correct, only slower (SSE2, or no vectors at all at the documented -O0).
// Single-threaded, no intrinsics; add_reduce_parallel.cc shares these loops out between all cores.
//
// Error codes (returned by CustomKernel): 1 inputs not two 2-D float32 tensors (or no output),
// 2 axis not 0 or 1, 3 x1 and x2 of different shapes, 4 the output not float32 of the reduced size.
#include <cstring>
#include <vector>

#include "custom_aot_extra.h"

namespace {

constexpr int kLanes = 32;  // partial sums per row: 2 AVX-512, 4 AVX or 8 SSE registers of adds

// out[i] = sum_j a[i, j] + b[i, j]. acc[k] sums the columns j = k (mod kLanes); g++ turns the inner
// k loop into vector adds; each acc[k] is a sum of its own: nothing reassociated (no -ffast-math).
void row_sums(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ out,
              int64_t rows, int64_t cols) {
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

// axis=0 adds whole vectors of columns, with explicit 16-float vectors (GCC/clang vector
// extensions: AVX-512 registers under -march=native where the machine has them, else pairs of AVX
// or four SSE registers): g++'s own vectorisation of a plain row loop measured 2x slower for rows
// of 256-1024 floats. Loads and stores go through memcpy (numpy data is only 4-byte aligned), and a
// vector is never passed or returned by value: no ABI warning when built without -march.
typedef float Vec16 __attribute__((vector_size(16 * sizeof(float))));
constexpr int64_t kVec = 16;
constexpr int64_t kBlockRows = 4;  // rows added per pass over the output (see col_sums)

// sum += a[0..15] + b[0..15]
void add_pair(Vec16 &sum, const float *a, const float *b) {
  Vec16 x, y;
  std::memcpy(&x, a, sizeof x);
  std::memcpy(&y, b, sizeof y);
  sum += x + y;
}

// out[0..15] += sum
void add_to(float *out, const Vec16 &sum) {
  Vec16 o;
  std::memcpy(&o, out, sizeof o);
  o += sum;
  std::memcpy(out, &o, sizeof o);
}

// out[j] = sum_i a[i, j] + b[i, j]. The rows are taken kBlockRows at a time: for every 32 columns,
// the block's 4 rows of both inputs are added in two registers and the sum goes into `out` once.
// The output row is thus loaded and stored once per 4 rows (one row at a time, it went to L2 and
// back once per row at 4096 columns: between two uses of an output line, 32 KiB of input and 16 KiB
// of output filled this machine's 48 KiB L1), while the inputs are still read in order: 8 streams,
// each front to back. A strip of columns down all rows keeps the output in registers but reads the
// inputs out of order: far slower. At 4096x4096 blocks of 4 rows measured 5-20% faster than one row
// per pass (2 or 8 rows: about the same); at 256 columns (output in L1 anyway) up to 15% slower.
void col_sums(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ out,
              int64_t rows, int64_t cols) {
  std::memset(out, 0, cols * sizeof(float));
  int64_t i = 0;
  for (; i + kBlockRows <= rows; i += kBlockRows) {
    const float *a0 = a + i * cols, *b0 = b + i * cols;
    int64_t j = 0;
    for (; j + 2 * kVec <= cols; j += 2 * kVec) {
      Vec16 s0 = {}, s1 = {};
      for (int r = 0; r < kBlockRows; r++) {
        add_pair(s0, a0 + r * cols + j, b0 + r * cols + j);
        add_pair(s1, a0 + r * cols + j + kVec, b0 + r * cols + j + kVec);
      }
      add_to(out + j, s0);
      add_to(out + j + kVec, s1);
    }
    for (; j < cols; j++) {  // the last columns, fewer than 32
      float s = 0.0f;
      for (int r = 0; r < kBlockRows; r++) s += a0[r * cols + j] + b0[r * cols + j];
      out[j] += s;
    }
  }
  for (; i < rows; i++)  // the last rows, fewer than kBlockRows: one at a time
    for (int64_t j = 0; j < cols; j++) out[j] += a[i * cols + j] + b[i * cols + j];
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
  // A rank or axis the kernel refuses gets a shape (read in bounds): the kernel's check reports it.
  if (ndims[0] != 2 || (axis != 0 && axis != 1)) return {1};
  if (keep_dim) return axis == 0 ? std::vector<int64_t>{1, shapes[0][1]}
                                 : std::vector<int64_t>{shapes[0][0], 1};
  return {shapes[0][1 - axis]};
}

extern "C" int CustomKernel(int nparam, void **params, int *ndims, int64_t **shapes,
                            const char **dtypes, void *stream, void *extra_void) {
  if (nparam < 3 || ndims[0] != 2 || ndims[1] != 2) return 1;
  if (std::strcmp(dtypes[0], "float32") != 0 || std::strcmp(dtypes[1], "float32") != 0) return 1;
  if (shapes[1][0] != shapes[0][0] || shapes[1][1] != shapes[0][1]) return 3;
  auto *data = static_cast<AddReduceData *>(static_cast<AotExtra *>(extra_void)->KernelData());
  if (data->axis != 0 && data->axis != 1) return 2;
  const int64_t rows = shapes[0][0], cols = shapes[0][1];
  int64_t out_elements = 1;  // exactly one output value per kept index (out_shape= may differ)
  for (int i = 0; i < ndims[2]; i++) out_elements *= shapes[2][i];
  if (std::strcmp(dtypes[2], "float32") != 0 || out_elements != (data->axis == 0 ? cols : rows))
    return 4;
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
