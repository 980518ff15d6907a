"""``mindspore.common.dtype`` (``mstype``): MindSpore's dtype objects, each naming a numpy dtype.

``str(mstype.float32)`` is ``Float32`` and ``repr`` is ``mindspore.float32``, as in MindSpore.
"""

from __future__ import annotations

import numpy as np

from ...native.dtypes import dtype_string, resolve_dtype
from ..missing import module_getattr


class DType:
    """One MindSpore dtype; ``kernel_name`` is the dtype string the kernel sees in ``dtypes[i]``."""

    __slots__ = ("kernel_name", "label", "public_name")

    def __init__(self, public_name: str, kernel_name: str, label: str):
        self.public_name = public_name
        self.kernel_name = kernel_name
        self.label = label

    def __repr__(self) -> str:
        return f"mindspore.{self.public_name}"

    def __str__(self) -> str:
        return self.label

    def __reduce__(self):
        return (of_name, (self.kernel_name,))

    @property
    def numpy(self) -> np.dtype:
        return resolve_dtype(self.kernel_name)


float16 = DType("float16", "float16", "Float16")
float32 = DType("float32", "float32", "Float32")
float64 = DType("float64", "float64", "Float64")
bfloat16 = DType("bfloat16", "bfloat16", "BFloat16")
int8 = DType("int8", "int8", "Int8")
int16 = DType("int16", "int16", "Int16")
int32 = DType("int32", "int32", "Int32")
int64 = DType("int64", "int64", "Int64")
uint8 = DType("uint8", "uint8", "UInt8")
uint16 = DType("uint16", "uint16", "UInt16")
uint32 = DType("uint32", "uint32", "UInt32")
uint64 = DType("uint64", "uint64", "UInt64")
bool_ = DType("bool_", "bool", "Bool")
complex64 = DType("complex64", "complex64", "Complex64")
complex128 = DType("complex128", "complex128", "Complex128")
half, single, double = float16, float32, float64

ALL = (float16, float32, float64, bfloat16, int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool_,
       complex64, complex128)
_BY_KERNEL_NAME = {d.kernel_name: d for d in ALL}


def of_name(kernel_name: str) -> DType:
    return _BY_KERNEL_NAME[kernel_name]


def of_numpy(dtype: np.dtype) -> DType:
    """The MindSpore dtype of a numpy dtype (refusing what kernels cannot receive, as aotbench does)."""
    return _BY_KERNEL_NAME[dtype_string(np.dtype(dtype))]


def to_numpy(dtype: object) -> object:
    """A MindSpore dtype as the numpy dtype aotbench takes; anything else unchanged (numpy dtypes pass)."""
    return dtype.numpy if isinstance(dtype, DType) else dtype


def dtype_to_nptype(dtype: DType) -> type:
    """MindSpore's ``dtype_to_nptype``: the numpy scalar type of a MindSpore dtype."""
    return dtype.numpy.type


__getattr__ = module_getattr("mindspore.common.dtype")
