"""Warns (DynamicShapeWarning) where MindSpore's Init-once behaviour would give a kernel a workspace it does not fit.

For a net with dynamic inputs (``Cell.set_inputs``) MindSpore 2.10 calls the kernel's ``Init`` once: in graph
mode with -1 for the unknown dims, in PyNative mode with the first call's shapes, and keeps that workspace for
every later shape (measured: a 4x9 call got the 80 bytes a 4x5 call asked for; in graph mode a wrapped -1 size
left the workspace overlapping the output). aotbench runs ``Init`` for every concrete signature, so its
workspaces always fit; this module compares the two and warns (:class:`~aotbench.DynamicShapeWarning`).

To know what graph mode would give, it calls ``Init`` once more, in this process, with the -1 dims (after the
net's first call, whose result is already computed): a kernel that keeps state in globals sees that call, and one
whose ``Init`` crashes on -1 dims crashes here as it would in MindSpore's graph mode (``isolate=True`` does not
cover it; ``op.check(..., dynamic=...)`` is the same pass, on its own).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from ..run.plan import signature_key
from .._userframe import user_stacklevel
from ..errors import DynamicShapeWarning
from ..tools.check import ABSURD_WORKSPACE, graph_mode_workspaces
from .context import GRAPH_MODE

if TYPE_CHECKING:
    from ..op.op import Op

MODE_NAMES = {GRAPH_MODE: "graph", 1: "PyNative"}


def _shapes_text(shapes) -> str:
    return ", ".join(str(tuple(s)) for s in shapes)


class DynamicShapeCheck:
    """Follows one op's calls from dynamic nets: what MindSpore's single Init gave, per mode and declaration."""

    def __init__(self, op: Op):
        self._op = op
        self._first: dict[tuple, tuple[list[int], str] | None] = {}
        self._seen: set[tuple] = set()

    def observe(self, declared: list[tuple[int, ...] | None], arrays: tuple, extras: tuple, mode: int) -> None:
        """Compare this call's workspaces with what MindSpore would have given (once per new signature).

        ``declared`` has, per input, its ``set_inputs`` shape (-1 unknown dim, ``(-2,)`` unknown rank) or None
        when the input is not one of the net's declared inputs."""
        if not any(d is not None and (-1 in d or d == (-2,)) for d in declared):
            return
        key = (mode, tuple(declared))
        signature = (key, tuple((a.shape, a.dtype.str) for a in arrays), tuple(repr(e) for e in extras))
        if signature in self._seen:
            return
        self._seen.add(signature)
        op = self._op
        needed, outputs = self._planned(arrays, extras)
        shapes = _shapes_text(a.shape for a in arrays)
        if key not in self._first:
            self._first[key] = self._first_init(declared, arrays, extras, outputs, needed, shapes, mode)
            if mode != GRAPH_MODE:
                return
        first = self._first[key]
        if first is None:
            return
        given, when = first
        for j, (need, got) in enumerate(zip(needed, given)):
            if need > got:
                self._warn(f"{op.name}Init asks for {need} bytes for workspace {j} with inputs {shapes}, but "
                           f"MindSpore's {MODE_NAMES[mode]} mode runs Init once for a net with dynamic inputs "
                           f"({when}) and would give it {got} bytes: the kernel would write past its workspace "
                           "there. aotbench ran Init for these shapes, so its workspace fits them.")

    def _first_init(self, declared, arrays, extras, outputs, needed, shapes, mode):
        """(workspace sizes, when Init ran) for MindSpore's one Init, or None when it cannot be compared."""
        op = self._op
        if mode != GRAPH_MODE:
            return needed, f"at the first call's inputs {shapes}"
        dynamic = [tuple(a.shape) if d is None else (None if d == (-2,) else tuple(None if x == -1 else x for x in d))
                   for d, a in zip(declared, arrays)]
        attrs = op.kernel.all_attrs(extras)
        sizes, failure = graph_mode_workspaces(op, dynamic, arrays, attrs, outputs)
        if failure is not None:
            self._warn(failure)
            return None
        absurd = [(j, size) for j, size in enumerate(sizes) if size >= ABSURD_WORKSPACE]
        for j, size in absurd:
            self._warn(f"with -1 dims, as MindSpore's graph mode calls it once for a net with dynamic inputs "
                       f"({_shapes_text(declared_or(d, a) for d, a in zip(declared, arrays))}), {op.name}Init "
                       f"asks for {size} bytes for workspace {j}: this kernel would misbehave in MindSpore's graph "
                       "mode (MindSpore 2.10 then lets the workspace overlap other buffers). Compute workspace "
                       "sizes only from known dims, or guard against -1. aotbench ran Init for the concrete "
                       "shapes, so its workspace fits them.")
        return None if absurd else (sizes, "with -1 dims")

    def _planned(self, arrays: tuple, extras: tuple) -> tuple[list[int], list]:
        """(workspace sizes Init asked for, outputs) of the call just made with these arguments: from the plan the
        op kept for it, so Init does not run again; else (an isolated or gpu op) from a new plan."""
        op = self._op
        plan = op.kernel.plans.find(signature_key(arrays, op.kernel.call_attrs(extras)))
        if plan is not None:
            return [requested for requested, _ in plan.workspaces], plan.outputs
        info = op.plan_info(*arrays, *extras)
        return [w["requested"] for w in info["workspaces"]], info["outputs"]

    @staticmethod
    def _warn(message: str) -> None:
        warnings.warn(message, DynamicShapeWarning, stacklevel=user_stacklevel())


def declared_or(declared: tuple[int, ...] | None, array) -> tuple[int, ...]:
    return tuple(array.shape) if declared is None else declared
