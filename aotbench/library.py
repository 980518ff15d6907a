"""Load a kernel library and find its entry points, refusing what would crash instead of failing cleanly."""

from __future__ import annotations

import ctypes
import os
import re
from dataclasses import dataclass
from pathlib import Path

from . import elf
from .errors import AbiMismatchError, ArgumentError, LoadError, SymbolNotFoundError

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


def check_function_name(name: str) -> str:
    if not isinstance(name, str) or not _FUNC_NAME.fullmatch(name):
        raise ArgumentError(
            f"{name!r} is not a valid kernel function name: it must be a C identifier, as in 'kernel.cc:MyKernel'")
    return name


def load(path: Path, name: str) -> KernelLibrary:
    """Load ``path`` and resolve ``name`` (plus ``nameInit`` / ``nameInferShape`` when exported)."""
    try:
        image = Path(path).read_bytes()
    except OSError as exc:
        raise LoadError(str(path), exc.strerror or str(exc)) from exc
    symbols = elf.dynamic_symbols(image)
    foreign = elf.new_string_abi_symbols(symbols)
    if foreign:
        raise AbiMismatchError(str(path), foreign)
    try:
        handle = ctypes.CDLL(str(path), mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as exc:
        raise LoadError(str(path), str(exc), _load_hint(str(exc))) from exc

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
                         address("aotb_cuda_last_error"))


def _load_hint(reason: str) -> str:
    if "undefined symbol" in reason:
        return ("The library uses a function that nothing loaded defines: add the library that provides it to "
                "the flags (e.g. flags=['-lm']), or define the function.")
    if "ELF" in reason or "file too short" in reason:
        return "The file is not a shared library built for this machine."
    return ""
