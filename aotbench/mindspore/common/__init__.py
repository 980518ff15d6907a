"""``mindspore.common``: the dtype module and ``Tensor``."""

from ..missing import module_getattr
from . import dtype
from .dtype import DType
from .tensor import Tensor

__getattr__ = module_getattr("mindspore.common")

__all__ = ["DType", "Tensor", "dtype"]
