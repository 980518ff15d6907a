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
aligned to 64 bytes (it copies anything else), so outputs handed to JAX are allocated that way. JAX without
``jax_enable_x64`` narrows 64-bit dtypes in its ``from_dlpack`` (int64 2**40 becomes 0, float64 1e300 becomes
inf, without a word): such an output stays a numpy array, with a :class:`~aotbench.errors.NarrowingWarning`.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._userframe import user_stacklevel
from ..errors import ArgumentTypeError, NarrowingWarning
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
    #: The dtype this library's from_dlpack would make of an array's dtype (None: it keeps every dtype).
    kept_as: Callable[[np.dtype], np.dtype] | None = None

    def wrap(self, result: Any) -> Any:
        """``result`` (an output or a tuple of them: numpy or cupy arrays) as this library's arrays."""
        if self.from_dlpack is None:
            return result
        if isinstance(result, tuple):
            return tuple(self._one(r) for r in result)
        return self._one(result)

    def _one(self, out: Any) -> Any:
        if self.kept_as is not None and self._narrows(out):
            return out
        if isinstance(out, np.ndarray):
            if self.alignment > 1 and out.ctypes.data % self.alignment:
                out = aligned_copy(out, self.alignment)  # a small output of a guarded first call, say
            return self.from_dlpack(dlpack.export(out))
        return self.from_dlpack(out)  # a device array: it exports itself

    def _narrows(self, out: Any) -> bool:
        """Whether from_dlpack would turn ``out``'s dtype into a narrower one (then ``out`` is kept, and said)."""
        dtype = np.dtype(out.dtype)
        try:
            kept = np.dtype(self.kept_as(dtype))  # type: ignore[misc]
        except Exception:  # noqa: BLE001 - a dtype the library has no rule for: it keeps it
            return False
        if kept == dtype:
            return False
        warnings.warn(NarrowingWarning(
            f"an output of dtype {dtype} is returned as a {type(out).__module__.partition('.')[0]} array: "
            f"{self.name}'s from_dlpack would make it {kept}, which can lose values (JAX keeps 64-bit types only "
            "with jax.config.update(\"jax_enable_x64\", True))"),
            stacklevel=user_stacklevel())
        return True


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
    return Library(name, from_dlpack if callable(from_dlpack) else None, ALIGNMENT.get(name, 1),
                   _jax_dtype if name == "jax" else None)


def _jax_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype JAX gives an array of ``dtype`` now (64-bit types only with ``jax_enable_x64``, which a
    ``jax.enable_x64`` block sets per thread)."""
    from jax import dtypes  # noqa: PLC0415 - JAX made the caller's array, so it is imported already

    return np.dtype(dtypes.canonicalize_dtype(dtype))


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
    """(DLPack device type, device id) of an object that speaks DLPack; None for one that does not, or whose
    ``__dlpack_device__`` fails (:func:`not_an_array` says how)."""
    try:
        if not hasattr(value, "__dlpack__"):
            return None
        device_type, device_id = value.__dlpack_device__()
        return int(device_type), int(device_id)
    except Exception:  # noqa: BLE001 - a half-implemented protocol: fall back to the others (not_an_array says it)
        return None


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
            if library_of(value).name == "jax" and "Tracer" in type(value).__name__:
                raise ArgumentTypeError(
                    f"input {index} is {describe(value)}: inside jax.jit, vmap or grad an array has no values yet, "
                    "and a kernel needs them. Call the op outside the transformation, or inside it through "
                    "jax.pure_callback(op, jax.ShapeDtypeStruct(shape, dtype), x, vmap_method=\"sequential\") "
                    "(which has no gradient)") from exc
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
    elif hasattr(value, "__dlpack__"):
        what = f"{describe(value)} ({type(value).__module__}.{type(value).__qualname__}), {_dlpack_fault(value)}"
    else:
        what = (f"{describe(value)} ({type(value).__module__}.{type(value).__qualname__}), which has none of "
                "__dlpack__, the CUDA array interface, __array_interface__, __array__ and the buffer protocol")
    return ArgumentTypeError(f"input {index} is {what}: a kernel takes arrays. Pass a numpy array (np.asarray of "
                             "numbers), or an array of a library that exports one (torch, JAX, cupy ...)")


def _dlpack_fault(value: Any) -> str:
    """Why an object with ``__dlpack__`` could not be read through DLPack: its ``__dlpack_device__``, which says
    where the memory is, is missing, raised, or answered something other than two integers."""
    try:
        answer = value.__dlpack_device__()
    except AttributeError as exc:
        if "__dlpack_device__" in str(exc):
            return "which has __dlpack__ but no __dlpack_device__ (DLPack needs both, to know where the memory is)"
        return f"whose __dlpack_device__ raised AttributeError: {exc}"
    except Exception as exc:  # noqa: BLE001 - the producer's own error, reported as it is
        return f"whose __dlpack_device__ raised {type(exc).__name__}: {exc}"
    if isinstance(answer, tuple) and len(answer) == 2 and all(isinstance(a, int) for a in answer):
        return f"whose __dlpack_device__ failed when aotbench first asked, then answered {answer!r}"
    return f"whose __dlpack_device__() answered {answer!r}, not (device type, device id)"


def checked_dtype(arr: Any, index: int, value: Any) -> None:
    """Refuse, naming the input, an array of a dtype no kernel can receive (the supported list is in the error)."""
    try:
        dtype_string(np.dtype(arr.dtype))
    except ArgumentTypeError as exc:
        if type(value) is np.ndarray:
            raise
        raise ArgumentTypeError(f"input {index} ({describe(value)}): {exc}") from None


def aligned_empty(shape: tuple, dtype: Any, alignment: int) -> np.ndarray:
    """An uninitialised array whose data starts at a multiple of ``alignment`` bytes (numpy's own for 1)."""
    if alignment <= 1:
        return np.empty(shape, dtype)
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
