"""Read the dynamic symbol table of an ELF shared library, in pure Python.

Used before a library is loaded: to refuse a truncated or damaged file (``dlopen`` maps its segments, and
touching a page past the end of the file kills the process with SIGBUS), to refuse one built with the other
libstdc++ string ABI (its symbols name ``__cxx11``) and to list the exported C functions when the requested one
is missing.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

_SHT_DYNSYM = 11
_STT_FUNC = 2
_PT_LOAD = 1
_PT_DYNAMIC = 2
_ET_DYN = 3
_EHDR_BYTES = 64
_PHDR_BYTES = 56


@dataclass(frozen=True)
class Symbol:
    name: str
    defined: bool
    is_function: bool


def structural_problem(image: bytes) -> str | None:
    """Why ``image`` cannot be a complete 64-bit little-endian shared library, or None when its headers hold.

    Checked: the ELF identification, the file type, the program header table, and that every loadable segment
    and the dynamic section lie inside the file. Other ELF classes get None (the loader refuses them cleanly).
    """
    if len(image) < _EHDR_BYTES:
        return f"the file is {len(image)} bytes long, too short for an ELF header: not a shared library (truncated?)"
    if image[:4] != b"\x7fELF":
        return "the file does not start with the ELF magic number: not a shared library"
    if image[4] != 2 or image[5] != 1:
        return None  # 32-bit or big-endian: dlopen says "wrong ELF class" without mapping anything
    e_type, = struct.unpack_from("<H", image, 0x10)
    if e_type != _ET_DYN:
        return f"its ELF file type is {e_type}, not 3 (ET_DYN): not a shared library"
    phoff, = struct.unpack_from("<Q", image, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", image, 0x36)
    if phnum == 0 or phentsize < _PHDR_BYTES or phoff + phnum * phentsize > len(image):
        return (f"its program header table ({phnum} entries at offset {phoff}) does not lie inside the "
                f"{len(image)}-byte file (truncated?)")
    loads = 0
    for i in range(phnum):
        p_type, _flags, p_offset, _vaddr, _paddr, p_filesz = struct.unpack_from("<IIQQQQ", image, phoff + i * phentsize)
        if p_type in (_PT_LOAD, _PT_DYNAMIC) and p_offset + p_filesz > len(image):
            kind = "loadable segment" if p_type == _PT_LOAD else "dynamic section"
            return (f"a {kind} ends at byte {p_offset + p_filesz}, past the end of the {len(image)}-byte file "
                    "(truncated?)")
        loads += p_type == _PT_LOAD
    if not loads:
        return "it has no loadable segment"
    return None


def dynamic_symbols(image: bytes) -> list[Symbol]:
    """The ``.dynsym`` entries of a 64-bit little-endian ELF image; an empty list for any other format."""
    if len(image) < 64 or image[:4] != b"\x7fELF" or image[4] != 2 or image[5] != 1:
        return []
    try:
        shoff, = struct.unpack_from("<Q", image, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", image, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * shentsize) for i in range(shnum)]
        out: list[Symbol] = []
        for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
            if kind != _SHT_DYNSYM or not entsize:
                continue
            strtab_offset = sections[link][4]
            for k in range(1, size // entsize):  # entry 0 is the null symbol
                st_name, st_info, _other, st_shndx = struct.unpack_from("<IBBH", image, offset + k * entsize)
                start = strtab_offset + st_name
                name = image[start:image.index(b"\0", start)].decode("utf-8", "replace")
                out.append(Symbol(name, st_shndx != 0, (st_info & 0xF) == _STT_FUNC))
        return out
    except (struct.error, ValueError, IndexError, OverflowError):
        return []  # a damaged image is reported by the loader, not here


def new_string_abi_symbols(symbols: list[Symbol]) -> list[str]:
    """Undefined symbols that only a library built with ``_GLIBCXX_USE_CXX11_ABI=1`` references."""
    return [s.name for s in symbols if not s.defined and "__cxx11" in s.name]


def exported_c_functions(symbols: list[Symbol]) -> list[str]:
    """Defined functions with unmangled (``extern "C"``) names, sorted."""
    return sorted({s.name for s in symbols if s.defined and s.is_function and not s.name.startswith("_")})


def mangled_matches(symbols: list[Symbol], name: str) -> list[str]:
    """C++-mangled defined functions whose plain name is ``name`` (a missing ``extern "C"``)."""
    token = re.compile(rf"(?<![0-9]){len(name)}{re.escape(name)}")  # the length prefix delimits the name
    return [s.name for s in symbols if s.defined and s.name.startswith("_Z") and token.search(s.name)]
