"""The CUDA emulator's value types and math headers (aotbench/native/include/cuda_emu/, issue 25).

One shared library, compiled once for the module with g++ (the emulator's flags), calls the headers' functions on
arrays through ctypes; numpy (and ml_dtypes for bfloat16, when installed) is the reference. Every test draws fresh
random inputs from the ``rng`` fixture (its seed is printed when a test fails) plus the edge cases by name.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import aotbench

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")

EMU_INCLUDE = Path(aotbench.__file__).resolve().parent / "native" / "include" / "cuda_emu"
HEADERS = ["aotbench_emu/vector_types.h", "aotbench_emu/math_functions.h", "cuda_fp16.h", "cuda_bf16.h"]
FLAGS = ["-std=c++17", "-O2", "-fPIC", "-D_GLIBCXX_USE_CXX11_ABI=0", "-Wall", "-Wextra", f"-I{EMU_INCLUDE}"]

#: CUDA's sizeof and alignof of each vector type on a 64-bit Linux host (long is 8 bytes; CUDA 12 aligns the
#: 4-wide 8-byte types to 16).
ELEMENTS = {"char": 1, "uchar": 1, "short": 2, "ushort": 2, "int": 4, "uint": 4, "long": 8, "ulong": 8,
            "longlong": 8, "ulonglong": 8, "float": 4, "double": 8}
EXPECTED_LAYOUT = {
    "char1": (1, 1), "char2": (2, 2), "char3": (3, 1), "char4": (4, 4),
    "uchar1": (1, 1), "uchar2": (2, 2), "uchar3": (3, 1), "uchar4": (4, 4),
    "short1": (2, 2), "short2": (4, 4), "short3": (6, 2), "short4": (8, 8),
    "ushort1": (2, 2), "ushort2": (4, 4), "ushort3": (6, 2), "ushort4": (8, 8),
    "int1": (4, 4), "int2": (8, 8), "int3": (12, 4), "int4": (16, 16),
    "uint1": (4, 4), "uint2": (8, 8), "uint3": (12, 4), "uint4": (16, 16),
    "float1": (4, 4), "float2": (8, 8), "float3": (12, 4), "float4": (16, 16),
    "long1": (8, 8), "long2": (16, 16), "long3": (24, 8), "long4": (32, 16),
    "ulong1": (8, 8), "ulong2": (16, 16), "ulong3": (24, 8), "ulong4": (32, 16),
    "longlong1": (8, 8), "longlong2": (16, 16), "longlong3": (24, 8), "longlong4": (32, 16),
    "ulonglong1": (8, 8), "ulonglong2": (16, 16), "ulonglong3": (24, 8), "ulonglong4": (32, 16),
    "double1": (8, 8), "double2": (16, 16), "double3": (24, 8), "double4": (32, 16),
    "dim3": (12, 4),
    "__half": (2, 2), "__half2": (4, 4), "__nv_bfloat16": (2, 2), "__nv_bfloat162": (4, 4),
}

# The ops of half_binary/bf16_binary, in the library's order.
BINARY_OPS = ["__hadd", "__hsub", "__hmul", "__hdiv", "+", "-", "*", "/", "+=", "__hmax", "__hmin",
              "__hadd2", "__hsub2", "__hmul2", "__h2div", "__hmax2", "__hmin2", "half2 *"]
COMPARISONS = ["__heq", "__hne", "__hlt", "__hle", "__hgt", "__hge", "__hequ", "__hneu", "__hltu", "__hleu",
               "__hgtu", "__hgeu", "==", "!=", "<", "<=", ">", ">="]
INT_OPS = ["__popc", "__clz", "__ffs", "__brev", "__byte_perm", "__mulhi", "__umulhi", "__mul24", "__umul24",
           "__sad", "__usad", "__hadd", "__rhadd", "__uhadd", "__urhadd", "__funnelshift_l", "__funnelshift_r",
           "__funnelshift_lc", "__funnelshift_rc", "min(int, int)", "max(int, int)", "min(int, unsigned)",
           "max(unsigned, int)", "__float_as_uint(__uint_as_float)"]
LL_OPS = ["__popcll", "__clzll", "__ffsll", "__brevll", "__mul64hi", "__umul64hi", "min(long long, ...)",
          "max(unsigned long long, ...)"]
CONVERSIONS = ["__float2int_rn", "__float2int_rz", "__float2int_rd", "__float2int_ru", "__float2uint_rn",
               "__float2ll_rn", "__half2int_rn", "__half2int_rz"]


def _vector_source() -> str:
    names = [f"{base}{n}" for base in ELEMENTS for n in range(1, 5)]
    lines = [f"  out[{2 * i}] = sizeof({name}); out[{2 * i + 1}] = alignof({name});"
             for i, name in enumerate(names + ["dim3", "__half", "__half2", "__nv_bfloat16", "__nv_bfloat162"])]
    checks = []
    for base, size in ELEMENTS.items():
        elem = {"char": "signed char", "uchar": "unsigned char", "ushort": "unsigned short", "uint": "unsigned int",
                "ulong": "unsigned long", "longlong": "long long", "ulonglong": "unsigned long long"}.get(base, base)
        for n in range(1, 5):
            args = ", ".join(f"({elem}){k + 1}" for k in range(n))
            fields = "xyzw"[:n]
            cond = " && ".join(f"v.{f} == ({elem}){k + 1}" for k, f in enumerate(fields))
            checks.append(f"  {{ constexpr {base}{n} v = make_{base}{n}({args}); static_assert({cond}, \"\");"
                          f" {base}{n} w = make_{base}{n}({args}); bad += !(w.{fields[-1]} == ({elem}){n});"
                          f" static_assert(std::is_trivially_copyable<{base}{n}>::value"
                          f" && std::is_aggregate<{base}{n}>::value, \"\"); }}")
    return ("extern \"C\" void vector_layout(long *out) {\n" + "\n".join(lines) + "\n}\n"
            + "extern \"C\" int make_checks() {\n  int bad = 0;\n" + "\n".join(checks) + "\n  return bad;\n}\n"
            + f"extern \"C\" int layout_count() {{ return {len(names) + 5}; }}\n")


LIBRARY = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "aotbench_emu/math_functions.h"
#include "aotbench_emu/vector_types.h"
#include <cstdint>
#include <type_traits>

static_assert(std::is_trivially_copyable<__half>::value && std::is_trivially_default_constructible<__half>::value, "");
static_assert(std::is_trivially_copyable<__half2>::value && std::is_trivially_default_constructible<__half2>::value,
              "");
static_assert(std::is_trivially_copyable<__nv_bfloat16>::value, "");
static_assert(std::is_trivially_copyable<__nv_bfloat162>::value, "");
static_assert(std::is_same<decltype(min(1, 2u)), unsigned int>::value, "CUDA's min(int, unsigned) is unsigned");
static_assert(std::is_same<decltype(max(1.0f, 2.0)), double>::value, "");
static_assert(std::is_same<decltype(min(1.0f, 2.0f)), float>::value, "");

template <typename H> static H from_bits(uint16_t b) { H h; std::memcpy(&h, &b, 2); return h; }
template <typename H> static uint16_t to_bits(H h) { uint16_t b; std::memcpy(&b, &h, 2); return b; }

template <typename H, typename H2>
static void binary(int op, const uint16_t *a, const uint16_t *b, uint16_t *out, long n) {
  for (long i = 0; i + 1 < n; i += 2) {
    const H x0 = from_bits<H>(a[i]), x1 = from_bits<H>(a[i + 1]), y0 = from_bits<H>(b[i]), y1 = from_bits<H>(b[i + 1]);
    H r0, r1;
    const H2 p(x0, x1), q(y0, y1);
    H2 r2 = p;
    switch (op) {
      case 0: r0 = __hadd(x0, y0); r1 = __hadd(x1, y1); break;
      case 1: r0 = __hsub(x0, y0); r1 = __hsub(x1, y1); break;
      case 2: r0 = __hmul(x0, y0); r1 = __hmul(x1, y1); break;
      case 3: r0 = __hdiv(x0, y0); r1 = __hdiv(x1, y1); break;
      case 4: r0 = x0 + y0; r1 = x1 + y1; break;
      case 5: r0 = x0 - y0; r1 = x1 - y1; break;
      case 6: r0 = x0 * y0; r1 = x1 * y1; break;
      case 7: r0 = x0 / y0; r1 = x1 / y1; break;
      case 8: r0 = x0; r0 += y0; r1 = x1; r1 += y1; break;
      case 9: r0 = __hmax(x0, y0); r1 = __hmax(x1, y1); break;
      case 10: r0 = __hmin(x0, y0); r1 = __hmin(x1, y1); break;
      default:
        switch (op) {
          case 11: r2 = __hadd2(p, q); break;
          case 12: r2 = __hsub2(p, q); break;
          case 13: r2 = __hmul2(p, q); break;
          case 14: r2 = __h2div(p, q); break;
          case 15: r2 = __hmax2(p, q); break;
          case 16: r2 = __hmin2(p, q); break;
          default: r2 *= q; break;
        }
        r0 = r2.x; r1 = r2.y;
    }
    out[i] = to_bits(r0); out[i + 1] = to_bits(r1);
  }
}

template <typename H>
static void compare(const uint16_t *a, const uint16_t *b, uint8_t *out, long n) {
  for (long i = 0; i < n; ++i) {
    const H x = from_bits<H>(a[i]), y = from_bits<H>(b[i]);
    const bool r[18] = {__heq(x, y), __hne(x, y), __hlt(x, y), __hle(x, y), __hgt(x, y), __hge(x, y),
                        __hequ(x, y), __hneu(x, y), __hltu(x, y), __hleu(x, y), __hgtu(x, y), __hgeu(x, y),
                        x == y, x != y, x < y, x <= y, x > y, x >= y};
    for (int k = 0; k < 18; ++k) out[18 * i + k] = r[k];
  }
}

extern "C" {
void half_to_float(const uint16_t *in, float *out, long n) {
  for (long i = 0; i < n; ++i) out[i] = __half2float(__ushort_as_half(in[i]));
}
void half_to_float_implicit(const uint16_t *in, float *out, long n) {
  for (long i = 0; i < n; ++i) { float f = from_bits<__half>(in[i]); out[i] = f; }
}
void float_to_half(const float *in, uint16_t *out, long n, int mode) {
  for (long i = 0; i < n; ++i) {
    __half h;
    switch (mode) {
      case 0: h = __float2half(in[i]); break;
      case 1: h = __float2half_rz(in[i]); break;
      case 2: h = __float2half_rd(in[i]); break;
      case 3: h = __float2half_ru(in[i]); break;
      default: h = in[i]; break;  // the implicit conversion
    }
    out[i] = __half_as_ushort(h);
  }
}
void double_to_half(const double *in, uint16_t *out, long n) {
  for (long i = 0; i < n; ++i) out[i] = to_bits(__double2half(in[i]));
}
void int_to_half(const long long *in, uint16_t *out, uint16_t *out_bf16, long n) {
  for (long i = 0; i < n; ++i) { out[i] = to_bits(__half(in[i])); out_bf16[i] = to_bits(__nv_bfloat16(in[i])); }
}
void bf16_to_float(const uint16_t *in, float *out, long n) {
  for (long i = 0; i < n; ++i) out[i] = __bfloat162float(__ushort_as_bfloat16(in[i]));
}
void float_to_bf16(const float *in, uint16_t *out, long n, int mode) {
  for (long i = 0; i < n; ++i) {
    __nv_bfloat16 h;
    switch (mode) {
      case 0: h = __float2bfloat16(in[i]); break;
      case 1: h = __float2bfloat16_rz(in[i]); break;
      case 2: h = __float2bfloat16_rd(in[i]); break;
      case 3: h = __float2bfloat16_ru(in[i]); break;
      default: h = in[i]; break;
    }
    out[i] = __bfloat16_as_ushort(h);
  }
}
void double_to_bf16(const double *in, uint16_t *out, long n) {
  for (long i = 0; i < n; ++i) out[i] = to_bits(__double2bfloat16(in[i]));
}

void half_binary(int op, const uint16_t *a, const uint16_t *b, uint16_t *out, long n) {
  binary<__half, __half2>(op, a, b, out, n);
}
void bf16_binary(int op, const uint16_t *a, const uint16_t *b, uint16_t *out, long n) {
  binary<__nv_bfloat16, __nv_bfloat162>(op, a, b, out, n);
}

void half_compare(const uint16_t *a, const uint16_t *b, uint8_t *out, long n) { compare<__half>(a, b, out, n); }
void bf16_compare(const uint16_t *a, const uint16_t *b, uint8_t *out, long n) {
  compare<__nv_bfloat16>(a, b, out, n);
}
void half_fma(const uint16_t *a, const uint16_t *b, const uint16_t *c, uint16_t *out, long n) {
  for (long i = 0; i < n; ++i)
    out[i] = to_bits(__hfma(from_bits<__half>(a[i]), from_bits<__half>(b[i]), from_bits<__half>(c[i])));
}
void bf16_fma(const uint16_t *a, const uint16_t *b, const uint16_t *c, uint16_t *out, long n) {
  for (long i = 0; i < n; ++i)
    out[i] = to_bits(__hfma(from_bits<__nv_bfloat16>(a[i]), from_bits<__nv_bfloat16>(b[i]),
                            from_bits<__nv_bfloat16>(c[i])));
}
// Unary half ops: __hneg, __habs, -h, hsqrt, hrcp, __hisnan, __hisinf, __hadd_sat(h, 0).
void half_unary(const uint16_t *a, uint16_t *out, long n) {
  for (long i = 0; i < n; ++i) {
    const __half h = from_bits<__half>(a[i]);
    const uint16_t r[8] = {to_bits(__hneg(h)), to_bits(__habs(h)), to_bits(-h), to_bits(hsqrt(h)), to_bits(hrcp(h)),
                           static_cast<uint16_t>(__hisnan(h)), static_cast<uint16_t>(__hisinf(h) + 1),
                           to_bits(__hadd_sat(h, __float2half(0.0f)))};
    for (int k = 0; k < 8; ++k) out[8 * i + k] = r[k];
  }
}

void int_ops(const uint32_t *a, const uint32_t *b, const uint32_t *c, uint32_t *out, long n) {
  for (long i = 0; i < n; ++i) {
    const int sa = static_cast<int>(a[i]), sb = static_cast<int>(b[i]);
    const uint32_t r[24] = {
        static_cast<uint32_t>(__popc(a[i])), static_cast<uint32_t>(__clz(sa)), static_cast<uint32_t>(__ffs(sa)),
        __brev(a[i]), __byte_perm(a[i], b[i], c[i]), static_cast<uint32_t>(__mulhi(sa, sb)), __umulhi(a[i], b[i]),
        static_cast<uint32_t>(__mul24(sa, sb)), __umul24(a[i], b[i]), __sad(sa, sb, c[i]), __usad(a[i], b[i], c[i]),
        static_cast<uint32_t>(__hadd(sa, sb)), static_cast<uint32_t>(__rhadd(sa, sb)), __uhadd(a[i], b[i]),
        __urhadd(a[i], b[i]), __funnelshift_l(a[i], b[i], c[i]), __funnelshift_r(a[i], b[i], c[i]),
        __funnelshift_lc(a[i], b[i], c[i] & 63u), __funnelshift_rc(a[i], b[i], c[i] & 63u),
        static_cast<uint32_t>(min(sa, sb)), static_cast<uint32_t>(max(sa, sb)), min(sa, b[i]), max(a[i], sb),
        __float_as_uint(__uint_as_float(a[i]))};
    for (int k = 0; k < 24; ++k) out[24 * i + k] = r[k];
  }
}
void ll_ops(const uint64_t *a, const uint64_t *b, uint64_t *out, long n) {
  for (long i = 0; i < n; ++i) {
    const long long sa = static_cast<long long>(a[i]), sb = static_cast<long long>(b[i]);
    const uint64_t r[8] = {static_cast<uint64_t>(__popcll(a[i])), static_cast<uint64_t>(__clzll(sa)),
                           static_cast<uint64_t>(__ffsll(sa)), __brevll(a[i]),
                           static_cast<uint64_t>(__mul64hi(sa, sb)), __umul64hi(a[i], b[i]),
                           static_cast<uint64_t>(min(sa, sb)), max(static_cast<unsigned long long>(a[i]), sb)};
    for (int k = 0; k < 8; ++k) out[8 * i + k] = r[k];
  }
}
void conversions(const float *x, long long *out, long n) {
  for (long i = 0; i < n; ++i) {
    const __half h = __float2half(x[i]);
    const long long r[8] = {__float2int_rn(x[i]), __float2int_rz(x[i]), __float2int_rd(x[i]), __float2int_ru(x[i]),
                            __float2uint_rn(x[i]), __float2ll_rn(x[i]), __half2int_rn(h), __half2int_rz(h)};
    for (int k = 0; k < 8; ++k) out[8 * i + k] = r[k];
  }
}
// Float functions: __saturatef, rsqrtf, __frsqrt_rn, sinpif, cospif, __fdividef, __expf, __logf, norm3df, __fmaf_rn.
void float_ops(const float *x, const float *y, float *out, long n) {
  for (long i = 0; i < n; ++i) {
    float s, c;
    sincospif(x[i], &s, &c);
    const float r[12] = {__saturatef(x[i]), rsqrtf(x[i]), __frsqrt_rn(x[i]), sinpif(x[i]), cospif(x[i]), s, c,
                         __fdividef(x[i], y[i]), __expf(x[i]), __logf(x[i]), norm3df(x[i], y[i], x[i] - y[i]),
                         __fmaf_rn(x[i], y[i], -x[i])};
    for (int k = 0; k < 12; ++k) out[12 * i + k] = r[k];
  }
}
int dim3_and_memory_checks() {
  int bad = 0;
  const int n = 1000;
  const int64_t a = 7, b = 3;
  dim3 grid(n / 256, 2);
  dim3 wide(a, b);
  const dim3 none;
  bad += !(grid.x == 3 && grid.y == 2 && grid.z == 1 && wide.x == 7 && wide.y == 3 && none.x == 1 && none.z == 1);
  const uint3 u = wide;
  const dim3 back(u);
  bad += !(u.x == 7 && u.y == 3 && u.z == 1 && back.y == 3);
  float4 v = {1, 2, 3, 4};
  float4 w = __ldg(&v);
  bad += !(w.w == 4.0f && __ldcs(&v.y) == 2.0f);
  __stcg(&v.x, 5.0);
  __stwt(&w, make_float4(6, 7, 8, 9));
  bad += !(v.x == 5.0f && w.z == 8.0f);
  const __half h = 1.5f;
  const float f = h;
  const __half from_int = 3, from_double = 2.25;
  const __half2 pair = {h, from_int};
  const float2 back2 = __half22float2(pair);
  bad += !(f == 1.5f && __half2float(from_int) == 3.0f && __half2float(from_double) == 2.25f && back2.y == 3.0f);
  const __half2 packed = __floats2half2_rn(0.5f, -2.0f);
  bad += !(__low2float(packed) == 0.5f && __high2float(packed) == -2.0f && __half2float(__high2half(packed)) == -2.0f);
  const __nv_bfloat162 bp = __floats2bfloat162_rn(1.0f, 3.0f);
  const float2 bback = __bfloat1622float2(bp);
  bad += !(bback.x == 1.0f && bback.y == 3.0f && __bfloat162float(__high2bfloat16(bp)) == 3.0f);
  const __nv_bfloat16 bf = 2.0f;
  bad += !(static_cast<float>(bf * bf) == 4.0f && static_cast<float>(-bf) == -2.0f);
  return bad;
}
}
"""


def _compile(tmp: Path, source: str, name: str, *extra: str) -> Path:
    (tmp / f"{name}.cc").write_text(source)
    out = tmp / f"lib{name}.so"
    proc = subprocess.run(["g++", *FLAGS, *extra, "-shared", "-o", str(out), str(tmp / f"{name}.cc")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    """The one library of this module, with the argument types of its functions declared."""
    path = _compile(tmp_path_factory.mktemp("emu_types"), LIBRARY + _vector_source(), "emu_types")
    handle = ctypes.CDLL(str(path))
    p, n, i = ctypes.c_void_p, ctypes.c_long, ctypes.c_int
    signatures = {
        "half_to_float": [p, p, n], "half_to_float_implicit": [p, p, n], "float_to_half": [p, p, n, i],
        "double_to_half": [p, p, n], "int_to_half": [p, p, p, n], "bf16_to_float": [p, p, n],
        "float_to_bf16": [p, p, n, i], "double_to_bf16": [p, p, n], "half_binary": [i, p, p, p, n],
        "bf16_binary": [i, p, p, p, n], "half_compare": [p, p, p, n], "bf16_compare": [p, p, p, n],
        "half_fma": [p, p, p, p, n], "bf16_fma": [p, p, p, p, n], "half_unary": [p, p, n],
        "int_ops": [p, p, p, p, n], "ll_ops": [p, p, p, n], "conversions": [p, p, n], "float_ops": [p, p, p, n],
        "vector_layout": [p],
    }
    for name, args in signatures.items():
        getattr(handle, name).argtypes = args
        getattr(handle, name).restype = None
    return handle


def call(fn, *arrays, extra=()):
    """``fn(arrays..., len(arrays[0]), extra...)`` with contiguous arrays; returns nothing (outputs are arrays)."""
    fn(*[a.ctypes.data for a in arrays], len(arrays[0]), *extra)


def run_out(fn, out_dtype, per_item, *inputs, extra=()):
    out = np.zeros(len(inputs[0]) * per_item, dtype=out_dtype)
    call_args = [np.ascontiguousarray(a) for a in inputs]
    fn(*[a.ctypes.data for a in call_args], out.ctypes.data, len(inputs[0]), *extra)
    return out.reshape(len(inputs[0]), per_item) if per_item > 1 else out


# ---------------------------------------------------------------------------------------------------------------
# references
# ---------------------------------------------------------------------------------------------------------------

try:
    import ml_dtypes

    def to_bf16_bits(x32: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(x32, np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)

    def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(bits, np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)
except ImportError:  # a numpy reference: round to nearest even on the float's low 16 bits
    def to_bf16_bits(x32: np.ndarray) -> np.ndarray:
        bits = np.asarray(x32, np.float32).view(np.uint32).astype(np.uint64)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        return np.where(np.isnan(x32), np.uint16(0x7FFF), rounded)

    def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
        return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def half_bits(x) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(x, np.float32).astype(np.float16).view(np.uint16)


def same_bits_or_both_nan(ours, ref, as_float) -> np.ndarray:
    """Indices where ``ours`` and ``ref`` (bit patterns) differ, a NaN matching any NaN."""
    ours_f, ref_f = as_float(ours), as_float(ref)
    bad = (ours != ref) & ~(np.isnan(ours_f) & np.isnan(ref_f))
    return np.flatnonzero(bad)


def as_half(bits):
    return np.asarray(bits, np.uint16).view(np.float16).astype(np.float32)


def random_floats(rng, count: int) -> np.ndarray:
    """Floats of every kind: random bit patterns (NaN, infinities, subnormals, huge), the half range with random
    mantissas, the half subnormal range, and the exact midpoints between adjacent halves and their neighbours."""
    q = count // 5
    bits = rng.integers(0, 2**32, size=q, dtype=np.uint64).astype(np.uint32).view(np.float32)
    sign = rng.choice([-1.0, 1.0], size=q)
    in_range = (sign * np.exp2(rng.uniform(-26, 16.5, size=q))).astype(np.float32)
    subnormal = (sign * np.exp2(rng.uniform(-26, -14, size=q))).astype(np.float32)
    h = rng.integers(0, 0x7BFF, size=q, dtype=np.uint16)  # finite halves below the largest
    lo, hi = as_half(h).astype(np.float64), as_half(h + 1).astype(np.float64)
    mid = ((lo + hi) / 2 * sign).astype(np.float32)  # exact: 12 bits
    near = np.nextafter(mid, rng.choice([-np.inf, np.inf], size=q).astype(np.float32))
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 65504, 65519.996, 65520, 65536, -65520,
                         2**-24, 2**-25, 2**-25 * 1.0000001, -(2**-25), 2**-14, 2**-14 - 2**-25, 1e-45, 3.4e38],
                        dtype=np.float32)
    return np.concatenate([bits, in_range, subnormal, mid, near, specials])


def directed(ours_rn_ref: np.ndarray, x: np.ndarray, mode: int, to_float, from_float_next) -> np.ndarray:
    """The reference of a directed rounding from the round-to-nearest reference: one step where it went the wrong
    way (rz: away from zero, rd: above x, ru: below x)."""
    with np.errstate(invalid="ignore"):  # signalling NaNs among the inputs
        v = to_float(ours_rn_ref).astype(np.float64)
        xd = x.astype(np.float64)
        if mode == 1:
            step, toward = np.abs(v) > np.abs(xd), np.zeros_like(xd)
        elif mode == 2:
            step, toward = v > xd, np.full_like(xd, -np.inf)
        else:
            step, toward = v < xd, np.full_like(xd, np.inf)
    step &= ~np.isnan(xd)
    return np.where(step, from_float_next(ours_rn_ref, toward), ours_rn_ref)


def half_next(bits, toward):
    """The next half from ``bits`` towards ``toward`` (numpy's float16 nextafter)."""
    with np.errstate(all="ignore"):  # the step from the largest half up is infinity, which is what is wanted
        return np.nextafter(bits.view(np.float16), toward.astype(np.float16)).view(np.uint16)


def bf16_next(bits, toward):
    """The next bfloat16 from ``bits`` towards ``toward``: one step of the magnitude's bit pattern."""
    bits = np.asarray(bits, np.uint16).astype(np.int64)
    f = bf16_to_f32(bits.astype(np.uint16)).astype(np.float64)
    away = (toward > f) == (f > 0)
    stepped = (bits & 0x8000) | ((bits & 0x7FFF) + np.where(away, 1, -1))
    from_zero = np.where(toward > 0, 0x0001, 0x8001)
    return np.where(f == 0, from_zero, stepped).astype(np.uint16)


def nearest_float32(exact: Fraction) -> np.float32:
    """``exact`` rounded once to float32, halfway cases to even."""
    c = np.float32(float(exact))
    best = None
    for cand in (np.nextafter(c, np.float32(-np.inf)), c, np.nextafter(c, np.float32(np.inf))):
        dist = abs(Fraction(float(cand)) - exact)
        even = not int(cand.view(np.uint32)) & 1
        if best is None or dist < best[0] or (dist == best[0] and even):
            best = (dist, cand)
    return best[1]


# ---------------------------------------------------------------------------------------------------------------
# the headers compile alone and together, warning-free
# ---------------------------------------------------------------------------------------------------------------

def test_every_header_compiles_alone_and_together_without_warnings(tmp_path):
    units = {f"alone_{k}.cc": f"#include <{h}>\n" for k, h in enumerate(HEADERS)}
    units["together.cc"] = "".join(f"#include <{h}>\n" for h in HEADERS)
    units["reversed.cc"] = "".join(f"#include <{h}>\n" for h in reversed(HEADERS)) + "#include <algorithm>\n"
    for name, text in units.items():
        (tmp_path / name).write_text(text)
    proc = subprocess.run(["g++", *FLAGS, "-Werror", "-fsyntax-only", *sorted(str(tmp_path / n) for n in units)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr
    for header in HEADERS:
        text = (EMU_INCLUDE / header).read_text()
        assert "#pragma once" in text
        includes = [line.split()[1] for line in text.splitlines() if line.startswith("#include")]
        assert all(inc.startswith("<") or inc == '"aotbench_emu/vector_types.h"' for inc in includes), includes


def test_the_warning_check_can_fail(tmp_path):
    """The header check's command fails on a warning: here a narrowing brace-initialised dim3 (nvcc's error)."""
    (tmp_path / "bad.cc").write_text('#include "aotbench_emu/vector_types.h"\nlong long n = 5;\ndim3 g{n, 2};\n')
    proc = subprocess.run(["g++", *FLAGS, "-Werror", "-fsyntax-only", str(tmp_path / "bad.cc")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "narrowing" in proc.stderr


# ---------------------------------------------------------------------------------------------------------------
# vector types
# ---------------------------------------------------------------------------------------------------------------

def test_vector_type_sizes_and_alignments_are_cudas(lib):
    names = [f"{base}{n}" for base in ELEMENTS for n in range(1, 5)] + ["dim3", "__half", "__half2",
                                                                        "__nv_bfloat16", "__nv_bfloat162"]
    assert lib.layout_count() == len(names) == len(EXPECTED_LAYOUT)
    out = np.zeros(2 * len(names), dtype=np.int64)
    lib.vector_layout(out.ctypes.data)
    measured = {name: (int(out[2 * k]), int(out[2 * k + 1])) for k, name in enumerate(names)}
    assert measured == EXPECTED_LAYOUT


def test_make_functions_dim3_and_cache_hinted_memory_access(lib):
    assert lib.make_checks() == 0
    assert lib.dim3_and_memory_checks() == 0


# ---------------------------------------------------------------------------------------------------------------
# half and bfloat16 conversions
# ---------------------------------------------------------------------------------------------------------------

def test_every_half_converts_to_its_exact_float(lib):
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    ref = bits.view(np.float16).astype(np.float32)
    for fn in (lib.half_to_float, lib.half_to_float_implicit):
        out = np.zeros(65536, dtype=np.float32)
        call(fn, bits, out)
        finite = ~np.isnan(ref)
        assert np.array_equal(out[finite].view(np.uint32), ref[finite].view(np.uint32))
        assert np.isnan(out[~finite]).all() and np.array_equal(np.signbit(out), np.signbit(ref))
    assert finite.sum() == 65536 - 2 * 1023


def test_floats_round_to_the_nearest_half_and_directed(lib, rng):
    x = random_floats(rng, 10**6)
    ref = half_bits(x)
    for mode in range(5):  # __float2half, _rz, _rd, _ru, the implicit conversion
        out = run_out(lambda a, o, n, m=mode: lib.float_to_half(a, o, n, m), np.uint16, 1, x)
        want = ref if mode in (0, 4) else directed(ref, x, mode, as_half, half_next)
        bad = same_bits_or_both_nan(out, want, as_half)
        assert bad.size == 0, (mode, [(float(x[i]), hex(out[i]), hex(want[i])) for i in bad[:5]])
    nan_out = run_out(lambda a, o, n: lib.float_to_half(a, o, n, 0), np.uint16, 1, np.array([np.nan], np.float32))
    assert nan_out[0] == 0x7FFF


def test_doubles_round_once_to_half_and_bfloat16(lib, rng):
    """A double just above a midpoint rounds up: converting through float would round it to the midpoint and
    then to even."""
    h = rng.integers(1, 0x7BFE, size=20000, dtype=np.uint16)
    lo, hi = as_half(h).astype(np.float64), as_half(h + 1).astype(np.float64)
    mid = (lo + hi) / 2
    tiny = (hi - lo) * 2.0**-30
    x = np.concatenate([mid + tiny, mid - tiny, mid])
    out = run_out(lib.double_to_half, np.uint16, 1, x)
    even = np.where(h % 2 == 0, h, h + 1).astype(np.uint16)
    assert np.array_equal(out, np.concatenate([h + 1, h, even]).astype(np.uint16))
    b = rng.integers(1, 0x7F7E, size=20000, dtype=np.uint16)
    blo, bhi = bf16_to_f32(b).astype(np.float64), bf16_to_f32(b + 1).astype(np.float64)
    bmid, btiny = (blo + bhi) / 2, (bhi - blo) * 2.0**-30
    out = run_out(lib.double_to_bf16, np.uint16, 1, np.concatenate([bmid + btiny, bmid - btiny, bmid]))
    beven = np.where(b % 2 == 0, b, b + 1).astype(np.uint16)
    assert np.array_equal(out, np.concatenate([b + 1, b, beven]).astype(np.uint16))
    # random doubles, against numpy's direct double -> half
    d = np.concatenate([rng.standard_normal(50000) * np.exp2(rng.uniform(-30, 20, 50000)),
                        [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e300, -1e-300, 65519.99999, 65520.0]])
    out = run_out(lib.double_to_half, np.uint16, 1, d)
    with np.errstate(over="ignore"):
        ref = d.astype(np.float16).view(np.uint16)
    bad = same_bits_or_both_nan(out, ref, as_half)
    assert bad.size == 0, [(d[i], hex(out[i])) for i in bad[:5]]


def test_integers_convert_to_half_and_bfloat16_rounding_once(lib, rng):
    x = np.concatenate([rng.integers(-2**62, 2**62, 5000), rng.integers(-70000, 70000, 5000),
                        [0, 1, -1, 65504, 65519, 65520, 2**24 + 1, 0x1008001, 2**63 - 1, -2**63,
                         # just above a bfloat16 midpoint by 1: a conversion through double would tie to even
                         2**62 + 2**54 + 1, -(2**62 + 2**54 + 1), 2**60 + 3 * 2**52 + 1, 2**55 + 2**47 + 1]]
                       ).astype(np.int64)
    half_out, bf_out = np.zeros(len(x), np.uint16), np.zeros(len(x), np.uint16)
    lib.int_to_half(x.ctypes.data, half_out.ctypes.data, bf_out.ctypes.data, len(x))
    exact = [int(v) for v in x]
    # reference: float64 holds every |x| < 2^53 exactly; above, halves are inf and bfloat16 rounds on bit 8
    small = np.abs(x) < 2**53
    with np.errstate(over="ignore"):
        ref = x[small].astype(np.float64).astype(np.float16).view(np.uint16)
    assert np.array_equal(half_out[small], ref)
    assert (as_half(half_out[~small]) == np.sign(x[~small]) * np.inf).all()
    want = []
    for v in exact:  # to 8 significant bits, halfway cases to even
        mag = abs(v)
        shift = max(mag.bit_length() - 8, 0)
        q, r = divmod(mag, 1 << shift)
        if r * 2 > (1 << shift) or (r * 2 == (1 << shift) and q & 1):
            q += 1
        want.append(q * 2.0**shift * (1 if v >= 0 else -1))
    got = bf16_to_f32(bf_out)
    bad = np.flatnonzero(got != np.array(want, np.float32))
    assert bad.size == 0, [(int(x[i]), float(got[i]), want[i]) for i in bad[:5]]


def test_floats_round_to_bfloat16_and_back(lib, rng):
    x = random_floats(rng, 10**6)
    ref = to_bf16_bits(x)
    as_bf = bf16_to_f32
    for mode in range(5):
        out = run_out(lambda a, o, n, m=mode: lib.float_to_bf16(a, o, n, m), np.uint16, 1, x)
        want = ref if mode in (0, 4) else directed(ref, x, mode, as_bf, bf16_next)
        bad = same_bits_or_both_nan(out, want, as_bf)
        assert bad.size == 0, (mode, [(float(x[i]), hex(out[i]), hex(want[i])) for i in bad[:5]])
        assert (out[np.isnan(x)] == 0x7FFF).all()  # the canonical quiet NaN
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    back = run_out(lib.bf16_to_float, np.float32, 1, bits)
    assert np.array_equal(back.view(np.uint32), bits.astype(np.uint32) << 16)


# ---------------------------------------------------------------------------------------------------------------
# arithmetic and comparisons
# ---------------------------------------------------------------------------------------------------------------

def random_halves(rng, n: int) -> np.ndarray:
    bits = rng.integers(0, 65536, size=n, dtype=np.uint32).astype(np.uint16)
    small = rng.integers(0, n, size=n // 4)
    bits[small] = half_bits(rng.standard_normal(len(small)))  # ordinary values, so sums cancel and tie
    return bits


def reference_binary(op: str, x: np.ndarray, y: np.ndarray, round_bits) -> np.ndarray:
    name = {"__hadd2": "+", "__hsub2": "-", "__hmul2": "*", "__h2div": "/", "half2 *": "*", "__hmax2": "__hmax",
            "__hmin2": "__hmin"}.get(op, op)
    with np.errstate(all="ignore"):
        if name in ("__hmax", "__hmin"):
            pick_x = (x > y) if name == "__hmax" else (x < y)
            tie_x = (x == y) & (np.signbit(y) if name == "__hmax" else np.signbit(x))
            r = np.where(np.isnan(x), y, np.where(np.isnan(y), x, np.where(pick_x | tie_x, x, y)))
            return round_bits(r)
        fn = {"__hadd": np.add, "+": np.add, "+=": np.add, "__hsub": np.subtract, "-": np.subtract,
              "__hmul": np.multiply, "*": np.multiply, "__hdiv": np.divide, "/": np.divide}[name]
        return round_bits(fn(x, y))


@pytest.mark.parametrize("kind", ["half", "bfloat16"])
def test_arithmetic_rounds_once_like_numpy(lib, rng, kind):
    n = 200_000
    if kind == "half":
        a, b = random_halves(rng, n), random_halves(rng, n)
        fn, to_f, round_bits = lib.half_binary, as_half, half_bits
    else:
        a, b = (rng.integers(0, 65536, size=n, dtype=np.uint32).astype(np.uint16) for _ in range(2))
        with np.errstate(all="ignore"):
            b[: n // 4] = to_bf16_bits(bf16_to_f32(a[: n // 4]) * rng.uniform(-2, 2, n // 4).astype(np.float32))
        fn, to_f, round_bits = lib.bf16_binary, bf16_to_f32, to_bf16_bits
    x, y = to_f(a), to_f(b)
    if kind == "half":  # numpy's own float16 arithmetic is the reference for the four operations
        with np.errstate(all="ignore"):
            np_ops = {"+": a.view(np.float16) + b.view(np.float16), "*": a.view(np.float16) * b.view(np.float16),
                      "/": a.view(np.float16) / b.view(np.float16)}
        for op, r in np_ops.items():
            out = run_out(lambda p, q, o, m, k=BINARY_OPS.index(op): fn(k, p, q, o, m), np.uint16, 1, a, b)
            assert same_bits_or_both_nan(out, r.view(np.uint16), to_f).size == 0, op
    for k, op in enumerate(BINARY_OPS):
        out = run_out(lambda p, q, o, m, k=k: fn(k, p, q, o, m), np.uint16, 1, a, b)
        bad = same_bits_or_both_nan(out, reference_binary(op, x, y, round_bits), to_f)
        assert bad.size == 0, (op, [(float(x[i]), float(y[i]), float(to_f(out[i:i + 1])[0])) for i in bad[:5]])


@pytest.mark.parametrize("kind", ["half", "bfloat16"])
def test_fma_rounds_the_exact_result_once(lib, rng, kind):
    n = 100_000
    if kind == "half":
        a, b, c = (random_halves(rng, n) for _ in range(3))
        fn, to_f, next_of = lib.half_fma, as_half, half_next

        def round64(v):
            with np.errstate(all="ignore"):
                return v.astype(np.float16).view(np.uint16)
    else:
        a, b, c = (to_bf16_bits(rng.standard_normal(n).astype(np.float32) * np.float32(4)) for _ in range(3))
        fn, to_f, next_of = lib.bf16_fma, bf16_to_f32, bf16_next

        def round64(v):  # float64 -> bfloat16 exactly: to float rounding to odd, then to nearest even
            f = v.astype(np.float32)
            inexact = (f.astype(np.float64) != v) & ~np.isnan(v)
            fb = f.view(np.uint32) - (np.abs(f.astype(np.float64)) > np.abs(v)).astype(np.uint32) * inexact
            return to_bf16_bits((fb | inexact.astype(np.uint32)).astype(np.uint32).view(np.float32))
    out = run_out(fn, np.uint16, 1, a, b, c)
    with np.errstate(all="ignore"):
        x, y, z = (to_f(v).astype(np.float64) for v in (a, b, c))
        p = x * y  # exact: at most 22 significant bits
        s = p + z
        bv = s - p
        err = (p - (s - bv)) + (z - bv)  # s + err == p + z exactly (TwoSum)
        r = round64(s)
        r64 = to_f(r).astype(np.float64)
        other = next_of(r, np.where(s > r64, np.inf, -np.inf))
        is_mid = np.isfinite(r64) & (s != r64) & (np.abs(s - r64) * 2 == np.abs(to_f(other) - r64))
        move = is_mid & (err != 0) & (np.sign(err) == np.sign(s - r64))
    want = np.where(move, other, r)
    bad = same_bits_or_both_nan(out, want, to_f)
    assert bad.size == 0, [(x[i], y[i], z[i], float(to_f(out[i:i + 1])[0])) for i in bad[:5]]


@pytest.mark.parametrize("kind", ["half", "bfloat16"])
def test_comparisons_ordered_and_unordered(lib, rng, kind):
    n = 50_000
    a = rng.integers(0, 65536, size=n, dtype=np.uint32).astype(np.uint16)
    b = np.where(rng.random(n) < 0.3, a, rng.integers(0, 65536, size=n, dtype=np.uint32).astype(np.uint16))
    b[:100] = a[:100] ^ 0x8000  # +0 and -0, x and -x
    fn, to_f = (lib.half_compare, as_half) if kind == "half" else (lib.bf16_compare, bf16_to_f32)
    out = run_out(fn, np.uint8, 18, a, b).astype(bool)
    x, y = to_f(a), to_f(b)
    with np.errstate(invalid="ignore"):
        ordered = [x == y, (x < y) | (x > y), x < y, x <= y, x > y, x >= y]
    unordered = [~((x < y) | (x > y)), ~(x == y), ~(x >= y), ~(x > y), ~(x <= y), ~(x < y)]
    operators = [ordered[0], unordered[1], ordered[2], ordered[3], ordered[4], ordered[5]]
    for k, (name, want) in enumerate(zip(COMPARISONS, ordered + unordered + operators)):
        assert np.array_equal(out[:, k], want), name
    assert np.isnan(x).any() and out[np.isnan(x)][:, 0].sum() == 0


def test_half_unary_operations(lib, rng):
    bits = np.concatenate([np.arange(65536, dtype=np.uint32).astype(np.uint16),
                           rng.integers(0, 65536, 1000, dtype=np.uint32).astype(np.uint16)])
    out = run_out(lib.half_unary, np.uint16, 8, bits)
    h = bits.view(np.float16)
    x = h.astype(np.float32)
    assert np.array_equal(out[:, 0], bits ^ 0x8000) and np.array_equal(out[:, 2], bits ^ 0x8000)
    assert np.array_equal(out[:, 1], bits & 0x7FFF)
    with np.errstate(all="ignore"):
        for col, ref in ((3, np.sqrt(x)), (4, np.float32(1) / x)):
            assert same_bits_or_both_nan(out[:, col], half_bits(ref), as_half).size == 0, col
    assert np.array_equal(out[:, 5].astype(bool), np.isnan(x))
    assert np.array_equal(out[:, 6].astype(np.int64) - 1, np.where(np.isinf(x), np.sign(x), 0).astype(np.int64))
    sat = as_half(out[:, 7])
    with np.errstate(invalid="ignore"):
        want = np.where(np.isnan(x) | (x <= 0), 0.0, np.minimum(x, 1.0))
    assert np.array_equal(sat, want.astype(np.float32)) and not np.signbit(sat).any()


# ---------------------------------------------------------------------------------------------------------------
# integer intrinsics
# ---------------------------------------------------------------------------------------------------------------

def _s32(v: int) -> int:
    return v - (1 << 32) if v & 0x80000000 else v


def _s64(v: int) -> int:
    return v - (1 << 64) if v >> 63 else v


def _int_reference(a: int, b: int, c: int) -> list[int]:
    m = 0xFFFFFFFF
    sa, sb = _s32(a), _s32(b)
    both = (b << 32) | a

    def s24(v):
        return ((v & 0xFFFFFF) ^ 0x800000) - 0x800000

    perm = sum(((both >> (8 * ((c >> (4 * k)) & 7))) & 0xFF) << (8 * k) for k in range(4))
    return [x & m for x in [
        bin(a).count("1"), 32 - a.bit_length(), (a & -a).bit_length(), int(f"{a:032b}"[::-1], 2), perm,
        (sa * sb) >> 32, (a * b) >> 32, s24(a) * s24(b), (a & 0xFFFFFF) * (b & 0xFFFFFF), abs(sa - sb) + c,
        abs(a - b) + c, (sa + sb) >> 1, (sa + sb + 1) >> 1, (a + b) >> 1, (a + b + 1) >> 1,
        (both << (c & 31)) >> 32, both >> (c & 31), (both << min(c & 63, 32)) >> 32, both >> min(c & 63, 32),
        min(sa, sb), max(sa, sb), min(a, b), max(a, b), a]]


def test_integer_intrinsics_against_python_integers(lib, rng):
    edges = [0, 1, 2, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFF, 0x00800000, 0x00FFFFFF, 0xFF800000, 0x80000001]
    n = 3000
    a = np.concatenate([rng.integers(0, 2**32, n, dtype=np.uint64), np.repeat(edges, len(edges))]).astype(np.uint32)
    b = np.concatenate([rng.integers(0, 2**32, n, dtype=np.uint64), np.tile(edges, len(edges))]).astype(np.uint32)
    c = np.concatenate([rng.integers(0, 2**32, n, dtype=np.uint64), rng.integers(0, 64, len(edges) ** 2)]
                       ).astype(np.uint32)
    out = run_out(lib.int_ops, np.uint32, len(INT_OPS), a, b, c)
    for i in range(len(a)):
        want = _int_reference(int(a[i]), int(b[i]), int(c[i]))
        got = [int(v) for v in out[i]]
        if got != want:
            wrong = [INT_OPS[k] for k in range(len(INT_OPS)) if got[k] != want[k]]
            pytest.fail(f"{wrong} of a={a[i]:#x} b={b[i]:#x} c={c[i]:#x}: {got} != {want}")


def test_64_bit_intrinsics_against_python_integers(lib, rng):
    edges = np.array([0, 1, 2**64 - 1, 2**63, 2**63 - 1, 2**32, 0xFFFFFFFF], dtype=np.uint64)
    a = np.concatenate([rng.integers(0, 2**64, 2000, dtype=np.uint64), np.repeat(edges, len(edges))])
    b = np.concatenate([rng.integers(0, 2**64, 2000, dtype=np.uint64), np.tile(edges, len(edges))])
    assert a.dtype == b.dtype == np.uint64
    out = run_out(lib.ll_ops, np.uint64, len(LL_OPS), a, b)
    m = 2**64 - 1
    for i in range(len(a)):
        x, y = int(a[i]), int(b[i])
        sx, sy = _s64(x), _s64(y)
        want = [bin(x).count("1"), 64 - x.bit_length(), (x & -x).bit_length(), int(f"{x:064b}"[::-1], 2),
                ((sx * sy) >> 64) & m, (x * y) >> 64, min(sx, sy) & m, max(x, y)]
        got = [int(v) for v in out[i]]
        assert got == want, ([LL_OPS[k] for k in range(len(LL_OPS)) if got[k] != want[k]], hex(x), hex(y))


# ---------------------------------------------------------------------------------------------------------------
# float intrinsics and conversions
# ---------------------------------------------------------------------------------------------------------------

def test_float_to_integer_conversions_round_and_saturate(lib, rng):
    edges = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 2**31, -(2**31), 2147483520, 4294967296, 4294967040,
             -1, -0.0, 1e20, -1e20, 2**63, -(2**63), np.inf, -np.inf, np.nan, 65504, 65520, -70000.5]
    x = np.concatenate([rng.standard_normal(20000) * np.exp2(rng.uniform(0, 70, 20000)),
                        rng.integers(-100, 100, 5000) + 0.5, edges]).astype(np.float32)
    out = run_out(lib.conversions, np.int64, len(CONVERSIONS), x)
    xd = x.astype(np.float64)

    def sat(v, lo, hi):
        with np.errstate(invalid="ignore"):
            return np.where(np.isnan(v), 0, np.clip(np.nan_to_num(v, posinf=hi, neginf=lo), lo, hi)).astype(np.int64)

    i32, u32, i64 = (-(2**31), 2**31 - 1), (0, 2**32 - 1), (-(2**63), 2**63 - 1)
    with np.errstate(over="ignore"):
        h = x.astype(np.float16).astype(np.float64)
    wants = [sat(np.rint(xd), *i32), sat(np.trunc(xd), *i32), sat(np.floor(xd), *i32), sat(np.ceil(xd), *i32),
             sat(np.rint(xd), *u32), None, sat(np.rint(h), *i32), sat(np.trunc(h), *i32)]
    for k, want in enumerate(wants):
        if want is not None:
            bad = np.flatnonzero(out[:, k] != want)
            assert bad.size == 0, (CONVERSIONS[k], [(float(x[i]), int(out[i, k]), int(want[i])) for i in bad[:5]])
    ll = out[:, 5]
    finite = np.isfinite(xd) & (np.abs(xd) < 2.0**62)
    assert np.array_equal(ll[finite], np.rint(xd[finite]).astype(np.int64))
    assert ll[xd == np.inf].tolist() == [i64[1]] and ll[xd == -np.inf].tolist() == [i64[0]]
    assert (ll[xd >= 2.0**63] == i64[1]).all() and (ll[xd < -(2.0**63)] == i64[0]).all()
    assert ll[np.isnan(xd)].tolist() == [0]


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    def ordered(v):
        i = v.astype(np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)

    return np.abs(ordered(a) - ordered(b))


def test_float_intrinsics(lib, rng):
    n = 20000
    x = np.concatenate([rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n)),
                        rng.uniform(-3, 3, n), rng.integers(-50, 50, 400) / 2.0,
                        [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, np.inf, -np.inf, np.nan, 1e-45, 2.0**-130, 2.0**24 + 2]]
                       ).astype(np.float32)
    y = np.concatenate([rng.standard_normal(len(x) - 6), [0.0, -0.0, np.inf, 2.0, 1e-45, 3e38]]).astype(np.float32)
    out = run_out(lib.float_ops, np.float32, 12, x, y)
    xd = x.astype(np.float64)
    with np.errstate(all="ignore"):
        sat = np.where(np.isnan(x), 0, np.clip(x, 0, 1)).astype(np.float32)
        assert np.array_equal(out[:, 0], sat) and not np.signbit(out[:, 0]).any()
        for col in (1, 2):  # rsqrtf, __frsqrt_rn: correctly rounded
            pos = x > 0
            assert np.isnan(out[~pos & (x != 0) & ~np.isnan(x), col]).all()
            assert (out[x == 0, col] == np.copysign(np.inf, x[x == 0])).all()
            assert _ulps(out[pos, col], (1 / np.sqrt(xd[pos])).astype(np.float32)).max() <= 1
        assert np.array_equal(out[:, 1], out[:, 2], equal_nan=True)
        finite_pos = np.isfinite(x) & (x > 0)
        for xi, r in zip(x[finite_pos][:3000], out[finite_pos][:3000, 1]):
            lo, hi = np.nextafter(r, np.float32(0)), np.nextafter(r, np.float32(np.inf))
            m_lo, m_hi = (Fraction(float(r)) + Fraction(float(lo))) / 2, (Fraction(float(r)) + Fraction(float(hi))) / 2
            assert Fraction(float(xi)) * m_lo**2 <= 1 <= Fraction(float(xi)) * m_hi**2, (xi, r)
        # sinpif, cospif, sincospif: exact at integers and half-integers, within an ulp elsewhere
        red = np.fmod(xd, 2.0)
        assert np.array_equal(out[:, 3], out[:, 5], equal_nan=True)
        assert np.array_equal(out[:, 4], out[:, 6], equal_nan=True)
        integer = np.isfinite(xd) & (xd == np.round(xd))
        assert np.array_equal(out[integer, 3], np.copysign(0, x[integer]).astype(np.float32))
        sin_at_integers = out[integer, 3]
        assert not np.signbit(sin_at_integers[x[integer] > 0]).any()
        assert np.signbit(sin_at_integers[x[integer] < 0]).all()
        assert np.array_equal(out[integer, 4], np.where(np.fmod(np.abs(xd[integer]), 2) == 0, 1, -1).astype(np.float32))
        half_int = np.isfinite(xd) & (np.fmod(np.abs(xd), 1) == 0.5)
        assert (out[half_int, 4] == 0).all() and not np.signbit(out[half_int, 4]).any()
        assert np.array_equal(np.abs(out[half_int, 3]), np.ones(half_int.sum(), np.float32))
        other = np.isfinite(xd) & ~integer & ~half_int
        assert _ulps(out[other, 3], np.sin(np.pi * red[other]).astype(np.float32)).max() <= 1
        assert _ulps(out[other, 4], np.cos(np.pi * red[other]).astype(np.float32)).max() <= 1
        assert np.isnan(out[~np.isfinite(xd), 3]).all() and np.isnan(out[~np.isfinite(xd), 4]).all()
        # __fdividef is the exact division here; __expf, __logf the precise functions
        assert np.array_equal(out[:, 7], x / y, equal_nan=True)
        finite = np.isfinite(x) & (np.abs(x) < 80)
        assert _ulps(out[finite, 8], np.exp(xd[finite]).astype(np.float32)).max() <= 1
        pos = np.isfinite(x) & (x > 0)
        assert _ulps(out[pos, 9], np.log(xd[pos]).astype(np.float32)).max() <= 1
        norm = np.sqrt(xd * xd + y.astype(np.float64) ** 2 + (x - y).astype(np.float64) ** 2).astype(np.float32)
        assert np.array_equal(out[:, 10], np.where(np.isinf(x) | np.isinf(y), np.inf, norm), equal_nan=True)
        rows = np.flatnonzero(np.isfinite(x) & np.isfinite(y) & (np.abs(x) < 1e15) & (np.abs(y) < 1e15))[:2000]
        fma = [nearest_float32(Fraction(float(x[i])) * Fraction(float(y[i])) - Fraction(float(x[i]))) for i in rows]
        assert np.array_equal(out[rows, 11].view(np.uint32), np.array(fma, np.float32).view(np.uint32))
