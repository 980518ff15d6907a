"""The gpu target's run path: cupy arrays in and out, the current cupy stream, CUDA errors as :class:`CudaError`.

A call: the inputs become C-contiguous device arrays (another library's GPU tensor is a view, through DLPack or
``__cuda_array_interface__``, and its outputs go back in that library: :mod:`aotbench.run.interop`; a numpy
input is copied, with a :class:`HostCopyWarning` once per op); the plan (shape rule, ``Init``, device workspaces) is made once per signature and device, as on
the cpu target; the outputs are allocated with cupy; the kernel's main function runs on the host with device
pointers and the current stream's handle; then the launch error is read through the library's own CUDA runtime
(``include/aotb_cuda_probe.h``) and the stream is synchronized, so a fault while the kernel ran surfaces at the
call that caused it, with the CUDA error's name and the kernel's.

:class:`Launcher` is the same call with the outputs allocated once and no synchronization, for device timing
(:mod:`aotbench.tools.gpu_timing`) and CUDA-graph capture. cupy is imported only through
:func:`aotbench.run.gpu_availability.require_gpu`, when a gpu op runs.
"""

from __future__ import annotations

import ctypes
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from ..native import dlpack
from ..native.dtypes import dtype_string
from ..build.nvcc import short_kernel_name
from .._userframe import user_stacklevel
from ..errors import ArgumentTypeError, ArgumentValueError, CudaError, HostCopyWarning
from . import guard, interop
from .calls import call_pointers, raise_for
from .devices import GPU, Device
from .gpu_availability import require_gpu
from .kernel import Kernel, contiguous
from .plan import WORKSPACE_ALIGNMENT, Plan, signature_key
from .runner import Runner

if TYPE_CHECKING:
    from ..op.op import Op

_PROBE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p))
_probes: dict[int, Any] = {}  # probe address -> its ctypes function

#: Errors after which the CUDA context is unusable (every later call in the process fails).
STICKY = frozenset({
    "cudaErrorIllegalAddress", "cudaErrorLaunchFailure", "cudaErrorIllegalInstruction",
    "cudaErrorMisalignedAddress", "cudaErrorInvalidAddressSpace", "cudaErrorInvalidPc", "cudaErrorAssert",
    "cudaErrorHardwareStackError", "cudaErrorLaunchTimeout", "cudaErrorUnknown",
})
#: What to look at for the errors a kernel under development most often gives.
HINTS = {
    "cudaErrorInvalidConfiguration": (
        "Check the launch's grid and block: at most 1024 threads per block, and every grid dimension at least 1 "
        "(an empty input gives a grid of 0 blocks: return early when there is no work)."),
    "cudaErrorInvalidValue": "An argument of a CUDA call or launch is out of range (e.g. dynamic shared memory "
                             "above the device's limit).",
    "cudaErrorLaunchOutOfResources": (
        "The block needs more registers or shared memory than a multiprocessor has: op.resources shows ptxas's "
        "report; launch fewer threads per block or add __launch_bounds__."),
    "cudaErrorNoKernelImageForDevice": (
        "The library holds no machine code or PTX this GPU can run: rebuild with arch= set to the GPU's compute "
        "capability (nvidia-smi --query-gpu=compute_cap), or without arch= so aotbench detects it."),
    "cudaErrorUnsupportedPtxVersion": (
        "The library holds only PTX for this GPU, made by an nvcc newer than this driver can compile (a build made "
        "where no GPU was detected, or a pip nvcc newer than the driver): rebuild on this machine, so aotbench "
        "detects the GPU and adds its machine code, or pass arch= with its compute capability; or update the "
        "driver."),
    "cudaErrorIllegalAddress": (
        "A kernel read or wrote memory it does not own (an index past the end, or a host pointer used on the "
        "device). op.compute_sanitizer(...) runs one call under compute-sanitizer memcheck, which names the kernel, the "
        "source line and the thread."),
    "cudaErrorMisalignedAddress": "A kernel accessed memory through a pointer not aligned for its type (e.g. a "
                                  "float4 load from an offset that is not a multiple of 16 bytes).",
    "cudaErrorAssert": "A device-side assert() failed; its message is on the process's stderr (the terminal, or "
                       "the Jupyter server's log).",
    "cudaErrorStreamCaptureImplicit": (
        "The kernel launched on the default stream instead of the stream it was given: launch with "
        "<<<grid, block, shared_bytes, static_cast<cudaStream_t>(stream)>>>."),
    "cudaErrorStreamCaptureInvalidated": (
        "The CUDA graph capture was broken, most often by a launch on the default stream instead of the stream the "
        "kernel was given: launch with <<<grid, block, shared_bytes, static_cast<cudaStream_t>(stream)>>>."),
}


def kernel_names(kernel: Kernel) -> tuple[str, ...]:
    """The ``__global__`` kernels ptxas reported for this library, by name (without their parameter lists)."""
    names: list[str] = []
    usage = list(kernel.artifact.manifest.resource_usage) if kernel.artifact else []
    for entry in usage:
        name = short_kernel_name(str(entry.get("kernel", "")))
        if name and name not in names:
            names.append(name)
    return tuple(names)


def cuda_error(kernel: Kernel, name: str, description: str, when: str) -> CudaError:
    return CudaError(kernel.name, name, description, when, kernel_names(kernel), name in STICKY, HINTS.get(name, ""))


def launch_error(kernel: Kernel) -> CudaError | None:
    """The error the kernel's launches left in the library's own CUDA runtime (cleared by reading), if any.

    None for a library without the probe (prebuilt by something other than aotbench): its launch errors are
    not visible from outside, and a fault while it ran still is, at the synchronization.
    """
    address = kernel.library.cuda_probe
    if not address:
        return None
    probe = _probes.get(address)
    if probe is None:
        probe = _probes[address] = _PROBE(address)
    name, text = ctypes.c_char_p(), ctypes.c_char_p()
    if probe(ctypes.byref(name), ctypes.byref(text)) == 0:
        return None
    error = (name.value or b"cudaError").decode()
    when = "while it ran (seen right after the launch)" if error in STICKY else "at launch"
    return cuda_error(kernel, error, (text.value or b"").decode(), when)


def synchronize(kernel: Kernel, cp: Any) -> None:
    """Wait for the whole device, not only the current stream: a kernel that ignores its ``stream`` argument and
    launches on the default stream is waited for too, so a call never returns before its work is done. A CUDA
    error raised there becomes this kernel's :class:`CudaError`."""
    try:
        cp.cuda.runtime.deviceSynchronize()
    except cp.cuda.runtime.CUDARuntimeError as exc:
        name, _, description = str(exc).partition(": ")
        raise cuda_error(kernel, name, description, "while it ran (seen when the device was synchronized)") from None


def device_workspace(cp: Any):
    """An allocator of device workspaces for :func:`~aotbench.run.plan.make_plan`: (owner, aligned address)."""

    def allocate(nbytes: int) -> tuple[object, int]:
        raw = cp.empty(nbytes + WORKSPACE_ALIGNMENT, dtype=cp.uint8)
        return raw, raw.data.ptr + (-raw.data.ptr % WORKSPACE_ALIGNMENT)

    return allocate


class GuardMirror(guard.Mirror):
    """The device side of a guarded call: inputs on the GPU, the guarded host buffers mirrored there."""

    def __init__(self, kernel: Kernel, runner: OnDevice | None = None):
        self._kernel = kernel
        self._runner = runner or OnDevice()
        self._cp = require_gpu(kernel.name)

    def inputs(self, args) -> tuple[tuple, tuple]:
        return self._runner.inputs(self._kernel, self._cp, args)

    def upload(self, array: np.ndarray):
        return self._cp.asarray(array)

    def run(self, plan: Plan, arrays, raws: list[np.ndarray]) -> None:
        """Copy every guarded buffer to the device, run the kernel there, copy them back into ``raws``."""
        mirrors = [self._cp.asarray(raw) for raw in raws]
        pointers = [a.data.ptr for a in arrays] + [m.data.ptr + guard.GUARD_BEFORE for m in mirrors]
        enqueue(self._kernel, plan, pointers, self._cp.cuda.get_current_stream().ptr)
        synchronize(self._kernel, self._cp)
        for raw, mirror in zip(raws, mirrors):
            raw[:] = mirror.get()


def _new_plan(kernel: Kernel, cp: Any, arrays: tuple, call_attrs: list) -> Plan:
    device = cp.cuda.Device()
    plan = kernel.plan(arrays, call_attrs, allocate_workspace=device_workspace(cp),
                       memory_limit=(int(device.mem_info[1]), f"GPU {device.id}'s memory"))
    # A device call never takes the host's fast path (which holds the record's set while F runs): every call
    # checks a set out until its stream is done, so the plan's own set is the first one in the pool.
    if plan.own_workspaces is not None:
        plan.checkin(plan.own_workspaces)
    return plan


def device_outputs(kernel: Kernel, cp: Any, plan: Plan) -> tuple:
    try:
        if plan.fill is not None:  # the guarded first call found unwritten outputs: never show old memory
            return tuple(cp.full(shape, value, dtype) for (shape, dtype), value in zip(plan.outputs, plan.fill))
        return tuple(cp.empty(shape, dtype) for shape, dtype in plan.outputs)
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(f"{kernel.name}'s outputs {[str(d) for _, d in plan.outputs]} cannot be cupy arrays "
                            f"({exc}); use a dtype cupy supports") from exc


def enqueue(kernel: Kernel, plan: Plan, pointers: list[int], stream_ptr: int) -> None:
    """Run the kernel's main function with these device pointers (inputs, outputs, then workspaces: a set the
    caller holds until the stream is done with it) on the stream ``stream_ptr``; raise its error code or the
    launch error it left."""
    code = call_pointers(plan, pointers, stream_ptr or None)
    error = launch_error(kernel)  # same thread, right after the launch: the runtime's last error is per thread
    if error is not None:
        raise error
    raise_for(plan, code)


def wait_for_producer(cp: Any, interface: dict) -> None:
    """Make the current cupy stream wait for the work the producer of a ``__cuda_array_interface__`` (v3) has
    queued on its ``stream`` (absent or None: nothing to wait for; 1 and 2 are CUDA's legacy and per-thread
    default streams, which ``cudaEventRecord`` takes as they are)."""
    stream = interface.get("stream")
    if stream is None:
        return
    if int(stream) == 0:
        raise ArgumentValueError("__cuda_array_interface__ gives stream 0, which the protocol does not allow (it "
                                 "is ambiguous): the producer should give 1 for the legacy default stream")
    event = cp.cuda.Event(block=False, disable_timing=True)
    event.record(cp.cuda.ExternalStream(int(stream)))
    cp.cuda.get_current_stream().wait_event(event)


def device_array(cp: Any, value: Any, index: int) -> Any | None:
    """A non-cupy input as a cupy array on its device without a copy: DLPack first (``cupy.from_dlpack``), then
    ``__cuda_array_interface__`` (:func:`wait_for_producer`, then ``cupy.asarray``); None for host data (numpy
    arrays, lists ...), which the gpu path copies as before. Another library's tensor in host memory is an
    :class:`ArgumentTypeError` saying how to move it (:func:`aotbench.run.interop.device_error`)."""
    if isinstance(value, np.ndarray):
        return None
    device = interop.dlpack_device(value)
    if device is not None:
        if device[0] not in (dlpack.KDLCUDA, dlpack.KDLCUDA_MANAGED):
            raise interop.device_error(index, value, f"{dlpack.device_name(*device)} memory", "on a GPU")
        try:
            return cp.from_dlpack(value)
        except Exception as exc:  # noqa: BLE001 - the producer or cupy refused
            raise ArgumentTypeError(f"input {index} ({interop.describe(value)}) could not be read through DLPack: "
                                    f"{type(exc).__name__}: {exc}") from exc
    interface = getattr(value, "__cuda_array_interface__", None)
    if interface is not None:
        wait_for_producer(cp, interface)
        return cp.asarray(value)
    return None


class OnDevice(Runner):
    """A gpu op's calls: cupy arrays in and out, the current cupy stream, CUDA errors as :class:`CudaError`.

    The first call of a new signature runs guarded (:func:`aotbench.run.guard.first_call`, on device mirrors of
    fenced, poisoned buffers) unless the op has ``guard=False``; the plan is kept (per device) once it passed.
    """

    name = "cuda-device"

    def __init__(self) -> None:
        #: Whether the op already warned that numpy inputs were copied to the device (said once per op).
        self.host_copy_noted = False

    @property
    def device(self) -> Device:
        return GPU

    def inputs(self, kernel: Kernel, cp: Any, args: tuple, device: int | None = None) -> tuple[tuple, tuple]:
        """(C-contiguous cupy arrays on the current device, call-attribute values) from a call's arguments.
        ``device``: the current device's id, when the caller already has it."""
        arrays, extras = kernel.split(args)
        device = cp.cuda.runtime.getDevice() if device is None else device
        converted, copied = [], []
        for i, a in enumerate(arrays):
            # a cupy array as it is (the common case, checked first); another library's device array as a view
            # (DLPack, then __cuda_array_interface__ with its stream waited for); else host data, copied
            arr = a if type(a) is cp.ndarray else device_array(cp, a, i)
            if arr is not None:
                if arr.data.device_id != device:
                    on = arr.data.device_id
                    raise ArgumentValueError(f"input {i} is on GPU {on} but the current device is GPU {device}: call "
                                        f"the op inside `with cupy.cuda.Device({on}):`")
            else:
                host = contiguous(a, i)
                dtype_string(host.dtype)  # refuses object, string, datetime ... arrays
                try:
                    arr = cp.asarray(host)
                except (TypeError, ValueError) as exc:
                    raise ArgumentTypeError(f"input {i} ({host.dtype}) cannot be copied to the GPU: cupy has no such "
                                        f"arrays ({exc})") from exc
                copied.append(i)
            dtype_string(arr.dtype)
            converted.append(arr if arr.flags.c_contiguous else cp.ascontiguousarray(arr))
        if copied and not self.host_copy_noted:
            self.host_copy_noted = True
            warnings.warn(HostCopyWarning(
                f"{kernel.name} is a gpu op: input(s) {', '.join(map(str, copied))} were numpy arrays and were "
                "copied to the GPU, as they will be on every call. Pass cupy arrays (cupy.asarray(x)) to keep the "
                "data on the device and time only the kernel. (Said once per op.)"), stacklevel=user_stacklevel())
        return tuple(converted), extras

    def plan(self, kernel: Kernel, cp: Any, device: int, arrays: tuple, extras: tuple) -> tuple[tuple, Plan | None,
                                                                                                  list]:
        """(the plan cache key of a device call: device id, shapes, dtypes, call-attribute values; the kept plan
        or None; the typed call attributes)."""
        call_attrs = kernel.call_attrs(extras) if extras else []
        key = ("gpu", device, *signature_key(arrays, call_attrs))
        return key, kernel.plans.find(key), call_attrs

    def call(self, kernel: Kernel, args: tuple) -> Any:
        cp = require_gpu(kernel.name)
        device = cp.cuda.runtime.getDevice()
        arrays, extras = self.inputs(kernel, cp, args, device)
        key, _, call_attrs = self.plan(kernel, cp, device, arrays, extras)

        def first(plan: Plan) -> Any:
            return guard.first_call(plan, arrays, GuardMirror(kernel, self))

        result = kernel.plans.call(key, lambda: _new_plan(kernel, cp, arrays, call_attrs),
                                   lambda plan: _run(kernel, cp, plan, arrays), first if kernel.spec.guard else None)
        caller = kernel.caller(args)  # torch or JAX GPU inputs: their outputs too (through DLPack, no copy)
        return result if caller is None or caller.name == "cupy" else caller.wrap(result)


def _run(kernel: Kernel, cp: Any, plan: Plan, arrays: tuple) -> Any:
    """One call on a kept plan: allocate the outputs, enqueue on the current stream, synchronize."""
    outs = device_outputs(kernel, cp, plan)
    workspaces = plan.checkout()  # this call's own scratch memory, held until the device is done with it
    try:
        enqueue(kernel, plan, [a.data.ptr for a in arrays] + [o.data.ptr for o in outs] + workspaces.pointers,
                cp.cuda.get_current_stream().ptr)
        synchronize(kernel, cp)
    finally:
        plan.checkin(workspaces)
    return outs[0] if plan.single else outs


class Launcher:
    """One prepared call of a gpu op on fixed inputs, with its outputs allocated once (``outputs``).

    ``launcher()`` enqueues the kernel on the current stream and returns at once; ``finish()`` synchronizes and
    raises the first CUDA error. A launch is what device timing measures and what a CUDA graph captures: no
    allocation and no synchronization happen inside it. The inputs (copied to the device once, if they were
    numpy arrays) are kept alive with it.
    """

    def __init__(self, op: Op, *args: Any):
        self._cp = cp = require_gpu(op.name)
        self._kernel = kernel = op.kernel
        runner = op.runner if isinstance(op.runner, OnDevice) else OnDevice()
        self.__name__ = op.name  # timing tools name what they time by it (cupyx.profiler.benchmark reads it first)
        device = cp.cuda.runtime.getDevice()
        self.inputs, extras = runner.inputs(kernel, cp, args, device)
        key, plan, call_attrs = runner.plan(kernel, cp, device, self.inputs, extras)
        if plan is None:
            plan = _new_plan(kernel, cp, self.inputs, call_attrs)
            kernel.plans.remember(key, plan)
        self.plan = plan
        self.outputs = device_outputs(kernel, cp, self.plan)
        self.workspaces = self.plan.checkout()  # its own for as long as it lives (graphs replay the same pointers)
        self._pointers = [a.data.ptr for a in self.inputs] + [o.data.ptr for o in self.outputs] + \
            self.workspaces.pointers
        self.nbytes = sum(a.nbytes for a in self.inputs) + sum(o.nbytes for o in self.outputs)

    def __call__(self) -> None:
        enqueue(self._kernel, self.plan, self._pointers, self._cp.cuda.get_current_stream().ptr)

    def finish(self) -> None:
        synchronize(self._kernel, self._cp)

    @property
    def result(self) -> Any:
        """The output array (or tuple of them) the launches write."""
        return self.outputs[0] if self.plan.single else self.outputs

    def __repr__(self) -> str:
        return f"<aotbench.gpu.Launcher {self._kernel.name} {[tuple(a.shape) for a in self.inputs]}>"


def to_device_like(op: Any, args: tuple) -> tuple:
    """``args`` with numpy arrays copied to the GPU when ``op`` is a gpu op (for sweeps and panels that make
    their inputs on the host); unchanged otherwise."""
    if getattr(getattr(op, "spec", None), "target", "cpu") != "gpu":
        return args
    cp = require_gpu(getattr(op, "name", "op"))
    return tuple(cp.asarray(a) if isinstance(a, np.ndarray) else a for a in args)


__all__ = ["HINTS", "STICKY", "GuardMirror", "Launcher", "OnDevice", "cuda_error", "device_array", "device_outputs",
           "enqueue", "kernel_names", "launch_error", "synchronize", "to_device_like", "wait_for_producer"]
