"""A precompiled ``custom_aot_extra.h`` for g++ builds: most of a small kernel's compile time is parsing the
header's ``<iostream>``, ``<string>`` and ``<vector>``, and with the header precompiled a rebuild takes half as long.

Which builds use it (:func:`for_build`): a C++ source whose first ``#include`` is the header, or whose only lines
before it are comments, ``#line`` and ``#include`` of standard library headers (which may be included in any
order, [using.headers]); whose header is aotbench's (no ``custom_aot_extra.h`` beside the kernel or in a folder
its flags add, where MindSpore's would be found first); and whose folder holds no file that a header read by the
PCH would find instead (the kernel's folder is an -I folder of the documented command, not of the PCH's build).
Such a build's command is the documented one plus ``-include <cache>/pch/<key>/custom_aot_extra.h``. That folder
holds ``custom_aot_extra.h.gch`` and a symbolic link to aotbench's header, so g++ loads the PCH where it is valid
and reads the very header otherwise (GCC looks for ``name.gch`` just before ``name``). ``AOTBENCH_PCH=0`` turns
it off.

One PCH per compiler and exact flag set (``key``; with ``-march=native`` and the like, also what they resolve
to on this machine, :mod:`.hostflags`): GCC refuses a PCH made with other -O, -m, -g, -f or macro
settings, and its manual names the same options as the safe choice. It is built on the third miss with a flag
set (making it costs about two plain compiles, so a one-off build, or a test's build and rebuild in a fresh
cache, would lose), under ``locks/pch-<key>.lock``, into ``tmp/``, and published with an atomic rename. Its
manifest ``pch/<key>.json`` records the .gch's stamp (size, mtime, sha256), the files it read and the listings
of its include folders; a miss that finds any of them changed rebuilds it, and while g++ compiles the .gch is
hashed (:func:`verify`): a mismatch discards that build and compiles again without it. A PCH that cannot be
built, or whose build prints anything (a warning the header draws with these flags would vanish from the
kernel's log), is refused: the documented command is used for that flag set.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import time
import uuid
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .._version import __version__
from ..errors import DamagedPchError
from . import cache, hostflags, subproc, toolchain

HEADER = "custom_aot_extra.h"
SWITCH = "AOTBENCH_PCH"  # "0", "off", "false" or "no": every build uses the documented command
OUTPUT = "<output>"  # where the PCH's build command names its output
BUILD_ON_MISS = 3  # a flag set's PCH is made on its third cache miss
_FORMAT = 1
_ENV = ("CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH")  # they change where g++ finds the header's includes
_PRE_INCLUDES = ("-include", "--include", "-imacros", "--imacros")  # would be read before the PCH
_BLAMES_PCH = re.compile(r"precompiled header|PCH file|\.gch\b")

_STANDARD = frozenset({  # C++20's headers and the C library's, as <cname> and <name.h>
    "algorithm", "any", "array", "atomic", "barrier", "bit", "bitset", "charconv", "chrono", "codecvt", "compare",
    "complex", "concepts", "condition_variable", "coroutine", "deque", "exception", "execution", "filesystem",
    "format", "forward_list", "fstream", "functional", "future", "initializer_list", "iomanip", "ios", "iosfwd",
    "iostream", "istream", "iterator", "latch", "limits", "list", "locale", "map", "memory", "memory_resource",
    "mutex", "new", "numbers", "numeric", "optional", "ostream", "queue", "random", "ranges", "ratio", "regex",
    "scoped_allocator", "semaphore", "set", "shared_mutex", "source_location", "span", "sstream", "stack",
    "stdexcept", "stop_token", "streambuf", "string", "string_view", "strstream", "syncstream", "system_error",
    "thread", "tuple", "type_traits", "typeindex", "typeinfo", "unordered_map", "unordered_set", "utility",
    "valarray", "variant", "vector", "version", "cassert", "ccomplex", "cctype", "cerrno", "cfenv", "cfloat",
    "cinttypes", "ciso646", "climits", "clocale", "cmath", "csetjmp", "csignal", "cstdalign", "cstdarg", "cstdbool",
    "cstddef", "cstdint", "cstdio", "cstdlib", "cstring", "ctgmath", "ctime", "cuchar", "cwchar", "cwctype",
    "assert.h", "complex.h", "ctype.h", "errno.h", "fenv.h", "float.h", "inttypes.h", "iso646.h", "limits.h",
    "locale.h", "math.h", "setjmp.h", "signal.h", "stdalign.h", "stdarg.h", "stdbool.h", "stddef.h", "stdint.h",
    "stdio.h", "stdlib.h", "string.h", "tgmath.h", "time.h", "uchar.h", "wchar.h", "wctype.h",
})
_LEAD = re.compile(r"""
      \s*\n
    | [ \t]+(?=//|/\*|\Z)
    | //[^\n]*
    | /\*.*?\*/
    | \#[ \t]*line\b[^\n]*
    | (?<![^\n\ufeff])[ \t]*\#[ \t]*include[ \t]*(?P<ours>"custom_aot_extra\.h"|<custom_aot_extra\.h>)(?=[ \t]*(?://[^\n]*)?(?:\n|\Z))
    | (?<![^\n\ufeff])[ \t]*\#[ \t]*include[ \t]*<(?P<std>[^>\n]+)>(?=[ \t]*(?://[^\n]*)?(?:\n|\Z))
""", re.VERBOSE | re.DOTALL)  # a directive starts its own line, and nothing but a comment follows it there


@dataclass(frozen=True)
class Pch:
    """The precompiled header one flag set's builds share: where it lives and how it is built."""

    key: str
    folder: Path  # <cache>/pch/<key>: the .gch and the link to the header, nothing else
    argv: tuple[str, ...]  # its build command, writing OUTPUT
    search_dirs: tuple[str, ...]  # where that build looks for headers first: aotbench's folder and the flags'

    @property
    def header(self) -> Path:
        """What the kernel's command pre-includes (a link to aotbench's header, beside the .gch)."""
        return self.folder / HEADER

    @property
    def gch(self) -> Path:
        return self.folder / f"{HEADER}.gch"

    @property
    def manifest(self) -> Path:
        return self.folder.with_suffix(".json")

    @property
    def lock(self) -> Path:
        return self.folder.parents[1] / "locks" / f"pch-{self.key}.lock"


def enabled() -> bool:
    """False when ``AOTBENCH_PCH`` says off (read at call time)."""
    return os.environ.get(SWITCH, "1").strip().lower() not in ("0", "off", "false", "no")


def leading_includes(text: str) -> tuple[str, ...] | None:
    """The standard headers a source includes before ``custom_aot_extra.h`` (empty when it comes first), or None
    when anything else (code, a macro, another header, a conditional) comes first or the header never does."""
    pos, names = (1 if text.startswith("\ufeff") else 0), []
    while (m := _LEAD.match(text, pos)) is not None:
        if m["ours"]:
            return tuple(names)
        if m["std"] is not None:
            if m["std"] not in _STANDARD:
                return None
            names.append(m["std"])
        elif m.group().rstrip().endswith("\\"):
            return None  # a comment or #line that goes on to the next line
        pos = m.end()
    return None


def for_build(root: Path, compiler: str, source: Path, text: str, flags: tuple[str, ...]) -> Pch | None:
    """The PCH a build of ``source`` (whose text is ``text``) with ``flags`` can use, or None: switched off, not a
    C++ source, a source that does not open with the header, another header found first, or the PCH refused."""
    if not enabled() or source.suffix not in toolchain.CXX_SUFFIXES:
        return None
    if any(os.environ.get(v) for v in _ENV):
        return None  # folders searched that the PCH's freshness check does not list: the documented command
    leading = leading_includes(text)
    if leading is None or any(f.startswith(_PRE_INCLUDES) for f in flags):
        return None
    ours = str(toolchain.include_dir())
    dirs = toolchain.user_include_dirs(source, flags)
    if any(os.path.lexists(os.path.join(d, HEADER)) for d in dirs if d != ours):
        return None  # MindSpore's header (or another) is what the documented command reads
    if any(os.path.lexists(os.path.join(d, name)) for d in dirs for name in leading):
        return None  # a "standard" header of the user's own: where it comes relative to ours matters
    try:
        pch = describe(root, compiler, flags)
    except OSError:
        return None  # the header cannot be read: the documented command says so in its own words
    refused, names = _state(str(pch.manifest))
    if refused or names.intersection(_listdir(source.parent)):
        return None
    return pch


def describe(root: Path, compiler: str, flags: tuple[str, ...]) -> Pch:
    """The PCH for ``compiler`` and ``flags`` in the cache at ``root`` (nothing is read or built)."""
    header = toolchain.include_dir() / HEADER
    base = [f for f in toolchain.CXX_BASE_FLAGS if f != "--shared"]  # a link option: nothing to do with a PCH
    argv = (compiler, *base, f"-I{header.parent}", *flags, "-x", "c++-header", str(header), "-o", OUTPUT)
    dirs = tuple(toolchain.user_include_dirs(header, flags))  # relative -I folders, made absolute here
    native = hostflags.resolve(compiler, flags)  # -march=native: what it means here (only then part of the key)
    h = hashlib.sha256()
    for part in (f"aotbench-pch {_FORMAT} {__version__}", toolchain.compiler_identity(compiler), json.dumps(argv),
                 json.dumps(dirs), _digest(header), *(os.environ.get(v, "") for v in _ENV),
                 *(() if native is None else (f"native {native.resolved}",))):
        h.update(part.encode() + b"\0")
    key = h.hexdigest()[:24]
    return Pch(key, root / "pch" / key, argv, dirs)


def prepare(pch: Pch, source_dir: Path) -> bool:
    """Ready the PCH for a build that missed the cache: link the header; on the third miss with this flag set,
    build the .gch; rebuild one whose files changed. False when the documented command must be used instead (the
    PCH was refused, or ``source_dir`` holds a file that one of the PCH's headers would find)."""
    try:
        with cache.locked(pch.lock):
            state = _prepared(pch)
    except OSError:  # no symbolic links here, a full disk, a folder another user made: never the kernel's failure
        return False
    return state.get("state") != "refused" and not set(_names(state)).intersection(_listdir(source_dir))


def _prepared(pch: Pch) -> dict:
    """:func:`prepare`'s work under the PCH's lock; returns the manifest as it now is."""
    _link(pch)
    state = cache.read_json(pch.manifest) or {}
    if state.get("state") != "built":
        _unlink(pch.gch)  # one no manifest vouches for (a prune stopped half way) is never read
    misses = state.get("misses", 0) + 1 if isinstance(state.get("misses", 0), int) else 1
    if state.get("state") in (None, "wanted") and misses < BUILD_ON_MISS:
        state = {"state": "wanted", "misses": misses, "created": state.get("created", time.time())}
        _write(pch, state)
    elif state.get("state") != "refused" and not (state.get("state") == "built" and _intact(pch, state)):
        built = _build(pch)
        if built is not None:  # None: g++ could not be run; the next miss tries again
            state = built
            _write(pch, state)
    return state


def verify(pch: Pch) -> None:
    """Raise :class:`DamagedPchError` if the .gch differs from its recorded sha256. Called while g++ compiles
    (hashing 30 MB then costs no time), so a .gch damaged without a change of size or mtime, which the stat
    check of :func:`prepare` cannot see, never yields a library."""
    state = cache.read_json(pch.manifest) or {}
    try:
        intact = cache.sha256_file(pch.gch) == cache.DepStamp(*state["gch"]).sha256 and state["state"] == "built"
    except FileNotFoundError:
        return  # no .gch: g++ reads the header
    except (OSError, KeyError, TypeError, ValueError):
        intact = False
    if not intact:
        raise DamagedPchError(f"the precompiled header {pch.gch} does not match its recorded sha256: build again "
                              f"(it is set aside and made anew), or set {SWITCH}=0")


def repair(pch: Pch, log: str, damaged: bool = False) -> bool:
    """After a compile that pre-included ``pch.header`` failed (``log``) or read a ``damaged`` .gch: True when the
    PCH may be the cause and has been set aside, so that the same command, run again, reads the plain header. A
    damaged .gch is removed and made again on the next miss; one g++ failed on is refused for good."""
    try:
        with cache.locked(pch.lock):
            return _set_aside(pch, log, damaged)
    except OSError:
        return False


def _set_aside(pch: Pch, log: str, damaged: bool) -> bool:
    """:func:`repair`'s work under the PCH's lock."""
    if not _link(pch):
        return True  # removed (pruned) while the kernel compiled
    state = cache.read_json(pch.manifest) or {}
    if not damaged and (state.get("state") != "built" or not pch.gch.exists() or not _BLAMES_PCH.search(log)):
        return False  # the kernel's own error (verify saw the .gch intact while g++ read it)
    _unlink(pch.gch)
    _write(pch, {"state": "wanted", "misses": BUILD_ON_MISS - 1} if damaged else  # made on the next miss
           {"state": "refused", "reason": "g++ failed on it", "log": log[-4000:]})
    return True


def _build(pch: Pch) -> dict | None:
    """Compile the header into tmp/, publish it as ``pch.gch``, and return its manifest (state "built" or
    "refused"); None when g++ could not be run at all."""
    scratch = pch.folder.parents[1] / "tmp" / f"pch-{pch.key[:12]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    out, dep = scratch.with_suffix(".gch"), scratch.with_suffix(".d")
    argv = [str(out) if a == OUTPUT else a for a in pch.argv]
    listings = [[d, cache.listing_hash(d)] for d in pch.search_dirs]
    started = time.perf_counter()
    try:
        proc = subproc.run([*argv, "-MD", "-MF", str(dep)])  # its own process group: an interrupt ends all of it
        if proc.returncode != 0 or proc.stdout.strip() or not _is_pch(out):
            return {"state": "refused", "argv": argv, "returncode": proc.returncode, "log": proc.stdout[-4000:]}
        deps = [cache.stamp(p) for p in map(os.path.abspath, cache.parse_depfile(dep.read_text()))]
        names = _shadow_names([d.path for d in deps], _search_roots(pch))
        os.replace(out, pch.gch)
        return {"state": "built", "argv": argv, "build_time_s": round(time.perf_counter() - started, 4),
                "created": time.time(), "gch": list(vars(cache.stamp(str(pch.gch))).values()),
                "deps": [list(vars(d).values()) for d in deps], "dirs": listings, "names": sorted(names)}
    except OSError:
        return None
    finally:
        _unlink(out)
        _unlink(dep)


def _intact(pch: Pch, state: dict) -> bool:
    """True when the .gch, every file it was made from and its include folders' listings are as recorded."""
    try:
        gch = cache.DepStamp(*state["gch"])
        deps = [cache.DepStamp(*d) for d in state["deps"]]
        listings = {d: h for d, h in state["dirs"]}
    except (KeyError, TypeError, ValueError):
        return False
    return (gch.path == str(pch.gch) and gch.still_valid()
            and listings == {d: cache.listing_hash(d) for d in pch.search_dirs}
            and all(d.still_valid() for d in deps))


def _link(pch: Pch) -> bool:
    """Make the folder and its link to aotbench's header; False when either was missing."""
    target = str(toolchain.include_dir() / HEADER)
    try:
        if os.readlink(pch.header) == target:
            return True
    except OSError:
        pass
    pch.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    cache.check_private(pch.folder, pch.folder.parents[1])
    tmp = pch.folder / f".{HEADER}.{uuid.uuid4().hex[:8]}"
    os.symlink(target, tmp)
    os.replace(tmp, pch.header)
    return False


def _search_roots(pch: Pch) -> list[str]:
    """The folders g++ searches for the header's includes with these flags (from ``-v``); empty if unknown."""
    try:
        proc = subprocess.run([*pch.argv[:-5], "-x", "c++", "-E", "-v", "-o", os.devnull, os.devnull], check=False,
                              capture_output=True, text=True, errors="replace", stdin=subprocess.DEVNULL, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    lines = proc.stderr.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith('#include "..." search starts here'))
        end = lines.index("End of search list.", start)
    except (StopIteration, ValueError):
        return []
    return [os.path.normpath(line.strip()) for line in lines[start + 1:end] if line.startswith(" ")]


def _shadow_names(paths: list[str], roots: list[str]) -> set[str]:
    """The first component of each file's name relative to the innermost search folder holding it (``vector``,
    ``bits``, ``features.h``): a file or folder of that name in the kernel's folder would be found instead. A
    file under no known folder gives every component of its path (a cautious overestimate)."""
    names = set()
    for path in paths:
        under = [r for r in roots if path.startswith(r.rstrip("/") + "/")]
        if under:
            names.add(path[len(max(under, key=len).rstrip("/")) + 1:].split("/")[0])
        else:
            names.update(Path(path).parts[1:])
    return names


def _state(manifest: str) -> tuple[bool, frozenset[str]]:
    """(refused, shadow names) from a PCH manifest, read once per version of the file."""
    try:
        st = os.stat(manifest)
    except OSError:
        return False, frozenset()
    return _read_state(manifest, st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=64)
def _read_state(manifest: str, size: int, mtime_ns: int) -> tuple[bool, frozenset[str]]:
    state = cache.read_json(Path(manifest)) or {}
    return state.get("state") == "refused", frozenset(_names(state))


def _names(state: dict) -> list[str]:
    names = state.get("names")
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


@lru_cache(maxsize=8)
def _header_digest(path: str, size: int, mtime_ns: int) -> str:
    return cache.sha256_file(Path(path))


def _digest(header: Path) -> str:
    st = os.stat(header)
    return _header_digest(str(header), st.st_size, st.st_mtime_ns)


def _listdir(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _is_pch(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"gpch"
    except OSError:
        return False


def _write(pch: Pch, state: dict) -> None:
    cache.write_atomic(pch.manifest, json.dumps(state, indent=1).encode())


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
