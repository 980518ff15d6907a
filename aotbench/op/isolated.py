"""An op whose calls run in a worker process (``Custom(..., isolate=True, timeout_s=...)``): an
:class:`~aotbench.op.op.Op` with the :class:`~aotbench.run.worker.InWorker` runner (see :mod:`aotbench.run.worker`
for what runs where, and what a crash, a hang or Ctrl-C gives)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..native.loading import KernelLibrary
from ..native.runtime import Runtime
from ..run.channel import rebuild_exception
from ..run.worker import InWorker
from ..spec.spec import OpSpec
from .op import Op


class IsolatedOp(Op):
    """An :class:`~aotbench.op.op.Op` whose calls run in a worker process; a crash or hang there raises
    ``KernelCrashedError`` / ``KernelTimeoutError`` here and the next call starts a fresh worker.

    Everything else (``infer_shape``, ``plan_info``, ``check``, attributes, ``with_attrs``) runs in this process,
    as for an ``Op``.
    """

    def __init__(self, spec: OpSpec, library: KernelLibrary, runtime: Runtime, artifact: Any = None,
                 source: Path | None = None, runner: InWorker | None = None):
        super().__init__(spec, library, runtime, artifact, source, runner or InWorker())

    @property
    def worker_pid(self) -> int | None:
        """The running worker's process id (None before the first call and after a crash)."""
        return self.runner.worker_pid

    @property
    def sanitized_artifact(self):
        """The ``sanitize=`` build the worker runs (None without ``sanitize=``)."""
        return self.runner.sanitized_artifact


__all__ = ["IsolatedOp", "rebuild_exception"]
