"""``mindspore.Tensor``, backed by a numpy array: data in and out of aot ops, and shapes for ``set_inputs``.

``Tensor(array)`` holds a C-contiguous copy (Python floats become float32 and ints int64, as in MindSpore);
``Tensor(shape=[4, None], dtype=mstype.float32)`` is a placeholder with unknown dims (-1) for
``Cell.set_inputs``. ``asnumpy()`` returns the array itself.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ...errors import ArgumentTypeError, ArgumentValueError, ShapeError
from ..missing import missing, missing_attribute, missing_operation
from . import dtype as mstype

UNKNOWN_RANK = -2


def _default_dtype(data: object) -> np.dtype | None:
    """MindSpore's dtype for Python data: bool, int64 for ints, float32 for floats (numpy data keeps its own)."""
    if isinstance(data, (np.ndarray, np.generic)):
        return None
    flat = np.asarray(data, dtype=object).ravel()
    if flat.size and all(isinstance(v, (bool, np.bool_)) for v in flat):
        return np.dtype(np.bool_)
    if flat.size and all(isinstance(v, numbers.Integral) for v in flat):
        return np.dtype(np.int64)
    if any(isinstance(v, complex) for v in flat):
        return None  # numpy's complex128
    return np.dtype(np.float32)


class Tensor:
    """MindSpore's ``Tensor(input_data=None, dtype=None, shape=None, init=None, ...)`` on a numpy array."""

    __slots__ = ("_array", "_dtype", "_shape")

    def __init__(self, input_data: Any = None, dtype: mstype.DType | None = None, shape: Any = None,
                 init: Any = None, const_arg: bool = False, device: Any = None):
        if init is not None:
            raise missing("Tensor(init=...)")
        if dtype is not None and not isinstance(dtype, mstype.DType):
            raise ArgumentTypeError(f"Tensor dtype must be a MindSpore dtype such as mstype.float32, got {dtype!r}")
        if input_data is None:
            if shape is None or dtype is None:
                raise ArgumentTypeError("Tensor() needs input_data, or shape= and dtype= (a placeholder for "
                                        "Cell.set_inputs, e.g. Tensor(shape=[4, None], dtype=mstype.float32))")
            dims = [shape] if isinstance(shape, numbers.Integral) else list(shape)
            if any(d is not None and (isinstance(d, bool) or not isinstance(d, numbers.Integral)) for d in dims):
                raise ShapeError(f"Tensor shape {shape!r}: give ints, with None (or -1) for an unknown dim")
            coded = tuple(-1 if d is None else int(d) for d in dims)
            if any(d < -1 for d in coded) and coded != (UNKNOWN_RANK,):
                raise ShapeError(f"Tensor shape {shape!r}: a dim is >= 0, or None / -1 when unknown "
                                 "([-2] alone means an unknown rank)")
            self._array, self._shape, self._dtype = None, coded, dtype
            return
        if isinstance(input_data, Tensor):
            input_data = input_data.asnumpy()
        try:
            want = dtype.numpy if dtype is not None else _default_dtype(input_data)
            array = np.array(input_data, dtype=want, order="C")
        except (TypeError, ValueError) as exc:
            raise ArgumentValueError(f"Tensor({type(input_data).__name__}) is not a rectangular array of numbers"
                                     f"{f' of {dtype}' if dtype is not None else ''}: {exc}") from exc
        self._dtype = mstype.of_numpy(array.dtype)
        self._array, self._shape = array, tuple(array.shape)

    @classmethod
    def _wrap(cls, array: np.ndarray) -> Tensor:
        """A Tensor on ``array`` itself (an op's fresh output), without a copy."""
        tensor = cls.__new__(cls)
        tensor._array, tensor._shape, tensor._dtype = array, tuple(array.shape), mstype.of_numpy(array.dtype)
        return tensor

    @property
    def is_placeholder(self) -> bool:
        """True for ``Tensor(shape=..., dtype=...)``: a shape for ``set_inputs``, with no data."""
        return self._array is None

    def asnumpy(self) -> np.ndarray:
        if self._array is None:
            raise ArgumentValueError(f"this Tensor is a placeholder (shape {list(self._shape)}, {self._dtype}) for "
                                     "Cell.set_inputs and holds no data: call the net with Tensor(array)")
        return self._array

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> mstype.DType:
        return self._dtype

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        return int(self.asnumpy().size)

    def __array__(self, dtype=None, copy=None):
        array = self.asnumpy()
        return array if dtype is None else array.astype(dtype)

    def __len__(self) -> int:
        return len(self.asnumpy())

    def __getitem__(self, index) -> Tensor:
        return Tensor(self.asnumpy()[index])

    def __str__(self) -> str:
        return str(self.asnumpy()) if self._array is not None else repr(self)

    def __repr__(self) -> str:
        value = "" if self._array is None else f" {np.array2string(self._array, separator=', ')}"
        return f"Tensor(shape={list(self._shape)}, dtype={self._dtype}, value={value})"

    def _no_operator(self, *args: Any):
        raise missing_operation("arithmetic and comparison on mindspore.Tensor (use .asnumpy() and numpy)")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _no_operator
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = __matmul__ = __rmatmul__ = _no_operator
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = __lshift__ = __rshift__ = _no_operator
    __neg__ = __pos__ = __abs__ = __invert__ = __round__ = __float__ = __int__ = _no_operator
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _no_operator
    __hash__ = object.__hash__
    __array_ufunc__ = None  # numpy_array + tensor is refused too, instead of computing with the data silently

    def __bool__(self) -> bool:
        """As MindSpore: the truth of a one-element Tensor; ambiguous (an error) for more elements."""
        array = self.asnumpy()
        if array.size != 1:
            raise ArgumentValueError(f"the truth value of a Tensor of {array.size} elements is ambiguous: use "
                                     ".asnumpy().any() or .all()")
        return bool(array.item())

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise missing_attribute(f"mindspore.Tensor.{name} (use .asnumpy() and numpy)")
