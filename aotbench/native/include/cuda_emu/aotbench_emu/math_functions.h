// aotbench CUDA emulator: CUDA's device math functions and integer intrinsics that a host C++ compiler lacks,
// as plain inline functions at global scope (plus <cmath>/<math.h>, which give sqrtf, expf, fmaf, fminf, ...).
// Differences from CUDA: the fast intrinsics (__expf, __sinf, __fdividef, __powf, ...) are the precise host
// functions here, not approximations; rsqrtf and __frsqrt_rn are correctly rounded; the __ld*/__st* cache hints
// are plain loads and stores; float-to-integer conversions saturate and map NaN to 0 (the 32-bit cvt's rule).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <math.h>

namespace aotbench_emu_math {
template <typename To, typename From>
inline To bits_as(From v) {
  static_assert(sizeof(To) == sizeof(From), "same size");
  To r;
  std::memcpy(&r, &v, sizeof r);
  return r;
}
template <typename T> struct same { using type = T; };

// x rounded to an integer, halfway cases to even, whatever the current rounding mode.
template <typename F>
inline F round_half_even(F x) {
  F r = std::floor(x);
  F d = x - r;  // exact
  if (d > F(0.5) || (d == F(0.5) && std::fmod(r, F(2)) != F(0))) r += F(1);
  return r;
}
// An integer-valued (or NaN) floating-point value converted to I, saturated to I's range, NaN to 0.
template <typename I, typename F>
inline I saturate_to(F r) {
  if (r != r) return I(0);
  const F lo = I(0) < I(-1) ? F(0) : -std::ldexp(F(1), int(sizeof(I) * 8 - 1));
  const F hi = std::ldexp(F(1), int(sizeof(I) * 8) - (I(0) < I(-1) ? 0 : 1));  // first value above the range
  if (r < lo) return I(0) < I(-1) ? I(0) : I(I(1) << (sizeof(I) * 8 - 1));
  if (r >= hi) return I(~I(0) ^ (I(0) < I(-1) ? I(0) : I(I(1) << (sizeof(I) * 8 - 1))));
  return I(r);
}
// sin(pi x) and cos(pi x) for |reduced x| <= 1/2, exact at the integers and half-integers.
template <typename F, typename W>
inline F sinpi_of(F x) {
  if (!std::isfinite(x)) return x - x;  // NaN
  F r = std::fmod(x, F(2));             // exact, in (-2, 2), sign of x
  if (r > F(1)) r -= F(2);
  if (r < F(-1)) r += F(2);
  if (r > F(0.5)) r = F(1) - r;
  if (r < F(-0.5)) r = F(-1) - r;
  F s = F(std::sin(W(3.14159265358979323846264338327950288L) * W(r)));
  return s == F(0) ? std::copysign(F(0), x) : s;
}
template <typename F, typename W>
inline F cospi_of(F x) {
  if (!std::isfinite(x)) return x - x;
  F r = std::fmod(std::fabs(x), F(2));  // [0, 2)
  if (r > F(1)) r = F(2) - r;           // [0, 1]
  F s = F(std::sin(W(3.14159265358979323846264338327950288L) * W(F(0.5) - r)));
  return s == F(0) ? F(0) : s;
}
}  // namespace aotbench_emu_math

// ---- reinterpretation -----------------------------------------------------------------------------------------
inline int __float_as_int(float x) { return aotbench_emu_math::bits_as<int>(x); }
inline float __int_as_float(int x) { return aotbench_emu_math::bits_as<float>(x); }
inline unsigned int __float_as_uint(float x) { return aotbench_emu_math::bits_as<unsigned int>(x); }
inline float __uint_as_float(unsigned int x) { return aotbench_emu_math::bits_as<float>(x); }
inline long long __double_as_longlong(double x) { return aotbench_emu_math::bits_as<long long>(x); }
inline double __longlong_as_double(long long x) { return aotbench_emu_math::bits_as<double>(x); }
inline int __double2hiint(double x) { return int(__double_as_longlong(x) >> 32); }
inline int __double2loint(double x) { return int(static_cast<unsigned int>(__double_as_longlong(x))); }
inline double __hiloint2double(int hi, int lo) {
  return __longlong_as_double(
      static_cast<long long>((static_cast<unsigned long long>(static_cast<unsigned int>(hi)) << 32) |
                             static_cast<unsigned int>(lo)));
}

// ---- fast-math intrinsics: exact here -------------------------------------------------------------------------
#if !(defined(__GLIBC__) && defined(__USE_GNU))
inline float exp10f(float x) { return float(std::pow(10.0, double(x))); }
inline double exp10(double x) { return std::pow(10.0, x); }
#endif
inline float __expf(float x) { return std::exp(x); }
inline float __exp10f(float x) { return ::exp10f(x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __log10f(float x) { return std::log10(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline void __sincosf(float x, float *s, float *c) { *s = std::sin(x); *c = std::cos(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float fdividef(float x, float y) { return x / y; }

// ---- IEEE round-to-nearest operations (never contracted into an fma by this header) -----------------------------
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fsub_rn(float x, float y) { return x - y; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __fdiv_rn(float x, float y) { return x / y; }
inline float __fmaf_rn(float x, float y, float z) { return std::fma(x, y, z); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline double __dadd_rn(double x, double y) { return x + y; }
inline double __dsub_rn(double x, double y) { return x - y; }
inline double __dmul_rn(double x, double y) { return x * y; }
inline double __ddiv_rn(double x, double y) { return x / y; }
inline double __fma_rn(double x, double y, double z) { return std::fma(x, y, z); }
inline double __drcp_rn(double x) { return 1.0 / x; }
inline double __dsqrt_rn(double x) { return std::sqrt(x); }

// 1/sqrt(x) correctly rounded: a candidate from double precision, then the midpoint towards the exact value
// decides, computed exactly (M*M is exact in a double; x*M*M exactly as p + e with an fma).
inline float __frsqrt_rn(float x) {
  if (!(x > 0.0f) || std::isinf(x)) return x == 0.0f ? std::copysign(INFINITY, x) : (x > 0.0f ? 0.0f : NAN);
  const double xd = x;
  float r = float(1.0 / std::sqrt(xd));
  for (int step = 0; step < 2; ++step) {
    const float up = std::nextafter(r, INFINITY), down = std::nextafter(r, 0.0f);
    const double mid_up = (double(r) + double(up)) * 0.5, mid_down = (double(r) + double(down)) * 0.5;
    auto side = [xd](double m) {  // sign of x*m*m - 1: > 0 when 1/sqrt(x) < m
      const double m2 = m * m, p = xd * m2, e = std::fma(xd, m2, -p);
      const double d = (p - 1.0) + e;
      return d > 0 ? 1 : (d < 0 ? -1 : 0);
    };
    if (side(mid_up) < 0) r = up;          // the exact value lies above the upper midpoint
    else if (side(mid_down) > 0) r = down; // ... below the lower one
    else break;
  }
  return r;
}
inline float rsqrtf(float x) { return __frsqrt_rn(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float rcbrtf(float x) { return float(1.0 / std::cbrt(double(x))); }
inline double rcbrt(double x) { return 1.0 / std::cbrt(x); }
inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : (x > 0.0f ? x : 0.0f); }  // NaN -> 0

// ---- sinpi, cospi ---------------------------------------------------------------------------------------------
inline float sinpif(float x) { return aotbench_emu_math::sinpi_of<float, double>(x); }
inline float cospif(float x) { return aotbench_emu_math::cospi_of<float, double>(x); }
inline void sincospif(float x, float *s, float *c) { *s = sinpif(x); *c = cospif(x); }
inline double sinpi(double x) { return aotbench_emu_math::sinpi_of<double, long double>(x); }
inline double cospi(double x) { return aotbench_emu_math::cospi_of<double, long double>(x); }
inline void sincospi(double x, double *s, double *c) { *s = sinpi(x); *c = cospi(x); }

// ---- norms (computed in double, rounded once) -----------------------------------------------------------------
inline float norm3df(float a, float b, float c) {
  if (std::isinf(a) || std::isinf(b) || std::isinf(c)) return INFINITY;
  const double x = a, y = b, z = c;
  return float(std::sqrt(x * x + y * y + z * z));
}
inline float rnorm3df(float a, float b, float c) {
  if (std::isinf(a) || std::isinf(b) || std::isinf(c)) return 0.0f;
  const double x = a, y = b, z = c;
  return float(1.0 / std::sqrt(x * x + y * y + z * z));
}
inline float norm4df(float a, float b, float c, float d) {
  if (std::isinf(a) || std::isinf(b) || std::isinf(c) || std::isinf(d)) return INFINITY;
  const double x = a, y = b, z = c, w = d;
  return float(std::sqrt(x * x + y * y + z * z + w * w));
}
inline float rnorm4df(float a, float b, float c, float d) {
  if (std::isinf(a) || std::isinf(b) || std::isinf(c) || std::isinf(d)) return 0.0f;
  const double x = a, y = b, z = c, w = d;
  return float(1.0 / std::sqrt(x * x + y * y + z * z + w * w));
}
inline float rhypotf(float a, float b) {
  if (std::isinf(a) || std::isinf(b)) return 0.0f;
  const double x = a, y = b;
  return float(1.0 / std::sqrt(x * x + y * y));
}

// ---- integer intrinsics ---------------------------------------------------------------------------------------
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned int>(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned int __brev(unsigned int x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
  return (x >> 16) | (x << 16);
}
inline unsigned long long __brevll(unsigned long long x) {
  return (static_cast<unsigned long long>(__brev(static_cast<unsigned int>(x))) << 32) |
         __brev(static_cast<unsigned int>(x >> 32));
}
// Byte n of the result is byte (s >> 4n) & 7 of the eight bytes y:x (x holds bytes 0-3).
inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
  const unsigned long long both = (static_cast<unsigned long long>(y) << 32) | x;
  unsigned int r = 0;
  for (int n = 0; n < 4; ++n) {
    const unsigned int byte = static_cast<unsigned int>(both >> (8 * ((s >> (4 * n)) & 7u))) & 0xffu;
    r |= byte << (8 * n);
  }
  return r;
}
inline unsigned int __funnelshift_l(unsigned int lo, unsigned int hi, unsigned int shift) {
  const unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
  return static_cast<unsigned int>((v << (shift & 31u)) >> 32);
}
inline unsigned int __funnelshift_lc(unsigned int lo, unsigned int hi, unsigned int shift) {
  const unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
  return static_cast<unsigned int>((v << (shift < 32u ? shift : 32u)) >> 32);
}
inline unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int shift) {
  const unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
  return static_cast<unsigned int>(v >> (shift & 31u));
}
inline unsigned int __funnelshift_rc(unsigned int lo, unsigned int hi, unsigned int shift) {
  const unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
  return static_cast<unsigned int>(v >> (shift < 32u ? shift : 32u));
}
inline int __mulhi(int x, int y) { return int((static_cast<long long>(x) * y) >> 32); }
inline unsigned int __umulhi(unsigned int x, unsigned int y) {
  return static_cast<unsigned int>((static_cast<unsigned long long>(x) * y) >> 32);
}
inline long long __mul64hi(long long x, long long y) {
  return static_cast<long long>((static_cast<__int128>(x) * y) >> 64);
}
inline unsigned long long __umul64hi(unsigned long long x, unsigned long long y) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(x) * y) >> 64);
}
// The low 32 bits of the product of the low 24 bits of each operand (sign-extended for __mul24).
inline int __mul24(int x, int y) {
  const long long a = static_cast<long long>(static_cast<unsigned int>(x) << 8) << 32 >> 40;
  const long long b = static_cast<long long>(static_cast<unsigned int>(y) << 8) << 32 >> 40;
  return int(static_cast<unsigned int>(static_cast<unsigned long long>(a * b)));
}
inline unsigned int __umul24(unsigned int x, unsigned int y) {
  return static_cast<unsigned int>(static_cast<unsigned long long>(x & 0xffffffu) * (y & 0xffffffu));
}
inline unsigned int __sad(int x, int y, unsigned int z) {
  return z + static_cast<unsigned int>(x > y ? static_cast<long long>(x) - y : static_cast<long long>(y) - x);
}
inline unsigned int __usad(unsigned int x, unsigned int y, unsigned int z) { return z + (x > y ? x - y : y - x); }
inline int __hadd(int x, int y) { return int((static_cast<long long>(x) + y) >> 1); }
inline int __rhadd(int x, int y) { return int((static_cast<long long>(x) + y + 1) >> 1); }
inline unsigned int __uhadd(unsigned int x, unsigned int y) {
  return static_cast<unsigned int>((static_cast<unsigned long long>(x) + y) >> 1);
}
inline unsigned int __urhadd(unsigned int x, unsigned int y) {
  return static_cast<unsigned int>((static_cast<unsigned long long>(x) + y + 1) >> 1);
}

// ---- conversions: the rounding the name says, whatever the current mode; saturating; NaN -> 0 -----------------
inline int __float2int_rn(float x) {
  return aotbench_emu_math::saturate_to<int>(aotbench_emu_math::round_half_even(x));
}
inline int __float2int_rz(float x) { return aotbench_emu_math::saturate_to<int>(std::trunc(x)); }
inline int __float2int_rd(float x) { return aotbench_emu_math::saturate_to<int>(std::floor(x)); }
inline int __float2int_ru(float x) { return aotbench_emu_math::saturate_to<int>(std::ceil(x)); }
inline unsigned int __float2uint_rn(float x) {
  return aotbench_emu_math::saturate_to<unsigned int>(aotbench_emu_math::round_half_even(x));
}
inline unsigned int __float2uint_rz(float x) { return aotbench_emu_math::saturate_to<unsigned int>(std::trunc(x)); }
inline long long __float2ll_rn(float x) {
  return aotbench_emu_math::saturate_to<long long>(aotbench_emu_math::round_half_even(x));
}
inline long long __float2ll_rz(float x) { return aotbench_emu_math::saturate_to<long long>(std::trunc(x)); }
inline unsigned long long __float2ull_rn(float x) {
  return aotbench_emu_math::saturate_to<unsigned long long>(aotbench_emu_math::round_half_even(x));
}
inline int __double2int_rn(double x) {
  return aotbench_emu_math::saturate_to<int>(aotbench_emu_math::round_half_even(x));
}
inline int __double2int_rz(double x) { return aotbench_emu_math::saturate_to<int>(std::trunc(x)); }
inline long long __double2ll_rn(double x) {
  return aotbench_emu_math::saturate_to<long long>(aotbench_emu_math::round_half_even(x));
}
inline float __int2float_rn(int x) { return float(x); }  // exact below 2^24; rounds to nearest above
inline float __uint2float_rn(unsigned int x) { return float(x); }
inline float __ll2float_rn(long long x) { return float(x); }
inline float __ull2float_rn(unsigned long long x) { return float(x); }
inline double __int2double_rn(int x) { return double(x); }
inline float __double2float_rn(double x) { return float(x); }

// ---- cache-hinted loads and stores: plain memory accesses here ------------------------------------------------
template <typename T> inline T __ldg(const T *p) { return *p; }
template <typename T> inline T __ldcg(const T *p) { return *p; }
template <typename T> inline T __ldca(const T *p) { return *p; }
template <typename T> inline T __ldcs(const T *p) { return *p; }
template <typename T> inline T __ldlu(const T *p) { return *p; }
template <typename T> inline T __ldcv(const T *p) { return *p; }
template <typename T> inline void __stcg(T *p, typename aotbench_emu_math::same<T>::type v) { *p = v; }
template <typename T> inline void __stcs(T *p, typename aotbench_emu_math::same<T>::type v) { *p = v; }
template <typename T> inline void __stwb(T *p, typename aotbench_emu_math::same<T>::type v) { *p = v; }
template <typename T> inline void __stwt(T *p, typename aotbench_emu_math::same<T>::type v) { *p = v; }

// ---- min and max at global scope, with CUDA's overloads (mixed signedness compares as unsigned) -----------------
#define AOTB_EMU_MINMAX(R, A, B)                                                                               \
  inline R min(A a, B b) { const R x = static_cast<R>(a), y = static_cast<R>(b); return x < y ? x : y; }       \
  inline R max(A a, B b) { const R x = static_cast<R>(a), y = static_cast<R>(b); return x > y ? x : y; }
AOTB_EMU_MINMAX(int, int, int)
AOTB_EMU_MINMAX(unsigned int, unsigned int, unsigned int)
AOTB_EMU_MINMAX(unsigned int, int, unsigned int)
AOTB_EMU_MINMAX(unsigned int, unsigned int, int)
AOTB_EMU_MINMAX(long, long, long)
AOTB_EMU_MINMAX(unsigned long, unsigned long, unsigned long)
AOTB_EMU_MINMAX(unsigned long, long, unsigned long)
AOTB_EMU_MINMAX(unsigned long, unsigned long, long)
AOTB_EMU_MINMAX(long long, long long, long long)
AOTB_EMU_MINMAX(unsigned long long, unsigned long long, unsigned long long)
AOTB_EMU_MINMAX(unsigned long long, long long, unsigned long long)
AOTB_EMU_MINMAX(unsigned long long, unsigned long long, long long)
#undef AOTB_EMU_MINMAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
inline double min(float a, double b) { return std::fmin(double(a), b); }
inline double max(float a, double b) { return std::fmax(double(a), b); }
inline double min(double a, float b) { return std::fmin(a, double(b)); }
inline double max(double a, float b) { return std::fmax(a, double(b)); }
inline unsigned int umin(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int umax(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline long long llmin(long long a, long long b) { return a < b ? a : b; }
inline long long llmax(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
