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


# -- what a kernel's call changed (reported by the native host, which restored it) ----------------------------
_ROUNDING = {0: "to-nearest", 1: "downward", 2: "upward", 3: "toward-zero"}
_EXCEPTIONS = ("invalid operation", "denormal operand", "division by zero", "overflow", "underflow", "inexact")
_X87_PRECISION = {0: "24-bit (float)", 1: "reserved", 2: "53-bit (double)", 3: "64-bit (extended)"}


def _describe_x86(mxcsr_before: int, mxcsr_after: int, x87_before: int, x87_after: int) -> list[str]:
    parts = []
    rb, ra = (mxcsr_before >> 13) & 3, (mxcsr_after >> 13) & 3
    xb, xa = (x87_before >> 10) & 3, (x87_after >> 10) & 3
    if rb != ra or xb != xa:
        now = _ROUNDING[ra if rb != ra else xa]
        was = _ROUNDING[rb if rb != ra else xb]
        parts.append(f"the rounding mode at {now} (the caller's: round-{was})" if was == "to-nearest"
                     else f"the rounding mode at {now} (the caller's: {was})")
    # An exception is trapped when its mask bit is clear: MXCSR bits 7-12, x87 control word bits 0-5.
    trapped = [name for k, name in enumerate(_EXCEPTIONS)
               if (mxcsr_before >> (7 + k)) & 1 and not (mxcsr_after >> (7 + k)) & 1
               or (x87_before >> k) & 1 and not (x87_after >> k) & 1]
    if trapped:
        parts.append(f"floating-point traps enabled for {', '.join(trapped)} (a later numpy or Python operation "
                     "raising one would kill the process with SIGFPE)")
    untrapped = [name for k, name in enumerate(_EXCEPTIONS)
                 if not (mxcsr_before >> (7 + k)) & 1 and (mxcsr_after >> (7 + k)) & 1
                 or not (x87_before >> k) & 1 and (x87_after >> k) & 1]
    if untrapped:
        parts.append(f"floating-point traps disabled for {', '.join(untrapped)}")
    for bit, name in MXCSR_NAMES.items():
        if (mxcsr_before ^ mxcsr_after) & bit:
            parts.append(f"{name} {'on' if mxcsr_after & bit else 'off'}")
    pb, pa = (x87_before >> 8) & 3, (x87_after >> 8) & 3
    if pb != pa:
        parts.append(f"the x87 precision at {_X87_PRECISION[pa]} (was {_X87_PRECISION[pb]})")
    return parts


def describe_call_change(control_before: int, control_after: int, x87_before: int, x87_after: int) -> str:
    """What a kernel's call left changed in the floating-point environment, in words: "left the rounding mode at
    upward (aotbench restored round-to-nearest)"."""
    if _machine() in ("x86_64", "amd64", "i386", "i686"):
        parts = _describe_x86(control_before, control_after, x87_before, x87_after)
    else:
        parts = []
    if not parts:
        parts = [f"the floating-point control register at {control_after:#x} (was {control_before:#x})"]
    return "left " + "; ".join(parts)


def describe_signal_change(blocked: int, unblocked: int, sigint_replaced: int) -> str:
    """What a kernel's call left changed in the signal state: "left SIGINT blocked (Ctrl-C would be ignored)"."""
    import signal

    def names(bits: int) -> str:
        out = []
        for n in range(1, 65):
            if bits >> (n - 1) & 1:
                try:
                    out.append(signal.Signals(n).name)
                except ValueError:
                    out.append(f"signal {n}")
        return ", ".join(out)

    parts = []
    if blocked:
        why = " (Ctrl-C and the notebook's stop button would be ignored)" if blocked >> (signal.SIGINT - 1) & 1 else ""
        parts.append(f"{names(blocked)} blocked{why}")
    if unblocked:
        parts.append(f"{names(unblocked)} unblocked")
    if sigint_replaced:
        parts.append("SIGINT's handler replaced (Ctrl-C would no longer raise KeyboardInterrupt)")
    return "left " + "; ".join(parts or ["the signal state changed"])
