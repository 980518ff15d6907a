"""The recipe of an op: everything needed to make it again (``with_attrs``, pickling, hot reload)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..native.attrs import TypedAttr
from ..errors import ArgumentTypeError
from .registration import OpInfo


@dataclass(frozen=True)
class OpSpec:
    """Everything needed to make the op again (``with_attrs``, pickling): the recipe, not the build."""

    func: str
    out_shape: Any = None
    out_dtype: Any = None
    reg_info: OpInfo | None = None
    attrs: tuple[TypedAttr, ...] = ()
    target: str = "cpu"
    flags: tuple[str, ...] = ()
    cache_dir: Path | None = None
    n_outputs: int = 1
    call_attrs: tuple[str, ...] = field(default=())
    arch: str | int | None = None  # CUDA architecture override (gpu target)
    isolate: bool = False  # run calls in a worker process (aotbench.run.worker)
    timeout_s: float | None = None  # isolated calls only: kill the worker after this many seconds
    sanitize: str | None = None  # "address" or "undefined": the worker runs a sanitizer build (implies isolate)
    guard: bool = True  # the first call of every new input signature runs on guarded buffers (aotbench.run.guard)
    emulate: bool | None = None  # gpu ops: True runs on aotbench's CUDA emulator, False needs a GPU, None either
    tuple_result: bool = False  # out_shape/out_dtype given as tuples: a call returns a tuple even for one output

    @property
    def returns_tuple(self) -> bool:
        """Whether a call returns a tuple of outputs (several outputs, or the tuple forms MindSpore returns as
        tuples even for one: ``out_shape=((4, 5),)``, ``out_dtype=(float32,)``) rather than one array."""
        return self.n_outputs > 1 or self.tuple_result


def parse_flags(flags: Any) -> tuple[str, ...]:
    """Compiler flags as a tuple: None is none, a string is split as a shell would."""
    if flags is None:
        return ()
    if isinstance(flags, str):
        return tuple(shlex.split(flags))
    if isinstance(flags, (list, tuple)) and all(isinstance(f, str) for f in flags):
        return tuple(flags)
    raise ArgumentTypeError(f"flags must be a list of strings such as ['-O3'], got {flags!r}")
