// aotbench CUDA emulator: CUDA's built-in vector types (char1 ... double4, uint3, dim3) and their make_* functions,
// for kernels compiled by the host C++ compiler. Sizes and alignments are CUDA's on a 64-bit Linux host (long is
// 8 bytes): 2- and 4-wide types are over-aligned like CUDA's, 3-wide ones keep their element's alignment, and
// the 4-wide 8-byte types (long4, longlong4, double4, ...) are aligned to 16 as CUDA 12 declares them. The types
// are plain aggregates (`float4 v = {1, 2, 3, 4};`), trivially copyable; the make_* functions are also constexpr.
#pragma once

#define AOTB_EMU_VEC1(T, E, A)                                                                                 \
  struct alignas(A) T##1 { E x; };                                                                             \
  constexpr inline T##1 make_##T##1(E x) { return T##1{x}; }
#define AOTB_EMU_VEC2(T, E, A)                                                                                 \
  struct alignas(A) T##2 { E x, y; };                                                                          \
  constexpr inline T##2 make_##T##2(E x, E y) { return T##2{x, y}; }
#define AOTB_EMU_VEC3(T, E, A)                                                                                 \
  struct alignas(A) T##3 { E x, y, z; };                                                                       \
  constexpr inline T##3 make_##T##3(E x, E y, E z) { return T##3{x, y, z}; }
#define AOTB_EMU_VEC4(T, E, A)                                                                                 \
  struct alignas(A) T##4 { E x, y, z, w; };                                                                    \
  constexpr inline T##4 make_##T##4(E x, E y, E z, E w) { return T##4{x, y, z, w}; }
// One family: the alignments of the 1-, 2-, 3- and 4-wide types.
#define AOTB_EMU_VEC(T, E, A1, A2, A3, A4)                                                                     \
  AOTB_EMU_VEC1(T, E, A1) AOTB_EMU_VEC2(T, E, A2) AOTB_EMU_VEC3(T, E, A3) AOTB_EMU_VEC4(T, E, A4)

AOTB_EMU_VEC(char, signed char, 1, 2, 1, 4)
AOTB_EMU_VEC(uchar, unsigned char, 1, 2, 1, 4)
AOTB_EMU_VEC(short, short, 2, 4, 2, 8)
AOTB_EMU_VEC(ushort, unsigned short, 2, 4, 2, 8)
AOTB_EMU_VEC(int, int, 4, 8, 4, 16)
AOTB_EMU_VEC(uint, unsigned int, 4, 8, 4, 16)
AOTB_EMU_VEC(long, long, 8, 16, 8, 16)
AOTB_EMU_VEC(ulong, unsigned long, 8, 16, 8, 16)
AOTB_EMU_VEC(longlong, long long, 8, 16, 8, 16)
AOTB_EMU_VEC(ulonglong, unsigned long long, 8, 16, 8, 16)
AOTB_EMU_VEC(float, float, 4, 8, 4, 16)
AOTB_EMU_VEC(double, double, 8, 16, 8, 16)

#undef AOTB_EMU_VEC
#undef AOTB_EMU_VEC1
#undef AOTB_EMU_VEC2
#undef AOTB_EMU_VEC3
#undef AOTB_EMU_VEC4

// Launch dimensions: every component defaults to 1. The parameters are unsigned int, so `dim3 g(n / 256, 2)`
// with int or int64_t arguments converts as any function argument does (no narrowing error, as with nvcc).
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};
