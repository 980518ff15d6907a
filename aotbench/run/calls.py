"""The ctypes calls of a kernel on a plan in this process: the fast call (outputs allocated, then one ctypes call),
what follows a call that did not run (workspaces busy, an argument the buffer protocol refused), and the call on
raw pointers that guarded calls and device calls use.

Everything here works on a :class:`~aotbench.run.plan.Plan`, which knows its runtime and library: the op's fast
path is ``Op.__call__`` -> :func:`invoke` -> ``Runtime.call_buffers``.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ..native.runtime import BAD_BUFFER, BUSY
from . import prints
from .interop import aligned_empty
from .kernel import contiguous
from .plan import Plan


def invoke(plan: Plan, arrays: tuple) -> Any:
    """Allocate the outputs and call the kernel: one ctypes call on the fast path."""
    if plan.prints and prints.needs_capture():  # a library that can print: its stdout shown in order
        with prints.shown():
            return invoke(plan, arrays)
    if plan.single:
        out = np.empty(plan.shape0, plan.dtype0)
        code = plan.runtime.call_buffers(plan.address, arrays, (out,))
        if not code:
            return out
        outs: tuple = (out,)
    else:
        outs = tuple([np.empty(s, d) for s, d in plan.outputs])
        code = plan.runtime.call_buffers(plan.address, arrays, outs)
        if not code:
            return outs
    return retry(code, plan, arrays, outs)


def invoke_filled(plan: Plan, arrays: tuple, alignment: int = 1) -> Any:
    """A call of a signature whose guarded first call found unwritten outputs: the outputs are filled with
    ``plan.fill`` (NaN for floats, see :func:`aotbench.run.plan.fill_value`) before the kernel runs, so what it
    leaves unwritten never shows reused memory. Such plans are kept off the fast path's key. With ``alignment``
    the outputs' data start at a multiple of that many bytes (what JAX needs to take them without a copy)."""
    if plan.fill is None and alignment == 1:
        return invoke(plan, arrays)
    if plan.prints and prints.needs_capture():
        with prints.shown():
            return invoke_filled(plan, arrays, alignment)
    outs = tuple([aligned_empty(s, d, alignment) for s, d in plan.outputs])
    if plan.fill is not None:
        for out, value in zip(outs, plan.fill):
            out.fill(value)
    code = plan.runtime.call_buffers(plan.address, arrays, outs)
    if code:
        return retry(code, plan, arrays, outs)
    return outs[0] if plan.single else outs


def retry(code: int, plan: Plan, arrays: tuple, outs: tuple) -> Any:
    """After a fast call that did not run F: another call held the plan's workspaces (run on a set of this
    call's own), or the buffer protocol refused an argument (convert it); or raise the kernel's error. A
    kernel that changed the floating-point or signal state (restored by the runtime) is warned about."""
    runtime, name, path = plan.runtime, plan.library.name, plan.library.path
    code = runtime.note_changes(code, name, path)
    if code == BUSY:
        code = runtime.note_changes(call_own_workspaces(plan, arrays, outs), name, path)
    if code == BAD_BUFFER:  # read-only inputs are copied: the kernel must not crash on or write through them
        arrays = tuple(contiguous(a, i, writable=True) for i, a in enumerate(arrays))
        code = runtime.note_changes(call_own_workspaces(plan, arrays, outs), name, path)
        if code == BAD_BUFFER:  # e.g. dtypes numpy cannot export as buffers
            code = call_pointers(plan, [a.ctypes.data for a in arrays + outs])
    if code:
        runtime.raise_for(code, name, 0, plan.attrs, path)
    return outs[0] if plan.single else outs


def call_own_workspaces(plan: Plan, arrays: tuple, outs: tuple) -> int:
    """The buffer call on a workspace set checked out for this call alone; the outcome code."""
    workspaces = plan.checkout()
    try:
        return plan.runtime.call_buffers_with(plan.address, arrays, outs, workspaces.address)
    finally:
        plan.checkin(workspaces)


def call_pointers(plan: Plan, pointers: list[int], stream: int | None = None) -> int:
    """Slow but universal: F on raw data pointers (inputs, outputs, then the workspaces — given, as check
    mode's guarded ones, or else checked out for this call) on ``stream``; the outcome code."""
    workspaces = plan.checkout() if len(pointers) < plan.record.nparam else None
    if workspaces is not None:
        pointers = [*pointers, *workspaces.pointers]
    params = (ctypes.c_void_p * max(len(pointers), 1))(*pointers)
    try:
        return plan.runtime.call_params(plan.address, params, stream)
    finally:
        if workspaces is not None:
            plan.checkin(workspaces)


def raise_for(plan: Plan, code: int) -> None:
    """Raise the error outcome ``code`` of a call on ``plan`` stands for (nothing for 0)."""
    if code:
        plan.runtime.raise_for(code, plan.library.name, 0, plan.attrs, plan.library.path)


__all__ = ["call_own_workspaces", "call_pointers", "invoke", "invoke_filled", "raise_for", "retry"]
