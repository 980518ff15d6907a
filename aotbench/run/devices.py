"""The one seam between cpu and gpu: a :class:`Device` chosen once per op, that the rest of aotbench asks.

The op's call, check mode, timing, compare and sweep do not test the target or ``__cuda_array_interface__``
themselves; they ask the op's device (or, for a plain callable, :func:`for_call`): which arrays are its own, how
to copy one to the host, how to time a call (the wall clock, or CUDA events), its copy bandwidth (the roofline
of a memory-bound kernel), and, for the gpu, how to run a call and a guarded call. :data:`CPU` and :data:`GPU`
are the two devices; the gpu's parts import cupy only when used.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np


class Device:
    """Where a kernel runs. ``name`` is the op target it serves ("cpu", "gpu")."""

    name = ""
    copy_label = ""  # what copy_bandwidth_gbps measures, in words (a roofline's legend)
    #: True where calls go through the device's own runner (:meth:`runner`) instead of the host's fast path.
    runs_elsewhere = False

    def owns(self, value: Any) -> bool:
        """Whether ``value`` is an array in this device's memory."""
        raise NotImplementedError

    def to_host(self, value: Any) -> np.ndarray:
        """``value`` as a numpy array (a copy from device memory where needed)."""
        return np.asarray(value)

    def shapes(self, args: tuple) -> tuple[tuple[int, ...], ...]:
        """The shapes of the array arguments among ``args`` (host and this device's arrays)."""
        return tuple(tuple(int(d) for d in a.shape) for a in args if isinstance(a, np.ndarray) or self.owns(a))

    def bench(self, fn: Callable, args: tuple, **options: Any):
        """Time ``fn(*args)`` on this device's clock (see :func:`aotbench.tools.timing.bench`)."""
        raise NotImplementedError

    def copy_bandwidth_gbps(self) -> float:
        """GB/s of a large copy in this device's memory: the roofline of a memory-bound kernel."""
        raise NotImplementedError

    def guard_mirror(self, kernel: Any, runner: Any = None):
        """What a guarded call of ``kernel`` (:class:`aotbench.run.kernel.Kernel`) runs through (check mode): None
        on the host. ``runner``: the op's own, so what it noted already (a host copy warned) is not said again."""

    def prepare(self, op: Any, args: tuple) -> tuple:
        """``args`` as this device's calls take them (host arrays stay as they are on the cpu)."""
        return tuple(args)

    def runner(self) -> Any:
        """A new runner (:class:`aotbench.run.runner.Runner`) for an op of this device's target."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<aotbench device {self.name}>"


class Cpu(Device):
    """The host: numpy arrays, host memory, the wall clock, the bandwidth of a numpy copy."""

    name = "cpu"
    copy_label = "numpy copy"

    def owns(self, value: Any) -> bool:
        return isinstance(value, np.ndarray)

    def bench(self, fn: Callable, args: tuple, **options: Any):
        from ..tools.timing import bench_host

        return bench_host(fn, args, **options)

    def runner(self) -> Any:
        from .runner import InProcess

        return InProcess()

    def copy_bandwidth_gbps(self) -> float:
        from ..tools.bandwidth import memory_bandwidth_gbps

        return memory_bandwidth_gbps()


class Gpu(Device):
    """A CUDA device through cupy: device memory, the current stream, CUDA events, a device-to-device copy."""

    name = "gpu"
    copy_label = "device-to-device copy"
    runs_elsewhere = True

    def owns(self, value: Any) -> bool:
        return hasattr(value, "__cuda_array_interface__")

    def to_host(self, value: Any) -> np.ndarray:
        if self.owns(value):
            get = getattr(value, "get", None)
            if callable(get):
                return np.asarray(get())
            import cupy

            return cupy.asnumpy(cupy.asarray(value))
        return np.asarray(value)

    def bench(self, fn: Callable, args: tuple, **options: Any):
        from ..tools.gpu_timing import bench_device

        flush = options.pop("flush_cache", None)
        options.pop("timer", None)  # events are the clock
        return bench_device(fn, *args, flush_cache=True if flush is None else bool(flush), **options)

    def copy_bandwidth_gbps(self) -> float:
        return _device_copy_gbps()

    def runner(self) -> Any:
        from .gpu import OnDevice  # cupy and the device code load only for a gpu op

        return OnDevice()

    def guard_mirror(self, kernel: Any, runner: Any = None):
        from .gpu import GuardMirror, OnDevice

        return GuardMirror(kernel, runner if isinstance(runner, OnDevice) else None)

    def prepare(self, op: Any, args: tuple) -> tuple:
        from .gpu import to_device_like

        return to_device_like(op, tuple(args))


@functools.cache
def _device_copy_gbps() -> float:
    from ..tools.gpu_timing import copy_bandwidth_gbps

    return copy_bandwidth_gbps()[0]


CPU: Device = Cpu()
GPU: Device = Gpu()
_BY_TARGET = {"cpu": CPU, "gpu": GPU}


def for_target(target: str) -> Device:
    """The device of an op built for ``target``."""
    return _BY_TARGET[target]


def for_call(fn: Any, args: tuple) -> Device:
    """The device ``fn(*args)`` runs on: an op's own, else the gpu when any argument is a device array."""
    device = getattr(fn, "device", None)
    if isinstance(device, Device):
        return device
    return GPU if any(GPU.owns(a) for a in args) else CPU


def for_value(value: Any) -> Device:
    """The device whose memory holds ``value`` (the cpu for anything that is not a device array)."""
    items = value if isinstance(value, (tuple, list)) else (value,)
    return GPU if any(GPU.owns(v) for v in items) else CPU


__all__ = ["CPU", "GPU", "Cpu", "Device", "Gpu", "for_call", "for_target", "for_value"]
