// aotbench CUDA emulator: cuda_bf16.h for kernels compiled by the host C++ compiler: __nv_bfloat16,
// __nv_bfloat162, their conversions, arithmetic, comparisons, operators and math, as plain inline functions.
// Every operation converts to float (exactly), computes there and rounds once to bfloat16 (to nearest even), so
// + - * / and sqrt are correctly rounded; __hfma rounds a double result once. Differences from CUDA: the
// approximate math (hexp, hsin, ...) is the float function rounded to bfloat16; a NaN result of a conversion
// to bfloat16 is the canonical quiet 0x7fff. Atomics and warp shuffles of bfloat16 are not in this header.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "aotbench_emu/vector_types.h"

namespace aotbench_emu_bf16 {
enum Round { kNearest, kTowardZero, kDown, kUp };

// The bfloat16 the rounding mode picks for f: its top 16 bits, rounded on the 16 bits below.
inline unsigned short from_float(float f, Round mode) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  const bool negative = (u >> 31) != 0;
  const std::uint32_t low = u & 0xffffu;
  std::uint32_t r = u >> 16;
  if (low != 0) {
    const bool up = mode == kNearest ? low > 0x8000u || (low == 0x8000u && (r & 1u))
                                     : (mode == kUp ? !negative : (mode == kDown ? negative : false));
    r += up ? 1u : 0u;  // a carry moves to the next binade, from the largest finite value to infinity
  }
  return static_cast<unsigned short>(r);
}
// d rounded to float "to odd" (truncated, lowest bit set when inexact) keeps enough to round once more exactly.
inline unsigned short from_double(double d, Round mode) {
  float f = static_cast<float>(d);
  if (d == d && static_cast<double>(f) != d) {
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if (std::fabs(static_cast<double>(f)) > std::fabs(d)) u -= 1u;  // one step towards zero: the truncation
    u |= 1u;
    std::memcpy(&f, &u, sizeof f);
  }
  return from_float(f, mode);
}

// The exact float of a bfloat16.
inline float to_float(unsigned short h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
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
}  // namespace aotbench_emu_bf16

struct __nv_bfloat16_raw {
  unsigned short x;
};
struct __nv_bfloat162_raw {
  unsigned short x, y;
};

// 16 bits of storage (a float's top 16 bits); trivially default-constructible and copyable.
// Converts from and to float implicitly.
struct __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  constexpr __nv_bfloat16(const __nv_bfloat16_raw &r) : __x(r.x) {}
  __nv_bfloat16(float f) : __x(aotbench_emu_bf16::from_float(f, aotbench_emu_bf16::kNearest)) {}
  __nv_bfloat16(double d) : __x(aotbench_emu_bf16::from_double(d, aotbench_emu_bf16::kNearest)) {}
  __nv_bfloat16(short i) : __nv_bfloat16(static_cast<double>(i)) {}
  __nv_bfloat16(unsigned short i) : __nv_bfloat16(static_cast<double>(i)) {}
  __nv_bfloat16(int i) : __nv_bfloat16(static_cast<double>(i)) {}
  __nv_bfloat16(unsigned int i) : __nv_bfloat16(static_cast<double>(i)) {}
  __nv_bfloat16(long i) : __nv_bfloat16(aotbench_emu_bf16::from_integer(static_cast<long long>(i))) {}
  __nv_bfloat16(unsigned long i)
      : __nv_bfloat16(aotbench_emu_bf16::from_integer(static_cast<unsigned long long>(i))) {}
  __nv_bfloat16(long long i) : __nv_bfloat16(aotbench_emu_bf16::from_integer(i)) {}
  __nv_bfloat16(unsigned long long i) : __nv_bfloat16(aotbench_emu_bf16::from_integer(i)) {}
  __nv_bfloat16 &operator=(const __nv_bfloat16_raw &r) { __x = r.x; return *this; }
  constexpr operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
  operator float() const { return aotbench_emu_bf16::to_float(__x); }
};

// Two bfloat16 values, x the low one; 4-byte aligned as CUDA's.
struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
  __nv_bfloat162() = default;
  constexpr __nv_bfloat162(const __nv_bfloat16 &a, const __nv_bfloat16 &b) : x(a), y(b) {}
  constexpr __nv_bfloat162(const __nv_bfloat162_raw &r) : x(__nv_bfloat16_raw{r.x}), y(__nv_bfloat16_raw{r.y}) {}
  __nv_bfloat162 &operator=(const __nv_bfloat162_raw &r) {
    x = __nv_bfloat16_raw{r.x};
    y = __nv_bfloat16_raw{r.y};
    return *this;
  }
  constexpr operator __nv_bfloat162_raw() const {
    return __nv_bfloat162_raw{__nv_bfloat16_raw(x).x, __nv_bfloat16_raw(y).x};
  }
};

typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

// ---- conversions ----------------------------------------------------------------------------------------------
inline __nv_bfloat16 __bfloat16_from_bits_(unsigned short b) { return __nv_bfloat16(__nv_bfloat16_raw{b}); }
inline unsigned short __bfloat16_bits_(const __nv_bfloat16 h) { return __nv_bfloat16_raw(h).x; }
inline __nv_bfloat16 __bfloat16_rounded_(float f, aotbench_emu_bf16::Round mode) {
  return __bfloat16_from_bits_(aotbench_emu_bf16::from_float(f, mode));
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __bfloat16_rounded_(f, aotbench_emu_bf16::kNearest); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __bfloat16_rounded_(f, aotbench_emu_bf16::kNearest); }
inline __nv_bfloat16 __float2bfloat16_rz(float f) { return __bfloat16_rounded_(f, aotbench_emu_bf16::kTowardZero); }
inline __nv_bfloat16 __float2bfloat16_rd(float f) { return __bfloat16_rounded_(f, aotbench_emu_bf16::kDown); }
inline __nv_bfloat16 __float2bfloat16_ru(float f) { return __bfloat16_rounded_(f, aotbench_emu_bf16::kUp); }
inline __nv_bfloat16 __double2bfloat16(double d) {
  return __bfloat16_from_bits_(aotbench_emu_bf16::from_double(d, aotbench_emu_bf16::kNearest));
}
inline float __bfloat162float(const __nv_bfloat16 h) { return aotbench_emu_bf16::to_float(__bfloat16_bits_(h)); }
inline __nv_bfloat16 __int2bfloat16_rn(int i) { return __nv_bfloat16(i); }
inline __nv_bfloat16 __uint2bfloat16_rn(unsigned int i) { return __nv_bfloat16(i); }
inline __nv_bfloat16 __short2bfloat16_rn(short i) { return __nv_bfloat16(i); }
inline __nv_bfloat16 __ushort2bfloat16_rn(unsigned short i) { return __nv_bfloat16(i); }
inline __nv_bfloat16 __ll2bfloat16_rn(long long i) { return __nv_bfloat16(i); }
inline __nv_bfloat16 __ull2bfloat16_rn(unsigned long long i) { return __nv_bfloat16(i); }
// Saturating; NaN to 0.
#define AOTB_EMU_BF16_TO_INT(suffix, I)                                                                       \
  inline I __bfloat162##suffix##_rn(const __nv_bfloat16 h) {                                                          \
    return aotbench_emu_bf16::to_integer<I>(aotbench_emu_bf16::round_half_even(__bfloat162float(h)));             \
  }                                                                                                           \
  inline I __bfloat162##suffix##_rz(const __nv_bfloat16 h) {                                                          \
    return aotbench_emu_bf16::to_integer<I>(std::trunc(__bfloat162float(h)));                                     \
  }                                                                                                           \
  inline I __bfloat162##suffix##_rd(const __nv_bfloat16 h) {                                                          \
    return aotbench_emu_bf16::to_integer<I>(std::floor(__bfloat162float(h)));                                     \
  }                                                                                                           \
  inline I __bfloat162##suffix##_ru(const __nv_bfloat16 h) {                                                          \
    return aotbench_emu_bf16::to_integer<I>(std::ceil(__bfloat162float(h)));                                      \
  }
AOTB_EMU_BF16_TO_INT(int, int)
AOTB_EMU_BF16_TO_INT(uint, unsigned int)
AOTB_EMU_BF16_TO_INT(short, short)
AOTB_EMU_BF16_TO_INT(ushort, unsigned short)
AOTB_EMU_BF16_TO_INT(ll, long long)
AOTB_EMU_BF16_TO_INT(ull, unsigned long long)
#undef AOTB_EMU_BF16_TO_INT
inline unsigned short __bfloat16_as_ushort(const __nv_bfloat16 h) { return __bfloat16_bits_(h); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short b) { return __bfloat16_from_bits_(b); }
inline short __bfloat16_as_short(const __nv_bfloat16 h) { return static_cast<short>(__bfloat16_bits_(h)); }
inline __nv_bfloat16 __short_as_bfloat16(short b) { return __bfloat16_from_bits_(static_cast<unsigned short>(b)); }

inline __nv_bfloat162 make_bfloat162(const __nv_bfloat16 x, const __nv_bfloat16 y) { return __nv_bfloat162(x, y); }
inline __nv_bfloat162 __halves2bfloat162(const __nv_bfloat16 lo, const __nv_bfloat16 hi) {
  return __nv_bfloat162(lo, hi);
}
inline __nv_bfloat162 __bfloat162bfloat162(const __nv_bfloat16 h) { return __nv_bfloat162(h, h); }
inline __nv_bfloat162 __float2bfloat162_rn(float f) {
  return __nv_bfloat162(__float2bfloat16_rn(f), __float2bfloat16_rn(f));
}
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
  return __nv_bfloat162(__float2bfloat16_rn(lo), __float2bfloat16_rn(hi));
}
inline __nv_bfloat162 __float22bfloat162_rn(const float2 f) { return __floats2bfloat162_rn(f.x, f.y); }
inline float2 __bfloat1622float2(const __nv_bfloat162 h) {
  return make_float2(__bfloat162float(h.x), __bfloat162float(h.y));
}
inline __nv_bfloat16 __low2bfloat16(const __nv_bfloat162 h) { return h.x; }
inline __nv_bfloat16 __high2bfloat16(const __nv_bfloat162 h) { return h.y; }
inline float __low2float(const __nv_bfloat162 h) { return __bfloat162float(h.x); }
inline float __high2float(const __nv_bfloat162 h) { return __bfloat162float(h.y); }
inline __nv_bfloat162 __low2bfloat162(const __nv_bfloat162 h) { return __nv_bfloat162(h.x, h.x); }
inline __nv_bfloat162 __high2bfloat162(const __nv_bfloat162 h) { return __nv_bfloat162(h.y, h.y); }
inline __nv_bfloat162 __lows2bfloat162(const __nv_bfloat162 a, const __nv_bfloat162 b) {
  return __nv_bfloat162(a.x, b.x);
}
inline __nv_bfloat162 __highs2bfloat162(const __nv_bfloat162 a, const __nv_bfloat162 b) {
  return __nv_bfloat162(a.y, b.y);
}
inline __nv_bfloat162 __lowhigh2highlow(const __nv_bfloat162 h) { return __nv_bfloat162(h.y, h.x); }

// ---- arithmetic: in float (exact), rounded once --------------------------------------------------------------
inline __nv_bfloat16 __hadd(const __nv_bfloat16 a, const __nv_bfloat16 b) {
  return __float2bfloat16_rn(__bfloat162float(a) + __bfloat162float(b));
}
inline __nv_bfloat16 __hsub(const __nv_bfloat16 a, const __nv_bfloat16 b) {
  return __float2bfloat16_rn(__bfloat162float(a) - __bfloat162float(b));
}
inline __nv_bfloat16 __hmul(const __nv_bfloat16 a, const __nv_bfloat16 b) {
  return __float2bfloat16_rn(__bfloat162float(a) * __bfloat162float(b));
}
inline __nv_bfloat16 __hdiv(const __nv_bfloat16 a, const __nv_bfloat16 b) {
  return __float2bfloat16_rn(__bfloat162float(a) / __bfloat162float(b));
}
inline __nv_bfloat16 __hfma(const __nv_bfloat16 a, const __nv_bfloat16 b, const __nv_bfloat16 c) {
  return __double2bfloat16(static_cast<double>(__bfloat162float(a)) * __bfloat162float(b) + __bfloat162float(c));
}
inline __nv_bfloat16 __hneg(const __nv_bfloat16 a) {
  return __bfloat16_from_bits_(static_cast<unsigned short>(__bfloat16_bits_(a) ^ 0x8000u));
}
inline __nv_bfloat16 __habs(const __nv_bfloat16 a) {
  return __bfloat16_from_bits_(static_cast<unsigned short>(__bfloat16_bits_(a) & 0x7fffu));
}
inline bool __hisnan(const __nv_bfloat16 a) { return std::isnan(__bfloat162float(a)); }
inline int __hisinf(const __nv_bfloat16 a) {
  const float f = __bfloat162float(a);
  return std::isinf(f) ? (f < 0 ? -1 : 1) : 0;
}
// Saturated to [0, 1], a NaN to +0.
inline __nv_bfloat16 __hsat_(const __nv_bfloat16 a) {
  const float f = __bfloat162float(a);
  return f > 0.0f ? (f < 1.0f ? a : __float2bfloat16_rn(1.0f)) : __float2bfloat16_rn(0.0f);
}
inline __nv_bfloat16 __hadd_sat(const __nv_bfloat16 a, const __nv_bfloat16 b) { return __hsat_(__hadd(a, b)); }
inline __nv_bfloat16 __hsub_sat(const __nv_bfloat16 a, const __nv_bfloat16 b) { return __hsat_(__hsub(a, b)); }
inline __nv_bfloat16 __hmul_sat(const __nv_bfloat16 a, const __nv_bfloat16 b) { return __hsat_(__hmul(a, b)); }
inline __nv_bfloat16 __hfma_sat(const __nv_bfloat16 a, const __nv_bfloat16 b, const __nv_bfloat16 c) {
  return __hsat_(__hfma(a, b, c));
}
// The larger (smaller); a NaN operand loses to a number (both NaN: the canonical NaN); +0 is above -0.
inline __nv_bfloat16 __hmax(const __nv_bfloat16 a, const __nv_bfloat16 b) {
  const float x = __bfloat162float(a), y = __bfloat162float(b);
  if (x != x) return y != y ? __bfloat16_from_bits_(0x7fff) : b;
  if (y != y || x > y) return a;
  if (y > x) return b;
  return std::signbit(x) ? b : a;
}
inline __nv_bfloat16 __hmin(const __nv_bfloat16 a, const __nv_bfloat16 b) {
  const float x = __bfloat162float(a), y = __bfloat162float(b);
  if (x != x) return y != y ? __bfloat16_from_bits_(0x7fff) : b;
  if (y != y || x < y) return a;
  if (y < x) return b;
  return std::signbit(x) ? a : b;
}
inline __nv_bfloat16 __hmax_nan(const __nv_bfloat16 a, const __nv_bfloat16 b) {
  return __hisnan(a) || __hisnan(b) ? __bfloat16_from_bits_(0x7fff) : __hmax(a, b);
}
inline __nv_bfloat16 __hmin_nan(const __nv_bfloat16 a, const __nv_bfloat16 b) {
  return __hisnan(a) || __hisnan(b) ? __bfloat16_from_bits_(0x7fff) : __hmin(a, b);
}

// ---- comparisons: ordered ones are false with a NaN, the ...u (unordered) ones true --------------------------
inline bool __heq(const __nv_bfloat16 a, const __nv_bfloat16 b) { return __bfloat162float(a) == __bfloat162float(b); }
inline bool __hne(const __nv_bfloat16 a, const __nv_bfloat16 b) {
  return __bfloat162float(a) < __bfloat162float(b) || __bfloat162float(a) > __bfloat162float(b);
}
inline bool __hlt(const __nv_bfloat16 a, const __nv_bfloat16 b) { return __bfloat162float(a) < __bfloat162float(b); }
inline bool __hle(const __nv_bfloat16 a, const __nv_bfloat16 b) { return __bfloat162float(a) <= __bfloat162float(b); }
inline bool __hgt(const __nv_bfloat16 a, const __nv_bfloat16 b) { return __bfloat162float(a) > __bfloat162float(b); }
inline bool __hge(const __nv_bfloat16 a, const __nv_bfloat16 b) { return __bfloat162float(a) >= __bfloat162float(b); }
inline bool __hequ(const __nv_bfloat16 a, const __nv_bfloat16 b) { return !__hne(a, b); }
inline bool __hneu(const __nv_bfloat16 a, const __nv_bfloat16 b) { return !__heq(a, b); }
inline bool __hltu(const __nv_bfloat16 a, const __nv_bfloat16 b) { return !__hge(a, b); }
inline bool __hleu(const __nv_bfloat16 a, const __nv_bfloat16 b) { return !__hgt(a, b); }
inline bool __hgtu(const __nv_bfloat16 a, const __nv_bfloat16 b) { return !__hle(a, b); }
inline bool __hgeu(const __nv_bfloat16 a, const __nv_bfloat16 b) { return !__hlt(a, b); }

// ---- math: the float function, rounded once -------------------------------------------------------------------
#define AOTB_EMU_BF16_MATH(name, expr)                                                                         \
  inline __nv_bfloat16 h##name(const __nv_bfloat16 a) {                                                               \
    const float x = __bfloat162float(a);                                                                           \
    return __float2bfloat16_rn(expr);                                                                              \
  }                                                                                                            \
  inline __nv_bfloat162 h2##name(const __nv_bfloat162 a) { return __nv_bfloat162(h##name(a.x), h##name(a.y)); }
AOTB_EMU_BF16_MATH(exp, std::exp(x))
AOTB_EMU_BF16_MATH(exp2, std::exp2(x))
AOTB_EMU_BF16_MATH(exp10, std::pow(10.0f, x))
AOTB_EMU_BF16_MATH(log, std::log(x))
AOTB_EMU_BF16_MATH(log2, std::log2(x))
AOTB_EMU_BF16_MATH(log10, std::log10(x))
AOTB_EMU_BF16_MATH(sqrt, std::sqrt(x))
AOTB_EMU_BF16_MATH(rsqrt, static_cast<float>(1.0 / std::sqrt(static_cast<double>(x))))
AOTB_EMU_BF16_MATH(rcp, 1.0f / x)
AOTB_EMU_BF16_MATH(sin, std::sin(x))
AOTB_EMU_BF16_MATH(cos, std::cos(x))
AOTB_EMU_BF16_MATH(tanh, std::tanh(x))
AOTB_EMU_BF16_MATH(floor, std::floor(x))
AOTB_EMU_BF16_MATH(ceil, std::ceil(x))
AOTB_EMU_BF16_MATH(trunc, std::trunc(x))
AOTB_EMU_BF16_MATH(rint, aotbench_emu_bf16::round_half_even(x))
#undef AOTB_EMU_BF16_MATH

// ---- the __nv_bfloat162 forms: lane by lane -----------------------------------------------------------------------
#define AOTB_EMU_BF16_LANES2(name2, name)                                                                      \
  inline __nv_bfloat162 name2(const __nv_bfloat162 a, const __nv_bfloat162 b) {                                       \
    return __nv_bfloat162(name(a.x, b.x), name(a.y, b.y));                                                            \
  }
AOTB_EMU_BF16_LANES2(__hadd2, __hadd)
AOTB_EMU_BF16_LANES2(__hsub2, __hsub)
AOTB_EMU_BF16_LANES2(__hmul2, __hmul)
AOTB_EMU_BF16_LANES2(__h2div, __hdiv)
AOTB_EMU_BF16_LANES2(__hadd2_sat, __hadd_sat)
AOTB_EMU_BF16_LANES2(__hsub2_sat, __hsub_sat)
AOTB_EMU_BF16_LANES2(__hmul2_sat, __hmul_sat)
AOTB_EMU_BF16_LANES2(__hmax2, __hmax)
AOTB_EMU_BF16_LANES2(__hmin2, __hmin)
AOTB_EMU_BF16_LANES2(__hmax2_nan, __hmax_nan)
AOTB_EMU_BF16_LANES2(__hmin2_nan, __hmin_nan)
#undef AOTB_EMU_BF16_LANES2
inline __nv_bfloat162 __hfma2(const __nv_bfloat162 a, const __nv_bfloat162 b, const __nv_bfloat162 c) {
  return __nv_bfloat162(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y));
}
inline __nv_bfloat162 __hfma2_sat(const __nv_bfloat162 a, const __nv_bfloat162 b, const __nv_bfloat162 c) {
  return __nv_bfloat162(__hfma_sat(a.x, b.x, c.x), __hfma_sat(a.y, b.y, c.y));
}
inline __nv_bfloat162 __hneg2(const __nv_bfloat162 a) { return __nv_bfloat162(__hneg(a.x), __hneg(a.y)); }
inline __nv_bfloat162 __habs2(const __nv_bfloat162 a) { return __nv_bfloat162(__habs(a.x), __habs(a.y)); }
inline __nv_bfloat162 __hisnan2(const __nv_bfloat162 a) {
  return __nv_bfloat162(__float2bfloat16_rn(__hisnan(a.x) ? 1.0f : 0.0f),
                 __float2bfloat16_rn(__hisnan(a.y) ? 1.0f : 0.0f));
}
// __heq2 ...: 1.0 or 0.0 in each lane; __hbeq2 ...: true when the comparison holds in both lanes.
#define AOTB_EMU_BF16_COMPARE2(name)                                                                           \
  inline __nv_bfloat162 name##2(const __nv_bfloat162 a, const __nv_bfloat162 b) {                                     \
    return __nv_bfloat162(__float2bfloat16_rn(name(a.x, b.x) ? 1.0f : 0.0f),                                          \
                   __float2bfloat16_rn(name(a.y, b.y) ? 1.0f : 0.0f));                                            \
  }
AOTB_EMU_BF16_COMPARE2(__heq)
AOTB_EMU_BF16_COMPARE2(__hne)
AOTB_EMU_BF16_COMPARE2(__hlt)
AOTB_EMU_BF16_COMPARE2(__hle)
AOTB_EMU_BF16_COMPARE2(__hgt)
AOTB_EMU_BF16_COMPARE2(__hge)
AOTB_EMU_BF16_COMPARE2(__hequ)
AOTB_EMU_BF16_COMPARE2(__hneu)
AOTB_EMU_BF16_COMPARE2(__hltu)
AOTB_EMU_BF16_COMPARE2(__hleu)
AOTB_EMU_BF16_COMPARE2(__hgtu)
AOTB_EMU_BF16_COMPARE2(__hgeu)
#undef AOTB_EMU_BF16_COMPARE2
#define AOTB_EMU_BF16_BOTH2(bname, name)                                                                       \
  inline bool bname(const __nv_bfloat162 a, const __nv_bfloat162 b) { return name(a.x, b.x) && name(a.y, b.y); }
AOTB_EMU_BF16_BOTH2(__hbeq2, __heq)
AOTB_EMU_BF16_BOTH2(__hbne2, __hne)
AOTB_EMU_BF16_BOTH2(__hblt2, __hlt)
AOTB_EMU_BF16_BOTH2(__hble2, __hle)
AOTB_EMU_BF16_BOTH2(__hbgt2, __hgt)
AOTB_EMU_BF16_BOTH2(__hbge2, __hge)
AOTB_EMU_BF16_BOTH2(__hbequ2, __hequ)
AOTB_EMU_BF16_BOTH2(__hbneu2, __hneu)
AOTB_EMU_BF16_BOTH2(__hbltu2, __hltu)
AOTB_EMU_BF16_BOTH2(__hbleu2, __hleu)
AOTB_EMU_BF16_BOTH2(__hbgtu2, __hgtu)
AOTB_EMU_BF16_BOTH2(__hbgeu2, __hgeu)
#undef AOTB_EMU_BF16_BOTH2

// ---- operators, as CUDA defines them (== is ordered, != unordered) ---------------------------------------------
inline __nv_bfloat16 operator+(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hadd(a, b); }
inline __nv_bfloat16 operator-(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hsub(a, b); }
inline __nv_bfloat16 operator*(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hmul(a, b); }
inline __nv_bfloat16 operator/(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hdiv(a, b); }
inline __nv_bfloat16 &operator+=(__nv_bfloat16 &a, const __nv_bfloat16 &b) { return a = __hadd(a, b); }
inline __nv_bfloat16 &operator-=(__nv_bfloat16 &a, const __nv_bfloat16 &b) { return a = __hsub(a, b); }
inline __nv_bfloat16 &operator*=(__nv_bfloat16 &a, const __nv_bfloat16 &b) { return a = __hmul(a, b); }
inline __nv_bfloat16 &operator/=(__nv_bfloat16 &a, const __nv_bfloat16 &b) { return a = __hdiv(a, b); }
inline __nv_bfloat16 operator+(const __nv_bfloat16 &a) { return a; }
inline __nv_bfloat16 operator-(const __nv_bfloat16 &a) { return __hneg(a); }
inline __nv_bfloat16 &operator++(__nv_bfloat16 &a) { return a = __hadd(a, __float2bfloat16_rn(1.0f)); }
inline __nv_bfloat16 &operator--(__nv_bfloat16 &a) { return a = __hsub(a, __float2bfloat16_rn(1.0f)); }
inline __nv_bfloat16 operator++(__nv_bfloat16 &a, int) { const __nv_bfloat16 old = a; ++a; return old; }
inline __nv_bfloat16 operator--(__nv_bfloat16 &a, int) { const __nv_bfloat16 old = a; --a; return old; }
inline bool operator==(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __heq(a, b); }
inline bool operator!=(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hneu(a, b); }
inline bool operator<(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hlt(a, b); }
inline bool operator<=(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hle(a, b); }
inline bool operator>(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hgt(a, b); }
inline bool operator>=(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hge(a, b); }

inline __nv_bfloat162 operator+(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __hadd2(a, b); }
inline __nv_bfloat162 operator-(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __hsub2(a, b); }
inline __nv_bfloat162 operator*(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __hmul2(a, b); }
inline __nv_bfloat162 operator/(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __h2div(a, b); }
inline __nv_bfloat162 &operator+=(__nv_bfloat162 &a, const __nv_bfloat162 &b) { return a = __hadd2(a, b); }
inline __nv_bfloat162 &operator-=(__nv_bfloat162 &a, const __nv_bfloat162 &b) { return a = __hsub2(a, b); }
inline __nv_bfloat162 &operator*=(__nv_bfloat162 &a, const __nv_bfloat162 &b) { return a = __hmul2(a, b); }
inline __nv_bfloat162 &operator/=(__nv_bfloat162 &a, const __nv_bfloat162 &b) { return a = __h2div(a, b); }
inline __nv_bfloat162 operator+(const __nv_bfloat162 &a) { return a; }
inline __nv_bfloat162 operator-(const __nv_bfloat162 &a) { return __hneg2(a); }
inline bool operator==(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __hbeq2(a, b); }
inline bool operator!=(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __hbneu2(a, b); }
inline bool operator<(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __hblt2(a, b); }
inline bool operator<=(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __hble2(a, b); }
inline bool operator>(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __hbgt2(a, b); }
inline bool operator>=(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __hbge2(a, b); }
