"""Whether gpu ops can run here, and if not, why (no driver, cupy missing, no device) and what to do.

cupy is imported only when it is installed and a gpu op asks; nothing here runs at import time.
"""

from __future__ import annotations

import ctypes.util
import importlib.util

from .errors import DeviceUnavailableError


def gpu_unavailable_reason() -> str | None:
    """None when a CUDA device is usable through cupy; otherwise the first missing piece, in words."""
    if ctypes.util.find_library("cuda") is None:
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
    return None


def require_gpu(op_name: str) -> None:
    """Raise :class:`DeviceUnavailableError` for a gpu op that cannot run in this process."""
    reason = gpu_unavailable_reason()
    if reason is None:
        reason = "running kernels on the device is not implemented in this version of aotbench yet"
    raise DeviceUnavailableError(
        f"{op_name} is a gpu op and cannot run here: {reason}. It was built, and its Init and InferShape run on "
        "the host (op.infer_shape(...), op.plan_info(...)); op.resources shows ptxas's report. To run it, use a "
        "machine with an NVIDIA GPU, its driver and cupy.")
