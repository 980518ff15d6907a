/*
 * custom_aot_extra.h -- the interface between an aot kernel and the program that calls it.
 *
 * Written for aotbench. Source- and binary-compatible with the AotExtra / AotKernelData layout that
 * MindSpore's ops.Custom(..., "aot") host uses (Itanium C++ ABI, LP64), so a kernel built against this header
 * runs unchanged in either host, and a kernel built against MindSpore's standalone header runs in aotbench.
 *
 * Binary contract (checked by aotbench's layout test, which compiles a probe against this file):
 *   sizeof(AotKernelData) == 8    : a vptr only
 *   sizeof(AotExtra)      == 40   : vptr @0, std::vector<size_t> workspace_ @8, AotKernelData *kernel_data_ @32
 *   AotExtra vtable slots  (0,1)  : destructor (complete, deleting)
 *                            2    : HasAttr            6 : GetAttrStr
 *                            3    : GetAttrBool        7 : GetAttrIntVec
 *                            4    : GetAttrInt         8 : GetAttrFloatVec
 *                            5    : GetAttrFloat       9 : GetAttrInt2DVec
 *                                                     10 : GetAttrFloat2DVec
 *   Every attribute name is a std::string passed BY VALUE, so kernel and host must agree on the libstdc++
 *   string ABI: compile with -D_GLIBCXX_USE_CXX11_ABI=0 (the documented flags do).
 *
 * Entry points a kernel library exports with C linkage (F is the name after the colon in "file.cc:F"):
 *   int F(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream, void *extra);
 *   int FInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra);               (optional)
 *   std::vector<int64_t> FInferShape(int *ndims, int64_t **shapes, AotExtra *extra);             (optional)
 *   std::vector<std::vector<int64_t>> FInferShape(...)     (the form used when the op has several outputs)
 */
#ifndef AOTBENCH_CUSTOM_AOT_EXTRA_H_
#define AOTBENCH_CUSTOM_AOT_EXTRA_H_

#include <cstddef>
#include <cstdint>
#include <iostream>  // MindSpore's standalone header includes it: kernels use std::cout without it
#include <string>
#include <vector>

/* Version of this header. Bumped when anything a compiled kernel can observe changes; aotbench puts it in
 * every cache key, so a new header never reuses a library built against an old one. The binary layout above
 * has not changed since the first version and is not expected to (version 2 added <iostream>). */
#define AOTBENCH_AOT_EXTRA_VERSION 2

/* Base class of the per-kernel state a kernel creates in FInit (typically its attributes, decoded once).
 * Owner: the AotExtra it is handed to with SetKernelData; it is deleted through this virtual destructor,
 * i.e. by code inside the kernel library, before the library is released. */
class AotKernelData {
 public:
  AotKernelData() = default;
  virtual ~AotKernelData() = default;
};

/* What the host hands to FInit, FInferShape and F (as `void *extra`): the op's attributes, the workspace
 * sizes FInit requests, and the kernel's own state. Owner: the host. One AotExtra serves one concrete input
 * signature of one op. */
class AotExtra {
 public:
  AotExtra() = default;
  virtual ~AotExtra() = default;

  /* The value of attribute `name`, read as T. T must be exactly one of the eight attribute types:
   *   bool, int64_t, float, std::string, std::vector<int64_t>, std::vector<float>,
   *   std::vector<std::vector<int64_t>>, std::vector<std::vector<float>>.
   * There is no implicit conversion: an attribute registered from a Python int must be read as int64_t, a
   * Python float as float. The host throws (and aotbench reports an AttrError naming the attribute) when the
   * name is missing or the type differs. Any other T is rejected at compile time. */
  template <typename T>
  T Attr(std::string name) {
    static_assert(sizeof(T) == 0,
                  "AotExtra::Attr<T>: unsupported attribute type. Use one of: bool, int64_t, float, std::string, "
                  "std::vector<int64_t>, std::vector<float>, std::vector<std::vector<int64_t>>, "
                  "std::vector<std::vector<float>>");
    return T();
  }

  /* Workspace sizes, in BYTES, one entry per buffer. Set in FInit; the buffers arrive in F after the outputs
   * in `params`. Owner of the buffers: the host (aligned to 64 bytes, valid for the duration of F). */
  void SetWorkSpace(const std::vector<size_t> &workspace) { workspace_ = workspace; }
  const std::vector<size_t> &WorkSpace() const { return workspace_; }

  /* The kernel's own state (see AotKernelData). SetKernelData transfers ownership to this AotExtra. */
  void SetKernelData(AotKernelData *kernel_data) { kernel_data_ = kernel_data; }
  AotKernelData *KernelData() const { return kernel_data_; }

  /* Deletes the kernel data (through its virtual destructor) and forgets it. The host calls this before it
   * re-runs FInit and before the kernel library is released. */
  void DestructKernelData() {
    delete kernel_data_;
    kernel_data_ = nullptr;
  }

  /* True when an attribute called `name` exists, whatever its type. Never throws. */
  virtual bool HasAttr(std::string name) = 0;

 private:
  /* Typed getters, implemented by the host; kernels use Attr<T> instead. Slot order is part of the ABI. */
  virtual bool GetAttrBool(std::string name) = 0;
  virtual int64_t GetAttrInt(std::string name) = 0;
  virtual float GetAttrFloat(std::string name) = 0;
  virtual std::string GetAttrStr(std::string name) = 0;
  virtual std::vector<int64_t> GetAttrIntVec(std::string name) = 0;
  virtual std::vector<float> GetAttrFloatVec(std::string name) = 0;
  virtual std::vector<std::vector<int64_t>> GetAttrInt2DVec(std::string name) = 0;
  virtual std::vector<std::vector<float>> GetAttrFloat2DVec(std::string name) = 0;

  std::vector<size_t> workspace_;       /* bytes per workspace buffer, as set by FInit */
  AotKernelData *kernel_data_ = nullptr; /* owned; see DestructKernelData */
};

template <>
inline bool AotExtra::Attr<bool>(std::string name) { return GetAttrBool(name); }
template <>
inline int64_t AotExtra::Attr<int64_t>(std::string name) { return GetAttrInt(name); }
template <>
inline float AotExtra::Attr<float>(std::string name) { return GetAttrFloat(name); }
template <>
inline std::string AotExtra::Attr<std::string>(std::string name) { return GetAttrStr(name); }
template <>
inline std::vector<int64_t> AotExtra::Attr<std::vector<int64_t>>(std::string name) { return GetAttrIntVec(name); }
template <>
inline std::vector<float> AotExtra::Attr<std::vector<float>>(std::string name) { return GetAttrFloatVec(name); }
template <>
inline std::vector<std::vector<int64_t>> AotExtra::Attr<std::vector<std::vector<int64_t>>>(std::string name) {
  return GetAttrInt2DVec(name);
}
template <>
inline std::vector<std::vector<float>> AotExtra::Attr<std::vector<std::vector<float>>>(std::string name) {
  return GetAttrFloat2DVec(name);
}

#endif /* AOTBENCH_CUSTOM_AOT_EXTRA_H_ */
