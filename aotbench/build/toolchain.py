"""Which compiler builds a kernel, and with exactly which command.

The default C++ command is the documented one (ABI.md section 6), as an argv list:
``g++ -std=c++17 --shared -fPIC -D_GLIBCXX_USE_CXX11_ABI=0 -I<aotbench include> -I<source dir> -o <out> <src>``
followed by the user's extra flags. Nothing here runs a compiler except :func:`compiler_identity`, whose answer
is memoised per compiler binary.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from ..errors import ToolchainNotFoundError

#: The flags every C++ kernel is built with; the ABI flag must match the native host's.
CXX_BASE_FLAGS = ("-std=c++17", "--shared", "-fPIC", "-D_GLIBCXX_USE_CXX11_ABI=0")

CXX_SUFFIXES = (".cc", ".cpp")
CUDA_SUFFIXES = (".cu",)


@lru_cache(maxsize=1)
def include_dir() -> Path:
    """The directory holding aotbench's ``custom_aot_extra.h``."""
    return Path(__file__).resolve().parents[1] / "native" / "include"


def find_cxx() -> str:
    """Absolute path of ``g++`` on the current PATH (looked up at call time, never at import)."""
    found = shutil.which("g++")
    if found is None:
        raise ToolchainNotFoundError(
            "g++", "install the GNU C++ compiler (Debian/Ubuntu: apt-get install g++; conda: conda install gxx)"
        )
    return found


def cxx_command(compiler: str, source: Path, output: Path, flags: tuple[str, ...] = (),
                pre_include: Path | None = None) -> list[str]:
    """The documented C++ build command for ``source``, writing ``output``, with ``flags`` appended.

    The source's own directory is on the include path, so a ``custom_aot_extra.h`` beside the kernel (e.g.
    MindSpore's) is found first by ``#include "custom_aot_extra.h"``, exactly as in MindSpore. ``pre_include``
    (the link beside a precompiled header, :mod:`.pch`) adds ``-include <it>`` after the include folders.
    """
    return [
        compiler, *CXX_BASE_FLAGS,
        f"-I{include_dir()}", f"-I{source.parent}",
        *(("-include", str(pre_include)) if pre_include is not None else ()),
        "-o", str(output), str(source), *flags,
    ]


INCLUDE_OPTIONS = ("-I", "-iquote", "-isystem", "-idirafter")


def user_include_dirs(source: Path, flags: tuple[str, ...]) -> list[str]:
    """Directories searched for headers before the system's: the source's own, aotbench's, and those the
    flags add (``-I``, ``-iquote``, ``-isystem``, ``-idirafter``, joined or as two arguments)."""
    dirs = [str(source.parent), str(include_dir())]
    pending = None
    for flag in flags:
        if pending:
            dirs.append(flag)
            pending = None
            continue
        for option in INCLUDE_OPTIONS:
            if flag == option:
                pending = option
            elif flag.startswith(option) and not (option == "-I" and flag.startswith("-I-")):
                dirs.append(flag[len(option):])
    return [os.path.abspath(d) for d in dict.fromkeys(dirs)]


# Options whose next argument is a file the compiler looks for in the working directory first.
FILE_OPTIONS = ("-include", "-imacros")


def anchor_include_flags(flags: tuple[str, ...]) -> tuple[str, ...]:
    """``flags`` with each relative include folder (-I, -iquote, -isystem, -idirafter, joined or as the next
    argument) made absolute against the working directory now: the compiler would resolve it against the
    working directory of the build, which a later ``os.chdir`` or ``%cd`` changes. Absolute ones are kept. The
    file of an ``-include``/``-imacros`` is made absolute too when it is found from the working directory now
    (else the compiler searches the include folders for it, and the name is kept)."""
    out, pending, pending_file = [], False, False
    for flag in flags:
        if pending:
            out.append(os.path.abspath(flag) if flag else flag)
            pending = False
            continue
        if pending_file:  # a file found from the working directory now is that file for good
            out.append(os.path.abspath(flag) if flag and os.path.isfile(flag) else flag)
            pending_file = False
            continue
        if flag in FILE_OPTIONS:
            pending_file = True
            out.append(flag)
            continue
        option = next((o for o in INCLUDE_OPTIONS if flag.startswith(o)), None)
        if option is not None and flag == option:
            pending = True
            out.append(flag)
        elif option is not None and not (option == "-I" and flag.startswith("-I-")) \
                and not os.path.isabs(flag[len(option):]):
            out.append(option + os.path.abspath(flag[len(option):]))
        else:
            out.append(flag)
    return tuple(out)


def include_home(path: str, folders: list[str]) -> str | None:
    """The folder an included file was found from: the longest of ``folders`` that holds it, or None."""
    holding = [f for f in folders if path.startswith(f.rstrip("/") + "/")]
    return max(holding, key=len) if holding else None


def own_headers(source: Path, flags: tuple[str, ...], dependencies, outside: Path | None = None) -> list[str]:
    """Of a build's included files, the user's own: those found in the source's folder or in a folder its include
    flags name. Not aotbench's header, nor anything under ``outside`` (the cache: a precompiled header)."""
    folders = [d for d in user_include_dirs(source, flags) if d != str(include_dir())]
    skip = None if outside is None else str(outside).rstrip("/") + "/"
    return [p for p in dependencies if include_home(os.path.normpath(p), folders) is not None
            and not (skip and p.startswith(skip))]


def _binary_stamp(path: str) -> tuple[str, int, int]:
    real = os.path.realpath(path)
    st = os.stat(real)
    return real, st.st_size, st.st_mtime_ns


def compiler_identity(compiler: str) -> str:
    """A string that changes whenever the compiler does: its resolved path, version banner and target."""
    return _identity(*_binary_stamp(compiler))


@lru_cache(maxsize=32)
def _identity(real_path: str, size: int, mtime_ns: int) -> str:
    try:
        out = subprocess.run([real_path, "--version"], check=False, capture_output=True, text=True, timeout=60)
        machine = subprocess.run([real_path, "-dumpmachine"], check=False, capture_output=True, text=True, timeout=60)
    except OSError as exc:  # present but not runnable
        raise ToolchainNotFoundError(real_path, f"it could not be run ({exc})") from exc
    banner = out.stdout.strip().splitlines()[0] if out.stdout.strip() else "unknown"
    return f"{real_path} {size} {mtime_ns} | {banner} | {machine.stdout.strip()}"
