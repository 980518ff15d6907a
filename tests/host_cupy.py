"""A stand-in for the slice of cupy that aotbench's gpu run path uses, over HOST memory.

The gpu path (aotbench.device.gpu.run, gpu_timing, check mode's device side) is host code around a device: it converts
inputs, plans, allocates outputs and workspaces, passes pointers and the stream, reads the launch-error probe,
synchronizes, and times with events. Where no GPU exists (CI, this machine), that host code still has to be
right, so tests/test_gpu_path.py runs it with this module installed as ``cupy`` and a C++ kernel whose
"device pointers" are host pointers. What it cannot show (real launches, CUDA errors, event timing) is what
tests/test_gpu.py checks on a real device. Every allocation is logged, so tests can see where memory went.
"""

from __future__ import annotations

import time
import types
from typing import ClassVar

import numpy as np

uint8, float32, float64 = np.uint8, np.float32, np.float64
UNSUPPORTED = {"bfloat16"}  # dtypes cupy has no arrays of
allocations: list[int] = []  # bytes of every allocation, in order
pending_error: list[int] = []  # a CUDA error code the next synchronize raises (then clears)
current_device = [0]
device_memory = [80 << 30]  # the "device"'s total memory (a test may lower it)


class _Pointer:
    def __init__(self, ptr: int):
        self.ptr = ptr


class _Device:
    def __init__(self, id: int | None = None):
        self.id = current_device[0] if id is None else id
        self.attributes = {"L2CacheSize": 48 << 20}
        self.mem_info = (device_memory[0] // 2, device_memory[0])  # (free, total) bytes, as cupy reports them

    def synchronize(self) -> None:
        _raise_pending()

    def __enter__(self):
        self._old = current_device[0]
        current_device[0] = self.id
        return self

    def __exit__(self, *exc) -> None:
        current_device[0] = self._old


class ndarray(np.ndarray):
    """A host array that presents itself as a device array: ``data.ptr``, ``device``, ``get()``, the CUDA array
    interface."""

    def __array_finalize__(self, obj) -> None:
        self._device_id = getattr(obj, "_device_id", current_device[0])

    @property
    def data(self):  # cupy's MemoryPointer
        return _Pointer(self.ctypes.data)

    @property
    def device(self):
        return _Device(self._device_id)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ctypes.data, False), "version": 3}

    def get(self) -> np.ndarray:
        return np.array(self.view(np.ndarray), copy=True)


def _check_dtype(dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.name in UNSUPPORTED:
        raise TypeError(f"Unsupported type {dtype}")
    return dtype


def empty(shape, dtype=np.float64) -> ndarray:
    dtype = _check_dtype(dtype)
    out = np.empty(shape, dtype).view(ndarray)
    allocations.append(out.nbytes)
    return out


def empty_like(a) -> ndarray:
    return empty(a.shape, a.dtype)


def asarray(a) -> ndarray:
    if isinstance(a, ndarray):
        return a
    host = np.asarray(a)
    out = empty(host.shape, host.dtype)
    out[...] = host
    return out


def ascontiguousarray(a) -> ndarray:
    return asarray(np.ascontiguousarray(a))


def asnumpy(a) -> np.ndarray:
    return a.get() if isinstance(a, ndarray) else np.asarray(a)


def copyto(dst, src) -> None:
    np.copyto(dst, src)


class CUDARuntimeError(RuntimeError):
    NAMES: ClassVar[dict] = {700: ("cudaErrorIllegalAddress", "an illegal memory access was encountered"),
                             710: ("cudaErrorAssert", "device-side assert triggered")}

    def __init__(self, status: int):
        self.status = status
        name, text = self.NAMES.get(status, ("cudaErrorUnknown", "unknown error"))
        super().__init__(f"{name}: {text}")


def _raise_pending() -> None:
    if pending_error:
        raise CUDARuntimeError(pending_error.pop())


class Stream:
    """Streams are recorded by handle; the kernels run synchronously on the host, so waiting is only the error
    check."""

    _stack: ClassVar[list] = []

    def __init__(self, non_blocking: bool = False, ptr: int = 0x5EED):
        self.ptr = ptr
        self.done = True

    def synchronize(self) -> None:
        _raise_pending()

    def __enter__(self):
        Stream._stack.append(self)
        return self

    def __exit__(self, *exc) -> None:
        Stream._stack.pop()

    def begin_capture(self, mode=None):
        raise NotImplementedError("the host stand-in has no CUDA graphs")


NULL_STREAM = Stream(ptr=0)


def get_current_stream() -> Stream:
    return Stream._stack[-1] if Stream._stack else NULL_STREAM


class Event:
    def __init__(self, block: bool = False, disable_timing: bool = False):
        self.ns = None

    def record(self, stream=None) -> None:
        self.ns = time.perf_counter_ns()

    def synchronize(self) -> None:
        _raise_pending()


def get_elapsed_time(start: Event, end: Event) -> float:
    return (end.ns - start.ns) / 1e6


runtime = types.SimpleNamespace(CUDARuntimeError=CUDARuntimeError, getDeviceCount=lambda: 1)
cuda = types.SimpleNamespace(Device=_Device, Stream=Stream, Event=Event, get_current_stream=get_current_stream,
                             get_elapsed_time=get_elapsed_time, runtime=runtime)


def reset() -> None:
    allocations.clear()
    pending_error.clear()
    current_device[0] = 0
    device_memory[0] = 80 << 30
