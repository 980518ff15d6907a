"""``op.disassemble()`` and ``op.annotate()``: a separate inspection build of the op's own command, read back.

The inspection build is the op's command (same source, flags, architectures) plus what makes the compiler
explain itself without changing its code: ``-g`` and GCC's remark flags for C++, ``-lineinfo`` for CUDA. It is a
cache entry of its own, so the op's library and its results are untouched, and it is built once: asking again
costs a cache lookup, and the parsed views are kept per library.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

from ...build import toolchain
from ...build import compile as build
from ...build.compile import Artifact
from ...errors import ArgumentValueError, SourceChangedError
from . import device_asm, host_asm, remarks
from .listing import Function, SourceText
from .views import Annotation, Disassembly

# DWARF 4: GCC 12's default DWARF 5 line table is misread by binutils 2.40's objdump -l (file 1 reported as the
# main file, so a helper header's code shows under the kernel's lines); the code generated is the same.
CPU_EXTRA = ("-g", "-gdwarf-4", *remarks.GCC_REMARK_FLAGS)
GPU_EXTRA = ("-lineinfo",)
_OPTIMIZING = re.compile(r"^-O(?:[1-3sgz]|fast)?$")  # the last -O flag decides, as for GCC



def disassemble(op, kind: str | None = None, *, syntax: str = "intel") -> Disassembly:
    """The generated code of the kernel's functions, each instruction under its source line.

    cpu: host assembly (``syntax="intel"`` or ``"att"``) of main, Init, InferShape and their helpers. gpu:
    ``kind="sass"`` (the default: machine code, per kernel and architecture in the build) or ``"ptx"``.
    Read from an inspection build (the op's command plus ``-g`` / ``-lineinfo``); no GPU is needed.
    """
    gpu = _is_cuda(op)
    kinds = ("sass", "ptx") if gpu else ("asm",)
    kind = kinds[0] if kind is None else kind
    if kind not in kinds:
        raise ArgumentValueError(f"kind={kind!r}: a {op.spec.target} op's disassembly is "
                            f"{' or '.join(map(repr, kinds))}")
    if syntax not in ("intel", "att"):
        raise ArgumentValueError(f"syntax={syntax!r}: use 'intel' or 'att'")
    if op.artifact is None:  # a prebuilt library: its code without source lines
        functions = list(_functions(str(op.library.path), _file_key(op.library.path), kind, syntax))
        if kind == "asm":
            functions = host_asm.kernel_functions(functions, None, op.name)
        return Disassembly(kind, tuple(functions), SourceText("", ""), (), _empty_note(functions, gpu))
    artifact = _inspection_build(op)
    source = SourceText(str(op.source_path), artifact.source)
    functions = list(_functions(str(artifact.path), artifact.key, kind, syntax))
    if kind == "asm":
        functions = host_asm.kernel_functions(functions, source, op.name, _own_headers(op, artifact))
    return Disassembly(kind, tuple(functions), source, artifact.command, _empty_note(functions, gpu))

def annotate(op, *, missed: bool = False) -> Annotation:
    """The kernel's source with the compiler's remarks on each line: for cpu, GCC's vectorizer, loop and
    inliner remarks under this op's flags (``missed=True`` also shows the minor missed optimisations); for
    gpu, ptxas's registers, shared and local memory and spills next to each kernel's definition."""
    if op.artifact is None:
        raise ArgumentValueError(f"{op.name} is a prebuilt library: annotate needs its source")
    artifact = _inspection_build(op)
    source = SourceText(str(op.source_path), artifact.source)
    flags = tuple(op.spec.flags)
    hidden = frozenset() if missed else frozenset({"missed"})
    if _is_cuda(op):
        found = remarks.ptxas_remarks(list(artifact.manifest.resource_usage), source)
        return Annotation(source, tuple(found), flags, "", hidden)
    found = remarks.gcc_remarks(artifact.log, source)
    notes = []
    optimizing = [f for f in flags if f.startswith("-O")]
    if not optimizing or not _OPTIMIZING.match(optimizing[-1]):
        notes.append("Built without optimisation (no -O, as in the documented command, or -O0 last), GCC "
                     "optimises nothing, so it has little to say: try op.with_flags('-O3').annotate()")
    if any(f.startswith("-fopt-info") and "=" in f for f in flags):
        notes.append("The op's flags send GCC's remarks to a file (-fopt-info...=FILE), so few or none reach "
                     "this view")
    elsewhere = remarks.count_elsewhere(artifact.log, source, _own_headers(op, artifact))
    if elsewhere:
        notes.append(f"{elsewhere} remarks are about the kernel's own headers, not shown here")
    return Annotation(source, tuple(found), flags, ". ".join(notes), hidden)

def _is_cuda(op) -> bool:
    """A CUDA build (nvcc, by the source's suffix, as the build layer decides); a prebuilt library is one
    when its op runs on the device."""
    if op.source_path is None:
        return op.device.runs_elsewhere
    return Path(op.source_path).suffix in toolchain.CUDA_SUFFIXES

def _own_headers(op, artifact: Artifact) -> frozenset[str]:
    """The user's own headers the build included (:func:`aotbench.build.toolchain.own_headers`), normalised as
    objdump and GCC name them."""
    found = toolchain.own_headers(Path(op.source_path), tuple(op.spec.flags), artifact.dependencies,
                                  artifact.path.parent)
    return frozenset(os.path.normpath(p) for p in found)

def _inspection_build(op) -> Artifact:
    spec = op.spec
    _check_unchanged(op.artifact, Path(op.source_path), op.name)
    extra = GPU_EXTRA if _is_cuda(op) else CPU_EXTRA
    return build.build(Path(op.source_path), flags=(*spec.flags, *extra), cache_dir=spec.cache_dir,
                       arch=spec.arch)


def _check_unchanged(op_build: Artifact, source: Path, name: str) -> None:
    """Refuse, before compiling anything, a view of other code than the op runs: its source or one of the
    user's own headers is not what the op was built from, or is gone (the build record's check)."""
    fix = "Re-run the cell (or build the op again) first."
    try:
        source.read_bytes()
    except OSError as exc:
        raise SourceChangedError(f"{name}: the views need the op's source, {source}, which cannot be read now "
                                 f"({exc.strerror or exc}). {fix}", name=name, path=str(source)) from exc
    changed = op_build.changed_files()
    if changed:
        what = "its source" if changed[0] == str(source) else changed[0]
        raise SourceChangedError(f"{name}: {what} changed since the op was built, so the view would show other "
                                 f"code than the op runs. {fix}", name=name, path=changed[0])


def _empty_note(functions: list, gpu: bool) -> str:
    if functions:
        return ""
    return ("no device code in this build: the source defines no __global__ kernel" if gpu else
            "no function with code from the kernel's source was found in the library")


def _file_key(path: Path) -> str:
    st = os.stat(path)
    return f"{st.st_size}-{st.st_mtime_ns}"


@lru_cache(maxsize=64)
def _functions(library: str, key: str, kind: str, syntax: str) -> tuple[Function, ...]:
    """The parsed listing of one library (``key`` names its content: a cache key, or a prebuilt file's size and
    mtime, so the answer never goes stale)."""
    if kind == "asm":
        return tuple(host_asm.parse(host_asm.objdump_listing(Path(library), syntax)))
    return tuple(device_asm.sass(Path(library)) if kind == "sass" else device_asm.ptx(Path(library)))
