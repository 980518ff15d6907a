"""``mindspore.nn``: ``Cell``, whose ``construct`` is called with Tensors, and ``set_inputs`` for dynamic shapes.

A call checks its Tensors against the ``set_inputs`` placeholders (rank, known dims, dtype), as MindSpore does,
and, while ``construct`` runs, tells the ``Custom`` ops it calls which of their inputs are the net's dynamic
inputs (by identity), so that they can say how MindSpore's Init-once behaviour would differ
(:class:`~aotbench.DynamicShapeWarning`).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

from ..errors import ArgumentTypeError, ShapeError
from .common.tensor import UNKNOWN_RANK, Tensor
from .missing import module_getattr


@dataclass(frozen=True)
class DynamicCall:
    """A call of a net that has ``set_inputs``: its Tensors and the declared shapes (-1: unknown dim)."""

    tensors: tuple
    declared: tuple[tuple[int, ...], ...]

    def declared_shape(self, tensor: object) -> tuple[int, ...] | None:
        """The declared shape of ``tensor`` when it is one of the net's inputs, else None."""
        for given, shape in zip(self.tensors, self.declared):
            if given is tensor:
                return shape
        return None


current_call: contextvars.ContextVar[DynamicCall | None] = contextvars.ContextVar("aotbench_ms_call", default=None)


class Cell:
    """MindSpore's ``nn.Cell``: subclass it, create ops in ``__init__`` and call them in ``construct``."""

    def __init__(self, auto_prefix: bool = True, flags: Any = None):
        self._aotbench_inputs: tuple[Tensor, ...] | None = None

    def construct(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.construct is not defined: a Cell computes in construct")

    def set_inputs(self, *inputs: Tensor) -> None:
        """Declare the net's input shapes; ``None`` (-1) dims are dynamic, as in MindSpore."""
        for i, t in enumerate(inputs):
            if not isinstance(t, Tensor):
                raise ArgumentTypeError(
                    f"set_inputs: input {i} is {type(t).__name__}; give Tensor(shape=..., dtype=...)")
        self._aotbench_inputs = tuple(inputs)

    def set_train(self, mode: bool = True) -> Cell:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        declared = getattr(self, "_aotbench_inputs", None)
        if declared is None:
            return self.construct(*args, **kwargs)
        self._check_inputs(args, declared)
        token = current_call.set(DynamicCall(tuple(args), tuple(t.shape for t in declared)))
        try:
            return self.construct(*args, **kwargs)
        finally:
            current_call.reset(token)

    def _check_inputs(self, args: tuple, declared: tuple[Tensor, ...]) -> None:
        name = type(self).__name__
        if len(args) != len(declared):
            raise ArgumentTypeError(f"{name} was given {len(args)} inputs but set_inputs declared {len(declared)}")
        for i, (given, want) in enumerate(zip(args, declared)):
            if not isinstance(given, Tensor):
                continue
            if given.dtype is not want.dtype:
                raise ArgumentTypeError(f"{name} input {i} is {given.dtype}; set_inputs declared {want.dtype}")
            if want.shape == (UNKNOWN_RANK,):
                continue
            if len(given.shape) != len(want.shape) or any(w not in (-1, g) for g, w in zip(given.shape, want.shape)):
                raise ShapeError(f"{name} input {i} has shape {list(given.shape)}; set_inputs declared "
                                 f"{list(want.shape)} (-1: any size)")


__getattr__ = module_getattr("mindspore.nn")
