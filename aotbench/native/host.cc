// The aotbench native host: implements AotExtra over a typed attribute table and calls a kernel's entry
// points inside try/catch, behind a plain C interface that Python binds with ctypes.
//
// Built on first use by aotbench's build layer with the documented C++ flags, in particular
// -D_GLIBCXX_USE_CXX11_ABI=0: the attribute names that kernels pass to the getters are std::string by value,
// so this file and every kernel must agree on the string ABI.
//
// Error protocol: every aotb_call_* returns one of the AOTB_* codes below; on AOTB_EXCEPTION or
// AOTB_ATTR_ERROR the details are in thread-local state read by the aotb_error_* functions.

#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "custom_aot_extra.h"

#define AOTB_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kHostVersion = 1;

// Call outcome codes (mirrored in aotbench/host.py).
enum Outcome { AOTB_OK = 0, AOTB_STATUS = 1, AOTB_EXCEPTION = 2, AOTB_ATTR_ERROR = 3, AOTB_TOO_SMALL = 4 };

// Attribute kinds (mirrored in aotbench/attrs.py). kEmptyList satisfies any of the four list getters.
enum Kind {
  kMissing = 0, kBool = 1, kInt = 2, kFloat = 3, kStr = 4,
  kIntVec = 5, kFloatVec = 6, kInt2D = 7, kFloat2D = 8, kEmptyList = 9
};

struct AttrValue {
  Kind kind = kMissing;
  bool b = false;
  int64_t i = 0;
  float f = 0.0f;
  std::string s;
  std::vector<int64_t> iv;
  std::vector<float> fv;
  std::vector<std::vector<int64_t>> i2;
  std::vector<std::vector<float>> f2;
};

// Thrown by the getters; caught by the aotb_call_* wrappers (it may travel through kernel frames).
struct AttrFailure {
  std::string name;
  Kind requested;
  Kind registered;
};

struct ErrorState {
  std::string message;
  std::string attr_name;
  int attr_requested = 0;
  int attr_registered = 0;
};
thread_local ErrorState g_error;

class HostExtra final : public AotExtra {
 public:
  std::map<std::string, AttrValue> attrs;

  bool HasAttr(std::string name) override { return attrs.count(name) != 0; }

 private:
  const AttrValue &Get(const std::string &name, Kind requested) {
    auto it = attrs.find(name);
    if (it == attrs.end()) throw AttrFailure{name, requested, kMissing};
    Kind have = it->second.kind;
    bool list_ok = have == kEmptyList && requested >= kIntVec && requested <= kFloat2D;
    if (have != requested && !list_ok) throw AttrFailure{name, requested, have};
    return it->second;
  }
  bool GetAttrBool(std::string name) override { return Get(name, kBool).b; }
  int64_t GetAttrInt(std::string name) override { return Get(name, kInt).i; }
  float GetAttrFloat(std::string name) override { return Get(name, kFloat).f; }
  std::string GetAttrStr(std::string name) override { return Get(name, kStr).s; }
  std::vector<int64_t> GetAttrIntVec(std::string name) override { return Get(name, kIntVec).iv; }
  std::vector<float> GetAttrFloatVec(std::string name) override { return Get(name, kFloatVec).fv; }
  std::vector<std::vector<int64_t>> GetAttrInt2DVec(std::string name) override { return Get(name, kInt2D).i2; }
  std::vector<std::vector<float>> GetAttrFloat2DVec(std::string name) override { return Get(name, kFloat2D).f2; }
};

HostExtra *AsHost(void *extra) { return static_cast<HostExtra *>(extra); }

AttrValue &Slot(void *extra, const char *name, Kind kind) {
  AttrValue &v = AsHost(extra)->attrs[name];
  v = AttrValue();
  v.kind = kind;
  return v;
}

template <typename T>
std::vector<std::vector<T>> Unflatten(const T *flat, const int64_t *lengths, size_t rows) {
  std::vector<std::vector<T>> out(rows);
  size_t at = 0;
  for (size_t r = 0; r < rows; ++r) {
    out[r].assign(flat + at, flat + at + lengths[r]);
    at += static_cast<size_t>(lengths[r]);
  }
  return out;
}

// Runs `body` and turns anything it throws into an outcome code plus thread-local error text.
template <typename Body>
int Guarded(Body body) {
  try {
    return body();
  } catch (const AttrFailure &e) {
    g_error.message = "attribute error";
    g_error.attr_name = e.name;
    g_error.attr_requested = e.requested;
    g_error.attr_registered = e.registered;
    return AOTB_ATTR_ERROR;
  } catch (const std::exception &e) {
    g_error.message = e.what();
    return AOTB_EXCEPTION;
  } catch (...) {
    g_error.message = "an exception that is not a std::exception";
    return AOTB_EXCEPTION;
  }
}

using KernelFn = int (*)(int, void **, int *, int64_t **, const char **, void *, void *);
using InitFn = int (*)(int *, int64_t **, const char **, AotExtra *);
using InferFn = std::vector<int64_t> (*)(int *, int64_t **, AotExtra *);
using InferMultiFn = std::vector<std::vector<int64_t>> (*)(int *, int64_t **, AotExtra *);

}  // namespace

// One prepared kernel call. Python fills it once per input signature and rewrites only params[] per call.
struct AotbCall {
  void *fn;
  int32_t nparam;
  int32_t status;  // out: F's return value
  void **params;
  int *ndims;
  int64_t **shapes;
  const char **dtypes;
  void *stream;
  void *extra;
};

AOTB_EXPORT int aotb_host_version() { return kHostVersion; }
AOTB_EXPORT int aotb_host_call_size() { return static_cast<int>(sizeof(AotbCall)); }
AOTB_EXPORT int aotb_host_extra_size() { return static_cast<int>(sizeof(AotExtra)); }

AOTB_EXPORT void *aotb_extra_new() { return new (std::nothrow) HostExtra(); }

// Destroys an extra, deleting its kernel data first (kernel code: the library must still be loaded).
AOTB_EXPORT int aotb_extra_free(void *extra) {
  return Guarded([&] {
    HostExtra *h = AsHost(extra);
    h->DestructKernelData();
    delete h;
    return AOTB_OK;
  });
}

AOTB_EXPORT int aotb_extra_destruct_kernel_data(void *extra) {
  return Guarded([&] {
    AsHost(extra)->DestructKernelData();
    AsHost(extra)->SetWorkSpace({});
    return AOTB_OK;
  });
}

AOTB_EXPORT int64_t aotb_extra_workspace_count(void *extra) {
  return static_cast<int64_t>(AsHost(extra)->WorkSpace().size());
}

AOTB_EXPORT void aotb_extra_workspace_sizes(void *extra, uint64_t *out) {
  const std::vector<size_t> &w = AsHost(extra)->WorkSpace();
  for (size_t k = 0; k < w.size(); ++k) out[k] = w[k];
}

AOTB_EXPORT void aotb_extra_set_bool(void *extra, const char *name, int value) {
  Slot(extra, name, kBool).b = value != 0;
}
AOTB_EXPORT void aotb_extra_set_int(void *extra, const char *name, int64_t value) {
  Slot(extra, name, kInt).i = value;
}
AOTB_EXPORT void aotb_extra_set_float(void *extra, const char *name, float value) {
  Slot(extra, name, kFloat).f = value;
}
AOTB_EXPORT void aotb_extra_set_str(void *extra, const char *name, const char *data, size_t size) {
  Slot(extra, name, kStr).s.assign(data, size);
}
AOTB_EXPORT void aotb_extra_set_int_vec(void *extra, const char *name, const int64_t *data, size_t n) {
  Slot(extra, name, kIntVec).iv.assign(data, data + n);
}
AOTB_EXPORT void aotb_extra_set_float_vec(void *extra, const char *name, const float *data, size_t n) {
  Slot(extra, name, kFloatVec).fv.assign(data, data + n);
}
AOTB_EXPORT void aotb_extra_set_int_2d(void *extra, const char *name, const int64_t *flat, const int64_t *lengths,
                                       size_t rows) {
  Slot(extra, name, kInt2D).i2 = Unflatten(flat, lengths, rows);
}
AOTB_EXPORT void aotb_extra_set_float_2d(void *extra, const char *name, const float *flat, const int64_t *lengths,
                                         size_t rows) {
  Slot(extra, name, kFloat2D).f2 = Unflatten(flat, lengths, rows);
}
AOTB_EXPORT void aotb_extra_set_empty_list(void *extra, const char *name) { Slot(extra, name, kEmptyList); }

// The hot path: one call of F. *status receives F's return value.
AOTB_EXPORT int aotb_call_kernel(AotbCall *c) {
  return Guarded([&] {
    c->status = reinterpret_cast<KernelFn>(c->fn)(c->nparam, c->params, c->ndims, c->shapes, c->dtypes, c->stream,
                                                  c->extra);
    return c->status == 0 ? AOTB_OK : AOTB_STATUS;
  });
}

AOTB_EXPORT int aotb_call_init(void *fn, int *ndims, int64_t **shapes, const char **dtypes, void *extra,
                               int32_t *status) {
  return Guarded([&] {
    *status = reinterpret_cast<InitFn>(fn)(ndims, shapes, dtypes, AsHost(extra));
    return *status == 0 ? AOTB_OK : AOTB_STATUS;
  });
}

// Calls FInferShape (multi != 0: the vector-of-vectors form) and writes the result into `out` as
// [n_outputs, rank_0, dims_0..., rank_1, dims_1...]. When `capacity` is too small, *needed receives the size
// and AOTB_TOO_SMALL is returned (call again with a larger buffer).
AOTB_EXPORT int aotb_call_infer(void *fn, int multi, int *ndims, int64_t **shapes, void *extra, int64_t *out,
                                int64_t capacity, int64_t *needed) {
  return Guarded([&] {
    std::vector<std::vector<int64_t>> result;
    if (multi) {
      result = reinterpret_cast<InferMultiFn>(fn)(ndims, shapes, AsHost(extra));
    } else {
      result.push_back(reinterpret_cast<InferFn>(fn)(ndims, shapes, AsHost(extra)));
    }
    int64_t size = 1;
    for (const auto &s : result) size += 1 + static_cast<int64_t>(s.size());
    *needed = size;
    if (size > capacity) return AOTB_TOO_SMALL;
    int64_t at = 0;
    out[at++] = static_cast<int64_t>(result.size());
    for (const auto &s : result) {
      out[at++] = static_cast<int64_t>(s.size());
      for (int64_t d : s) out[at++] = d;
    }
    return AOTB_OK;
  });
}

AOTB_EXPORT const char *aotb_error_message() { return g_error.message.c_str(); }
AOTB_EXPORT const char *aotb_error_attr_name() { return g_error.attr_name.c_str(); }
AOTB_EXPORT int aotb_error_attr_requested() { return g_error.attr_requested; }
AOTB_EXPORT int aotb_error_attr_registered() { return g_error.attr_registered; }
