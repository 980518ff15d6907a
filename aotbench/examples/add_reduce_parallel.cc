// Fused Add + ReduceSum on every core: out = (x1 + x2).sum(axis), with the attributes (axis, keep_dim),
// InferShape and error codes of add_reduce_fast.cc and its one-pass, no-workspace loops, shared out between
// threads with OpenMP.
//
// Build with -fopenmp: aotbench.Custom(..., flags=["-O3", "-march=native", "-fopenmp"]), or
// `%%aot_kernel --flags "-O3 -march=native -fopenmp"`. The threads are GNU OpenMP's: by default one per CPU the
// process may run on (its affinity mask); OMP_NUM_THREADS=n, set in the environment before the process loads its
// first OpenMP kernel, asks for n. Without -fopenmp the pragmas are ignored, _OPENMP is undefined and the
// stand-ins below report one thread, so the same file builds into a correct one-core kernel: the plain build that
// compare_flags can show beside the -fopenmp one.
//
// How the work is shared, so that every thread streams its own part of the inputs front to back:
//   axis=1 (row sums): one contiguous band of rows per thread (schedule(static)); each row is summed exactly as
//     add_reduce_fast.cc sums it.
//   axis=0 (column sums): the COLUMNS are split, one strip per thread, in whole 64-byte cache lines of the
//     output, so no two threads write the same line of `out` (no false sharing) and there are no per-thread
//     partial sums to combine. Each thread runs add_reduce_fast.cc's loop (four rows per pass) over its strip: at
//     4096x4096 on 2 threads, 8 KiB of every row, long enough for the hardware prefetchers to stream. Splitting
//     the rows instead would need a partial output per thread, one more pass to add them, and would make the
//     result depend on the number of threads.
// Either way every output value is summed by one thread in one fixed order, the order of add_reduce_fast.cc:
// the result is the same, bit for bit, for any number of threads, for the plain build, and for
// add_reduce_fast.cc built with the same flags.
//
// Small inputs run on fewer threads (one per kMinElementsPerThread elements at most): starting and joining a
// parallel region costs microseconds, more than summing a few thousand floats. A matrix narrower than two strips
// of kMinColumnsPerThread columns is summed over axis=0 by one thread, since only its columns are shared out.
//
// Error codes (returned by CustomKernel): 1 inputs not two 2-D float32 tensors (or no output), 2 axis not 0 or
// 1, 3 x1 and x2 of different shapes, 4 the output is not float32 with the reduced number of elements.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "custom_aot_extra.h"

#ifdef _OPENMP
#include <omp.h>
#else
// Built without -fopenmp: one thread, and the `#pragma omp` lines are ignored.
static int omp_get_max_threads() { return 1; }
static int omp_get_thread_num() { return 0; }
static int omp_get_num_threads() { return 1; }
#endif

namespace {

constexpr int64_t kMinElementsPerThread = 1 << 16;  // 256 KiB of each input: tens of us of streaming
constexpr int64_t kLineBytes = 64;                  // a cache line: the unit of a column strip
constexpr int64_t kLineFloats = kLineBytes / sizeof(float);
constexpr int64_t kMinColumnsPerThread = 64;        // axis=0: a thread's strip is at least 4 cache lines wide

// How many threads to use for `elements` of work that can be split into `units` parts (rows, or strips of
// kMinColumnsPerThread columns): all of OpenMP's, but no more than there are parts, nor more than the input is
// large enough for.
[[maybe_unused]] int threads_for(int64_t elements, int64_t units) {  // unused without -fopenmp
  int64_t threads = std::min<int64_t>(omp_get_max_threads(), elements / kMinElementsPerThread);
  return static_cast<int>(std::max<int64_t>(1, std::min(threads, units)));
}

constexpr int kLanes = 32;  // partial sums per row: 2 AVX-512, 4 AVX or 8 SSE registers of independent adds

// sum_j a[j] + b[j] over one row, with kLanes independent partial sums (the loop g++ vectorises without
// -ffast-math, as in add_reduce_fast.cc), combined pairwise at the end.
float row_sum(const float *__restrict__ a, const float *__restrict__ b, int64_t cols) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= cols; j += kLanes)
    for (int k = 0; k < kLanes; k++) acc[k] += a[j + k] + b[j + k];
  float tail = 0.0f;
  for (; j < cols; j++) tail += a[j] + b[j];
  for (int half = kLanes / 2; half > 0; half /= 2)
    for (int k = 0; k < half; k++) acc[k] += acc[k + half];
  return acc[0] + tail;
}

// axis=0 adds whole vectors of columns, with explicit 16-float vectors (GCC/clang vector extensions: AVX-512
// registers under -march=native on a machine that has them, pairs of AVX or four SSE registers otherwise). Loads
// and stores go through memcpy because numpy's data is only 4-byte aligned.
typedef float Vec16 __attribute__((vector_size(16 * sizeof(float))));
constexpr int64_t kVec = 16;
constexpr int64_t kBlockRows = 4;  // rows added per pass over a strip (see col_sums)

// sum += a[0..15] + b[0..15]. The vector is passed by reference, never by value: that would change the ABI
// between builds with and without AVX-512, and g++ warns about it.
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

// out[j] = sum_i a[i, j] + b[i, j] for the columns first <= j < last only (the rows are `cols` apart).
// kBlockRows rows at a time: for every 32 columns of the strip, the block's 4 rows of both inputs are added in
// two registers and the sum is added to `out` once, so the output strip (in L1 or L2) is loaded and stored once
// per 4 rows instead of once per row, while the 8 input streams are each read front to back.
void col_sums(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ out, int64_t rows,
              int64_t cols, int64_t first, int64_t last) {
  std::fill(out + first, out + last, 0.0f);
  int64_t i = 0;
  for (; i + kBlockRows <= rows; i += kBlockRows) {
    const float *a0 = a + i * cols, *b0 = b + i * cols;
    int64_t j = first;
    for (; j + 2 * kVec <= last; j += 2 * kVec) {
      Vec16 s0 = {}, s1 = {};
      for (int r = 0; r < kBlockRows; r++) {
        add_pair(s0, a0 + r * cols + j, b0 + r * cols + j);
        add_pair(s1, a0 + r * cols + j + kVec, b0 + r * cols + j + kVec);
      }
      add_to(out + j, s0);
      add_to(out + j + kVec, s1);
    }
    for (; j < last; j++) {  // the strip's last columns, fewer than 32
      float s = 0.0f;
      for (int r = 0; r < kBlockRows; r++) s += a0[r * cols + j] + b0[r * cols + j];
      out[j] += s;
    }
  }
  for (; i < rows; i++)  // the last rows, fewer than kBlockRows: one at a time
    for (int64_t j = first; j < last; j++) out[j] += a[i * cols + j] + b[i * cols + j];
}

void row_sums_parallel(const float *a, const float *b, float *out, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) num_threads(threads_for(rows * cols, rows))
  for (int64_t i = 0; i < rows; i++) out[i] = row_sum(a + i * cols, b + i * cols, cols);
}

// Where strip t of n begins: a column whose output element starts a cache line in memory (the output need not be
// 64-byte aligned, so that is not always a multiple of 16), the lines dealt out as evenly as they can be.
int64_t strip_start(const float *out, int64_t cols, int64_t t, int64_t n) {
  if (t == 0) return 0;
  if (t == n) return cols;
  // columns [0, head) share the line that out[0] is in; from `head` on, every kLineFloats columns start a line
  const int64_t head = std::min<int64_t>(
      cols, (kLineBytes - reinterpret_cast<uintptr_t>(out) % kLineBytes) % kLineBytes / sizeof(float));
  const int64_t lines = (cols - head + kLineFloats - 1) / kLineFloats;
  return std::min(cols, head + lines * t / n * kLineFloats);
}

void col_sums_parallel(const float *a, const float *b, float *out, int64_t rows, int64_t cols) {
#pragma omp parallel num_threads(threads_for(rows * cols, cols / kMinColumnsPerThread))
  {
    const int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
    col_sums(a, b, out, rows, cols, strip_start(out, cols, t, n), strip_start(out, cols, t + 1, n));
  }
}

}  // namespace

class AddReduceData : public AotKernelData {
 public:
  int64_t axis = 0;
  bool keep_dim = false;
};

extern "C" int CustomKernelInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  auto *data = new AddReduceData;  // no workspace: nothing is materialised, not even per thread
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
  // Every check comes before the parallel region: an error code is returned by this thread alone.
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
    row_sums_parallel(x1, x2, out, rows, cols);
  } else {
    col_sums_parallel(x1, x2, out, rows, cols);
  }
  return 0;
}
