"""Sanitizer builds: the flags, the runtime a worker must preload, and turning a report into an error.

An ASan- or UBSan-instrumented library cannot be loaded into a running Python (the sanitizer runtime must be
the first library of the process), so a sanitized op always runs isolated, in a worker started with the runtime
in ``LD_PRELOAD``. The report the runtime prints when it stops the worker becomes a :class:`SanitizerError`
pointing at the first frame in the kernel's source: for a ``%%aot_kernel`` cell, ``<cell>:LINE``, the cell's
own line, thanks to the ``#line`` directive the cell is compiled with.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from functools import lru_cache

from ..build.toolchain import find_cxx
from ..errors import ArgumentValueError, KernelCrashedError, SanitizerError, ToolchainNotFoundError


@dataclass(frozen=True)
class Sanitizer:
    flags: tuple[str, ...]
    runtime: str  # the shared runtime to preload, as g++ names it
    env: dict


SANITIZERS = {
    "address": Sanitizer(("-fsanitize=address", "-fno-omit-frame-pointer", "-g"), "libasan.so",
                         {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:symbolize=1:print_summary=1"}),
    "undefined": Sanitizer(("-fsanitize=undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g"),
                           "libubsan.so", {"UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:abort_on_error=1"}),
}
_FRAME = re.compile(r"#\d+ 0x[0-9a-f]+ in (?P<func>\S+) (?P<file>[^\s:]+(?: [^\s:]+)*):(?P<line>\d+)")
_UBSAN = re.compile(r"(?P<file>[^\s:]+):(?P<line>\d+):(?P<col>\d+): runtime error: (?P<what>.*)")
_SUMMARY = re.compile(r"SUMMARY: (?:Address|UndefinedBehavior)Sanitizer: (?P<what>.*)")
_ASAN_ERROR = re.compile(r"ERROR: AddressSanitizer: (?P<what>[\w-]+)")


def check_kind(kind: str | None) -> str | None:
    if kind is not None and kind not in SANITIZERS:
        raise ArgumentValueError(f"sanitize={kind!r}: use 'address' (ASan) or 'undefined' (UBSan)")
    return kind


def flags(kind: str) -> tuple[str, ...]:
    return SANITIZERS[kind].flags


def runtime_path(kind: str) -> str:
    """The sanitizer runtime g++ links against (``g++ -print-file-name=libasan.so``)."""
    return runtime_library(SANITIZERS[kind].runtime)


@lru_cache(maxsize=8)
def runtime_library(name: str) -> str:
    """The path of the sanitizer runtime ``name`` (``libasan.so``, ``libtsan.so`` ...) as g++ finds it."""
    out = subprocess.run([find_cxx(), f"-print-file-name={name}"], capture_output=True, text=True, timeout=60,
                         check=False).stdout.strip()
    if not out or not os.path.isabs(out) or not os.path.exists(out):
        raise ToolchainNotFoundError(name, f"g++ has no {name}; install its sanitizer runtime "
                                     "(Debian: apt-get install libasan8 libubsan1 libtsan2)")
    return out


def worker_env(kind: str) -> dict:
    """Environment additions for a worker that runs a ``kind``-sanitized library."""
    return {"LD_PRELOAD": runtime_path(kind), **SANITIZERS[kind].env}


def sanitizer_error(crash: KernelCrashedError, kind: str, sources: dict[str, str]) -> SanitizerError:
    """The :class:`SanitizerError` for a worker a ``kind`` sanitizer stopped: what it found, and where in the
    kernel's source (``sources`` holds the cells' texts by their ``#line`` names)."""
    what, location = _parse(crash.stderr)
    summary = re.sub(r"\S*(<cell>)", r"\1", next((m["what"] for m in _SUMMARY.finditer(crash.stderr)), what))
    return SanitizerError(crash, kind, what, location, _line(location, sources), summary)


def _parse(report: str) -> tuple[str, tuple[str, int] | None]:
    ub = _UBSAN.search(report)
    if ub:
        return f"undefined behaviour: {ub['what'].strip()}", (_short(ub["file"]), int(ub["line"]))
    what = (m["what"] for m in _ASAN_ERROR.finditer(report))
    first = next((m for m in _FRAME.finditer(report) if not _is_runtime(m["file"])), None)
    return next(what, "a memory error"), ((_short(first["file"]), int(first["line"])) if first else None)


def _is_runtime(path: str) -> bool:
    return any(part in path for part in ("/libsanitizer/", "/Python-", "Modules/", "Objects/", "Python/", "../"))


def _short(path: str) -> str:
    """``/tmp/build/<cell>`` -> ``<cell>`` (the compiler prefixes the working directory to #line names)."""
    return path[path.index("<"):] if "<" in path and path.endswith(">") else path


def _line(location, sources: dict[str, str]) -> str:
    if not location:
        return ""
    text = sources.get(location[0])
    if text is None and os.path.isfile(location[0]):
        try:
            with open(location[0], encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            return ""
    lines = (text or "").splitlines()
    return lines[location[1] - 1] if 1 <= location[1] <= len(lines) else ""
