"""A small stand-in for MindSpore built on aotbench: enough of its API to run aot ``Custom`` ops unmodified.

``python -m aotbench run script.py`` (or ``run -m pytest ...``) makes ``import mindspore`` resolve here for
that run only; ``import aotbench.mindspore as ms`` uses it directly (in a notebook, say). It has ``Tensor``
(numpy-backed), ``nn.Cell``, ``ops.Custom`` (aotbench's build and call, Tensors in and out), ``ops.CustomRegOp``,
``ops.DataType``, the dtypes, ``context.set_context`` / ``set_device`` and the two modes. Any other MindSpore API
raises an error naming it (:class:`~aotbench.MindSporeApiError` for a module or ``from mindspore import X``,
:class:`~aotbench.MindSporeAttributeError` for an attribute, ``AttributeError`` / ``TypeError`` with the same
sentence for a Tensor method or operator). It is never installed as ``mindspore`` and never shadows a real
MindSpore outside ``run``.
"""

from . import common, context, nn, ops
from .common import Tensor, dtype
from .common.dtype import (
    bfloat16,
    bool_,
    complex64,
    complex128,
    double,
    float16,
    float32,
    float64,
    half,
    int8,
    int16,
    int32,
    int64,
    single,
    uint8,
    uint16,
    uint32,
    uint64,
)
from .context import GRAPH_MODE, PYNATIVE_MODE, get_context, set_context, set_device
from .missing import module_getattr

__getattr__ = module_getattr("mindspore")

__all__ = [
    "GRAPH_MODE", "PYNATIVE_MODE", "Tensor", "bfloat16", "bool_", "common", "complex64", "complex128", "context",
    "double", "dtype", "float16", "float32", "float64", "get_context", "half", "int8", "int16", "int32", "int64",
    "nn", "ops", "set_context", "set_device", "single", "uint8", "uint16", "uint32", "uint64",
]
