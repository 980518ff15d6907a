"""The thread's floating-point environment, read and restored around loading a library.

A library linked with GCC's ``crtfastmath.o`` (``-ffast-math``, ``-Ofast``, ``-funsafe-math-optimizations``)
turns on flush-to-zero and denormals-are-zero in a constructor that runs when it is loaded: from then on the
whole process, numpy included, computes ``np.float32(1e-39) * 1`` as ``0``. :func:`preserved` saves the
environment with libm's ``fegetenv`` before the load and puts it back with ``fesetenv`` after, and reports the
control bits the load changed, so the host can switch them on around the kernel's own calls only.

The control register is MXCSR on x86-64 (``fenv_t.__mxcsr``, byte 28) and FPCR on AArch64 (byte 0); on other
machines nothing is detected and nothing is switched.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# (byte offset of the control register in glibc's fenv_t, mask of its control bits) per machine
_LAYOUT = {"x86_64": (28, 0xFFC0), "amd64": (28, 0xFFC0), "aarch64": (0, 0x07FF_FF00), "arm64": (0, 0x07FF_FF00)}
FENV_BYTES = 64  # larger than any glibc fenv_t
MXCSR_NAMES = {0x8000: "flush-to-zero", 0x0040: "denormals-are-zero"}


@dataclass(frozen=True)
class Change:
    """Control bits a load turned on (``set``) and off (``clear``); both 0 when it changed nothing."""

    set: int = 0
    clear: int = 0

    def __bool__(self) -> bool:
        return bool(self.set or self.clear)

    def describe(self) -> str:
        """The change in words: "flush-to-zero and denormals-are-zero" for a fast-math library."""
        names = [name for bit, name in MXCSR_NAMES.items() if self.set & bit] if _machine() in ("x86_64", "amd64") \
            else []
        if _machine() in ("aarch64", "arm64") and self.set & (1 << 24):
            names.append("flush-to-zero")
        return " and ".join(names) or f"floating-point control bits (set {self.set:#x}, cleared {self.clear:#x})"


def _machine() -> str:
    return platform.machine().lower()


@functools.cache
def _libm():
    """glibc's libm, where fegetenv and fesetenv live (already loaded by Python itself)."""
    return ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")


class _State:
    """A saved floating-point environment of the calling thread."""

    def __init__(self, libm):
        self._libm = libm
        self.raw = ctypes.create_string_buffer(FENV_BYTES)
        libm.fegetenv(self.raw)

    def control(self) -> int | None:
        layout = _LAYOUT.get(_machine())
        if layout is None:
            return None
        offset, mask = layout
        return int.from_bytes(self.raw.raw[offset:offset + 4], "little") & mask

    def restore(self) -> None:
        self._libm.fesetenv(self.raw)


@contextmanager
def preserved(change: list) -> Iterator[None]:
    """Run the body (a ``dlopen``) and give the thread its floating-point environment back afterwards.

    What the body changed is appended to ``change`` as a :class:`Change` (an empty one if nothing changed).
    """
    libm = _libm()
    before = _State(libm)
    try:
        yield
    finally:
        after = _State(libm)
        old, new = before.control(), after.control()
        if old is not None and new is not None and old != new:
            before.restore()
            change.append(Change(set=new & ~old, clear=old & ~new))
        else:
            change.append(Change())
