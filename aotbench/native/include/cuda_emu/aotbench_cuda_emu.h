// aotbench's CUDA emulator: what a .cu source sees when aotbench compiles it with the host C++ compiler instead
// of nvcc (Custom(..., emulate=True), %%aot_kernel gpu --emulate). The build force-includes this header, and the
// source has been translated first (aotbench/build/cuda_emulation.py: `k<<<g, b, s, st>>>(args)` becomes a call of
// aotb_emu::launch, `extern __shared__ T s[];` a pointer to the block's dynamic shared memory), line for line.
//
// Every CUDA thread of a block runs on the CPU; a thread that waits (a barrier, a warp operation) is suspended on
// a fiber of its own and resumed when the block's threads have all arrived (aotbench/native/src/cuda_emu.cc).
// Blocks are spread over the CPU's cores. Static __shared__ variables are thread_local: one copy per core, which
// runs one block at a time. What a GPU has and this emulator does not (tensor cores, inline PTX, textures,
// dynamic parallelism, grid-wide sync, cp.async) is a compile-time error that names the feature.
#pragma once
#define AOTBENCH_CUDA_EMULATOR 1

// Standard headers first: the qualifier macros below must not reach libstdc++'s own attributes.
#include <algorithm>
#include <cassert>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "aotbench_emu/vector_types.h"
#include "aotbench_emu/math_functions.h"

// -- qualifiers ------------------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __grid_constant__
// One copy of each static __shared__ variable per CPU thread, which runs one block at a time. Sanitized builds
// run every block on one CPU thread and keep them plain statics, which AddressSanitizer puts redzones around.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define __shared__ static
#else
#define __shared__ static thread_local
#endif
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __CUDA_RUNTIME_H__ 1
#define CUDART_VERSION 13000


#define AOTB_EMU_API __attribute__((visibility("hidden")))
#define AOTB_EMU_HERE const char *aotb_file = __builtin_FILE(), int aotb_line = __builtin_LINE()

static constexpr int warpSize = 32;

namespace aotb_emu {

// The builtins of a CUDA thread.
struct Builtins {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

// Every CUDA thread runs on a fiber stack in a region of AOTB_EMU_STACK_BYTES aligned to its size; a 128-byte slot
// near the region's top (the fiber's own record) starts with a pointer to the builtins of the thread on it, so `threadIdx` is a few
// instructions and a load, no thread-local. The slot (and the stack below it) sits 64 bytes lower for each
// successive region, modulo 256 ("colouring"): stacks at one offset in many aligned regions would all fall into
// the same cache sets and evict each other at every switch.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(AOTB_EMU_ASAN) || defined(AOTB_EMU_TSAN)
#define AOTB_EMU_STACK_BYTES (2u * 1024u * 1024u)
#else
#define AOTB_EMU_STACK_BYTES (1024u * 1024u)
#endif
#define AOTB_EMU_COLOURS 256u
inline uintptr_t fiber_slot(uintptr_t sp) {
  const uintptr_t region = sp & ~uintptr_t(AOTB_EMU_STACK_BYTES - 1);
  const uintptr_t colour = (region / AOTB_EMU_STACK_BYTES) % AOTB_EMU_COLOURS;
  return region + AOTB_EMU_STACK_BYTES - 128 - 64 * colour;
}
inline const Builtins *here() {
  uintptr_t sp;
#if defined(__x86_64__)
  asm("movq %%rsp, %0" : "=r"(sp));
#elif defined(__aarch64__)
  asm("mov %0, sp" : "=r"(sp));
#else
  sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
#endif
  return *reinterpret_cast<const Builtins *const *>(fiber_slot(sp));
}

// What a thread waits for (the kinds of rendezvous the scheduler resolves).
enum Op : int {
  kBarrier = 1, kBarrierCount, kBarrierAnd, kBarrierOr,  // __syncthreads and its _count/_and/_or
  kSyncWarp, kShfl, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll,  // warp operations
  kMatchAny, kMatchAll, kReduceAdd, kReduceMin, kReduceMax, kReduceAnd, kReduceOr, kReduceXor,
};

AOTB_EMU_API int barrier(int op, int predicate, const char *file, int line);
// A warp operation of this lane: `value` its bits (zero-extended), `param` the lane/delta/lane mask, `width` the
// segment width; `is_signed` for the reductions' comparison. Returns the result's bits.
AOTB_EMU_API uint64_t warp_op(int op, unsigned mask, uint64_t value, int param, int width, int is_signed,
                              const char *file, int line);
AOTB_EMU_API unsigned active_mask();
AOTB_EMU_API unsigned lane_mask(int which);  // 0 lt, 1 le, 2 eq, 3 ge, 4 gt
AOTB_EMU_API void *dynamic_shared_memory();
AOTB_EMU_API void kernel_fault(const char *what, const char *file, int line);  // stops the kernel with an error
AOTB_EMU_API uint64_t clock_ticks();

// One launch: `body(args)` is run by every thread of every block. Returns a cudaError_t value.
AOTB_EMU_API int run_launch(void (*body)(void *), void *args, dim3 grid, dim3 block, size_t shared_bytes,
                            const char *kernel, const char *file, int line);

template <class T>
inline T *dynamic_shared() {
  return static_cast<T *>(dynamic_shared_memory());
}

// `extern __shared__ T s[];` at namespace scope: a name that reads the running block's dynamic shared memory.
template <class T>
struct DynamicShared {
  operator T *() const { return dynamic_shared<T>(); }
  T &operator[](std::ptrdiff_t i) const { return dynamic_shared<T>()[i]; }
  T *operator+(std::ptrdiff_t i) const { return dynamic_shared<T>() + i; }
};

// `kernel<<<grid, block, shared, stream>>>(args...)`, translated to `launch(name, line, body, grid, block,
// shared, stream)(args...)`: the arguments are evaluated once, on the host, and copied into every thread's call,
// as CUDA copies a kernel's parameters.
template <class Body>
struct Launch {
  const char *kernel;
  const char *file;
  int line;
  Body body;
  dim3 grid, block;
  size_t shared_bytes;

  template <class... Args>
  void operator()(Args &&...args) const {
    using Saved = std::tuple<std::decay_t<Args>...>;
    struct Call {
      Body body;
      Saved saved;
      static void run(void *self) {
        auto *call = static_cast<Call *>(self);
        std::apply(call->body, call->saved);
      }
    };
    Call call{body, Saved(std::forward<Args>(args)...)};
    run_launch(&Call::run, &call, grid, block, shared_bytes, kernel, file, line);
  }
};

template <class Body>
inline Launch<Body> launch(const char *kernel, int line, Body body, dim3 grid, dim3 block, size_t shared_bytes = 0,
                           const void *stream = nullptr, const char *file = __builtin_FILE()) {
  (void)stream;  // one in-order queue: every launch runs to the end before the host goes on
  return Launch<Body>{kernel, file, line, body, grid, block, shared_bytes};
}

template <class T>
inline uint64_t bits_of(const T &v) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8,
                "warp shuffles and votes take values of at most 8 bytes (int, float, double, __half2 ...)");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
inline T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}
template <class T>
inline T shuffle(int op, unsigned mask, T var, int param, int width, const char *file, int line) {
  return from_bits<T>(warp_op(op, mask, bits_of(var), param, width, 0, file, line));
}

template <class T>
struct always_false : std::false_type {};

}  // namespace aotb_emu

#define threadIdx (::aotb_emu::here()->thread_idx)
#define blockIdx (::aotb_emu::here()->block_idx)
#define blockDim (::aotb_emu::here()->block_dim)
#define gridDim (::aotb_emu::here()->grid_dim)

// -- barriers and warp operations ------------------------------------------------------------------------------
inline void __syncthreads(AOTB_EMU_HERE) { aotb_emu::barrier(aotb_emu::kBarrier, 1, aotb_file, aotb_line); }
inline int __syncthreads_count(int predicate, AOTB_EMU_HERE) {
  return aotb_emu::barrier(aotb_emu::kBarrierCount, predicate != 0, aotb_file, aotb_line);
}
inline int __syncthreads_and(int predicate, AOTB_EMU_HERE) {
  return aotb_emu::barrier(aotb_emu::kBarrierAnd, predicate != 0, aotb_file, aotb_line);
}
inline int __syncthreads_or(int predicate, AOTB_EMU_HERE) {
  return aotb_emu::barrier(aotb_emu::kBarrierOr, predicate != 0, aotb_file, aotb_line);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, AOTB_EMU_HERE) {
  aotb_emu::warp_op(aotb_emu::kSyncWarp, mask, 0, 0, 32, 0, aotb_file, aotb_line);
}
template <class T>
inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize, AOTB_EMU_HERE) {
  return aotb_emu::shuffle(aotb_emu::kShfl, mask, var, src_lane, width, aotb_file, aotb_line);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize, AOTB_EMU_HERE) {
  return aotb_emu::shuffle(aotb_emu::kShflUp, mask, var, static_cast<int>(delta), width, aotb_file, aotb_line);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize, AOTB_EMU_HERE) {
  return aotb_emu::shuffle(aotb_emu::kShflDown, mask, var, static_cast<int>(delta), width, aotb_file, aotb_line);
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize, AOTB_EMU_HERE) {
  return aotb_emu::shuffle(aotb_emu::kShflXor, mask, var, lane_mask, width, aotb_file, aotb_line);
}
inline unsigned __ballot_sync(unsigned mask, int predicate, AOTB_EMU_HERE) {
  return static_cast<unsigned>(aotb_emu::warp_op(aotb_emu::kBallot, mask, predicate != 0, 0, 32, 0, aotb_file,
                                                 aotb_line));
}
inline int __any_sync(unsigned mask, int predicate, AOTB_EMU_HERE) {
  return static_cast<int>(aotb_emu::warp_op(aotb_emu::kAny, mask, predicate != 0, 0, 32, 0, aotb_file, aotb_line));
}
inline int __all_sync(unsigned mask, int predicate, AOTB_EMU_HERE) {
  return static_cast<int>(aotb_emu::warp_op(aotb_emu::kAll, mask, predicate != 0, 0, 32, 0, aotb_file, aotb_line));
}
inline unsigned __activemask() { return aotb_emu::active_mask(); }
template <class T>
inline unsigned __match_any_sync(unsigned mask, T value, AOTB_EMU_HERE) {
  return static_cast<unsigned>(
      aotb_emu::warp_op(aotb_emu::kMatchAny, mask, aotb_emu::bits_of(value), 0, 32, 0, aotb_file, aotb_line));
}
template <class T>
inline unsigned __match_all_sync(unsigned mask, T value, int *pred, AOTB_EMU_HERE) {
  const unsigned r = static_cast<unsigned>(
      aotb_emu::warp_op(aotb_emu::kMatchAll, mask, aotb_emu::bits_of(value), 0, 32, 0, aotb_file, aotb_line));
  *pred = r != 0;
  return r;
}
#define AOTB_EMU_REDUCE(name, op, T, is_signed)                                                                  \
  inline T name(unsigned mask, T value, AOTB_EMU_HERE) {                                                      \
    return static_cast<T>(aotb_emu::warp_op(op, mask, static_cast<uint32_t>(value), 0, 32, is_signed,         \
                                            aotb_file, aotb_line));                                           \
  }
AOTB_EMU_REDUCE(__reduce_add_sync, aotb_emu::kReduceAdd, unsigned, 0)
AOTB_EMU_REDUCE(__reduce_add_sync, aotb_emu::kReduceAdd, int, 1)
AOTB_EMU_REDUCE(__reduce_min_sync, aotb_emu::kReduceMin, unsigned, 0)
AOTB_EMU_REDUCE(__reduce_min_sync, aotb_emu::kReduceMin, int, 1)
AOTB_EMU_REDUCE(__reduce_max_sync, aotb_emu::kReduceMax, unsigned, 0)
AOTB_EMU_REDUCE(__reduce_max_sync, aotb_emu::kReduceMax, int, 1)
AOTB_EMU_REDUCE(__reduce_and_sync, aotb_emu::kReduceAnd, unsigned, 0)
AOTB_EMU_REDUCE(__reduce_or_sync, aotb_emu::kReduceOr, unsigned, 0)
AOTB_EMU_REDUCE(__reduce_xor_sync, aotb_emu::kReduceXor, unsigned, 0)
#undef AOTB_EMU_REDUCE
inline unsigned __lanemask_lt() { return aotb_emu::lane_mask(0); }
inline unsigned __lanemask_le() { return aotb_emu::lane_mask(1); }
inline unsigned __lanemask_eq() { return aotb_emu::lane_mask(2); }
inline unsigned __lanemask_ge() { return aotb_emu::lane_mask(3); }
inline unsigned __lanemask_gt() { return aotb_emu::lane_mask(4); }

// The pre-CUDA-9 forms without a mask do not compile for any current GPU either.
template <class T, class... R>
T __shfl(T, R...) {
  static_assert(aotb_emu::always_false<T>::value, "__shfl was removed in CUDA 9: use __shfl_sync(mask, ...)");
  return T();
}
template <class T, class... R>
T __shfl_down(T, R...) {
  static_assert(aotb_emu::always_false<T>::value,
                "__shfl_down was removed in CUDA 9: use __shfl_down_sync(mask, ...)");
  return T();
}
template <class T, class... R>
T __shfl_up(T, R...) {
  static_assert(aotb_emu::always_false<T>::value, "__shfl_up was removed in CUDA 9: use __shfl_up_sync(mask, ...)");
  return T();
}
template <class T, class... R>
T __shfl_xor(T, R...) {
  static_assert(aotb_emu::always_false<T>::value,
                "__shfl_xor was removed in CUDA 9: use __shfl_xor_sync(mask, ...)");
  return T();
}

// -- memory order, time ----------------------------------------------------------------------------------------
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline long long clock64() { return static_cast<long long>(aotb_emu::clock_ticks()); }
inline long long __clock64() { return clock64(); }
inline unsigned long long __globaltimer() { return aotb_emu::clock_ticks(); }
inline void __nanosleep(unsigned) {}
inline void __trap(AOTB_EMU_HERE) { aotb_emu::kernel_fault("__trap() was called", aotb_file, aotb_line); }
inline void __brkpt(AOTB_EMU_HERE) { aotb_emu::kernel_fault("__brkpt() was called", aotb_file, aotb_line); }

// -- atomics: relaxed read-modify-writes, as CUDA's (blocks run on several cores at once) -----------------------
namespace aotb_emu {
template <class T, class F>
inline T atomic_update(T *address, F f) {  // a compare-and-swap loop over T's bits (floats, Inc/Dec)
  using Bits = std::conditional_t<sizeof(T) == 8, uint64_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>>;
  static_assert(sizeof(T) == sizeof(Bits), "atomics act on 2-, 4- or 8-byte values");
  Bits *bits = reinterpret_cast<Bits *>(address);
  Bits old = __atomic_load_n(bits, __ATOMIC_RELAXED);
  for (;;) {
    const T value = from_bits<T>(old);
    const T next = f(value);
    Bits next_bits;
    std::memcpy(&next_bits, &next, sizeof(T));
    if (__atomic_compare_exchange_n(bits, &old, next_bits, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return value;
  }
}
template <class T>
using IntegerOnly = std::enable_if_t<std::is_integral<T>::value, T>;
}  // namespace aotb_emu

template <class T>
inline aotb_emu::IntegerOnly<T> atomicAdd(T *a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); }
inline float atomicAdd(float *a, float v) {
  return aotb_emu::atomic_update(a, [v](float x) { return x + v; });
}
inline double atomicAdd(double *a, double v) {
  return aotb_emu::atomic_update(a, [v](double x) { return x + v; });
}
template <class T>
inline aotb_emu::IntegerOnly<T> atomicSub(T *a, T v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); }
template <class T>
inline aotb_emu::IntegerOnly<T> atomicExch(T *a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); }
inline float atomicExch(float *a, float v) {
  return aotb_emu::atomic_update(a, [v](float) { return v; });
}
template <class T>
inline aotb_emu::IntegerOnly<T> atomicMin(T *a, T v) {
  return aotb_emu::atomic_update(a, [v](T x) { return v < x ? v : x; });
}
template <class T>
inline aotb_emu::IntegerOnly<T> atomicMax(T *a, T v) {
  return aotb_emu::atomic_update(a, [v](T x) { return v > x ? v : x; });
}
inline float atomicMin(float *a, float v) {
  return aotb_emu::atomic_update(a, [v](float x) { return fminf(x, v); });
}
inline float atomicMax(float *a, float v) {
  return aotb_emu::atomic_update(a, [v](float x) { return fmaxf(x, v); });
}
inline double atomicMin(double *a, double v) {
  return aotb_emu::atomic_update(a, [v](double x) { return fmin(x, v); });
}
inline double atomicMax(double *a, double v) {
  return aotb_emu::atomic_update(a, [v](double x) { return fmax(x, v); });
}
inline unsigned atomicInc(unsigned *a, unsigned limit) {
  return aotb_emu::atomic_update(a, [limit](unsigned x) { return x >= limit ? 0u : x + 1; });
}
inline unsigned atomicDec(unsigned *a, unsigned limit) {
  return aotb_emu::atomic_update(a, [limit](unsigned x) { return (x == 0 || x > limit) ? limit : x - 1; });
}
template <class T>
inline aotb_emu::IntegerOnly<T> atomicCAS(T *a, T compare, T value) {
  __atomic_compare_exchange_n(a, &compare, value, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;  // the old value, whether or not it was replaced
}
template <class T>
inline aotb_emu::IntegerOnly<T> atomicAnd(T *a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_RELAXED); }
template <class T>
inline aotb_emu::IntegerOnly<T> atomicOr(T *a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_RELAXED); }
template <class T>
inline aotb_emu::IntegerOnly<T> atomicXor(T *a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_RELAXED); }
// Mixed argument types (atomicAdd(int64_t*, int) and the like) take the pointer's type, as CUDA's overloads would.
template <class T, class V, class = std::enable_if_t<!std::is_same<T, V>::value && std::is_arithmetic<V>::value>>
inline auto atomicAdd(T *a, V v) -> decltype(atomicAdd(a, static_cast<T>(v))) { return atomicAdd(a, static_cast<T>(v)); }
template <class T, class V, class = std::enable_if_t<!std::is_same<T, V>::value && std::is_arithmetic<V>::value>>
inline auto atomicSub(T *a, V v) -> decltype(atomicSub(a, static_cast<T>(v))) { return atomicSub(a, static_cast<T>(v)); }
template <class T, class V, class = std::enable_if_t<!std::is_same<T, V>::value && std::is_arithmetic<V>::value>>
inline auto atomicMax(T *a, V v) -> decltype(atomicMax(a, static_cast<T>(v))) { return atomicMax(a, static_cast<T>(v)); }
template <class T, class V, class = std::enable_if_t<!std::is_same<T, V>::value && std::is_arithmetic<V>::value>>
inline auto atomicMin(T *a, V v) -> decltype(atomicMin(a, static_cast<T>(v))) { return atomicMin(a, static_cast<T>(v)); }
#define AOTB_EMU_SCOPED(name)                                                   \
  template <class T, class... V>                                               \
  inline auto name##_block(T *a, V... v) -> decltype(name(a, v...)) { return name(a, v...); } \
  template <class T, class... V>                                               \
  inline auto name##_system(T *a, V... v) -> decltype(name(a, v...)) { return name(a, v...); }
AOTB_EMU_SCOPED(atomicAdd)
AOTB_EMU_SCOPED(atomicSub)
AOTB_EMU_SCOPED(atomicExch)
AOTB_EMU_SCOPED(atomicMin)
AOTB_EMU_SCOPED(atomicMax)
AOTB_EMU_SCOPED(atomicInc)
AOTB_EMU_SCOPED(atomicDec)
AOTB_EMU_SCOPED(atomicCAS)
AOTB_EMU_SCOPED(atomicAnd)
AOTB_EMU_SCOPED(atomicOr)
AOTB_EMU_SCOPED(atomicXor)
#undef AOTB_EMU_SCOPED

// -- device printf: each block's output kept in order and written when the launch ends --------------------------
extern "C" AOTB_EMU_API int aotb_emu_printf(const char *format, ...) __attribute__((format(printf, 1, 2)));
namespace std {
using ::aotb_emu_printf;
}
#define printf aotb_emu_printf

#include "aotbench_emu/runtime_api.h"
#include "aotbench_emu/unsupported.h"
