"""Crash isolation: the runner of an op whose calls run in a worker process (``Custom(..., isolate=True,
timeout_s=...)``).

The parent keeps everything an :class:`~aotbench.op.op.Op` has (the library is loaded here too, for
``infer_shape``, ``plan_info``, ``check`` and ``with_attrs``); only calls go to the worker, through :class:`InWorker`:

* the worker is ``python -m aotbench.run.worker_process``, started (``subprocess``, never a fork) on the first call and
  again after a crash. It loads the very library and native runtime the parent loaded (no compiler runs) and
  builds a ``Kernel`` from the op's ``OpSpec``; requests and replies are pickles on two pipes of their own, so
  what the kernel prints cannot corrupt them.
* arrays travel through one shared-memory arena owned by the parent (created, grown and always unlinked
  here; the worker only maps it): the parent copies the inputs in (another library's arrays read as numpy
  arrays first, :mod:`aotbench.run.interop`, and the outputs handed back in that library), the kernel writes its outputs straight into
  the arena, and the parent copies them out into fresh arrays. The worker plans the call (InferShape, Init) and
  answers "grow" when the arena is too small for the outputs; the arena only grows, so that happens rarely.
* a worker that dies (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, a stack overflow, ``exit``) gives
  :class:`~aotbench.errors.KernelCrashedError` with the signal, the kernel's native frames (the host's crash
  report, read by :mod:`aotbench.run.native_stack`) and what the kernel wrote to stderr (its stdout goes to this
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
from pathlib import Path
from typing import Any

from ..build import compile as build
from ..build.cells import CELL_LABEL
from ..errors import ArgumentTypeError, ArgumentValueError, KernelCrashedError
from ..spec.pickling import portable_spec
from . import native_stack, sanitize
from .channel import _Channel
from .devices import CPU, Device
from .guard import warn_findings
from .kernel import Kernel
from .runner import Runner


class InWorker(Runner):
    """Calls in a worker process; a crash or hang there raises ``KernelCrashedError`` / ``KernelTimeoutError``
    here and the next call starts a fresh worker. ``sanitized_artifact``: the ``sanitize=`` build the worker runs."""

    name = "isolated-worker"

    def __init__(self) -> None:
        self._channel: _Channel | None = None
        self.sanitized_artifact = None
        self._device: Device = CPU

    @property
    def device(self) -> Device:
        """The cpu, or the CUDA emulator for an emulated gpu op (its kernels run on the worker's CPU)."""
        return self._device

    def start(self, kernel: Kernel) -> None:
        from .emulation import EMULATED, is_emulated

        self._device = EMULATED if is_emulated(kernel.library) else CPU
        worker_library, env = self._worker_library(kernel)
        setup = _worker_setup(kernel, worker_library)
        if self._channel is None:
            self._channel = _Channel(setup, env)
            weakref.finalize(self, self._channel.close)
        else:  # hot reload: the next call starts a worker on the new library
            self._channel.reset(setup, env)

    def _worker_library(self, kernel: Kernel) -> tuple[str, dict | None]:
        """The library the worker runs, and its environment: with ``sanitize=``, a separate build of the same
        source with the sanitizer's flags, run with its runtime preloaded. This process keeps the plain build
        (for ``infer_shape`` and ``plan_info``): a sanitized library cannot be loaded here."""
        spec = kernel.spec
        if spec.sanitize is None:
            return str(kernel.library.path), None
        if kernel.source is None:
            raise ArgumentValueError("sanitize= needs a kernel source (.cc/.cpp/.cu) to rebuild; this op is a prebuilt "
                                "library")
        artifact = build.build(kernel.source, flags=spec.flags + sanitize.flags(spec.sanitize),
                               cache_dir=spec.cache_dir, arch=spec.arch, emulate=bool(kernel.library.emulator))
        self.sanitized_artifact = artifact
        return str(artifact.path), sanitize.worker_env(spec.sanitize)

    @property
    def worker_pid(self) -> int | None:
        """The running worker's process id (None before the first call and after a crash)."""
        worker = self._channel.worker if self._channel is not None else None
        return worker.proc.pid if worker is not None and worker.proc.poll() is None else None

    def call(self, kernel: Kernel, args: tuple) -> Any:
        spec = kernel.spec
        arrays, extras, caller = kernel.host_call(args)  # numpy arrays sent; caller: the outputs' library
        if extras:
            kernel.call_attrs(extras)  # refuse a mistyped call attribute here, before any process is involved
        try:
            outs, findings = self._channel.call(kernel.name, arrays, tuple(extras), spec.timeout_s)
        except KernelCrashedError as crash:
            if spec.sanitize and ("Sanitizer" in crash.stderr or "runtime error:" in crash.stderr):
                raise sanitize.sanitizer_error(crash, spec.sanitize, _cell_sources(kernel)) from None
            raise _with_kernel_frames(kernel, crash) from None
        if findings:  # what the worker's guarded first call of this signature found
            warn_findings(kernel.name, [tuple(a.shape) for a in arrays], findings)
        result = tuple(outs) if spec.returns_tuple else outs[0]
        return result if caller is None else caller.wrap(result)  # another library's inputs: its outputs too

    def profile(self, kernel: Kernel, args: tuple, *, seconds: float, interval_ns: int, min_samples: int):
        """``op.profile`` in the worker: one ordinary call, then :func:`aotbench.run.profiling.sample` there (the
        addresses are the worker's); the RawProfile comes back with the reply."""
        from .profiling import MAX_SECONDS_FACTOR, check_seconds

        check_seconds(seconds)
        arrays, extras = kernel.host_arrays(args)
        if extras:
            kernel.call_attrs(extras)
        timeout = kernel.spec.timeout_s
        if timeout is not None:  # the calls' limit, plus the sampling's own time
            timeout += seconds * MAX_SECONDS_FACTOR + 30
        options = {"seconds": seconds, "interval_ns": interval_ns, "min_samples": min_samples}
        try:
            outs, findings, raw = self._channel.call(kernel.name, arrays, tuple(extras), timeout, profile=options)
        except KernelCrashedError as crash:
            raise _with_kernel_frames(kernel, crash) from None
        if findings:
            warn_findings(kernel.name, [tuple(a.shape) for a in arrays], findings)
        return raw

    def close(self) -> None:
        """Stop the worker and free the shared memory (the next call starts a new one)."""
        if self._channel is not None:
            self._channel.reset()


def _worker_setup(kernel: Kernel, library: str) -> bytes:
    """The pickled setup message; its output rules are carried as every recipe leaving the process is
    (:func:`aotbench.spec.pickling.portable_spec`: a lambda travels as cloudpickle bytes)."""
    spec = portable_spec(replace(kernel.spec, isolate=False, timeout_s=None, sanitize=None),
                         f"isolate=True's recipe of {kernel.name}")
    setup = {"spec": spec, "library": library, "name": kernel.name, "host": str(kernel.runtime.path)}
    try:
        return pickle.dumps(setup, protocol=5)
    except Exception as exc:
        raise ArgumentTypeError(f"isolate=True needs a recipe that can be sent to a worker process: {exc}") from exc


def _with_kernel_frames(kernel: Kernel, crash: KernelCrashedError) -> KernelCrashedError:
    """The crash with the worker's native crash report turned into the kernel's frames (unchanged when the
    worker wrote none: it exited, or was killed by SIGKILL)."""
    report = native_stack.parse(crash.stderr, str(kernel.runtime.path))
    if not report.found:
        return crash
    sources, aliases = _cell_sources(kernel), {}
    source_path: Path | None = kernel.source
    text = kernel.artifact.source if kernel.artifact else None
    if sources and source_path is not None:
        aliases = {source_path.name: next(iter(sources))}  # the cell's file: its lines are the cell's
    elif source_path is not None and text is not None:
        sources[source_path.name] = text
    frames = native_stack.describe(report.frames, sources, report.ending, aliases)
    hint = "" if any(" at " in f for f in frames) or not frames else (
        "(the library has no line information: build it with flags=['-g'] to see file and line)")
    return KernelCrashedError(crash.function, crash.signal, crash.exitcode, crash.stderr, frames,
                              report.output, hint)


def _cell_sources(kernel: Kernel) -> dict[str, str]:
    """``{"<cell>": the cell's text}`` for a kernel written from a cell, so reports can show its lines."""
    text = (kernel.artifact.source if kernel.artifact else None) or ""
    header = f'#line 1 "{CELL_LABEL}"\n'
    return {CELL_LABEL: text[len(header):]} if text.startswith(header) else {}


__all__ = ["InWorker"]
