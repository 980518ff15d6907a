"""Arrays from any library in, outputs back in the caller's library: the array protocols, read without a copy.

numpy arrays take the path they always took. Anything else is read, in this order, through

1. DLPack (``__dlpack__`` and ``__dlpack_device__``: torch, JAX, cupy, TensorFlow ...; it carries bfloat16 and
   the float8 types), by :mod:`aotbench.native.dlpack` on the host and ``cupy.from_dlpack`` on a GPU;
2. the CUDA array interface (version 3, its ``stream`` waited for) on a GPU: :func:`aotbench.run.gpu.device_array`;
3. ``__array_interface__``, ``__array__`` or the buffer protocol (``np.asarray``) on the host.

The device is checked first: a tensor in GPU memory given to an op that runs on the CPU, or a foreign tensor in
host memory given to a gpu op, is an :class:`~aotbench.errors.ArgumentTypeError` naming the input, its library and
type, and how to move it. A non-contiguous tensor is copied to C order (as a non-contiguous numpy array is).

The outputs go back in the library of the first input that is neither a numpy array nor a Python object, and
that library has a ``from_dlpack`` (:func:`caller_library`): ``torch.from_dlpack``, ``jax.numpy.from_dlpack``,
``cupy.from_dlpack`` ..., which take the output's memory without a copy. JAX on the CPU aliases only memory
aligned to 64 bytes (it copies anything else), so outputs handed to JAX are allocated that way.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError
from ..native import dlpack
from ..native.dtypes import dtype_string
from .devices import GPU

#: Bytes an output must be aligned to for a library's ``from_dlpack`` to take it without a copy (JAX's CPU
#: client copies host memory aligned to less than 64 bytes: measured with jax 0.10.2).
ALIGNMENT = {"jax": 64}
# Where a library's from_dlpack lives, when not at its top level.
_FROM_DLPACK_MODULE = {"jax": "jax.numpy"}
# The module a type's module root belongs to, when the names differ.
_LIBRARY_NAME = {"jaxlib": "jax"}


@dataclass(frozen=True)
class Library:
    """The library an array belongs to: its ``name`` (the top-level package), the ``from_dlpack`` that makes its
    arrays (None: none found, or numpy's own arrays), and the ``alignment`` its from_dlpack needs to share memory."""

    name: str
    from_dlpack: Callable[[Any], Any] | None = None
    alignment: int = 1

    def wrap(self, result: Any) -> Any:
        """``result`` (an output or a tuple of them: numpy or cupy arrays) as this library's arrays."""
        if self.from_dlpack is None:
            return result
        if isinstance(result, tuple):
            return tuple(self._one(r) for r in result)
        return self._one(result)

    def _one(self, out: Any) -> Any:
        if isinstance(out, np.ndarray):
            if self.alignment > 1 and out.ctypes.data % self.alignment:
                out = aligned_copy(out, self.alignment)  # a small output of a guarded first call, say
            return self.from_dlpack(dlpack.export(out))
        return self.from_dlpack(out)  # a device array: it exports itself


NUMPY = Library("numpy")
_LIBRARIES: dict[type, Library] = {np.ndarray: NUMPY}


def library_of(value: Any) -> Library:
    """The :class:`Library` of ``value``'s type (looked up once per type)."""
    kind = type(value)
    found = _LIBRARIES.get(kind)
    if found is None:
        found = _LIBRARIES[kind] = _find_library(kind)
    return found


def _find_library(kind: type) -> Library:
    root = (getattr(kind, "__module__", None) or "").partition(".")[0]
    name = _LIBRARY_NAME.get(root, root)
    if name in ("numpy", "builtins", ""):
        return Library(name or "builtins")
    module = sys.modules.get(name)
    where = _FROM_DLPACK_MODULE.get(name)
    if where is not None and module is not None:
        try:
            module = importlib.import_module(where)
        except ImportError:  # pragma: no cover - jaxlib without jax cannot make arrays
            module = None
    from_dlpack = getattr(module, "from_dlpack", None) if module is not None else None
    return Library(name, from_dlpack if callable(from_dlpack) else None, ALIGNMENT.get(name, 1))


def caller_library(arrays: tuple) -> Library | None:
    """The library the outputs of a call on ``arrays`` go back in: the first input that is not a numpy array and
    whose library has a ``from_dlpack`` decides; None keeps numpy (cupy on a gpu op)."""
    for a in arrays:
        if type(a) is np.ndarray:
            continue
        library = library_of(a)
        if library.from_dlpack is not None:
            return library
    return None


def describe(value: Any) -> str:
    """``a torch Tensor``, ``a jax ArrayImpl``: an input as messages name it (its library and type)."""
    kind = type(value)
    library = library_of(value).name
    name = kind.__name__
    return f"a Python {name}" if library in ("builtins", "") else f"a {library} {name}"


def dlpack_device(value: Any) -> tuple[int, int] | None:
    """(DLPack device type, device id) of an object that speaks DLPack; None for one that does not."""
    probe = getattr(value, "__dlpack_device__", None)
    if probe is None or not hasattr(value, "__dlpack__"):
        return None
    try:
        device_type, device_id = probe()
    except Exception:  # noqa: BLE001 - a half-implemented protocol: fall back to the others
        return None
    return int(device_type), int(device_id)


#: How each library moves an array to host memory, and to GPU memory, in its own words.
_TO_HOST = {"torch": "t.cpu() (or t.detach().cpu())", "jax": 'jax.device_put(x, jax.devices("cpu")[0])',
            "cupy": "x.get() (or cupy.asnumpy(x))"}
_TO_GPU = {"torch": 't.cuda() (or t.to("cuda"))', "jax": 'jax.device_put(x, jax.devices("gpu")[0])'}


def to_host_hint(value: Any) -> str:
    """How to move ``value`` to host memory, in the words of its library."""
    return _TO_HOST.get(library_of(value).name, "copy it to host memory (a numpy array) with its library first")


def to_gpu_hint(value: Any) -> str:
    """How to move ``value`` to GPU memory, in the words of its library."""
    return _TO_GPU.get(library_of(value).name, "cupy.asarray(x) (a copy to the current GPU)")


def device_error(index: int, value: Any, where: str, runs: str) -> ArgumentTypeError:
    """The error for input ``index`` living in ``where`` (a device named in words) for an op that ``runs``
    elsewhere ("on the CPU", "on a GPU")."""
    hint = to_host_hint(value) if runs.endswith("CPU") else to_gpu_hint(value)
    return ArgumentTypeError(f"input {index} is {describe(value)} in {where}, but this op runs {runs}: move it "
                             f"there first, e.g. {hint}")


def host_array(value: Any, index: int, runs: str = "on the CPU") -> np.ndarray:
    """A non-numpy input as a C-contiguous numpy array in native byte order for a kernel on the CPU: a view of
    its memory where the protocols allow (DLPack first), else what ``np.asarray`` makes of it. ``runs``: how
    the op's errors describe where it runs."""
    device = dlpack_device(value)
    if device is not None:
        if device[0] not in dlpack.HOST_ACCESSIBLE:
            raise device_error(index, value, f"{dlpack.device_name(*device)} memory", runs)
        try:
            arr = dlpack.to_numpy(value)
        except ArgumentTypeError as exc:
            raise ArgumentTypeError(f"input {index} ({describe(value)}): {exc}") from None
        except Exception as exc:  # noqa: BLE001 - the producer refused (a torch tensor that requires grad ...)
            raise ArgumentTypeError(f"input {index} ({describe(value)}) could not be read through DLPack: "
                                    f"{type(exc).__name__}: {exc}") from exc
    elif GPU.owns(value):  # the CUDA array interface: device memory
        raise device_error(index, value, "GPU memory (it has the CUDA array interface)", runs)
    else:
        try:
            arr = np.asarray(value)
        except Exception as exc:  # noqa: BLE001 - whatever numpy could not make an array of
            raise ArgumentTypeError(f"input {index} ({describe(value)}) cannot be used as a numpy array: "
                                    f"{exc}") from exc
        if arr.dtype == object:
            raise not_an_array(index, value)
    if not arr.flags.c_contiguous or not arr.dtype.isnative:  # copied, as a non-contiguous numpy array is
        arr = np.asarray(arr, order="C")
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr


def not_an_array(index: int, value: Any) -> ArgumentTypeError:
    """The error for an input numpy can only hold as Python objects."""
    if isinstance(value, (list, tuple)):
        what = (f"a {type(value).__name__} that numpy reads only as Python objects (its elements are not all "
                "numbers of one shape)")
    else:
        what = (f"{describe(value)} ({type(value).__module__}.{type(value).__qualname__}), which has none of "
                "__dlpack__, the CUDA array interface, __array_interface__, __array__ and the buffer protocol")
    return ArgumentTypeError(f"input {index} is {what}: a kernel takes arrays. Pass a numpy array (np.asarray of "
                             "numbers), or an array of a library that exports one (torch, JAX, cupy ...)")


def checked_dtype(arr: Any, index: int, value: Any) -> None:
    """Refuse, naming the input, an array of a dtype no kernel can receive (the supported list is in the error)."""
    try:
        dtype_string(np.dtype(arr.dtype))
    except ArgumentTypeError as exc:
        if type(value) is np.ndarray:
            raise
        raise ArgumentTypeError(f"input {index} ({describe(value)}): {exc}") from None


def aligned_empty(shape: tuple, dtype: Any, alignment: int) -> np.ndarray:
    """An uninitialised array whose data starts at a multiple of ``alignment`` bytes."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + alignment, np.uint8)
    shift = -raw.ctypes.data % alignment
    return raw[shift:shift + nbytes].view(dtype).reshape(shape)


def aligned_copy(array: np.ndarray, alignment: int) -> np.ndarray:
    out = aligned_empty(array.shape, array.dtype, alignment)
    np.copyto(out, array)
    return out


__all__ = ["ALIGNMENT", "NUMPY", "Library", "aligned_copy", "aligned_empty", "caller_library", "checked_dtype",
           "describe", "device_error", "dlpack_device", "host_array", "library_of", "not_an_array", "to_gpu_hint",
           "to_host_hint"]
