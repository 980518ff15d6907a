"""``mindspore.ops``: ``Custom(func, out_shape, out_dtype, "aot", reg_info=...)`` on Tensors, built by aotbench,
and the registration builder ``CustomRegOp`` / ``DataType`` (aotbench's own, same chain of methods).

What MindSpore refuses, this refuses too, so that a script that runs here runs there: a registration without a
``dtype_format``, and ``out_shape`` / ``out_dtype`` in forms MindSpore 2.10 does not take together.
"""

from __future__ import annotations

from typing import Any

from ..spec.registration import CustomRegOp, DataType, OpInfo
from ..spec.rules import is_shape_list
from ..op.custom import Custom as _build
from ..errors import ArgumentTypeError, ArgumentValueError
from ..tools.accuracy import to_host
from . import context
from .common import dtype as mstype
from .common.tensor import Tensor
from .dynamic_shape_check import DynamicShapeCheck
from .missing import missing, module_getattr
from .nn import current_call


def _dtype_rule(out_dtype: Any) -> Any:
    """``out_dtype`` with MindSpore dtypes turned into numpy ones; a function gets and returns MindSpore dtypes."""
    if isinstance(out_dtype, (list, tuple)):
        return tuple(mstype.to_numpy(d) for d in out_dtype)
    if callable(out_dtype) and not isinstance(out_dtype, type):
        def rule(*dtypes):
            result = out_dtype(*[mstype.of_numpy(d) for d in dtypes])
            return tuple(mstype.to_numpy(d) for d in result) if isinstance(result, (list, tuple)) else \
                mstype.to_numpy(result)
        rule.__name__ = getattr(out_dtype, "__name__", "out_dtype")
        return rule
    return mstype.to_numpy(out_dtype)


def _shape_rule(out_shape: Any, out_dtype: Any) -> Any:
    """A shape function gets the input shapes as lists, as MindSpore passes them (``lambda s: s + [1]`` works),
    and what it returns must take the form of ``out_dtype`` (a tuple of shapes with a tuple of dtypes)."""
    if not callable(out_shape):
        return out_shape

    def rule(*shapes):
        result = out_shape(*[list(s) for s in shapes])
        if is_shape_list(result) != isinstance(out_dtype, (list, tuple)):
            raise ArgumentTypeError(f"out_shape returned {result!r} with out_dtype={out_dtype!r}: MindSpore takes a "
                                    "tuple of shapes with a tuple of dtypes, a single shape with a single dtype")
        return result

    rule.__name__ = getattr(out_shape, "__name__", "out_shape")
    return rule


def _check_forms(out_shape: Any, out_dtype: Any, reg: OpInfo) -> None:
    """Refuse the pairs MindSpore 2.10 refuses (measured): a tuple of shapes goes with a tuple of dtypes (a list
    with a list), a single shape with a single dtype; with InferShape a tuple dtype means several outputs (and
    several outputs need one); ``out_dtype`` is always needed. A shape function is checked when it has run."""
    if out_dtype is None:
        raise ArgumentTypeError("out_dtype=None: MindSpore needs the output dtype of an aot Custom ('Please add infer "
                                "type function'); give out_dtype=mstype.float32 (a tuple for several outputs)")
    dtype_seq = isinstance(out_dtype, (list, tuple))
    if out_shape is None:
        if len(reg.outputs) > 1 and not dtype_seq:
            raise ArgumentTypeError(f"the registration declares {len(reg.outputs)} outputs but out_dtype={out_dtype!r} "
                                    "is one dtype: MindSpore needs a tuple, one dtype per output")
        if dtype_seq and len(out_dtype) == 1:
            raise ArgumentValueError("out_shape=None with a one-element tuple out_dtype: MindSpore refuses it (a tuple "
                                     "out_dtype with InferShape means several outputs); give out_dtype=mstype.float32, "
                                     "or out_shape=((...),) to get a tuple back")
        return
    if callable(out_shape):
        return
    shape_seq = is_shape_list(out_shape)
    if shape_seq != dtype_seq or (shape_seq and type(out_shape) is not type(out_dtype)):
        raise ArgumentTypeError(f"out_shape={out_shape!r} with out_dtype={out_dtype!r}: MindSpore takes both as "
                                "tuples (or both as lists) for a tuple of outputs, even of one ((4, 5),) with "
                                "(mstype.float32,), or both as single values")


def _pick_registration(reg_info: Any) -> OpInfo | None:
    """MindSpore takes one registration or a list of them (one per target): the one for the current target."""
    if not isinstance(reg_info, (list, tuple)):
        return reg_info
    target = context.device_target()
    for info in reg_info:
        if isinstance(info, OpInfo) and (info.target or "").upper() == target:
            return info
    targets = ", ".join(str(getattr(i, "target", None)) for i in reg_info)
    raise ArgumentValueError(f"reg_info lists registrations for targets {targets}; none is for the current "
                             f"device_target {target!r}")


class Custom:
    """MindSpore's ``ops.Custom`` for ``func_type="aot"``: the kernel is built (or found in the cache) here."""

    def __init__(self, func: Any, out_shape: Any = None, out_dtype: Any = None, func_type: str = "pyfunc",
                 bprop: Any = None, reg_info: Any = None):
        if func_type != "aot":
            raise missing(f"mindspore.ops.Custom(func_type={func_type!r})")
        reg = _pick_registration(reg_info)
        if reg is None:
            raise ArgumentTypeError("an aot Custom without reg_info: MindSpore 2.10 fails on it ('The pointer[value] "
                                    "is null'); give reg_info=CustomRegOp(name).input(...).output(...).dtype_format("
                                    "...).target('CPU').get_op_info()")
        if isinstance(reg, OpInfo) and not reg.has_dtype_format:
            raise ArgumentValueError(f"registration {reg.name!r} has no dtype_format: MindSpore refuses it ('the "
                                     "registration information is registered failed'); add .dtype_format(DataType."
                                     "None_None, ...) with one entry per input and output")
        _check_forms(out_shape, out_dtype, reg)
        # The target is the registration's, else the source's kind (.cu: gpu), as aotbench.Custom decides.
        self.op = _build(func, _shape_rule(out_shape, out_dtype), _dtype_rule(out_dtype), "aot", reg_info=reg)
        # Tensors live on the host, as MindSpore's do before it moves them: copying them to the GPU is the
        # stand-in's job, not something a MindSpore script could change, so the op does not warn about it.
        if hasattr(self.op.runner, "host_copy_noted"):  # a gpu op's runner (aotbench.run.gpu.OnDevice)
            self.op.runner.host_copy_noted = True
        self.bprop = bprop
        self._dynamic_shapes = DynamicShapeCheck(self.op)
        # MindSpore 2.10 returns the outputs of list-form rules ([[4]], [mstype.float32]) as a list in graph mode
        # (a tuple in PyNative mode); measured.
        self._lists = isinstance(out_shape, list) and isinstance(out_dtype, list)

    def __call__(self, *args: Any) -> Any:
        values = []
        for i, a in enumerate(args):
            if isinstance(a, Tensor) and a.is_placeholder:
                raise ArgumentValueError(f"input {i} of {self.op.name} is a set_inputs placeholder, not data")
            values.append(a.asnumpy() if isinstance(a, Tensor) else a)
        result = self.op(*values)
        call = current_call.get()
        if call is not None:  # after the call: its plan holds the workspace sizes Init asked for
            n = len(args) - len(self.op.spec.call_attrs)
            self._dynamic_shapes.observe([call.declared_shape(a) for a in args[:n]], tuple(values[:n]),
                                    tuple(values[n:]), context.mode())
        if isinstance(result, tuple):
            outputs = [Tensor._wrap(to_host(r)) for r in result]
            return outputs if self._lists and context.mode() == context.GRAPH_MODE else tuple(outputs)
        return Tensor._wrap(to_host(result))

    def __repr__(self) -> str:
        return f"Custom({self.op.name}, aot, built by aotbench)"


__getattr__ = module_getattr("mindspore.ops")

__all__ = ["Custom", "CustomRegOp", "DataType"]
