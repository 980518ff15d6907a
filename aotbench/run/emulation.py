"""Running a gpu op on aotbench's CUDA emulator: the device it reports, the runner, and the emulator's report.

An emulated op's library is a host library (built by :mod:`aotbench.build.emulator_build`) whose kernels run on
the CPU, on host memory: its calls go through the in-process runner's plan cache and guarded first call like a
cpu op's (other libraries' host arrays in, outputs back in their library: :mod:`aotbench.run.interop`; a
GPU tensor is refused, as the emulator's memory is the host's). What differs: :data:`EMULATED` says so in every
timing ("emulated on the CPU") and its roofline is the host's memory (never a GPU's); after every call the library's own report is read (``aotb_emu_take_report``),
so a launch a GPU would refuse, a failed device assert or a ``__syncthreads`` that not every thread reached
raises :class:`~aotbench.errors.EmulatorError` naming the kernel, block, thread and line.
"""

from __future__ import annotations

import ctypes
import os
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .._userframe import user_stacklevel
from ..errors import EmulatorError
from ..native.loading import KernelLibrary
from . import guard
from .devices import Cpu
from .kernel import Kernel
from .runner import InProcess

#: What every emulated timing and plot says about itself.
LABEL = "emulated on the CPU"
_REPORT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t)
_CONFIGURE = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_int, ctypes.c_int)
_HAZARDS = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t)
_ABANDON = ctypes.CFUNCTYPE(None)
_NAMES = {1: "cudaErrorInvalidValue", 2: "cudaErrorMemoryAllocation", 9: "cudaErrorInvalidConfiguration",
          700: "cudaErrorIllegalAddress", 710: "cudaErrorAssert", 719: "cudaErrorLaunchFailure",
          801: "cudaErrorNotSupported"}
_BUFFER = 16 * 1024


class Emulated(Cpu):
    """The CUDA emulator: host memory and the host's clock, like the cpu, but labelled as an emulated GPU."""

    name = "emulated"
    copy_label = "numpy copy (host memory: the emulator runs on the CPU)"

    def bench(self, fn: Callable, args: tuple, **options: Any):
        timing = super().bench(fn, args, **options)
        return replace(timing, device="emulated", notes=(*timing.notes, f"{LABEL}: these are the emulator's "
                                                         "times, not a GPU's"))

    def runner(self) -> Any:
        return EmulatedRunner()


EMULATED = Emulated()


class EmulatedRunner(InProcess):
    """In process, on host memory; the emulator's report read after each call (so no plan-only fast path)."""

    name = "emulated"
    fast = False

    @property
    def device(self) -> Emulated:
        return EMULATED

    def start(self, kernel: Kernel) -> None:
        configure(kernel.library)

    def call(self, kernel: Kernel, args: tuple) -> Any:
        outer = guard.current_collector()
        try:
            # The guard's findings (this thread's) wait for the emulator's report: a kernel the emulator stopped
            # left its outputs unwritten, which is no news.
            with guard.collected_warnings() as said:
                result = super().call(kernel, args)
        except KeyboardInterrupt:
            abandon(kernel.library)
            raise
        except BaseException:
            take_report(kernel.library)  # what the emulator noted belongs to this failed call, not the next
            raise
        raise_report(kernel.library, kernel.name)
        for warning in said:
            if outer is not None:
                outer.append(warning)
            else:
                warnings.warn(warning, stacklevel=user_stacklevel())
        return result


def is_emulated(library: KernelLibrary) -> bool:
    """Whether ``library`` was built for the CUDA emulator."""
    return bool(library.emulator)


def take_report(library: KernelLibrary) -> tuple[int, str]:
    """The emulator's report of the last call (a cudaError_t value, 0 for none, and what happened), cleared."""
    if not library.emulator:
        return 0, ""
    buffer = ctypes.create_string_buffer(_BUFFER)
    code = _REPORT(library.emulator)(buffer, _BUFFER)
    return code, buffer.value.decode("utf-8", "replace")


def raise_report(library: KernelLibrary, function: str) -> None:
    """Raise :class:`EmulatorError` when the last call of ``library`` left an error in the emulator."""
    code, message = take_report(library)
    raise_report_from(function, code, message)


def raise_report_from(function: str, code: int, message: str) -> None:
    """Raise :class:`EmulatorError` for a report :func:`take_report` read (nothing for code 0)."""
    if code:
        raise EmulatorError(function, _NAMES.get(code, f"cudaError {code}"), message)


def _symbol(library: KernelLibrary, name: str) -> int:
    try:
        return ctypes.cast(getattr(library.handle, name), ctypes.c_void_p).value or 0
    except AttributeError:
        return 0


def configure(library: KernelLibrary, *, seed: int | None = None, threads: int = 0, synccheck: bool = False) -> None:
    """Set how ``library``'s emulator runs: ``seed`` orders the threads between barriers (0: index order; None:
    ``AOTBENCH_EMULATOR_SEED`` or the default), ``threads`` the CPU threads for blocks (0: every usable core),
    ``synccheck`` records hazards a GPU tolerates (:func:`take_hazards`)."""
    address = _symbol(library, "aotb_emu_configure")
    if not address:
        return
    if seed is None:
        seed = int(os.environ.get("AOTBENCH_EMULATOR_SEED", "24301"))
    _CONFIGURE(address)(int(seed) & 0xFFFFFFFFFFFFFFFF, int(threads), int(bool(synccheck)))


def take_hazards(library: KernelLibrary) -> list[str]:
    """synccheck's findings since they were last taken, one per entry."""
    address = _symbol(library, "aotb_emu_take_hazards")
    if not address:
        return []
    buffer = ctypes.create_string_buffer(1 << 17)
    _HAZARDS(address)(buffer, 1 << 17)
    return [line for line in buffer.value.decode("utf-8", "replace").splitlines() if line]


def abandon(library: KernelLibrary) -> None:
    """After an interrupt left a call inside a launch: tell that launch's helper threads to stop."""
    address = _symbol(library, "aotb_emu_abandon")
    if address:
        _ABANDON(address)()
    take_report(library)


__all__ = ["EMULATED", "LABEL", "Emulated", "EmulatedRunner", "abandon", "configure", "is_emulated",
           "raise_report", "raise_report_from", "take_hazards", "take_report"]
