"""Whether gpu ops can run here, and if not, why (no driver, cupy missing, no device) and what to do.

cupy is imported only when it is installed and a gpu op asks; nothing here runs at import time. A positive
answer is remembered for the process (a device does not disappear); a negative one is asked again each time,
so installing cupy or a driver mid-session is seen.
"""

from __future__ import annotations

import ctypes.util
import importlib.util
from types import ModuleType

from ..errors import DeviceUnavailableError

_usable = False


def gpu_unavailable_reason() -> str | None:
    """None when a CUDA device is usable through cupy; otherwise the first missing piece, in words."""
    global _usable
    if _usable:
        return None
    if not _driver_loads():
        return "no NVIDIA driver is installed (libcuda.so.1 was not found)"
    if importlib.util.find_spec("cupy") is None:
        return "cupy is not installed (pip install cupy-cuda13x, or the build matching your CUDA)"
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - cupy reports driver and device problems with many types
        return f"cupy cannot reach a CUDA device ({type(exc).__name__}: {exc})"
    if count == 0:
        return "the driver reports no CUDA device"
    _usable = True
    return None


def _driver_loads() -> bool:
    """Whether the driver library can be loaded, as cupy will load it: by its soname, so LD_LIBRARY_PATH and
    the loader's cache both count (a driver mounted outside the cache, as in containers, is found). Loading it
    creates no CUDA context."""
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return ctypes.util.find_library("cuda") is not None


def gpu_available() -> bool:
    """True when gpu ops can run in this process (a driver, cupy and a device)."""
    return gpu_unavailable_reason() is None


def require_gpu(op_name: str) -> ModuleType:
    """cupy, when ``op_name`` (a gpu op) can run here; else :class:`DeviceUnavailableError` with the reason."""
    reason = gpu_unavailable_reason()
    if reason is None:
        import cupy

        return cupy
    raise DeviceUnavailableError(
        f"{op_name} is a gpu op and cannot run here: {reason}. It was built, and its Init and InferShape run on "
        "the host (op.infer_shape(...), op.plan_info(...)); op.resources shows ptxas's report. To run it, use a "
        "machine with an NVIDIA GPU, its driver and cupy.")
