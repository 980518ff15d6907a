// aotbench CUDA emulator: cuda_fp16.h for kernels compiled by the host C++ compiler: __half, __half2, their
// conversions, arithmetic, comparisons, operators and math, as plain inline functions at global scope.
// Every operation converts to float (exactly), computes there and rounds once to half (to nearest even), so
// + - * / and sqrt are correctly rounded as on the GPU; __hfma rounds a double result once. Differences from
// CUDA: the approximate math (hexp, hsin, hrsqrt, ...) is the float function rounded to half; a NaN result of a
// conversion to half is the canonical 0x7fff. Atomics and warp shuffles of halves are not in this header.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "aotbench_emu/vector_types.h"

namespace aotbench_emu_fp16 {
enum Round { kNearest, kTowardZero, kDown, kUp };

// The half nearest to d (or the neighbour the rounding mode picks), from d's bits: exact for every double.
inline unsigned short from_double(double d, Round mode) {
  std::uint64_t b;
  std::memcpy(&b, &d, sizeof b);
  const unsigned sign = static_cast<unsigned>(b >> 48) & 0x8000u;
  const std::uint64_t mag = b & 0x7fffffffffffffffull;
  if (mag > 0x7ff0000000000000ull) return 0x7fff;  // NaN
  if (mag == 0x7ff0000000000000ull) return static_cast<unsigned short>(sign | 0x7c00u);
  const bool away = mode == kUp ? sign == 0 : (mode == kDown ? sign != 0 : false);  // directed away from zero
  const int exp = static_cast<int>(mag >> 52) - 1023;
  if (exp < -25) return static_cast<unsigned short>(sign | (mag != 0 && away ? 1u : 0u));  // below 2^-25
  if (exp >= 16) return static_cast<unsigned short>(sign | (mode == kNearest || away ? 0x7c00u : 0x7bffu));
  const std::uint64_t mant = (mag & 0xfffffffffffffull) | (1ull << 52);
  const int shift = 42 + (exp < -14 ? -14 - exp : 0);  // the half's quantum: 2^(exp-10), at least 2^-24
  std::uint64_t m = mant >> shift;
  const std::uint64_t rem = mant & ((1ull << shift) - 1), halfway = 1ull << (shift - 1);
  if (rem != 0 && (mode == kNearest ? rem > halfway || (rem == halfway && (m & 1u)) : away)) ++m;
  // m counts the implicit bit (1024) for normal numbers, so a carry out of the mantissa moves to the next binade.
  const unsigned biased = exp >= -14 ? static_cast<unsigned>(exp + 14) << 10 : 0u;
  return static_cast<unsigned short>(sign | (biased + static_cast<unsigned>(m)));
}
inline unsigned short from_float(float f, Round mode) { return from_double(static_cast<double>(f), mode); }

// The exact float of a half (a NaN keeps its payload and is made quiet).
inline float to_float(unsigned short h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  std::uint32_t bits;
  if (e == 0x1fu) {
    bits = sign | 0x7f800000u | (m << 13) | (m != 0 ? 0x400000u : 0u);
  } else if (e == 0) {
    const float v = std::ldexp(static_cast<float>(m), -24);
    return sign ? -v : v;
  } else {
    bits = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Integer magnitudes above 2^53 are folded into 53 bits with a sticky lowest bit, so that one more rounding is exact.
inline double from_magnitude(unsigned long long m, bool negative) {
  int k = 0;
  while (m >> 53) {
    m = (m >> 1) | (m & 1u);
    ++k;
  }
  const double v = std::ldexp(static_cast<double>(m), k);
  return negative ? -v : v;
}
inline double from_integer(long long i) {
  const unsigned long long u = static_cast<unsigned long long>(i);
  return from_magnitude(i < 0 ? 0ull - u : u, i < 0);
}
inline double from_integer(unsigned long long i) { return from_magnitude(i, false); }
inline float round_half_even(float x) {
  float r = std::floor(x);
  const float d = x - r;  // exact
  if (d > 0.5f || (d == 0.5f && std::fmod(r, 2.0f) != 0.0f)) r += 1.0f;
  return r;
}
// An integer-valued float (or NaN, or an infinity) as I: saturated to I's range, NaN to 0, as the GPU's cvt.
template <typename I>
inline I to_integer(float r) {
  const bool is_signed = I(-1) < I(0);
  const int bits = static_cast<int>(sizeof(I) * 8);
  if (r != r) return I(0);
  const float lo = is_signed ? -std::ldexp(1.0f, bits - 1) : 0.0f;
  const float hi = std::ldexp(1.0f, is_signed ? bits - 1 : bits);
  const I top = static_cast<I>(is_signed ? static_cast<I>(static_cast<unsigned long long>(~0ull) >> (65 - bits))
                                         : static_cast<I>(~0ull));
  if (r < lo) return is_signed ? static_cast<I>(-top - 1) : I(0);
  if (r >= hi) return top;
  return static_cast<I>(r);
}
}  // namespace aotbench_emu_fp16

struct __half_raw {
  unsigned short x;
};
struct __half2_raw {
  unsigned short x, y;
};

// 16 bits of storage; trivially default-constructible and copyable.
// Converts from and to float implicitly.
struct __half {
  unsigned short __x;
  __half() = default;
  constexpr __half(const __half_raw &r) : __x(r.x) {}
  __half(float f) : __x(aotbench_emu_fp16::from_float(f, aotbench_emu_fp16::kNearest)) {}
  __half(double d) : __x(aotbench_emu_fp16::from_double(d, aotbench_emu_fp16::kNearest)) {}
  __half(short i) : __half(static_cast<double>(i)) {}
  __half(unsigned short i) : __half(static_cast<double>(i)) {}
  __half(int i) : __half(static_cast<double>(i)) {}
  __half(unsigned int i) : __half(static_cast<double>(i)) {}
  __half(long i) : __half(aotbench_emu_fp16::from_integer(static_cast<long long>(i))) {}
  __half(unsigned long i)
      : __half(aotbench_emu_fp16::from_integer(static_cast<unsigned long long>(i))) {}
  __half(long long i) : __half(aotbench_emu_fp16::from_integer(i)) {}
  __half(unsigned long long i) : __half(aotbench_emu_fp16::from_integer(i)) {}
  __half &operator=(const __half_raw &r) { __x = r.x; return *this; }
  constexpr operator __half_raw() const { return __half_raw{__x}; }
  operator float() const { return aotbench_emu_fp16::to_float(__x); }
};

// Two halves, x the low one; 4-byte aligned as CUDA's.
struct alignas(4) __half2 {
  __half x, y;
  __half2() = default;
  constexpr __half2(const __half &a, const __half &b) : x(a), y(b) {}
  constexpr __half2(const __half2_raw &r) : x(__half_raw{r.x}), y(__half_raw{r.y}) {}
  __half2 &operator=(const __half2_raw &r) {
    x = __half_raw{r.x};
    y = __half_raw{r.y};
    return *this;
  }
  constexpr operator __half2_raw() const {
    return __half2_raw{__half_raw(x).x, __half_raw(y).x};
  }
};

typedef __half half;
typedef __half2 half2;

// ---- conversions ----------------------------------------------------------------------------------------------
inline __half __half_from_bits_(unsigned short b) { return __half(__half_raw{b}); }
inline unsigned short __half_bits_(const __half h) { return __half_raw(h).x; }
inline __half __half_rounded_(float f, aotbench_emu_fp16::Round mode) {
  return __half_from_bits_(aotbench_emu_fp16::from_float(f, mode));
}
inline __half __float2half_rn(float f) { return __half_rounded_(f, aotbench_emu_fp16::kNearest); }
inline __half __float2half(float f) { return __half_rounded_(f, aotbench_emu_fp16::kNearest); }
inline __half __float2half_rz(float f) { return __half_rounded_(f, aotbench_emu_fp16::kTowardZero); }
inline __half __float2half_rd(float f) { return __half_rounded_(f, aotbench_emu_fp16::kDown); }
inline __half __float2half_ru(float f) { return __half_rounded_(f, aotbench_emu_fp16::kUp); }
inline __half __double2half(double d) {
  return __half_from_bits_(aotbench_emu_fp16::from_double(d, aotbench_emu_fp16::kNearest));
}
inline float __half2float(const __half h) { return aotbench_emu_fp16::to_float(__half_bits_(h)); }
inline __half __int2half_rn(int i) { return __half(i); }
inline __half __uint2half_rn(unsigned int i) { return __half(i); }
inline __half __short2half_rn(short i) { return __half(i); }
inline __half __ushort2half_rn(unsigned short i) { return __half(i); }
inline __half __ll2half_rn(long long i) { return __half(i); }
inline __half __ull2half_rn(unsigned long long i) { return __half(i); }
// Saturating; NaN to 0.
#define AOTB_EMU_FP16_TO_INT(suffix, I)                                                                       \
  inline I __half2##suffix##_rn(const __half h) {                                                             \
    return aotbench_emu_fp16::to_integer<I>(aotbench_emu_fp16::round_half_even(__half2float(h)));             \
  }                                                                                                           \
  inline I __half2##suffix##_rz(const __half h) {                                                             \
    return aotbench_emu_fp16::to_integer<I>(std::trunc(__half2float(h)));                                     \
  }                                                                                                           \
  inline I __half2##suffix##_rd(const __half h) {                                                             \
    return aotbench_emu_fp16::to_integer<I>(std::floor(__half2float(h)));                                     \
  }                                                                                                           \
  inline I __half2##suffix##_ru(const __half h) {                                                             \
    return aotbench_emu_fp16::to_integer<I>(std::ceil(__half2float(h)));                                      \
  }
AOTB_EMU_FP16_TO_INT(int, int)
AOTB_EMU_FP16_TO_INT(uint, unsigned int)
AOTB_EMU_FP16_TO_INT(short, short)
AOTB_EMU_FP16_TO_INT(ushort, unsigned short)
AOTB_EMU_FP16_TO_INT(ll, long long)
AOTB_EMU_FP16_TO_INT(ull, unsigned long long)
#undef AOTB_EMU_FP16_TO_INT
inline unsigned short __half_as_ushort(const __half h) { return __half_bits_(h); }
inline __half __ushort_as_half(unsigned short b) { return __half_from_bits_(b); }
inline short __half_as_short(const __half h) { return static_cast<short>(__half_bits_(h)); }
inline __half __short_as_half(short b) { return __half_from_bits_(static_cast<unsigned short>(b)); }

inline __half2 make_half2(const __half x, const __half y) { return __half2(x, y); }
inline __half2 __halves2half2(const __half lo, const __half hi) { return __half2(lo, hi); }
inline __half2 __half2half2(const __half h) { return __half2(h, h); }
inline __half2 __float2half2_rn(float f) { return __half2(__float2half_rn(f), __float2half_rn(f)); }
inline __half2 __floats2half2_rn(float lo, float hi) { return __half2(__float2half_rn(lo), __float2half_rn(hi)); }
inline __half2 __float22half2_rn(const float2 f) { return __floats2half2_rn(f.x, f.y); }
inline float2 __half22float2(const __half2 h) { return make_float2(__half2float(h.x), __half2float(h.y)); }
inline __half __low2half(const __half2 h) { return h.x; }
inline __half __high2half(const __half2 h) { return h.y; }
inline float __low2float(const __half2 h) { return __half2float(h.x); }
inline float __high2float(const __half2 h) { return __half2float(h.y); }
inline __half2 __low2half2(const __half2 h) { return __half2(h.x, h.x); }
inline __half2 __high2half2(const __half2 h) { return __half2(h.y, h.y); }
inline __half2 __lows2half2(const __half2 a, const __half2 b) { return __half2(a.x, b.x); }
inline __half2 __highs2half2(const __half2 a, const __half2 b) { return __half2(a.y, b.y); }
inline __half2 __lowhigh2highlow(const __half2 h) { return __half2(h.y, h.x); }

// ---- arithmetic: in float (exact), rounded once --------------------------------------------------------------
inline __half __hadd(const __half a, const __half b) { return __float2half_rn(__half2float(a) + __half2float(b)); }
inline __half __hsub(const __half a, const __half b) { return __float2half_rn(__half2float(a) - __half2float(b)); }
inline __half __hmul(const __half a, const __half b) { return __float2half_rn(__half2float(a) * __half2float(b)); }
inline __half __hdiv(const __half a, const __half b) { return __float2half_rn(__half2float(a) / __half2float(b)); }
inline __half __hfma(const __half a, const __half b, const __half c) {
  return __double2half(static_cast<double>(__half2float(a)) * __half2float(b) + __half2float(c));
}
inline __half __hneg(const __half a) {
  return __half_from_bits_(static_cast<unsigned short>(__half_bits_(a) ^ 0x8000u));
}
inline __half __habs(const __half a) {
  return __half_from_bits_(static_cast<unsigned short>(__half_bits_(a) & 0x7fffu));
}
inline bool __hisnan(const __half a) { return std::isnan(__half2float(a)); }
inline int __hisinf(const __half a) {
  const float f = __half2float(a);
  return std::isinf(f) ? (f < 0 ? -1 : 1) : 0;
}
// Saturated to [0, 1], a NaN to +0.
inline __half __hsat_(const __half a) {
  const float f = __half2float(a);
  return f > 0.0f ? (f < 1.0f ? a : __float2half_rn(1.0f)) : __float2half_rn(0.0f);
}
inline __half __hadd_sat(const __half a, const __half b) { return __hsat_(__hadd(a, b)); }
inline __half __hsub_sat(const __half a, const __half b) { return __hsat_(__hsub(a, b)); }
inline __half __hmul_sat(const __half a, const __half b) { return __hsat_(__hmul(a, b)); }
inline __half __hfma_sat(const __half a, const __half b, const __half c) { return __hsat_(__hfma(a, b, c)); }
// The larger (smaller); a NaN operand loses to a number (both NaN: the canonical NaN); +0 is above -0.
inline __half __hmax(const __half a, const __half b) {
  const float x = __half2float(a), y = __half2float(b);
  if (x != x) return y != y ? __half_from_bits_(0x7fff) : b;
  if (y != y || x > y) return a;
  if (y > x) return b;
  return std::signbit(x) ? b : a;
}
inline __half __hmin(const __half a, const __half b) {
  const float x = __half2float(a), y = __half2float(b);
  if (x != x) return y != y ? __half_from_bits_(0x7fff) : b;
  if (y != y || x < y) return a;
  if (y < x) return b;
  return std::signbit(x) ? a : b;
}
inline __half __hmax_nan(const __half a, const __half b) {
  return __hisnan(a) || __hisnan(b) ? __half_from_bits_(0x7fff) : __hmax(a, b);
}
inline __half __hmin_nan(const __half a, const __half b) {
  return __hisnan(a) || __hisnan(b) ? __half_from_bits_(0x7fff) : __hmin(a, b);
}

// ---- comparisons: ordered ones are false with a NaN, the ...u (unordered) ones true --------------------------
inline bool __heq(const __half a, const __half b) { return __half2float(a) == __half2float(b); }
inline bool __hne(const __half a, const __half b) {
  return __half2float(a) < __half2float(b) || __half2float(a) > __half2float(b);
}
inline bool __hlt(const __half a, const __half b) { return __half2float(a) < __half2float(b); }
inline bool __hle(const __half a, const __half b) { return __half2float(a) <= __half2float(b); }
inline bool __hgt(const __half a, const __half b) { return __half2float(a) > __half2float(b); }
inline bool __hge(const __half a, const __half b) { return __half2float(a) >= __half2float(b); }
inline bool __hequ(const __half a, const __half b) { return !__hne(a, b); }
inline bool __hneu(const __half a, const __half b) { return !__heq(a, b); }
inline bool __hltu(const __half a, const __half b) { return !__hge(a, b); }
inline bool __hleu(const __half a, const __half b) { return !__hgt(a, b); }
inline bool __hgtu(const __half a, const __half b) { return !__hle(a, b); }
inline bool __hgeu(const __half a, const __half b) { return !__hlt(a, b); }

// ---- math: the float function, rounded once -------------------------------------------------------------------
#define AOTB_EMU_FP16_MATH(name, expr)                                                                         \
  inline __half h##name(const __half a) {                                                                      \
    const float x = __half2float(a);                                                                           \
    return __float2half_rn(expr);                                                                              \
  }                                                                                                            \
  inline __half2 h2##name(const __half2 a) { return __half2(h##name(a.x), h##name(a.y)); }
AOTB_EMU_FP16_MATH(exp, std::exp(x))
AOTB_EMU_FP16_MATH(exp2, std::exp2(x))
AOTB_EMU_FP16_MATH(exp10, std::pow(10.0f, x))
AOTB_EMU_FP16_MATH(log, std::log(x))
AOTB_EMU_FP16_MATH(log2, std::log2(x))
AOTB_EMU_FP16_MATH(log10, std::log10(x))
AOTB_EMU_FP16_MATH(sqrt, std::sqrt(x))
AOTB_EMU_FP16_MATH(rsqrt, static_cast<float>(1.0 / std::sqrt(static_cast<double>(x))))
AOTB_EMU_FP16_MATH(rcp, 1.0f / x)
AOTB_EMU_FP16_MATH(sin, std::sin(x))
AOTB_EMU_FP16_MATH(cos, std::cos(x))
AOTB_EMU_FP16_MATH(tanh, std::tanh(x))
AOTB_EMU_FP16_MATH(floor, std::floor(x))
AOTB_EMU_FP16_MATH(ceil, std::ceil(x))
AOTB_EMU_FP16_MATH(trunc, std::trunc(x))
AOTB_EMU_FP16_MATH(rint, aotbench_emu_fp16::round_half_even(x))
#undef AOTB_EMU_FP16_MATH

// ---- the __half2 forms: lane by lane ----------------------------------------------------------------------------
#define AOTB_EMU_FP16_LANES2(name2, name)                                                                      \
  inline __half2 name2(const __half2 a, const __half2 b) { return __half2(name(a.x, b.x), name(a.y, b.y)); }
AOTB_EMU_FP16_LANES2(__hadd2, __hadd)
AOTB_EMU_FP16_LANES2(__hsub2, __hsub)
AOTB_EMU_FP16_LANES2(__hmul2, __hmul)
AOTB_EMU_FP16_LANES2(__h2div, __hdiv)
AOTB_EMU_FP16_LANES2(__hadd2_sat, __hadd_sat)
AOTB_EMU_FP16_LANES2(__hsub2_sat, __hsub_sat)
AOTB_EMU_FP16_LANES2(__hmul2_sat, __hmul_sat)
AOTB_EMU_FP16_LANES2(__hmax2, __hmax)
AOTB_EMU_FP16_LANES2(__hmin2, __hmin)
AOTB_EMU_FP16_LANES2(__hmax2_nan, __hmax_nan)
AOTB_EMU_FP16_LANES2(__hmin2_nan, __hmin_nan)
#undef AOTB_EMU_FP16_LANES2
inline __half2 __hfma2(const __half2 a, const __half2 b, const __half2 c) {
  return __half2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y));
}
inline __half2 __hfma2_sat(const __half2 a, const __half2 b, const __half2 c) {
  return __half2(__hfma_sat(a.x, b.x, c.x), __hfma_sat(a.y, b.y, c.y));
}
inline __half2 __hneg2(const __half2 a) { return __half2(__hneg(a.x), __hneg(a.y)); }
inline __half2 __habs2(const __half2 a) { return __half2(__habs(a.x), __habs(a.y)); }
inline __half2 __hisnan2(const __half2 a) {
  return __half2(__float2half_rn(__hisnan(a.x) ? 1.0f : 0.0f),
                 __float2half_rn(__hisnan(a.y) ? 1.0f : 0.0f));
}
// __heq2 ...: 1.0 or 0.0 in each lane; __hbeq2 ...: true when the comparison holds in both lanes.
#define AOTB_EMU_FP16_COMPARE2(name)                                                                           \
  inline __half2 name##2(const __half2 a, const __half2 b) {                                                   \
    return __half2(__float2half_rn(name(a.x, b.x) ? 1.0f : 0.0f),                                             \
                   __float2half_rn(name(a.y, b.y) ? 1.0f : 0.0f));                                            \
  }
AOTB_EMU_FP16_COMPARE2(__heq)
AOTB_EMU_FP16_COMPARE2(__hne)
AOTB_EMU_FP16_COMPARE2(__hlt)
AOTB_EMU_FP16_COMPARE2(__hle)
AOTB_EMU_FP16_COMPARE2(__hgt)
AOTB_EMU_FP16_COMPARE2(__hge)
AOTB_EMU_FP16_COMPARE2(__hequ)
AOTB_EMU_FP16_COMPARE2(__hneu)
AOTB_EMU_FP16_COMPARE2(__hltu)
AOTB_EMU_FP16_COMPARE2(__hleu)
AOTB_EMU_FP16_COMPARE2(__hgtu)
AOTB_EMU_FP16_COMPARE2(__hgeu)
#undef AOTB_EMU_FP16_COMPARE2
#define AOTB_EMU_FP16_BOTH2(bname, name)                                                                       \
  inline bool bname(const __half2 a, const __half2 b) { return name(a.x, b.x) && name(a.y, b.y); }
AOTB_EMU_FP16_BOTH2(__hbeq2, __heq)
AOTB_EMU_FP16_BOTH2(__hbne2, __hne)
AOTB_EMU_FP16_BOTH2(__hblt2, __hlt)
AOTB_EMU_FP16_BOTH2(__hble2, __hle)
AOTB_EMU_FP16_BOTH2(__hbgt2, __hgt)
AOTB_EMU_FP16_BOTH2(__hbge2, __hge)
AOTB_EMU_FP16_BOTH2(__hbequ2, __hequ)
AOTB_EMU_FP16_BOTH2(__hbneu2, __hneu)
AOTB_EMU_FP16_BOTH2(__hbltu2, __hltu)
AOTB_EMU_FP16_BOTH2(__hbleu2, __hleu)
AOTB_EMU_FP16_BOTH2(__hbgtu2, __hgtu)
AOTB_EMU_FP16_BOTH2(__hbgeu2, __hgeu)
#undef AOTB_EMU_FP16_BOTH2

// ---- operators, as CUDA defines them (== is ordered, != unordered) ---------------------------------------------
inline __half operator+(const __half &a, const __half &b) { return __hadd(a, b); }
inline __half operator-(const __half &a, const __half &b) { return __hsub(a, b); }
inline __half operator*(const __half &a, const __half &b) { return __hmul(a, b); }
inline __half operator/(const __half &a, const __half &b) { return __hdiv(a, b); }
inline __half &operator+=(__half &a, const __half &b) { return a = __hadd(a, b); }
inline __half &operator-=(__half &a, const __half &b) { return a = __hsub(a, b); }
inline __half &operator*=(__half &a, const __half &b) { return a = __hmul(a, b); }
inline __half &operator/=(__half &a, const __half &b) { return a = __hdiv(a, b); }
inline __half operator+(const __half &a) { return a; }
inline __half operator-(const __half &a) { return __hneg(a); }
inline __half &operator++(__half &a) { return a = __hadd(a, __float2half_rn(1.0f)); }
inline __half &operator--(__half &a) { return a = __hsub(a, __float2half_rn(1.0f)); }
inline __half operator++(__half &a, int) { const __half old = a; ++a; return old; }
inline __half operator--(__half &a, int) { const __half old = a; --a; return old; }
inline bool operator==(const __half &a, const __half &b) { return __heq(a, b); }
inline bool operator!=(const __half &a, const __half &b) { return __hneu(a, b); }
inline bool operator<(const __half &a, const __half &b) { return __hlt(a, b); }
inline bool operator<=(const __half &a, const __half &b) { return __hle(a, b); }
inline bool operator>(const __half &a, const __half &b) { return __hgt(a, b); }
inline bool operator>=(const __half &a, const __half &b) { return __hge(a, b); }

inline __half2 operator+(const __half2 &a, const __half2 &b) { return __hadd2(a, b); }
inline __half2 operator-(const __half2 &a, const __half2 &b) { return __hsub2(a, b); }
inline __half2 operator*(const __half2 &a, const __half2 &b) { return __hmul2(a, b); }
inline __half2 operator/(const __half2 &a, const __half2 &b) { return __h2div(a, b); }
inline __half2 &operator+=(__half2 &a, const __half2 &b) { return a = __hadd2(a, b); }
inline __half2 &operator-=(__half2 &a, const __half2 &b) { return a = __hsub2(a, b); }
inline __half2 &operator*=(__half2 &a, const __half2 &b) { return a = __hmul2(a, b); }
inline __half2 &operator/=(__half2 &a, const __half2 &b) { return a = __h2div(a, b); }
inline __half2 operator+(const __half2 &a) { return a; }
inline __half2 operator-(const __half2 &a) { return __hneg2(a); }
inline bool operator==(const __half2 &a, const __half2 &b) { return __hbeq2(a, b); }
inline bool operator!=(const __half2 &a, const __half2 &b) { return __hbneu2(a, b); }
inline bool operator<(const __half2 &a, const __half2 &b) { return __hblt2(a, b); }
inline bool operator<=(const __half2 &a, const __half2 &b) { return __hble2(a, b); }
inline bool operator>(const __half2 &a, const __half2 &b) { return __hbgt2(a, b); }
inline bool operator>=(const __half2 &a, const __half2 &b) { return __hbge2(a, b); }
