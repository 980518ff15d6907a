"""DLPack through ctypes: read another library's tensor as a numpy array without a copy, and hand a numpy array
to another library's ``from_dlpack`` without a copy.

numpy's own ``np.from_dlpack`` refuses bfloat16 and float8 tensors, and numpy's ``__dlpack__`` cannot export
ml_dtypes' arrays, so aotbench reads and writes the C structures itself (``dlpack.h``, versions 0.8 to 1.1):

* :func:`to_numpy` asks an object for a capsule (``__dlpack__(stream=None, max_version=(1, 0))``, or without
  ``max_version`` for a producer from before DLPack 1.0), marks it used (``used_dltensor``), and returns a numpy
  view of the tensor's memory: strides honoured, read-only when the producer says so (the versioned tensor's
  ``READ_ONLY`` flag). The view's ``base`` owns the tensor: the producer's deleter runs exactly once, when the
  last numpy array over that memory is gone.
* :func:`export` wraps a numpy array in an object with ``__dlpack__`` / ``__dlpack_device__``: a consumer's
  ``from_dlpack`` takes the memory as it is, and the array lives until the consumer calls the deleter (or, for a
  capsule never consumed, until the capsule is collected).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError

# -- dlpack.h ------------------------------------------------------------------------------------------------------
#: DLDeviceType codes and how aotbench names them in messages.
DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 9: "vpi", 10: "rocm",
                11: "rocm_host", 12: "ext_dev", 13: "cuda_managed", 14: "oneapi", 15: "webgpu", 16: "hexagon",
                17: "maia", 18: "trn"}
KDLCPU, KDLCUDA, KDLCUDA_HOST, KDLCUDA_MANAGED = 1, 2, 3, 13
#: Devices whose memory the CPU can read and write: plain, pinned (cudaMallocHost) and managed memory.
HOST_ACCESSIBLE = frozenset({KDLCPU, KDLCUDA_HOST, 11, KDLCUDA_MANAGED})
#: Devices a CUDA kernel can read and write through a device pointer.
CUDA_ACCESSIBLE = frozenset({KDLCUDA, KDLCUDA_HOST, KDLCUDA_MANAGED})

READ_ONLY, IS_COPIED, IS_SUBBYTE_TYPE_PADDED = 1, 2, 4  # DLManagedTensorVersioned.flags

_INT, _UINT, _FLOAT, _BFLOAT, _COMPLEX, _BOOL = 0, 1, 2, 4, 5, 6
#: DLDataTypeCode of the 8-bit floats (DLPack 1.1) -> the ml_dtypes type of the same name.
FLOAT8_CODES = {7: "float8_e3m4", 8: "float8_e4m3", 9: "float8_e4m3b11fnuz", 10: "float8_e4m3fn",
                11: "float8_e4m3fnuz", 12: "float8_e5m2", 13: "float8_e5m2fnuz", 14: "float8_e8m0fnu"}
_ML_NAMES = {"bfloat16": _BFLOAT, **{name: code for code, name in FLOAT8_CODES.items()}}  # ml_dtypes' types
_SUBBYTE_CODES = {15: "float6_e2m3fn", 16: "float6_e3m2fn", 17: "float4_e2m1fn"}
_CODE_NAMES = {_INT: "int", _UINT: "uint", _FLOAT: "float", 3: "opaque handle", _BFLOAT: "bfloat",
               _COMPLEX: "complex", _BOOL: "bool"}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # void (*)(DLManagedTensor[Versioned] *)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


# -- capsules (prototypes of our own: ctypes.pythonapi's function objects are shared with other code) -------------
_API = ctypes.pythonapi
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_IsValid", _API))
_is_valid_at = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _API))
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", _API))
_get_pointer_at = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer",
                                                                                         _API))
_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)(("PyCapsule_SetName", _API))
_new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
    ("PyCapsule_New", _API))
_incref = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_IncRef", _API))

LEGACY, VERSIONED = b"dltensor", b"dltensor_versioned"
# A capsule keeps the pointer to its name, not a copy: these buffers live as long as the process.
_NAMES = {name: ctypes.create_string_buffer(name) for name in
          (LEGACY, VERSIONED, b"used_dltensor", b"used_dltensor_versioned")}


def _call_deleter(address: int, tensor: int) -> None:
    ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(address)(tensor)  # with the GIL held, as numpy and torch call it


class _Imported:
    """The owner of an imported tensor: numpy reads its ``__array_interface__`` and keeps it as the view's base;
    when the last view is gone, the producer's deleter runs (once)."""

    def __init__(self, tensor: int, deleter: int):
        self._tensor, self._deleter = tensor, deleter
        self.__array_interface__: dict = {}

    def release(self) -> None:
        tensor, self._tensor = self._tensor, 0
        if tensor and self._deleter:
            _call_deleter(self._deleter, tensor)

    def __del__(self) -> None:
        self.release()


def capsule_of(obj: Any) -> Any:
    """``obj.__dlpack__()`` for a consumer on the CPU: a versioned capsule where the producer makes one."""
    try:
        return obj.__dlpack__(stream=None, max_version=(1, 0))
    except TypeError:  # a producer from before DLPack 1.0 has no max_version
        return obj.__dlpack__(stream=None)


def to_numpy(obj: Any) -> np.ndarray:
    """A numpy view of ``obj``'s memory through DLPack (the caller checked that the device is host-accessible)."""
    return from_capsule(capsule_of(obj))


def from_capsule(capsule: Any) -> np.ndarray:
    """A numpy view of the tensor a DLPack capsule carries; the capsule is marked used (see the module's doc)."""
    if _is_valid(capsule, VERSIONED):
        address = _get_pointer(capsule, VERSIONED)
        managed = DLManagedTensorVersioned.from_address(address)
        owner = _take(capsule, b"used_dltensor_versioned", address, managed.deleter)
        if managed.version.major != 1:
            raise ArgumentTypeError(f"the tensor is in DLPack {managed.version.major}.{managed.version.minor}, "
                                    "which aotbench cannot read (it reads 0.x and 1.x)")
        flags = int(managed.flags)
    elif _is_valid(capsule, LEGACY):
        address = _get_pointer(capsule, LEGACY)
        managed = DLManagedTensor.from_address(address)  # type: ignore[assignment]
        owner, flags = _take(capsule, b"used_dltensor", address, managed.deleter), 0
    else:
        raise ArgumentTypeError(f"__dlpack__ returned {capsule!r}, not a DLPack capsule ('dltensor' or "
                                "'dltensor_versioned'); it may have been consumed already")
    return _view(managed.dl_tensor, owner, bool(flags & READ_ONLY), bool(flags & IS_SUBBYTE_TYPE_PADDED))


def _take(capsule: Any, used: bytes, address: int, deleter: int | None) -> _Imported:
    """Mark the capsule consumed (its destructor then leaves the tensor alone) and own the tensor from here on."""
    if _set_name(capsule, ctypes.addressof(_NAMES[used])) != 0:  # pragma: no cover - only fails on a bad capsule
        raise ArgumentTypeError("the DLPack capsule could not be marked as used")
    return _Imported(address, deleter or 0)


def _view(t: DLTensor, owner: _Imported, readonly: bool, subbyte: bool) -> np.ndarray:
    code, bits, lanes = int(t.dtype.code), int(t.dtype.bits), int(t.dtype.lanes)
    dtype = numpy_dtype(code, bits, lanes, subbyte)
    device = int(t.device.device_type)
    if device not in HOST_ACCESSIBLE:
        raise ArgumentTypeError(f"the tensor is on the {device_name(device, t.device.device_id)} device, which the "
                                "CPU cannot read")
    ndim = int(t.ndim)
    shape = tuple(int(t.shape[k]) for k in range(ndim))
    size = int(np.prod(shape, dtype=np.int64))
    if size and not t.data:
        owner.release()
        raise ArgumentTypeError(f"the tensor of shape {shape} has no data (its producer gave a NULL data pointer "
                                "for a non-empty tensor): pass a tensor whose memory exists, e.g. a copy of it")
    if size == 0:  # no memory to share (the data pointer may be NULL): an empty array of its own
        owner.release()
        return np.empty(shape, dtype)
    item = dtype.itemsize
    strides = tuple(int(t.strides[k]) * item for k in range(ndim)) if t.strides else None
    typestr = f"|V{item}" if dtype.name in _ML_NAMES else dtype.str  # ml_dtypes types: raw bytes, then viewed
    owner.__array_interface__ = {"version": 3, "shape": shape, "typestr": typestr, "strides": strides,
                                 "data": (int(t.data) + int(t.byte_offset), readonly)}
    arr = np.asarray(owner)
    return arr.view(dtype) if arr.dtype != dtype else arr


def device_name(device_type: int, device_id: int = 0) -> str:
    """``cuda:0``, ``cpu``: a DLPack device as messages name it."""
    name = DEVICE_NAMES.get(int(device_type), f"DLPack device type {int(device_type)}")
    return name if int(device_type) == KDLCPU else f"{name}:{int(device_id)}"


def _ml_dtype(name: str) -> np.dtype:
    try:
        import ml_dtypes
    except ImportError:
        raise ArgumentTypeError(f"the tensor holds {name}, which numpy reads only through the ml_dtypes package: "
                                "pip install ml_dtypes") from None
    kind = getattr(ml_dtypes, name, None)
    if kind is None:
        raise ArgumentTypeError(f"the tensor holds {name}, which this ml_dtypes ({ml_dtypes.__version__}) does not "
                                "have: pip install -U ml_dtypes")
    return np.dtype(kind)


def numpy_dtype(code: int, bits: int, lanes: int = 1, subbyte: bool = False) -> np.dtype:
    """The numpy dtype of a DLPack dtype (bfloat16 and the float8 types through ml_dtypes); an
    :class:`ArgumentTypeError` naming the DLPack dtype for one numpy has no equivalent for."""
    if lanes == 1:
        if code in (_INT, _UINT) and bits in (8, 16, 32, 64):
            return np.dtype(f"{'i' if code == _INT else 'u'}{bits // 8}")
        if code == _FLOAT and bits in (16, 32, 64):
            return np.dtype(f"f{bits // 8}")
        if code == _COMPLEX and bits in (64, 128):
            return np.dtype(f"c{bits // 8}")
        if code == _BOOL and bits == 8:
            return np.dtype(np.bool_)
        if code == _BFLOAT and bits == 16:
            return _ml_dtype("bfloat16")
        if code in FLOAT8_CODES and bits == 8:
            return _ml_dtype(FLOAT8_CODES[code])
    name = _SUBBYTE_CODES.get(code) or f"{_CODE_NAMES.get(code, f'type code {code}')} of {bits} bits"
    if code in _SUBBYTE_CODES:
        name += " (packed below a byte)" if not subbyte else " (one per byte)"
    if lanes != 1:
        name += f" in vectors of {lanes} lanes"
    raise ArgumentTypeError(f"the tensor's DLPack dtype, {name}, has no numpy equivalent")


def dlpack_dtype(dtype: np.dtype) -> tuple[int, int]:
    """(DLDataTypeCode, bits) of a numpy dtype, for :func:`export`."""
    dtype = np.dtype(dtype)
    bits = dtype.itemsize * 8
    if dtype.name in _ML_NAMES:  # before the kinds: ml_dtypes gives some of its types kind "f"
        return _ML_NAMES[dtype.name], bits
    if dtype.kind in "iufcb":
        return {"i": _INT, "u": _UINT, "f": _FLOAT, "c": _COMPLEX, "b": _BOOL}[dtype.kind], bits
    raise ArgumentTypeError(f"arrays of dtype {dtype} cannot be handed over through DLPack")


# -- export ------------------------------------------------------------------------------------------------------
# Exported tensors by address: what keeps each one's structures and array alive until its deleter runs.
_EXPORTS: dict[int, tuple] = {}


def _release(tensor: int) -> None:
    _EXPORTS.pop(tensor, None)


def _destroy_capsule(capsule: int) -> None:
    """A capsule collected before a consumer took it: run the deleter itself (a consumer renames it first)."""
    for name in (LEGACY, VERSIONED):
        if _is_valid_at(capsule, name):
            _release(_get_pointer_at(capsule, name) or 0)


_DELETER_THUNK = _DELETER(_release)
_DESTRUCTOR_THUNK = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_destroy_capsule)
# Never freed, not even while the interpreter shuts down: a capsule or a consumer may call them until the end.
_incref(_DELETER_THUNK)
_incref(_DESTRUCTOR_THUNK)


def _capsule(array: np.ndarray, versioned: bool) -> Any:
    code, bits = dlpack_dtype(array.dtype)
    ndim = array.ndim
    shape = (ctypes.c_int64 * max(ndim, 1))(*array.shape)
    strides = (ctypes.c_int64 * max(ndim, 1))(*(s // array.itemsize for s in array.strides))
    managed: Any = DLManagedTensorVersioned() if versioned else DLManagedTensor()
    t = managed.dl_tensor
    t.data = array.ctypes.data
    t.device = DLDevice(KDLCPU, 0)
    t.ndim = ndim
    t.dtype = DLDataType(code, bits, 1)
    t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    managed.deleter = ctypes.cast(_DELETER_THUNK, ctypes.c_void_p).value
    if versioned:
        managed.version = DLPackVersion(1, 0)
        managed.flags = 0 if array.flags.writeable else READ_ONLY
    address = ctypes.addressof(managed)
    _EXPORTS[address] = (managed, shape, strides, array)
    name = _NAMES[VERSIONED if versioned else LEGACY]
    return _new_capsule(address, ctypes.addressof(name), ctypes.cast(_DESTRUCTOR_THUNK, ctypes.c_void_p).value)


class Exported:
    """A numpy array as a DLPack producer on the CPU: pass it to ``from_dlpack`` (torch, JAX, numpy ...)."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray):
        self.array = array

    def __dlpack_device__(self) -> tuple[int, int]:
        return KDLCPU, 0

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: Any = None, copy: bool | None = None) -> Any:
        if dl_device is not None and tuple(int(v) for v in dl_device) != (KDLCPU, 0):
            raise BufferError(f"this array is in host memory; {tuple(dl_device)} asked for (copy it yourself)")
        array = self.array
        if copy:
            array = np.array(array, copy=True)
        versioned = max_version is not None and int(max_version[0]) >= 1
        if not versioned and not array.flags.writeable:  # the legacy tensor cannot say "read-only"
            array = np.array(array, copy=True)
        return _capsule(array, versioned)


def export(array: np.ndarray) -> Exported:
    """``array`` as an object a ``from_dlpack`` takes without a copy (see :class:`Exported`)."""
    return Exported(array)


def held_exports() -> list[np.ndarray]:
    """The arrays exported and not yet released (a consumer or an unconsumed capsule holds them): for tests."""
    return [entry[3] for entry in list(_EXPORTS.values())]


__all__ = ["CUDA_ACCESSIBLE", "DEVICE_NAMES", "FLOAT8_CODES", "HOST_ACCESSIBLE", "KDLCPU", "KDLCUDA", "READ_ONLY",
           "DLManagedTensor", "DLManagedTensorVersioned", "DLTensor", "Exported", "capsule_of", "device_name",
           "dlpack_dtype", "export", "from_capsule", "held_exports", "numpy_dtype", "to_numpy"]
