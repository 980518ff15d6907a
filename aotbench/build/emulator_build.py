"""The build of a ``.cu`` source for aotbench's CUDA emulator: the host C++ compiler, not nvcc.

The source is translated (:mod:`.cuda_emulation`: launches and ``extern __shared__``, line for line) into a
content-addressed file under ``<cache>/emulated/``, whose first line points every diagnostic back at the user's
own file (or cell). It is compiled with the emulator's header force-included
(``native/include/cuda_emu/aotbench_cuda_emu.h``) and linked with the emulator's scheduler
(``native/src/cuda_emu.cc``, compiled once per cache into an object file), so each library carries its own copy
of the emulator: ``-fno-gnu-unique`` keeps
the ``__shared__`` variables of template kernels private to their library (GCC would otherwise bind them to one
copy across every loaded library). nvcc-only flags are dropped and said so; ``-D``/``-U``/``-I``/``-O``/``-g``/
``-std``, and what ``-Xcompiler`` passes, reach g++.
"""

from __future__ import annotations

import hashlib
import os
import re
from functools import lru_cache
from pathlib import Path

from ..errors import CompileError
from . import cache, cuda_emulation, subproc, toolchain
from .diagnostics import Diagnostic

#: What every emulated build adds to the documented C++ flags. A function whose locals need more than half a
#: fiber's stack (AOTB_EMU_STACK_BYTES, 1 MiB) is a compile error at its line, not an overflow while it runs.
EMULATOR_FLAGS = ("-O2", "-g", "-fno-gnu-unique", "-pthread", "-Werror=frame-larger-than=524288")
HEADER = "aotbench_cuda_emu.h"

# nvcc options that mean nothing to the host compiler, with how many following words they take.
_NVCC_ONLY = {"-arch": 1, "--gpu-architecture": 1, "-gencode": 1, "--generate-code": 1, "-code": 1,
              "--gpu-code": 1, "-Xptxas": 1, "--ptxas-options": 1, "-Xnvlink": 1, "-maxrregcount": 1,
              "--maxrregcount": 1, "-lineinfo": 0, "--generate-line-info": 0, "--use_fast_math": 0,
              "-use_fast_math": 0, "--expt-relaxed-constexpr": 0, "--expt-extended-lambda": 0,
              "--extended-lambda": 0, "-rdc=true": 0, "-rdc": 1, "--relocatable-device-code": 1,
              "--resource-usage": 0, "-res-usage": 0, "-ftz=true": 0, "-ftz=false": 0, "-prec-div=false": 0,
              "-prec-sqrt=false": 0, "--ftz": 1, "--prec-div": 1, "--prec-sqrt": 1, "--fmad": 1, "-fmad": 1,
              "-Xcudafe": 1, "--diag-suppress": 1, "-G": 0, "--device-debug": 0, "-src-in-ptx": 0,
              "--keep": 0, "-keep": 0}
_NVCC_ONLY_PREFIX = ("-arch=", "--gpu-architecture=", "-gencode=", "--generate-code=", "-code=", "-Xptxas=",
                     "--ptxas-options=", "-maxrregcount=", "--maxrregcount=", "-rdc=", "--diag-suppress=",
                     "--ftz=", "--prec-div=", "--prec-sqrt=", "--fmad=", "-fmad=", "--use_fast_math=")


def include_dir() -> Path:
    """The folder of the emulator's headers (``cuda_runtime.h``, ``cuda_fp16.h`` ... as the emulator has them)."""
    return toolchain.include_dir() / "cuda_emu"


def runtime_source() -> Path:
    """The emulator's scheduler, compiled into every emulated library."""
    return toolchain.include_dir().parent / "src" / "cuda_emu.cc"


@lru_cache(maxsize=1)
def emulator_digest() -> str:
    """A hash of the emulator's own files and the translator's version: part of every emulated build's command,
    so a changed emulator never reuses a library built with the old one."""
    h = hashlib.sha256(f"translator {cuda_emulation.TRANSLATOR_VERSION}".encode())
    for path in sorted(include_dir().rglob("*")) + [runtime_source()]:
        if path.is_file():
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def host_flags(flags: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The user's nvcc flags as g++ takes them, and the ones dropped (nvcc-only: architectures, ptxas options,
    ``--use_fast_math``, whose approximations the emulator does not reproduce)."""
    kept: list[str] = []
    dropped: list[str] = []
    i = 0
    while i < len(flags):
        flag = flags[i]
        if flag in ("-Xcompiler", "--compiler-options") and i + 1 < len(flags):
            kept.extend(p for p in flags[i + 1].split(",") if p)
            i += 2
            continue
        if flag.startswith(("-Xcompiler=", "--compiler-options=")):
            kept.extend(p for p in flag.split("=", 1)[1].split(",") if p)
            i += 1
            continue
        if flag in _NVCC_ONLY:
            n = _NVCC_ONLY[flag]
            dropped.extend(flags[i:i + 1 + n])
            i += 1 + n
            continue
        if flag.startswith(_NVCC_ONLY_PREFIX):
            dropped.append(flag)
            i += 1
            continue
        kept.append(flag)
        i += 1
    return tuple(kept), tuple(dropped)


def translated_path(root: Path, source: Path, text: str) -> Path:
    """Translate ``text`` (the source at ``source``) for the emulator into ``<root>/emulated/`` and return the
    file's path (content-addressed: the same source is the same file). Raises :class:`CompileError` at the user's
    line for what the emulator refuses (inline PTX) or cannot translate (a malformed launch)."""
    problems = cuda_emulation.unsupported(text)
    if problems:
        raise _refusal(source, text, [(line, f"{feature} is not emulated by aotbench: run this kernel on a GPU "
                                             "(emulate=False)") for line, feature in problems])
    try:
        translated = cuda_emulation.translate(text)
    except ValueError as exc:
        match = re.match(r"line (\d+)", str(exc))
        raise _refusal(source, text, [(int(match[1]) if match else 1, str(exc))]) from exc
    body = f'#line 1 "{_quoted(str(source))}"\n{translated}'
    digest = hashlib.sha256(f"{cuda_emulation.TRANSLATOR_VERSION}\0{source}\0{body}".encode()).hexdigest()[:16]
    folder = root / "emulated" / digest
    path = folder / f"{_stem(source)}.emu.cc"
    data = body.encode()
    try:
        same = path.read_bytes() == data
    except OSError:
        same = False
    if not same:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        with cache.full_disk_is_cache_error(root, f"writing the translated source {path.name}"):
            cache.write_atomic(path, data)
    return path


def variant(flags: tuple[str, ...]) -> str:
    """Which build of the scheduler a library links: "plain", or "asan"/"tsan" for a sanitized library (the
    scheduler itself is never instrumented: it only tells the sanitizer about its fiber switches and barriers)."""
    joined = " ".join(flags)
    if "-fsanitize=thread" in joined:
        return "tsan"
    if "-fsanitize=address" in joined:
        return "asan"
    return "plain"


_VARIANT_DEFINES = {"plain": (), "asan": ("-DAOTB_EMU_ASAN=1",), "tsan": ("-DAOTB_EMU_TSAN=1",)}


def runtime_object(root: Path, compiler: str, kind: str) -> Path:
    """The scheduler compiled once per cache, compiler, emulator version and variant (an object file linked into
    every emulated library: each library still has its own copy of its state)."""
    identity = toolchain.compiler_identity(compiler)
    key = hashlib.sha256(f"{identity}\0{emulator_digest()}\0{kind}".encode()).hexdigest()[:16]
    path = root / "emulated" / f"cuda_emu-{kind}-{key}.o"
    if path.is_file():
        return path
    folder = path.parent
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    with cache.locked(root / "locks" / f"{path.stem}.lock"):
        if path.is_file():
            return path
        scratch = folder / f".{path.stem}-{os.getpid()}.o"
        argv = [compiler, "-c", *toolchain.CXX_BASE_FLAGS[:1], "-fPIC", "-D_GLIBCXX_USE_CXX11_ABI=0",
                *EMULATOR_FLAGS, *_VARIANT_DEFINES[kind], f"-I{include_dir()}", f"-I{toolchain.include_dir()}",
                "-o", str(scratch), str(runtime_source())]
        proc = subproc.run(argv)
        if proc.returncode != 0:
            scratch.unlink(missing_ok=True)
            raise CompileError(argv, proc.returncode, proc.stdout, [])
        os.replace(scratch, path)
    return path


def command(compiler: str, source: Path, translated: Path, output: Path, flags: tuple[str, ...],
            runtime: Path) -> list[str]:
    """The g++ command of an emulated build: the documented C++ flags, the emulator's, the user's (as g++ takes
    them), the translated source and the scheduler's object (:func:`runtime_object`)."""
    kept, _ = host_flags(flags)
    return [
        compiler, *toolchain.CXX_BASE_FLAGS, *EMULATOR_FLAGS, f"-I{include_dir()}", f"-I{toolchain.include_dir()}",
        f"-I{source.parent}", "-include", HEADER, *kept, "-o", str(output), str(translated), str(runtime),
    ]


def _refusal(source: Path, text: str, problems: list[tuple[int, str]]) -> CompileError:
    label = _label(source, text)
    log = "".join(f"{label}:{line}:1: error: {message}\n" for line, message in problems)
    diagnostics = [Diagnostic(label, line, 1, "error", message) for line, message in problems]
    return CompileError(["aotbench-emulator-translate", str(source)], 1, log, diagnostics)


def _label(source: Path, text: str) -> str:
    """The file name diagnostics use: a cell's ``#line 1 "<cell>"`` wins over its file's path."""
    first = text.split("\n", 1)[0]
    match = re.match(r'#line 1 "(.*)"$', first)
    return match[1] if match else str(source)


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _stem(source: Path) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", source.stem)[:48] or "kernel"


__all__ = ["EMULATOR_FLAGS", "command", "emulator_digest", "host_flags", "include_dir", "runtime_object",
           "runtime_source", "translated_path", "variant"]
