"""Crash isolation: an op whose calls run in a worker process (``Custom(..., isolate=True, timeout_s=...)``).

The parent keeps everything an :class:`~aotbench.op.Op` has (the library is loaded here too, for
``infer_shape``, ``plan_info``, ``check`` and ``with_attrs``); only ``__call__`` goes to the worker:

* the worker is ``python -m aotbench.run.worker_process``, started (``subprocess``, never a fork) on the first call and
  again after a crash. It loads the very library and native host the parent loaded (no compiler runs) and
  builds a plain ``Op`` from the op's ``OpSpec``; requests and replies are pickles on two pipes of their own, so
  what the kernel prints cannot corrupt them.
* arrays travel through one shared-memory arena owned by the parent (created, grown and always unlinked
  here; the worker only maps it): the parent copies the inputs in, the kernel writes its outputs straight into
  the arena, and the parent copies them out into fresh arrays. The worker plans the call (InferShape, Init) and
  answers "grow" when the arena is too small for the outputs; the arena only grows, so that happens rarely.
* a worker that dies (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, a stack overflow, ``exit``) gives
  :class:`~aotbench.errors.KernelCrashedError` with the signal, the kernel's native frames (the host's crash
  report, read by :mod:`aotbench.native_stack`) and what the kernel wrote to stderr (its stdout goes to this
  process's ``sys.stdout`` after every call, and before such an error: :mod:`aotbench.run.prints`); a call longer
  than ``timeout_s`` kills it and gives
  :class:`~aotbench.errors.KernelTimeoutError`; an interrupted call (Ctrl-C) kills it too and raises
  :class:`~aotbench.errors.IsolatedCallInterrupted` (a ``KeyboardInterrupt``). The next call starts
  a fresh worker. Errors the kernel reports normally (``KernelError``, ``AttrError`` ...) come back as the same
  class with the same message and fields.
"""

from __future__ import annotations

import pickle
import weakref
from dataclasses import replace
from typing import Any

from ..native.dtypes import dtype_string
from ..build import compile as build
from ..spec import rules
from ..run.guard import warn_findings
from ..errors import ArgumentError, KernelCrashedError
from .op import Op
from ..run import native_stack, sanitize
from ..run.channel import _Channel, rebuild_exception


class IsolatedOp(Op):
    """An :class:`~aotbench.op.Op` whose calls run in a worker process; a crash or hang there raises
    ``KernelCrashedError`` / ``KernelTimeoutError`` here and the next call starts a fresh worker.

    Everything else (``infer_shape``, ``plan_info``, ``check``, attributes, ``with_attrs``) runs in this process,
    as for an ``Op``.
    """

    def _install(self, library, artifact, source) -> None:
        super()._install(library, artifact, source)
        worker_library, env = self._sanitized_library(source)
        setup, self._concrete = self._worker_setup(worker_library)
        channel = getattr(self, "_channel", None)
        if channel is None:
            self._channel = _Channel(setup, env)
            self._channel_finalizer = weakref.finalize(self, self._channel.close)
        else:  # hot reload: the next call starts a worker on the new library
            channel.reset(setup, env)

    def _sanitized_library(self, source) -> tuple[str, dict | None]:
        """The library the worker runs, and its environment: with ``sanitize=``, a separate build of the same
        source with the sanitizer's flags, run with its runtime preloaded. This process keeps the plain build
        (for ``infer_shape`` and ``plan_info``): a sanitized library cannot be loaded here."""
        kind = self._spec.sanitize
        if kind is None:
            return str(self.library.path), None
        if source is None:
            raise ArgumentError("sanitize= needs a kernel source (.cc/.cpp/.cu) to rebuild; this op is a prebuilt "
                                "library")
        spec = self._spec
        artifact = build.build(source, flags=spec.flags + sanitize.flags(kind), cache_dir=spec.cache_dir,
                               arch=spec.arch)
        self.sanitized_artifact = artifact
        return str(artifact.path), sanitize.worker_env(kind)

    def _worker_setup(self, library: str) -> tuple[bytes, bool]:
        """The pickled setup message, and whether output rules must travel as concrete values (a lambda does
        not pickle: the parent then evaluates ``out_shape``/``out_dtype`` itself, per call)."""
        spec = replace(self._spec, isolate=False, timeout_s=None, sanitize=None)
        try:
            pickle.dumps((spec.out_shape, spec.out_dtype))
            concrete = False
        except Exception:  # noqa: BLE001 - whatever stops pickling (a lambda, a local class) means "concrete"
            spec = replace(spec, out_shape=None, out_dtype=None)
            concrete = True
        setup = {"spec": spec, "library": library, "name": self.library.name,
                 "host": str(self._host.path), "concrete": concrete}
        try:
            return pickle.dumps(setup, protocol=5), concrete
        except Exception as exc:
            raise ArgumentError(f"isolate=True needs a recipe that can be sent to a worker process: {exc}") from exc

    def __repr__(self) -> str:
        return super().__repr__().replace("<aotbench.Op ", "<aotbench.IsolatedOp ", 1)

    def __call__(self, *args: Any):
        spec = self._spec
        if self._export_next_call is not None:
            return self._exporting_call(lambda a: self(*a), args)
        if self._check_next_call:  # check mode runs here, exactly as Op's
            return Op._call_slow(self, args)
        arrays, extras = self._split(args)
        if extras:
            self._typed_call_attrs(extras)  # refuse a mistyped call attribute here, before any process is involved
        override = None
        if self._concrete:
            in_shapes = [tuple(int(d) for d in a.shape) for a in arrays]
            shapes = rules.output_shapes(spec.out_shape, in_shapes, spec.n_outputs)
            dtypes = rules.output_dtypes(spec.out_dtype, [a.dtype for a in arrays], spec.n_outputs, spec.reg_info,
                                         tuple(dtype_string(a.dtype) for a in arrays))
            override = (tuple(shapes), tuple(dtypes)) if spec.n_outputs > 1 else (shapes[0], dtypes[0])
        try:
            outs, findings = self._channel.call(self.name, arrays, tuple(extras), override, spec.timeout_s)
        except KernelCrashedError as crash:
            if spec.sanitize and ("Sanitizer" in crash.stderr or "runtime error:" in crash.stderr):
                raise sanitize.SanitizerError(crash, spec.sanitize, self._cell_sources()) from None
            raise self._with_kernel_frames(crash) from None
        if findings:  # what the worker's guarded first call of this signature found
            warn_findings(self.name, [tuple(a.shape) for a in arrays], findings)
        return tuple(outs) if spec.returns_tuple else outs[0]

    def _with_kernel_frames(self, crash: KernelCrashedError) -> KernelCrashedError:
        """The crash with the worker's native crash report turned into the kernel's frames (unchanged when the
        worker wrote none: it exited, or was killed by SIGKILL)."""
        report = native_stack.parse(crash.stderr, str(self._host.path))
        if not report.found:
            return crash
        sources, aliases = self._cell_sources(), {}
        if sources and self.source_path is not None:
            aliases = {self.source_path.name: next(iter(sources))}  # the cell's file: its lines are the cell's
        elif self.source_path is not None and self.source is not None:
            sources[self.source_path.name] = self.source
        frames = native_stack.describe(report.frames, sources, report.ending, aliases)
        hint = "" if any(" at " in f for f in frames) or not frames else (
            "(the library has no line information: build it with flags=['-g'] to see file and line)")
        return KernelCrashedError(crash.function, crash.signal, crash.exitcode, crash.stderr, frames,
                                  report.output, hint)

    def _cell_sources(self) -> dict[str, str]:
        """``{"<cell>": the cell's text}`` for a kernel written from a cell, so reports can show its lines."""
        from ..build.cells import CELL_LABEL

        text = self.source or ""
        header = f'#line 1 "{CELL_LABEL}"\n'
        return {CELL_LABEL: text[len(header):]} if text.startswith(header) else {}

    @property
    def worker_pid(self) -> int | None:
        """The running worker's process id (None before the first call and after a crash)."""
        worker = self._channel.worker
        return worker.proc.pid if worker is not None and worker.proc.poll() is None else None

    def close(self) -> None:
        """Release the plans, stop the worker and free the shared memory. The op stays usable."""
        super().close()
        self._channel.reset()


__all__ = ["IsolatedOp", "rebuild_exception"]
