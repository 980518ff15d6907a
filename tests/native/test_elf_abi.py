"""aotbench.native.elf and what the loader does with it: symbol listing, the string-ABI refusal, prebuilt libraries,
missing functions and files that are not libraries.

Every library here is built by a real g++; ``nm`` and ``c++filt`` (binutils) serve as independent witnesses.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.native import elf
from aotbench.build import compile as build

KERNELS = Path(__file__).resolve().parents[1] / "support" / "kernels"
DOCUMENTED_CXX = ["-std=c++17", "--shared", "-fPIC", "-D_GLIBCXX_USE_CXX11_ABI=0"]
NEW_STRING_ABI = ["-D_GLIBCXX_USE_CXX11_ABI=1"]

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


def run_tool(*argv: str | Path) -> str:
    """Run a toolchain program; fail the test with its output when it does not succeed."""
    proc = subprocess.run([str(a) for a in argv], check=False, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(map(str, argv))} failed:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


def build_library(source: Path, out: Path, *flags: str) -> Path:
    """``source`` built by hand with the documented C++ flags (plus ``flags``) into ``out``."""
    run_tool("g++", *DOCUMENTED_CXX, *flags, f"-I{aotbench.get_include()}", "-o", out, source)
    return out


def nm_dynamic(path: Path, *options: str) -> dict[str, str]:
    """``nm -D`` of ``path``: symbol name (without its @version) -> nm's type letter."""
    out = {}
    for line in run_tool("nm", "-D", *options, path).splitlines():
        *_, kind, name = line.split()
        out[name.split("@")[0]] = kind
    return out


def random_text(rng: np.random.Generator, n: int) -> str:
    return "".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz0123456789_"), n))


# ---------------------------------------------------------------------------------------------------------------
# 1. Reading the dynamic symbol table
# ---------------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def symbols_lib(tmp_path_factory) -> Path:
    """hdr_symbols.cc as a shared library (extern "C" functions, a data object, C++ functions, an import)."""
    return build_library(KERNELS / "hdr_symbols.cc", tmp_path_factory.mktemp("elf") / "libhdr_symbols.so")


def test_dynamic_symbols_agree_with_nm(symbols_lib):
    """Defined and undefined names and the function flag are what ``nm -D`` reports for the same file."""
    symbols = elf.dynamic_symbols(symbols_lib.read_bytes())
    defined = nm_dynamic(symbols_lib, "--defined-only")
    assert {s.name for s in symbols if s.defined} == set(defined)
    assert {s.name for s in symbols if not s.defined} == set(nm_dynamic(symbols_lib, "--undefined-only"))
    assert {s.name for s in symbols if s.defined and s.is_function} == {n for n, k in defined.items() if k in "TW"}
    by_name = {s.name: s for s in symbols}
    assert by_name["hdr_c_add"] == elf.Symbol("hdr_c_add", defined=True, is_function=True)
    assert by_name["hdr_c_data"] == elf.Symbol("hdr_c_data", defined=True, is_function=False)
    assert not by_name["strlen"].defined
    assert not any("hdr_internal" in s.name for s in symbols)


def test_exported_c_functions_are_the_extern_c_ones(symbols_lib):
    """Only defined, unmangled functions are listed: no data object, import or C++-mangled name."""
    symbols = elf.dynamic_symbols(symbols_lib.read_bytes())
    assert elf.exported_c_functions(symbols) == ["hdr_c_add", "hdr_c_len", "hdr_c_scale"]


def test_mangled_matches_find_functions_without_extern_c(symbols_lib):
    """The mangled symbol of a plain or namespaced C++ function is found by its plain name (and an extern "C"
    name has none)."""
    symbols = elf.dynamic_symbols(symbols_lib.read_bytes())
    assert elf.mangled_matches(symbols, "hdr_cpp_twice") == ["_Z13hdr_cpp_twicei"]
    assert elf.mangled_matches(symbols, "nested") == ["_ZN3hdr6nestedEl"]
    assert elf.mangled_matches(symbols, "hdr_c_add") == []
    assert run_tool("c++filt", "_Z13hdr_cpp_twicei").strip() == "hdr_cpp_twice(int)"


def test_mangled_matches_require_the_whole_length_prefix(symbols_lib):
    """A longer name whose length ends in the same digit is not a match (hdr_a vs hdr_a_something)."""
    assert elf.mangled_matches(elf.dynamic_symbols(symbols_lib.read_bytes()), "hdr_a") == []


@pytest.mark.parametrize("kind", ["empty", "random", "text", "elf32", "big-endian"])
def test_dynamic_symbols_of_non_elf64_le_bytes_is_empty(symbols_lib, rng, kind):
    """Anything but a 64-bit little-endian ELF image gives [] rather than an exception."""
    image = {
        "empty": lambda: b"",
        "random": lambda: b"\0" + rng.bytes(int(rng.integers(1, 8192))),
        "text": lambda: ("#!/bin/sh\n" + random_text(rng, 200)).encode(),
        "elf32": lambda: symbols_lib.read_bytes()[:4] + b"\x01" + symbols_lib.read_bytes()[5:],
        "big-endian": lambda: symbols_lib.read_bytes()[:5] + b"\x02" + symbols_lib.read_bytes()[6:],
    }[kind]()
    assert elf.dynamic_symbols(image) == []


def test_dynamic_symbols_of_truncated_image_is_empty(symbols_lib, rng):
    """Every prefix of a real library (the section headers come last) gives [] rather than an exception."""
    image = symbols_lib.read_bytes()
    assert elf.dynamic_symbols(image)  # the whole image does have symbols
    cuts = {0, 4, 63, 64, 65, len(image) // 2, len(image) - 64, len(image) - 1}
    cuts |= {int(c) for c in rng.integers(0, len(image), 40)}
    for cut in sorted(cuts):
        assert elf.dynamic_symbols(image[:cut]) == [], f"prefix of {cut} of {len(image)} bytes"


def test_dynamic_symbols_of_out_of_range_offset_is_empty(symbols_lib):
    """A damaged section-header offset (all ones) gives [], like any other damaged image."""
    image = bytearray(symbols_lib.read_bytes())
    struct.pack_into("<Q", image, 0x28, 2**64 - 1)  # e_shoff
    assert elf.dynamic_symbols(bytes(image)) == []


# ---------------------------------------------------------------------------------------------------------------
# 2. A kernel built with the new std::string ABI
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_new_string_abi_library_is_refused_before_loading(tmp_path, monkeypatch, rng):
    """A kernel built with -D_GLIBCXX_USE_CXX11_ABI=1 really imports std::__cxx11 symbols, and Custom refuses
    it with AbiMismatchError without even loading it (its load-time constructor never runs). The same source
    built with the documented flags loads and computes its string correctly."""
    src = tmp_path / "hdr_string_abi.cc"
    shutil.copyfile(KERNELS / "hdr_string_abi.cc", src)
    marker = tmp_path / "loaded.txt"
    monkeypatch.setenv("HDR_LOAD_MARKER", str(marker))
    tag, count = random_text(rng, int(rng.integers(1, 20))), int(rng.integers(-2**62, 2**62))
    make = {"out_shape": (64,), "out_dtype": np.uint8, "attrs": {"tag": tag, "count": count}}

    library = build.build(src, flags=tuple(NEW_STRING_ABI)).path
    cxx11 = {name for name in nm_dynamic(library, "--undefined-only") if "__cxx11" in name}
    assert cxx11, "g++ inlined every std::string operation; the kernel must force an out-of-line one"
    assert set(elf.new_string_abi_symbols(elf.dynamic_symbols(library.read_bytes()))) == cxx11

    with pytest.raises(aotbench.AbiMismatchError) as info:
        aotbench.Custom(f"{src}:HdrDescribe", flags=NEW_STRING_ABI, **make)
    assert "_GLIBCXX_USE_CXX11_ABI=0" in str(info.value)
    assert info.value.path == str(library)
    assert set(info.value.symbols) == cxx11
    assert not marker.exists(), "the refused library was loaded"

    op = aotbench.Custom(f"{src}:HdrDescribe", **make)
    assert marker.read_text() == "loaded\n"  # the marker does record a load
    x = rng.integers(-1000, 1000, int(rng.integers(1, 50)), dtype=np.int32)
    assert op(x).tobytes().rstrip(b"\0").decode() == f"{tag}:{count}:{int(x.sum())}"


# ---------------------------------------------------------------------------------------------------------------
# 3. Prebuilt libraries, missing functions, files that are not libraries
# ---------------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def prebuilt_lib(tmp_path_factory) -> Path:
    """hdr_prebuilt.cc built by hand with the documented flags (HdrAxpy extern "C", HdrNotC mangled)."""
    return build_library(KERNELS / "hdr_prebuilt.cc", tmp_path_factory.mktemp("prebuilt") / "libhdr_prebuilt.so")


def test_prebuilt_library_loads_and_runs(prebuilt_lib, rng):
    """A path that is not a source is loaded as it is (nothing compiled) and its kernel computes a*x + y."""
    a = float(rng.uniform(-3.0, 3.0))
    op = aotbench.Custom(f"{prebuilt_lib}:HdrAxpy", out_shape=lambda x, y: x, out_dtype=np.float32, attrs={"a": a})
    assert op.command is None and op.library.path == prebuilt_lib
    for shape in [(7,), (3, 5), (2, 3, 4)]:
        x = rng.standard_normal(shape).astype(np.float32)
        y = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(op(x, y), np.float32(a) * x + y, rtol=1e-6, atol=1e-6)


def test_missing_function_lists_exported_candidates(prebuilt_lib):
    """An absent function is a SymbolNotFoundError (an AttributeError too) naming what the library exports."""
    with pytest.raises(aotbench.SymbolNotFoundError) as info:
        aotbench.Custom(f"{prebuilt_lib}:HdrMissing", out_shape=(1,), out_dtype=np.float32)
    err = info.value
    assert isinstance(err, AttributeError)
    assert (err.candidates, err.mangled) == (["HdrAxpy"], [])
    assert "'HdrMissing'" in str(err) and "HdrAxpy" in str(err)


def test_symbol_not_found_error_keeps_the_function_name(prebuilt_lib):
    """The error's ``name`` field is the function that was asked for."""
    with pytest.raises(aotbench.SymbolNotFoundError) as info:
        aotbench.Custom(f"{prebuilt_lib}:HdrMissing", out_shape=(1,), out_dtype=np.float32)
    assert info.value.name == "HdrMissing"


def test_function_without_extern_c_gets_mangled_hint(prebuilt_lib):
    """A kernel function declared without extern "C" is reported with its mangled symbol and the fix."""
    with pytest.raises(aotbench.SymbolNotFoundError) as info:
        aotbench.Custom(f"{prebuilt_lib}:HdrNotC", out_shape=(1,), out_dtype=np.float32)
    err = info.value
    assert len(err.mangled) == 1
    mangled = err.mangled[0]
    assert mangled in nm_dynamic(prebuilt_lib, "--defined-only")
    assert run_tool("c++filt", mangled).startswith("HdrNotC(int, void**")
    assert mangled in str(err) and 'extern "C"' in str(err)


@pytest.mark.parametrize("kind,hint", [("empty", True), ("random", True), ("elf32-garbage", True)])
def test_non_library_file_is_a_load_error(tmp_path, rng, kind, hint):
    """A file that is not a loadable library gives LoadError (an OSError too) with the loader's reason and,
    for a non-ELF file, a hint saying so; the process survives."""
    path = tmp_path / "x.so"
    path.write_bytes({
        "empty": b"",
        "random": b"\0" + rng.bytes(4095),  # a NUL first byte: never the ELF magic
        "elf32-garbage": b"\x7fELF\x01\x01\x01" + rng.bytes(500),
    }[kind])
    with pytest.raises(aotbench.LoadError) as info:
        aotbench.Custom(f"{path}:F", out_shape=(1,), out_dtype=np.float32)
    err = info.value
    assert isinstance(err, OSError)
    assert err.path == str(path) and err.reason
    assert str(err).startswith(f"cannot load {path}: ") and err.reason in str(err)
    assert ("not a shared library" in str(err)) is hint


@pytest.mark.parametrize("where", ["missing file", "missing directory", "a directory"])
def test_unreadable_library_path_is_a_load_error(tmp_path, where):
    """A library path that names no file gives LoadError (an OSError too) naming the path."""
    path = {"missing file": tmp_path / "libnope.so", "missing directory": tmp_path / "nowhere" / "lib.so",
            "a directory": tmp_path}[where]
    with pytest.raises(aotbench.LoadError) as info:
        aotbench.Custom(f"{path}:F", out_shape=(1,), out_dtype=np.float32)
    assert isinstance(info.value, OSError)
    assert str(path) in str(info.value)
    if where != "a directory":
        assert "no such file" in str(info.value).lower()
