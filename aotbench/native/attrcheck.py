"""Refuse a library that reads an attribute as a type no attribute has (``Attr<double>``, ``Attr<int>``).

aotbench's ``custom_aot_extra.h`` rejects such a ``T`` at compile time. MindSpore's header, put beside a kernel,
shadows it and has a generic ``Attr<T>`` that returns ``T()``: the kernel compiles and silently reads 0. At
``-O0`` (the documented default) each instantiation is a weak symbol in the library, so :func:`check` finds it
before the library is loaded and raises :class:`~aotbench.errors.AttrError` naming the type, the eight supported
ones and, when the source is known, the kernel's line. With optimisation the instantiation is usually inlined
away; then, when a ``custom_aot_extra.h`` other than aotbench's is beside the source (or on its ``-I`` path), the
source text is scanned for ``Attr<...>`` with a type outside the list and an :class:`AttrTypeWarning` says so (a
warning: the read may sit in an ``#if 0`` block or a template never instantiated).
"""

from __future__ import annotations

import ctypes
import functools
import re
import warnings
from collections.abc import Sequence
from pathlib import Path

from .._userframe import user_stacklevel
from ..errors import AttrError, AttrTypeWarning
from . import elf

SUPPORTED = ("bool", "int64_t", "float", "std::string", "std::vector<int64_t>", "std::vector<float>",
             "std::vector<std::vector<int64_t>>", "std::vector<std::vector<float>>")
_SOURCE_SUFFIXES = (".cc", ".cpp", ".cu")
_HEADER = "custom_aot_extra.h"
_OWN_INCLUDE = Path(__file__).resolve().parent / "include"  # aotbench's header (build.toolchain.include_dir)
_CELL_HEADER = '#line 1 "<cell>"\n'
_DEMANGLED = re.compile(r"AotExtra\w*::Attr<(?P<t>.*)>\(")
_STRING = re.compile(r"std::(?:__cxx11::)?basic_string<char, ?std::char_traits<char>(?:, ?std::allocator<char>)? ?>")
_ALLOCATOR = ", std::allocator<"
_LONE_LONG = re.compile(r"(?<![\w ])long(?![\w ])")  # "long" alone (int64_t here), not "long long"/"unsigned long"
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_ATTR_CALL = re.compile(r"\bAttr\s*<")
# Type words a source spelling may consist of for the text scan to judge it (anything else may be a typedef).
_TYPE_WORDS = frozenset({"bool", "char", "short", "int", "long", "float", "double", "unsigned", "signed",
                         "vector", "string", "size_t", "ptrdiff_t", "int8_t", "int16_t", "int32_t", "int64_t",
                         "uint8_t", "uint16_t", "uint32_t", "uint64_t", "const"})
# Source spellings -> the names a demangled symbol uses (so a symbol's T can be found on a source line).
_SPELLINGS = (("long long int", "long long"), ("long int", "long"), ("unsigned int", "unsigned"),
              ("int64_t", "long"), ("uint64_t", "unsigned long"), ("size_t", "unsigned long"), ("int32_t", "int"),
              ("uint32_t", "unsigned"), ("int16_t", "short"), ("uint16_t", "unsigned short"),
              ("int8_t", "signed char"), ("uint8_t", "unsigned char"), ("ptrdiff_t", "long"))


def check(path: str, symbols: list[elf.Symbol], built_with: Sequence[str] = ()) -> None:
    """Raise AttrError when the library instantiates ``Attr<T>`` for an unsupported ``T``; for an optimised build
    under a foreign header, warn when its source (found in ``built_with``, the command that built it) shows one."""
    bad = list(dict.fromkeys(t for t in map(_read_type, elf.attr_instantiations(symbols)) if t))
    optimised = _optimised(built_with)
    source = _source_of(built_with) if bad or optimised else None
    if bad:
        lines = _lines_reading(source, bad) if source is not None else []
        raise AttrError(_message(bad, lines, source, Path(path).name, certain=True), requested=bad[0],
                        names=list(SUPPORTED))
    if source is not None and optimised and _foreign_header(source, built_with):
        found = _text_reads(source)
        if found:
            types = list(dict.fromkeys(t for t, _, _ in found))
            warnings.warn(AttrTypeWarning(_message(types, found, source, Path(path).name, certain=False)),
                          stacklevel=user_stacklevel())


def _message(types: list[str], lines: list[tuple[str, int, str]], source: Path | None, library: str,
             certain: bool) -> str:
    reads = " and ".join(f"Attr<{t}>" for t in types)
    kind = "which is not an attribute type" if len(types) == 1 else "which are not attribute types"
    label = _label(source)
    what = library if source is None else "the cell" if label == "<cell>" else f"the kernel {source.name}"
    where = "".join(f"\n  {label}:{n}: {text}" for _, n, text in lines)
    head = (f"{what} reads attributes with {reads}, {kind}. " if certain else
            f"{what} seems to read attributes with {reads}, {kind} (the build is optimised, so the library "
            "cannot confirm it). ")
    return (f"{head}The custom_aot_extra.h it was built with (MindSpore's, beside the kernel?) compiles that and "
            f"reads 0 (T()) instead of the value; aotbench's own header refuses it at compile time.{where}\n"
            f"Read each attribute as one of the eight attribute types: {', '.join(SUPPORTED)} (a Python int "
            "attribute is int64_t, a float is float; convert after reading).")


def _label(source: Path | None) -> str:
    if source is None:
        return "?"
    return "<cell>" if _cell_text(source) is not None else str(source)


@functools.lru_cache(maxsize=1024)
def _read_type(mangled: str) -> str:
    """The ``T`` of an ``Attr<T>`` symbol when it is not one of the supported types, else ""."""
    name = pretty(demangle(mangled) or "")
    return "" if name in SUPPORTED else name


def demangle(mangled: str) -> str | None:
    """The C++ name of a mangled symbol (libstdc++'s ``__cxa_demangle``), or None."""
    functions = _cxxabi()
    if functions is None:
        return None
    demangler, free = functions
    status = ctypes.c_int(0)
    ptr = demangler(mangled.encode(), None, None, ctypes.byref(status))
    if not ptr or status.value != 0:
        return None
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        free(ptr)


@functools.lru_cache(maxsize=1)
def _cxxabi() -> tuple | None:
    """libstdc++'s ``__cxa_demangle`` and libc's ``free`` (None where libstdc++ cannot be loaded)."""
    try:
        demangler = ctypes.CDLL("libstdc++.so.6")["__cxa_demangle"]
        free = ctypes.CDLL(None)["free"]
    except (OSError, AttributeError):
        return None
    demangler.restype = ctypes.c_void_p
    demangler.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    free.restype, free.argtypes = None, [ctypes.c_void_p]
    return demangler, free


def pretty(demangled: str) -> str:
    """``T`` of a demangled ``AotExtra::Attr<T>(...)`` in the spelling the supported list uses ("" if none)."""
    m = _DEMANGLED.search(demangled)
    return "" if m is None else canonical(m["t"], demangled=True)


def canonical(spelled: str, demangled: bool = False) -> str:
    """A type name with ``std::allocator`` arguments, ``std::`` prefixes of int types and extra spaces removed,
    ``long`` (or ``int64_t``) written ``int64_t`` and any string class written ``std::string``."""
    text = _STRING.sub("std::string", spelled)
    while _ALLOCATOR in text:
        start = text.index(_ALLOCATOR)
        depth, end = 0, start + len(_ALLOCATOR) - 1
        for end in range(start + len(_ALLOCATOR) - 1, len(text)):
            depth += {"<": 1, ">": -1}.get(text[end], 0)
            if depth == 0:
                break
        text = text[:start] + text[end + 1:]
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"\s*([<>,])\s*", r"\1", text).replace("std::int", "int").replace("std::uint", "uint")
    text = text.replace("std::size_t", "size_t").replace("const ", "")
    if not demangled:
        if not text.startswith("std::"):
            text = re.sub(r"^(vector|string)\b", r"std::\1", text)
        text = re.sub(r"<(vector|string)\b", r"<std::\1", text)
        for spelled_as, name in _SPELLINGS:
            text = re.sub(rf"\b{spelled_as}\b", name, text)
        text = text.replace("unsigned", "unsigned int").replace("unsigned int long", "unsigned long") \
            .replace("unsigned int short", "unsigned short").replace("unsigned int char", "unsigned char")
    return _LONE_LONG.sub("int64_t", text)


def _source_of(built_with: Sequence[str]) -> Path | None:
    """The kernel source in the command that built the library (None for a prebuilt one)."""
    for before, arg in zip(("", *built_with), built_with):
        if before not in ("-o", "-include") and arg.endswith(_SOURCE_SUFFIXES) and not arg.startswith("-"):
            path = Path(arg)
            if path.is_file():
                return path
    return None


def _optimised(built_with: Sequence[str]) -> bool:
    """True when the command optimises (its last ``-O`` is not ``-O0``; g++ and nvcc's host code default to it)."""
    levels = [a for a in built_with if a.startswith("-O")]
    return bool(levels) and levels[-1] != "-O0"


def _foreign_header(source: Path, built_with: Sequence[str]) -> bool:
    """True when a custom_aot_extra.h other than aotbench's is beside the source or in a user's -I folder."""
    own = _OWN_INCLUDE
    return any((f / _HEADER).is_file() and f.resolve() != own for f in [source.parent, *_include_folders(built_with)])


def _include_folders(argv: Sequence[str]) -> list[Path]:
    """The folders a command's include options name, joined (``-Idir``) or apart (``-I dir``); the same options
    as the build layer's ``toolchain.INCLUDE_OPTIONS``, which this layer may not import."""
    options = ("-I", "-iquote", "-isystem", "-idirafter")
    folders = []
    for k, arg in enumerate(argv):
        option = next((o for o in options if arg.startswith(o)), None)
        if option is None:
            continue
        value = arg[len(option):] or (argv[k + 1] if k + 1 < len(argv) else "")
        if value:
            folders.append(Path(value))
    return folders


def _cell_text(source: Path) -> str | None:
    try:
        text = source.read_text("utf-8", "replace")
    except OSError:
        return None
    return text[len(_CELL_HEADER):] if text.startswith(_CELL_HEADER) else None


def _source_text(source: Path) -> str:
    """The text whose line numbers the user sees: a cell's own text, or the file's."""
    cell = _cell_text(source)
    if cell is not None:
        return cell
    try:
        return source.read_text("utf-8", "replace")
    except OSError:
        return ""


def _text_reads(source: Path) -> list[tuple[str, int, str]]:
    """(type, line, line text) of each ``Attr<T>`` in the source whose ``T`` is plainly not an attribute type."""
    text = _source_text(source)
    blanked = _COMMENTS.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)  # keep the line numbers
    lines = text.splitlines()
    out = []
    for m in _ATTR_CALL.finditer(blanked):
        depth, end = 1, m.end()
        while end < len(blanked) and depth:
            depth += {"<": 1, ">": -1}.get(blanked[end], 0)
            end += 1
        spelled = blanked[m.end():end - 1]
        words = {w.rpartition("::")[2] for w in re.findall(r"[A-Za-z_][\w:]*", spelled)}
        if depth or not words or not words <= _TYPE_WORDS:
            continue  # unbalanced, or a name aotbench cannot judge (a typedef, a template parameter)
        name = canonical(spelled)
        if name not in SUPPORTED:
            n = blanked.count("\n", 0, m.start()) + 1
            out.append((name, n, lines[n - 1].strip() if n <= len(lines) else ""))
    return out


def _lines_reading(source: Path, types: list[str]) -> list[tuple[str, int, str]]:
    """The source lines that read one of ``types``."""
    return [r for r in _text_reads(source) if r[0] in types]
