// Dynamic symbols of known kinds, for aotbench.elf (tests/native/test_elf_abi.py). No aot entry points.
#include <cstddef>
#include <cstring>

extern "C" int hdr_c_add(int a, int b) { return a + b; }
extern "C" double hdr_c_scale(double x) { return 2.5 * x; }
extern "C" {
int hdr_c_data = 7;  // an exported object, not a function
}

static int hdr_internal(int a) { return a - 1; }  // internal linkage: not in .dynsym

// References strlen, which libc defines: an undefined dynamic symbol.
extern "C" std::size_t hdr_c_len(const char *s) { return std::strlen(s) + hdr_internal(1); }

int hdr_cpp_twice(int a) { return 2 * a; }  // no extern "C": exported as _Z13hdr_cpp_twicei

// 15 characters, so its mangled name _Z15hdr_a_somethingv contains "5hdr_a", the length-prefixed form of the
// name hdr_a, which nothing defines.
int hdr_a_something() { return 3; }

namespace hdr {
int nested(long v) { return static_cast<int>(v); }  // _ZN3hdr6nestedEl
}  // namespace hdr
