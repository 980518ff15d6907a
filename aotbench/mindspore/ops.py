"""``mindspore.ops``: ``Custom(func, out_shape, out_dtype, "aot", reg_info=...)`` on Tensors, built by aotbench,
and the registration builder ``CustomRegOp`` / ``DataType`` (aotbench's own, same chain of methods)."""

from __future__ import annotations

from typing import Any

from ..call.reg import CustomRegOp, DataType, OpInfo
from ..custom import Custom as _build
from ..errors import ArgumentError
from ..measure.accuracy import to_host
from . import context
from .common import dtype as mstype
from .common.tensor import Tensor
from .init_once import InitOnce
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


def _pick_registration(reg_info: Any) -> OpInfo | None:
    """MindSpore takes one registration or a list of them (one per target): the one for the current target."""
    if not isinstance(reg_info, (list, tuple)):
        return reg_info
    target = context.device_target()
    for info in reg_info:
        if isinstance(info, OpInfo) and (info.target or "").upper() == target:
            return info
    targets = ", ".join(str(getattr(i, "target", None)) for i in reg_info)
    raise ArgumentError(f"reg_info lists registrations for targets {targets}; none is for the current "
                        f"device_target {target!r}")


class Custom:
    """MindSpore's ``ops.Custom`` for ``func_type="aot"``: the kernel is built (or found in the cache) here."""

    def __init__(self, func: Any, out_shape: Any = None, out_dtype: Any = None, func_type: str = "pyfunc",
                 bprop: Any = None, reg_info: Any = None):
        if func_type != "aot":
            raise missing(f"mindspore.ops.Custom(func_type={func_type!r})")
        # The target is the registration's, else the source's kind (.cu: gpu), as aotbench.Custom decides.
        self.op = _build(func, out_shape, _dtype_rule(out_dtype), "aot", reg_info=_pick_registration(reg_info))
        self.bprop = bprop
        self._init_once = InitOnce(self.op)

    def __call__(self, *args: Any) -> Any:
        values = []
        for i, a in enumerate(args):
            if isinstance(a, Tensor) and a.is_placeholder:
                raise ArgumentError(f"input {i} of {self.op.name} is a set_inputs placeholder, not data")
            values.append(a.asnumpy() if isinstance(a, Tensor) else a)
        result = self.op(*values)
        call = current_call.get()
        if call is not None:  # after the call: its plan holds the workspace sizes Init asked for
            n = len(args) - len(self.op.spec.call_attrs)
            self._init_once.observe([call.declared_shape(a) for a in args[:n]], tuple(values[:n]),
                                    tuple(values[n:]), context.mode())
        if isinstance(result, tuple):
            return tuple(Tensor._wrap(to_host(r)) for r in result)
        return Tensor._wrap(to_host(result))

    def __repr__(self) -> str:
        return f"Custom({self.op.name}, aot, built by aotbench)"


__getattr__ = module_getattr("mindspore.ops")

__all__ = ["Custom", "CustomRegOp", "DataType"]
