"""A stand-in for the slice of cupy that aotbench's gpu run path uses, over HOST memory.

The gpu path (aotbench.run.gpu, gpu_timing, check mode's device side) is host code around a device: it converts
inputs, plans, allocates outputs and workspaces, passes pointers and the stream, reads the launch-error probe,
synchronizes, and times with events. Where no GPU exists (CI, this machine), that host code still has to be
right, so tests/run/test_gpu_path.py runs it with this module installed as ``cupy`` and a C++ kernel whose
"device pointers" are host pointers. What it cannot show (real launches, CUDA errors, event timing) is what
tests/run/test_gpu.py checks on a real device. Every allocation is logged, so tests can see where memory went.
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
compute_capability = ["90"]  # what cupy.cuda.Device().compute_capability says
captures: list[dict] = []  # the stream of every graph capture begun: {"non_blocking": ..., "mode": ...}


class _Pointer:
    def __init__(self, ptr: int, device_id: int = 0):
        self.ptr, self.device_id = ptr, device_id


class _Device:
    def __init__(self, id: int | None = None):
        self.id = current_device[0] if id is None else id
        self.attributes = {"L2CacheSize": 48 << 20}
        self.compute_capability = compute_capability[0]
        self.mem_info = (device_memory[0] // 2, device_memory[0])  # (free, total) bytes, as cupy reports them

    def synchronize(self) -> None:
        _raise_pending()

    def __enter__(self):
        self._old = current_device[0]
        current_device[0] = self.id
        return self

    def __exit__(self, *exc) -> None:
        current_device[0] = self._old


def _unwrap(value):
    """The host array behind a stand-in array (and inside tuples, lists and dicts), for numpy to work on."""
    if isinstance(value, ndarray):
        return value._host
    if isinstance(value, (tuple, list)):
        return type(value)(_unwrap(v) for v in value)
    if isinstance(value, dict):
        return {k: _unwrap(v) for k, v in value.items()}
    return value


def _refuse_host(values) -> None:
    """cupy refuses numpy arrays mixed into its operations; so does the stand-in."""
    for v in values:
        if isinstance(v, np.ndarray):
            raise TypeError(f"Unsupported type {type(v)}")


def _wrap(value, device_id: int):
    if isinstance(value, np.ndarray):
        return ndarray(value, device_id)
    if isinstance(value, tuple):
        return tuple(_wrap(v, device_id) for v in value)
    return value


class ndarray(np.lib.mixins.NDArrayOperatorsMixin):
    """A host array presented as a device array, and NOT a numpy array (as a cupy array is not one):
    ``data.ptr``, ``device``, ``get()``, the CUDA array interface, arithmetic among stand-in arrays and scalars,
    and, like cupy, a TypeError for implicit conversion to numpy (``np.asarray(x)``) or mixing in numpy arrays."""

    __array_priority__ = 100

    def __init__(self, host: np.ndarray, device_id: int | None = None):
        self._host = host
        self._device_id = current_device[0] if device_id is None else device_id

    @property
    def data(self):  # cupy's MemoryPointer
        return _Pointer(self._host.ctypes.data, self._device_id)

    @property
    def device(self):
        return _Device(self._device_id)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self._host.shape, "typestr": self._host.dtype.str, "data": (self._host.ctypes.data, False),
                "version": 3, "strides": None if self._host.flags.c_contiguous else self._host.strides}

    def get(self) -> np.ndarray:
        return np.array(self._host, copy=True)

    def __array__(self, dtype=None, copy=None):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct a "
                        "NumPy array explicitly.")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        _refuse_host(inputs)
        result = getattr(ufunc, method)(*_unwrap(inputs), **_unwrap(kwargs))
        return _wrap(result, self._device_id)

    def __array_function__(self, func, types, args, kwargs):
        _refuse_host(args)
        return _wrap(func(*_unwrap(args), **_unwrap(kwargs)), self._device_id)

    def __getattr__(self, name: str):
        value = getattr(self._host, name)
        if callable(value):
            def method(*args, **kwargs):
                _refuse_host(args)
                return _wrap(value(*_unwrap(args), **_unwrap(kwargs)), self._device_id)

            return method
        return _wrap(value, self._device_id)

    def __getitem__(self, index):
        return _wrap(self._host[_unwrap(index)], self._device_id)

    def __setitem__(self, index, value) -> None:
        _refuse_host([value])
        self._host[_unwrap(index)] = _unwrap(value)

    def __len__(self) -> int:
        return len(self._host)

    def __float__(self) -> float:
        return float(self._host)

    def __int__(self) -> int:
        return int(self._host)

    def __bool__(self) -> bool:
        return bool(self._host)

    def __repr__(self) -> str:
        return repr(self._host).replace("array", "stand-in device array", 1)


def _check_dtype(dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.name in UNSUPPORTED:
        raise TypeError(f"Unsupported type {dtype}")
    return dtype


def empty(shape, dtype=np.float64) -> ndarray:
    dtype = _check_dtype(dtype)
    out = ndarray(np.empty(shape, dtype))
    allocations.append(out.nbytes)
    return out


def empty_like(a) -> ndarray:
    return empty(a.shape, a.dtype)


def asarray(a, dtype=None) -> ndarray:
    if isinstance(a, ndarray) and dtype is None:
        return a
    host = np.asarray(_unwrap(a), dtype=dtype)
    out = empty(host.shape, host.dtype)
    out._host[...] = host
    return out


def ascontiguousarray(a) -> ndarray:
    return asarray(np.ascontiguousarray(_unwrap(a)))


def asnumpy(a) -> np.ndarray:
    return a.get() if isinstance(a, ndarray) else np.asarray(a)


def copyto(dst, src) -> None:
    np.copyto(_unwrap(dst), _unwrap(src))


def _device_function(name: str):
    """numpy's ``name`` on stand-in arrays, returning stand-in arrays (cupy has the same function)."""
    func = getattr(np, name)

    def run(*args, **kwargs):
        _refuse_host(args)
        return _wrap(func(*_unwrap(args), **_unwrap(kwargs)), current_device[0])

    run.__name__ = name
    return run


abs, sqrt, maximum, zeros_like = (_device_function(n) for n in ("abs", "sqrt", "maximum", "zeros_like"))


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
        self.non_blocking = non_blocking
        self.done = True

    def synchronize(self) -> None:
        _raise_pending()

    def __enter__(self):
        Stream._stack.append(self)
        return self

    def __exit__(self, *exc) -> None:
        Stream._stack.pop()

    def begin_capture(self, mode=None):
        """Records the capture's stream. The kernels run on the host at once, so there is nothing to record in
        the graph: :meth:`end_capture` gives a graph that replays NOTHING (its timings mean nothing)."""
        captures.append({"non_blocking": self.non_blocking, "mode": mode})

    def end_capture(self):
        return _EmptyGraph()


class _EmptyGraph:
    def launch(self, stream=None) -> None:
        pass


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


runtime = types.SimpleNamespace(CUDARuntimeError=CUDARuntimeError, getDeviceCount=lambda: 1,
                                getDevice=lambda: current_device[0], deviceSynchronize=_raise_pending,
                                getDeviceProperties=lambda i: {"l2CacheSize": 48 << 20, "name": b"host stand-in"})
cuda = types.SimpleNamespace(Device=_Device, Stream=Stream, Event=Event, get_current_stream=get_current_stream,
                             get_elapsed_time=get_elapsed_time, runtime=runtime)


def reset() -> None:
    allocations.clear()
    pending_error.clear()
    captures.clear()
    current_device[0] = 0
    device_memory[0] = 80 << 30
    compute_capability[0] = "90"
