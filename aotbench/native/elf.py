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
_SHT_DYNAMIC = 6
_DT_NEEDED = 1
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


def _sections(image: bytes) -> list[tuple]:
    """The section headers of a 64-bit little-endian ELF image (name, type, flags, address, offset, size, link,
    info, alignment, entry size); an empty list for any other format or a damaged table."""
    if len(image) < 64 or image[:4] != b"\x7fELF" or image[4] != 2 or image[5] != 1:
        return []
    try:
        shoff, = struct.unpack_from("<Q", image, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", image, 0x3A)
        return [struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * shentsize) for i in range(shnum)]
    except (struct.error, OverflowError):
        return []


def section_bytes(image: bytes, name: str) -> bytes | None:
    """The contents of the section called ``name`` (``".text"``) of a 64-bit little-endian ELF image, or None."""
    sections = _sections(image)
    try:
        index, = struct.unpack_from("<H", image, 0x3E)
        names = sections[index]
    except (struct.error, IndexError):
        return None
    wanted = name.encode()
    for sh_name, _type, _flags, _addr, offset, size, *_ in sections:
        start = names[4] + sh_name
        if image[start:start + len(wanted) + 1] == wanted + b"\0":
            return image[offset:offset + size]
    return None


def dynamic_symbols(image: bytes) -> list[Symbol]:
    """The ``.dynsym`` entries of a 64-bit little-endian ELF image; an empty list for any other format."""
    sections = _sections(image)
    if not sections:
        return []
    try:
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


def needed_libraries(image: bytes) -> list[str]:
    """The ``DT_NEEDED`` entries (``libgomp.so.1`` ...) of a 64-bit little-endian ELF image's ``.dynamic``
    section: the libraries its loading loads; an empty list for any other format or a damaged image."""
    sections = _sections(image)
    if not sections:
        return []
    try:
        out: list[str] = []
        for _name, kind, _flags, _addr, offset, size, link, _info, _align, _entsize in sections:
            if kind != _SHT_DYNAMIC:
                continue
            strtab_offset = sections[link][4]
            for k in range(size // 16):
                tag, value = struct.unpack_from("<qQ", image, offset + 16 * k)
                if tag == 0:  # DT_NULL ends the table
                    break
                if tag == _DT_NEEDED:
                    start = strtab_offset + value
                    out.append(image[start:image.index(b"\0", start)].decode("utf-8", "replace"))
        return out
    except (struct.error, ValueError, IndexError, OverflowError):
        return []


def attr_instantiations(symbols: list[Symbol]) -> list[str]:
    """Defined C++ symbols that are instantiations of an ``AotExtra``-like class's ``Attr<T>`` (mangled: the class
    name, possibly in a namespace, then ``4AttrI``): what a kernel read attributes as, at ``-O0`` at least."""
    token = re.compile(r"AotExtra\w*4AttrI")
    return [s.name for s in symbols if "4AttrI" in s.name and s.defined and token.search(s.name)]


# What a library can write output with: C stdio and POSIX writes (the _chk forms are what -D_FORTIFY_SOURCE calls),
# and the C++ streams (std::cout and any std::ostream's operators and members).
_OUTPUT_FUNCTIONS = frozenset(
    "printf vprintf fprintf vfprintf dprintf vdprintf puts putchar putc fputc fputs fwrite "
    "putchar_unlocked putc_unlocked fputc_unlocked fputs_unlocked fwrite_unlocked "
    "__printf_chk __vprintf_chk __fprintf_chk __vfprintf_chk __dprintf_chk __vdprintf_chk "
    "wprintf vwprintf fwprintf vfwprintf putwchar putwc fputwc fputws __wprintf_chk __fwprintf_chk "
    "__vwprintf_chk __vfwprintf_chk write writev pwrite pwritev syscall stdout".split())
_OUTPUT_CXX = re.compile(r"^_ZSt\d*(?:w?cout|w?cerr|w?clog)$|^_ZNSo|^_ZNSt13basic_ostream|^_ZSt16__ostream_insert"
                         r"|^_ZStlsI|St13basic_ostream|^_ZSt4endl|^_ZSt5flush")


def output_symbols(symbols: list[Symbol]) -> list[str]:
    """Undefined symbols through which a library can print (``printf``, ``std::cout`` ...), sorted: a library
    without any cannot write to stdout itself, so its calls need no capture (:mod:`aotbench.run.prints`)."""
    return undefined_among(symbols, _OUTPUT_FUNCTIONS, _OUTPUT_CXX)


# What a library can change the signal mask or a signal's handler with (libc, and the raw syscall).
_SIGNAL_FUNCTIONS = frozenset(
    "sigprocmask pthread_sigmask sigsetmask sigblock sighold sigrelse sigpause sigsuspend sigaction signal "
    "sigset sigignore bsd_signal sysv_signal __sysv_signal siginterrupt sigvec syscall".split())


def signal_symbols(symbols: list[Symbol]) -> list[str]:
    """Undefined symbols through which a library can block signals or replace a handler (``sigprocmask``,
    ``signal`` ...), sorted: only such a library's calls have the signal state saved and checked by the host."""
    return undefined_among(symbols, _SIGNAL_FUNCTIONS)


def undefined_among(symbols: list[Symbol], names: frozenset, pattern: re.Pattern | None = None) -> list[str]:
    """The undefined symbols (what the library takes from others) named in ``names`` or matching ``pattern``,
    sorted: one question, asked of the ``.dynsym`` table by the per-library flags above."""
    return sorted({s.name for s in symbols
                   if not s.defined and (s.name in names or (pattern is not None and pattern.search(s.name)))})
