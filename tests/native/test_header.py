"""custom_aot_extra.h: its binary layout, its compatibility with an independent copy, and its diagnostics.

The layout facts checked here are those of /work/shared/design/ABI.md section 3 (Itanium C++ ABI, LP64). They
are measured from compiled code, never read from the header's text.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench._version import HEADER_VERSION

KERNELS = Path(__file__).resolve().parents[1] / "support" / "kernels"
DOCUMENTED_FLAGS = ["-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=0"]

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")

#: Vtable slot of each virtual function of AotExtra (8-byte entries counted from the vptr's target).
EXPECTED_SLOTS = {
    "HasAttr": 2, "GetAttrBool": 3, "GetAttrInt": 4, "GetAttrFloat": 5, "GetAttrStr": 6,
    "GetAttrIntVec": 7, "GetAttrFloatVec": 8, "GetAttrInt2DVec": 9, "GetAttrFloat2DVec": 10,
}
GETTERS = [name for name in EXPECTED_SLOTS if name != "HasAttr"]


def gxx(*args: str | Path) -> str:
    """Run g++ with ``args``; fail the test with the compiler's output when it does not succeed."""
    proc = subprocess.run(["g++", *map(str, args)], check=False, capture_output=True, text=True)
    assert proc.returncode == 0, f"g++ {' '.join(map(str, args))} failed:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


# ---------------------------------------------------------------------------------------------------------------
# 1. Layout probe
# ---------------------------------------------------------------------------------------------------------------

_RETURNS = {
    "HasAttr": ("bool", "false"), "GetAttrBool": ("bool", "false"), "GetAttrInt": ("int64_t", "0"),
    "GetAttrFloat": ("float", "0"), "GetAttrStr": ("std::string", "{}"),
    "GetAttrIntVec": ("std::vector<int64_t>", "{}"), "GetAttrFloatVec": ("std::vector<float>", "{}"),
    "GetAttrInt2DVec": ("std::vector<std::vector<int64_t>>", "{}"),
    "GetAttrFloat2DVec": ("std::vector<std::vector<float>>", "{}"),
}
_OVERRIDES = "\n".join(f"  {ret} {name}(std::string) override {{ return {value}; }}"
                       for name, (ret, value) in _RETURNS.items())
_SLOT_FIELDS = ", ".join(f'\\"{name}\\": %ld' for name in EXPECTED_SLOTS)
_SLOT_ARGS = ", ".join(f"Slot(&Probe::{name})" for name in EXPECTED_SLOTS)
_PRIVATE_DETECTORS = "\n".join(
    f"template <typename E, typename = void> struct Public{n} : std::false_type {{}};\n"
    f"template <typename E> struct Public{n}<E, decltype(void(std::declval<E &>().{n}(std::string())))>"
    f" : std::true_type {{}};" for n in GETTERS)
_PRIVATE_CHECK = " && ".join(f"!Public{n}<AotExtra>::value" for n in GETTERS)

PROBE_SOURCE = r"""
// Measures the binary layout of AotExtra / AotKernelData as compiled, without `#define private public`.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "custom_aot_extra.h"

static int g_destroyed = 0, g_deleted = 0;

// Count frees, so the destructor slots can be told apart (complete: destroys; deleting: destroys and frees).
void *operator new(std::size_t n) {
  if (void *p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void *p) noexcept { ++g_deleted; std::free(p); }
void operator delete(void *p, std::size_t) noexcept { ++g_deleted; std::free(p); }

// Overrides every virtual function publicly, so that &Probe::GetAttrInt etc. can be formed.
class Probe : public AotExtra {
 public:
  ~Probe() override { ++g_destroyed; }
@OVERRIDES@
};

// Itanium C++ ABI: a pointer to a virtual member function is {1 + byte offset in the vtable, this adjustment}.
template <typename PMF>
long Slot(PMF pmf) {
  static_assert(sizeof(PMF) == 2 * sizeof(std::ptrdiff_t), "not an Itanium pointer to member function");
  std::ptrdiff_t word[2];
  std::memcpy(word, &pmf, sizeof word);
  if ((word[0] & 1) == 0 || word[1] != 0) return -1;  // not virtual, or needs a this adjustment
  return static_cast<long>((word[0] - 1) / static_cast<std::ptrdiff_t>(sizeof(void *)));
}

// Calls vtable entry `slot` of `e` as a destructor; returns 10 * (objects destroyed) + (blocks freed).
static int CallDestructorSlot(AotExtra *e, int slot) {
  void **vtable;
  std::memcpy(&vtable, e, sizeof vtable);  // the vptr is the object's first word
  int destroyed = g_destroyed, deleted = g_deleted;
  reinterpret_cast<void (*)(AotExtra *)>(vtable[slot])(e);
  return 10 * (g_destroyed - destroyed) + (g_deleted - deleted);
}

@DETECTORS@

int main() {
  Probe probe;
  AotExtra *e = &probe;
  const char *base = reinterpret_cast<const char *>(e);
  long workspace_offset = reinterpret_cast<const char *>(&e->WorkSpace()) - base;

  AotKernelData marker;
  e->SetKernelData(&marker);
  std::string kernel_data_offsets;
  for (std::size_t off = 0; off + sizeof(void *) <= sizeof(AotExtra); ++off) {
    void *word;
    std::memcpy(&word, base + off, sizeof word);
    if (word == &marker) kernel_data_offsets += (kernel_data_offsets.empty() ? "" : ", ") + std::to_string(off);
  }
  bool kernel_data_roundtrip = e->KernelData() == &marker;
  e->SetKernelData(nullptr);

  AotExtra *heap = new Probe;
  int slot0 = CallDestructorSlot(heap, 0);  // complete-object destructor: the memory stays allocated
  ::operator delete(static_cast<void *>(heap));
  int slot1 = CallDestructorSlot(new Probe, 1);  // deleting destructor

  std::printf("{\"sizeof_kernel_data\": %zu, \"sizeof_extra\": %zu, \"workspace_offset\": %ld, "
              "\"kernel_data_offsets\": [%s], \"kernel_data_roundtrip\": %s, \"kernel_data_virtual_dtor\": %s, "
              "\"dtor_slot0\": %d, \"dtor_slot1\": %d, \"getters_private\": %s, \"slots\": {@SLOT_FIELDS@}}\n",
              sizeof(AotKernelData), sizeof(AotExtra), workspace_offset, kernel_data_offsets.c_str(),
              kernel_data_roundtrip ? "true" : "false",
              std::has_virtual_destructor<AotKernelData>::value ? "true" : "false", slot0, slot1,
              (@PRIVATE_CHECK@) ? "true" : "false", @SLOT_ARGS@);
  return 0;
}
""".replace("@OVERRIDES@", _OVERRIDES).replace("@DETECTORS@", _PRIVATE_DETECTORS) \
   .replace("@SLOT_FIELDS@", _SLOT_FIELDS).replace("@SLOT_ARGS@", _SLOT_ARGS) \
   .replace("@PRIVATE_CHECK@", _PRIVATE_CHECK)


@pytest.fixture(scope="module")
def layout(tmp_path_factory) -> dict:
    """Compile the probe against aotbench's header with the documented flags, run it, parse its JSON."""
    work = tmp_path_factory.mktemp("layout-probe")
    (work / "probe.cc").write_text(PROBE_SOURCE)
    gxx(*DOCUMENTED_FLAGS, f"-I{aotbench.get_include()}", "-o", work / "probe", work / "probe.cc")
    proc = subprocess.run([str(work / "probe")], check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_object_sizes(layout):
    """AotKernelData is a lone vptr (8 bytes) with a virtual destructor; AotExtra is 40 bytes."""
    assert layout["sizeof_kernel_data"] == 8
    assert layout["kernel_data_virtual_dtor"] is True
    assert layout["sizeof_extra"] == 40


def test_member_offsets(layout):
    """workspace_ lives at byte 8 and kernel_data_ at byte 32 (and the pointer appears nowhere else)."""
    assert layout["workspace_offset"] == 8
    assert layout["kernel_data_offsets"] == [32]
    assert layout["kernel_data_roundtrip"] is True


def test_virtual_function_slots(layout):
    """Each virtual function sits in the vtable slot MindSpore's host fills (read from pointers to members)."""
    assert layout["slots"] == EXPECTED_SLOTS


def test_destructor_slots(layout):
    """Slot 0 is the complete-object destructor (destroys, frees nothing), slot 1 the deleting one (frees)."""
    assert (layout["dtor_slot0"], layout["dtor_slot1"]) == (10, 11)


def test_typed_getters_are_private(layout):
    """Kernels cannot call GetAttrInt & co. directly (source compatibility: they must use Attr<T>)."""
    assert layout["getters_private"] is True


# ---------------------------------------------------------------------------------------------------------------
# 2. A kernel built against an independent copy of the layout
# ---------------------------------------------------------------------------------------------------------------

_INDEPENDENT_GETTERS = "\n".join(f"  virtual {_RETURNS[n][0]} {n}(std::string name) = 0;" for n in GETTERS)
_INDEPENDENT_SPECIALISATIONS = "\n".join(
    f"template <>\ninline {_RETURNS[n][0]} AotExtra::Attr<{_RETURNS[n][0]}>(std::string name) {{ return {n}(name); }}"
    for n in GETTERS)

#: Written from ABI.md section 3 alone: same members, same virtual order, MindSpore's silent generic Attr<T>.
INDEPENDENT_HEADER = f"""
#ifndef HDR_INDEPENDENT_AOT_EXTRA_H_
#define HDR_INDEPENDENT_AOT_EXTRA_H_
#define HDR_INDEPENDENT_HEADER 1
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

class AotKernelData {{
 public:
  virtual ~AotKernelData() = default;
}};

class AotExtra {{
 public:
  virtual ~AotExtra() = default;
  template <typename T>
  T Attr(std::string) {{ return T(); }}
  void SetWorkSpace(const std::vector<size_t> &workspace) {{ workspace_ = workspace; }}
  const std::vector<size_t> &WorkSpace() const {{ return workspace_; }}
  void SetKernelData(AotKernelData *kernel_data) {{ kernel_data_ = kernel_data; }}
  AotKernelData *KernelData() const {{ return kernel_data_; }}
  void DestructKernelData() {{ delete kernel_data_; kernel_data_ = nullptr; }}
  virtual bool HasAttr(std::string name) = 0;

 private:
{_INDEPENDENT_GETTERS}
  std::vector<size_t> workspace_;
  AotKernelData *kernel_data_ = nullptr;
}};

{_INDEPENDENT_SPECIALISATIONS}
#endif
"""


def _random_attrs(rng: np.random.Generator) -> dict:
    """Fresh values for the eight attribute types read by hdr_all_attrs.cc (ragged 2-D lists included)."""
    letters = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-λé")

    def floats(n: int) -> list[float]:
        return [float(v) for v in rng.uniform(-100.0, 100.0, n)]

    def ints(n: int, bound: int) -> list[int]:
        return [int(v) for v in rng.integers(-bound, bound, n)]

    return {
        "flag": bool(rng.integers(2)),
        "k": int(rng.integers(-2**62, 2**62)),
        "alpha": float(rng.uniform(-4.0, 4.0)),
        "tag": "".join(rng.choice(letters, int(rng.integers(1, 24)))),
        "ivec": ints(int(rng.integers(1, 6)), 1000),
        "fvec": floats(int(rng.integers(1, 6))),
        "imat": [ints(int(rng.integers(1, 5)), 2**40) for _ in range(int(rng.integers(1, 5)))],
        "fmat": [floats(int(rng.integers(1, 5))) for _ in range(int(rng.integers(1, 5)))],
    }


def _expected_all_attrs(a: dict, x: np.ndarray) -> tuple[np.ndarray, list[int], list[float]]:
    """What hdr_all_attrs.cc computes, in the same order of operations (so float results are bit-identical)."""
    alpha = float(np.float32(a["alpha"]))
    fvec = [float(np.float32(v)) for v in a["fvec"]]
    idx = np.arange(x.size)
    sign = 1.0 if a["flag"] else -1.0
    y = sign * x.astype(np.float64) * alpha + np.array(fvec)[idx % len(fvec)] + np.array(
        a["ivec"], dtype=np.float64)[idx % len(a["ivec"])]
    tag = a["tag"].encode()
    ints = [
        1, a["k"], sum(a["ivec"]),
        sum((r + 1) * (c + 1) * v for r, row in enumerate(a["imat"]) for c, v in enumerate(row)),
        len(tag), sum((i + 1) * b for i, b in enumerate(tag)), 10, len(a["imat"]) * 100 + len(a["fmat"]),
    ]
    fweighted = 0.0
    for r, row in enumerate(a["fmat"]):
        for c, v in enumerate(row):
            fweighted += float((r + 1) * (c + 1)) * float(np.float32(v))
    floats = [alpha, sum(fvec, 0.0), fweighted, 1.0 if a["flag"] else 0.0]
    return y, ints, floats


@pytest.mark.slow
def test_kernel_built_against_independent_header(tmp_path, rng):
    """The native host runs a kernel compiled against an independently written copy of the layout.

    The copy sits beside the kernel, so ``#include "custom_aot_extra.h"`` picks it over aotbench's (the kernel
    reports which one it saw). All eight attribute types, two workspaces and kernel data cross the boundary.
    """
    (tmp_path / "custom_aot_extra.h").write_text(INDEPENDENT_HEADER)
    src = tmp_path / "hdr_all_attrs.cc"
    shutil.copyfile(KERNELS / "hdr_all_attrs.cc", src)
    attrs = _random_attrs(rng)
    n = int(rng.integers(1, 40))
    op = aotbench.Custom(f"{src}:HdrAllAttrs", out_shape=((n,), (8,), (4,)),
                         out_dtype=(np.float64, np.int64, np.float64), attrs=attrs)
    for flag in (attrs["flag"], not attrs["flag"]):
        attrs["flag"] = flag
        x = rng.standard_normal(n).astype(np.float32)
        y, ints, floats = op.with_attrs(flag=flag)(x)
        y_ref, ints_ref, floats_ref = _expected_all_attrs(attrs, x)
        assert ints.tolist() == ints_ref
        np.testing.assert_allclose(floats, floats_ref, rtol=1e-12, atol=0)
        np.testing.assert_allclose(y, y_ref, rtol=1e-12, atol=0)


# ---------------------------------------------------------------------------------------------------------------
# 3. Unsupported Attr<T>
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cpp_type", ["int", "double", "std::vector<int>"])
@pytest.mark.slow
def test_unsupported_attr_type_is_a_compile_error(tmp_path, cpp_type):
    """Attr<T> for a T outside the eight is refused at compile time, naming the supported types (MindSpore's
    header would silently return T())."""
    src = tmp_path / "hdr_bad_attr.cc"
    src.write_text(
        "#include <vector>\n#include \"custom_aot_extra.h\"\n"
        "extern \"C\" int BadInit(int *, int64_t **, const char **, AotExtra *extra) {\n"
        f"  {cpp_type} value = extra->Attr<{cpp_type}>(\"x\");\n"
        "  return static_cast<int>(sizeof(value));\n}\n"
        "extern \"C\" int Bad(int, void **, int *, int64_t **, const char **, void *, void *) { return 0; }\n")
    with pytest.raises(aotbench.CompileError) as info:
        aotbench.Custom(f"{src}:Bad", out_shape=(1,), out_dtype=np.float32, attrs={"x": 1})
    err = info.value
    assert err.returncode != 0
    messages = [d.message for d in err.errors]
    assert any("unsupported attribute type" in m for m in messages), messages
    listed = next(m for m in messages if "unsupported attribute type" in m)
    for supported in ("bool", "int64_t", "float", "std::string", "std::vector<int64_t>", "std::vector<float>",
                      "std::vector<std::vector<int64_t>>", "std::vector<std::vector<float>>"):
        assert supported in listed
    assert f"T = {cpp_type}" in err.log  # the offending type is named
    assert f"{src.name}:4:" in err.log  # and the kernel line that asked for it
    assert "unsupported attribute type" in str(err)


# ---------------------------------------------------------------------------------------------------------------
# 4. The tutorial's kernel, as published and corrected
# ---------------------------------------------------------------------------------------------------------------

AXES_KEEP = [(axis, keep) for axis in (0, 1) for keep in (False, True)]


def _reduced_shape(shape: tuple[int, int], axis: int, keep: bool) -> tuple[int, ...]:
    return tuple(np.empty(shape).sum(axis, keepdims=keep).shape)


@pytest.mark.parametrize("axis,keep_dim", AXES_KEEP)
def test_tutorial_kernel_compiles_unchanged(axis, keep_dim):
    """tutorial/kernel.cc, verbatim from the tutorial, builds with the documented command and its
    InferShape gives numpy's reduced shape (its F is not run: it is the buggy one)."""
    op = aotbench.Custom(f"{aotbench.examples_dir() / 'tutorial' / 'kernel.cc'}:CustomKernel", None, np.float32,
                         attrs={"axis": axis, "keep_dim": keep_dim})
    assert op.name == "CustomKernel"
    for shape in [(4, 5), (7, 2)]:
        assert op.infer_shape(shape, shape) == _reduced_shape(shape, axis, keep_dim)


@pytest.mark.parametrize("axis,keep_dim", AXES_KEEP)
def test_corrected_add_reduce_matches_numpy(axis, keep_dim, rng):
    """add_reduce.cc computes (x + y).sum(axis, keepdims=keep_dim) for several shapes, empty ones included."""
    op = aotbench.Custom(f"{aotbench.examples_dir() / 'add_reduce.cc'}:CustomKernel", None, np.float32,
                         attrs={"axis": axis, "keep_dim": keep_dim})
    for shape in [(4, 5), (1, 9), (13, 3), (64, 33), (4, 5), (0, 6), (3, 0)]:
        x = rng.standard_normal(shape).astype(np.float32)
        y = rng.standard_normal(shape).astype(np.float32)
        out = op(x, y)
        expected = (x.astype(np.float64) + y).sum(axis, keepdims=keep_dim)
        assert out.dtype == np.float32 and out.shape == expected.shape
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# 5, 6. Header version and standalone compilation
# ---------------------------------------------------------------------------------------------------------------

def test_header_version_matches_python(tmp_path):
    """AOTBENCH_AOT_EXTRA_VERSION, as the preprocessor sees it, equals aotbench._version.HEADER_VERSION."""
    tu = tmp_path / "version.cc"
    tu.write_text('#include "custom_aot_extra.h"\n')
    macros = gxx("-std=c++17", "-dM", "-E", f"-I{aotbench.get_include()}", tu)
    found = re.findall(r"^#define AOTBENCH_AOT_EXTRA_VERSION (\S+)$", macros, re.MULTILINE)
    assert found == [str(HEADER_VERSION)]


@pytest.mark.parametrize("std", ["c++14", "c++17", "c++20"])
@pytest.mark.slow
def test_header_compiles_alone_without_warnings(tmp_path, std):
    """A translation unit holding only the include compiles with -Wall -Wextra -Werror (self-contained)."""
    tu = tmp_path / "alone.cc"
    tu.write_text('#include "custom_aot_extra.h"\n')
    gxx(f"-std={std}", "-Wall", "-Wextra", "-Werror", "-D_GLIBCXX_USE_CXX11_ABI=0", f"-I{aotbench.get_include()}",
        "-c", "-o", tmp_path / "alone.o", tu)
