// Uses std::string at run time (Attr<std::string>, append, std::to_string), so a build with
// -D_GLIBCXX_USE_CXX11_ABI=1 references libstdc++'s std::__cxx11 symbols (tests/native/test_elf_abi.py).
// A load-time constructor appends a line to the file named by $HDR_LOAD_MARKER, which shows whether the
// library was ever loaded.
// Attributes: tag (str), count (int). Input: x int32 (n,). Output: uint8 (m,): the bytes of
// "<tag>:<count>:<sum of x>", zero-padded; returns 1 when they do not fit.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "custom_aot_extra.h"

__attribute__((constructor)) static void HdrRecordLoad() {
  const char *path = std::getenv("HDR_LOAD_MARKER");
  if (path == nullptr) return;
  if (FILE *f = std::fopen(path, "a")) {
    std::fputs("loaded\n", f);
    std::fclose(f);
  }
}

extern "C" int HdrDescribe(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                           void * /*stream*/, void *extra_void) {
  auto *extra = static_cast<AotExtra *>(extra_void);
  if (nparam < 2 || ndims[0] != 1 || std::strcmp(dtypes[0], "int32") != 0) return 2;
  const int32_t *x = static_cast<const int32_t *>(params[0]);
  int64_t sum = 0;
  for (int64_t i = 0; i < shapes[0][0]; i++) sum += x[i];

  std::string text = extra->Attr<std::string>("tag");
  text.append(":");
  text += std::to_string(extra->Attr<int64_t>("count"));
  text += ":" + std::to_string(sum);

  const size_t capacity = static_cast<size_t>(shapes[1][0]);
  if (text.size() > capacity) return 1;
  char *out = static_cast<char *>(params[1]);
  std::memset(out, 0, capacity);
  std::memcpy(out, text.data(), text.size());
  return 0;
}
