"""Load a kernel library and find its entry points, refusing what would crash instead of failing cleanly."""

from __future__ import annotations

import ctypes
import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .._userframe import user_stacklevel
from ..errors import AbiMismatchError, ArgumentValueError, FastMathWarning, LoadError, SymbolNotFoundError
from . import attrcheck, elf, fpenv

_FAST_MATH_FLAGS = ("-ffast-math", "-Ofast", "-funsafe-math-optimizations", "-ffp-contract=fast")
# Per library path: what loading it did to the floating-point control register (dlopen runs a library's
# constructors only the first time, so a second load cannot see it again), and whether the user was told.
_FP_CHANGES: dict[str, fpenv.Change] = {}

_FUNC_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class KernelLibrary:
    """A loaded library and the addresses of ``F``, ``FInit`` and ``FInferShape`` (0 when absent), and of
    ``aotb_cuda_last_error`` in a gpu library aotbench built (see ``include/aotb_cuda_probe.h``)."""

    path: Path
    name: str
    handle: ctypes.CDLL
    kernel: int
    init: int
    infer_shape: int
    cuda_probe: int = 0
    fp_set: int = 0  # floating-point control bits its load turned on (a -ffast-math build's FTZ/DAZ), set around F
    fp_clear: int = 0  # and turned off
    prints: bool = False  # it references printf, std::cout ...: its calls capture stdout (aotbench.run.prints)
    signals: bool = False  # it references sigprocmask, signal ...: the host saves and checks the signal state
    openmp: bool = False  # it depends on GNU OpenMP's runtime (DT_NEEDED libgomp): refused after a fork (run.forking)
    emulator: int = 0  # aotb_emu_take_report in a library built for aotbench's CUDA emulator (run.emulation)


def check_function_name(name: str) -> str:
    if not isinstance(name, str) or not _FUNC_NAME.fullmatch(name):
        raise ArgumentValueError(
            f"{name!r} is not a valid kernel function name: it must be a C identifier, as in 'kernel.cc:MyKernel'")
    return name


def load(path: Path, name: str, built_with: Sequence[str] = ()) -> KernelLibrary:
    """Load ``path`` and resolve ``name`` (plus ``nameInit`` / ``nameInferShape`` when exported).

    ``built_with`` is the command that built it, if known (to name a fast-math flag when its load changes the
    floating-point mode: see :func:`_open`).
    """
    try:
        image = Path(path).read_bytes()
    except OSError as exc:
        raise LoadError(str(path), exc.strerror or str(exc)) from exc
    problem = elf.structural_problem(image)
    if problem is not None:  # dlopen would map it and die of SIGBUS touching the missing pages
        raise LoadError(str(path), problem, "Rebuild the library (a cached one is rebuilt by aotbench itself).")
    symbols = elf.dynamic_symbols(image)
    foreign = elf.new_string_abi_symbols(symbols)
    if foreign:
        raise AbiMismatchError(str(path), foreign)
    attrcheck.check(str(path), symbols, built_with)  # Attr<double> under a header that would read it as 0
    needed = elf.needed_libraries(image)
    # OpenMP: its own DT_NEEDED names libgomp, or its loading brought libgomp in through a library of its own
    # (asked only when it needs one: a failed RTLD_NOLOAD look-up costs tens of microseconds)
    via_own_library = any(not n.startswith(_SYSTEM_LIBRARIES) for n in needed)
    gomp_before = via_own_library and _libgomp_loaded()
    handle, change = _open(Path(path), built_with)
    openmp = any(n.startswith("libgomp") for n in needed) or (
        via_own_library and not gomp_before and _libgomp_loaded())

    def address(symbol: str) -> int:
        try:
            return ctypes.cast(getattr(handle, symbol), ctypes.c_void_p).value or 0
        except AttributeError:
            return 0

    kernel = address(name)
    if not kernel:
        raise SymbolNotFoundError(str(path), name, elf.exported_c_functions(symbols),
                                  elf.mangled_matches(symbols, name))
    return KernelLibrary(Path(path), name, handle, kernel, address(f"{name}Init"), address(f"{name}InferShape"),
                         address("aotb_cuda_last_error"), change.set, change.clear,
                         prints=bool(elf.output_symbols(symbols)), signals=bool(elf.signal_symbols(symbols)),
                         openmp=openmp, emulator=address("aotb_emu_take_report"))


# What a kernel library needs from the toolchain itself (any other DT_NEEDED entry is a library of the user's).
_SYSTEM_LIBRARIES = ("libstdc++", "libm.", "libgcc_s", "libc.", "ld-linux", "libgomp", "libpthread", "libdl.",
                     "librt.", "libmvec", "libasan", "libubsan", "liblsan", "libtsan", "libcudart", "libcuda.")


def _libgomp_loaded() -> bool:
    """Whether GNU OpenMP's runtime is loaded in this process (asked without loading it)."""
    try:
        ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD)
        return True
    except OSError:
        return False


def _open(path: Path, built_with: Sequence[str]) -> tuple[ctypes.CDLL, fpenv.Change]:
    """``dlopen`` the library, leaving this thread's floating-point environment as it was.

    A library linked with crtfastmath.o switches flush-to-zero and denormals-are-zero on for the process in a
    constructor; that is undone here, remembered per path (the kernel's calls then run under it, switched in the
    host around F), and said once per library with a :class:`~aotbench.errors.FastMathWarning`.
    """
    key = str(path.resolve())
    changes: list[fpenv.Change] = []
    try:
        with fpenv.preserved(changes):
            handle = ctypes.CDLL(str(path), mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as exc:
        raise LoadError(str(path), str(exc), _load_hint(str(exc))) from exc
    except UnicodeDecodeError as exc:  # ctypes decodes dlerror() as UTF-8; a path of other bytes fails that
        reason = exc.object.decode("utf-8", "replace") if isinstance(exc.object, bytes) else str(exc)
        raise LoadError(str(path), reason, _load_hint(reason)) from None
    if changes and changes[0]:
        _FP_CHANGES[key] = changes[0]
        flags = [f for f in built_with if f in _FAST_MATH_FLAGS or f.startswith("-Ofast")]
        named = " ".join(dict.fromkeys(flags)) or "-ffast-math, -Ofast or -funsafe-math-optimizations"
        warnings.warn(FastMathWarning(
            f"{path.name} was built with {named}, so GCC linked crtfastmath.o into it, whose start-up code turns on "
            f"{changes[0].describe()} for the whole process when the library is loaded (numpy would then compute "
            "np.float32(1e-39) * 1 as 0). aotbench restored this process's floating-point mode; the kernel's main "
            "function runs with that mode on, as it was built for (its Init and InferShape do not). Drop the flag "
            "to compute with denormals. (Said once per library.)"), stacklevel=user_stacklevel())
    return handle, _FP_CHANGES.get(key, fpenv.Change())


_OPENMP_SYMBOL = re.compile(r"undefined symbol: (?:GOMP_|omp_|kmp_|__kmpc_)\w*")


def _load_hint(reason: str) -> str:
    openmp = _OPENMP_SYMBOL.search(reason)
    if openmp:  # omp_get_thread_num() and the like without -fopenmp: g++ ignored the pragmas and did not link libgomp
        return (f"{openmp.group(0).split(': ', 1)[1]} is OpenMP's: build with flags=['-fopenmp'] (it compiles the "
                "#pragma omp lines and links libgomp, which defines the omp_* and GOMP_* functions).")
    if "undefined symbol" in reason:
        return ("The library uses a function that nothing loaded defines: add the library that provides it to "
                "the flags (e.g. flags=['-lm']), or define the function.")
    if "ELF" in reason or "file too short" in reason:
        return "The file is not a shared library built for this machine."
    return ""
