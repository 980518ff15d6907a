"""The worker process of an isolated op: ``python -m aotbench.run.worker_process REQUEST_FD REPLY_FD``.

It reads one setup message (the op's recipe, the library and host paths the parent loaded), answers
``("ready", pid)``, then serves calls until the request pipe closes: inputs are read from the parent's
shared-memory arena, the kernel writes its outputs straight into the arena, and the reply says where they are
(or ``("grow", bytes)`` when they do not fit, or ``("error", ...)`` with the exception to re-raise). A crash
kills only this process; the native host's crash report writes the native stack to stderr first, which the
parent turns into the kernel's frames (:mod:`aotbench.run.native_stack`). A sanitized worker leaves fatal signals
to the sanitizer, whose report says more.
"""

from __future__ import annotations

import mmap
import os
import pickle
import signal
import sys
import warnings
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

from ..errors import ArenaTooSmall, ContractViolation
from .calls import retry
from .guard import GuardReport, run_guarded
from .kernel import Kernel, contiguous
from .plan import Plan, fill_values, signature_key

ALIGN = 64


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _error_reply(exc: BaseException) -> bytes:
    cls = type(exc)
    state = {}
    for key, value in getattr(exc, "__dict__", {}).items():
        try:
            pickle.dumps(value)
        except Exception:  # noqa: BLE001 - any field that does not pickle travels as its repr
            value = repr(value)
        state[key] = value
    try:
        args = tuple(exc.args)
        pickle.dumps(args)
    except Exception:  # noqa: BLE001 - args that do not pickle travel as the message
        args = (str(exc),)
    return pickle.dumps(("error", ("error", cls.__module__, cls.__qualname__, args, state)), protocol=5)


class Server:
    """The build this worker serves (its plans kept as in the parent) and the mapped arena."""

    def __init__(self, spec, library: str, name: str, host: str):
        from ..native.loading import load
        from ..native.runtime import Runtime
        from ..spec.pickling import restored_spec

        runtime = Runtime(Path(host))
        runtime.set_abort_report(False)  # the parent reports a crash (KernelCrashedError), not the runtime
        if spec.sanitize is None:  # before the kernel's library is loaded: its constructors may crash too
            runtime.lib.aotb_install_crash_report(sys.stderr.fileno())
        with warnings.catch_warnings():  # the parent has said it already (a fast-math library, say)
            warnings.simplefilter("ignore")
            library = load(Path(library), name)
        self.kernel = Kernel(restored_spec(spec), library, runtime)
        if library.emulator:
            from .emulation import configure

            configure(library)
        self.arena_name: str | None = None
        self.arena: mmap.mmap | None = None

    def _release(self) -> None:
        """Unmap the arena (its pages are freed once the parent, which unlinked it, has unmapped it too)."""
        old, self.arena, self.arena_name = self.arena, None, None
        if old is not None:
            try:
                old.close()
            except BufferError:
                pass

    def _attach(self, name: str, size: int) -> mmap.mmap:
        if name != self.arena_name:
            import _posixshmem  # what multiprocessing.shared_memory uses; mapping it directly registers nothing
                                # with a resource tracker (which would unlink the parent's arena when we exit)

            self._release()
            fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
            try:
                self.arena = mmap.mmap(fd, size)
            finally:
                os.close(fd)
            self.arena_name = name
        return self.arena  # type: ignore[return-value]

    def call(self, request: bytes) -> bytes:
        """One request: a call whose outputs the kernel writes into the arena (through the build's plan cache,
        as in the parent: the first call of a signature guarded), or "release"."""
        message = pickle.loads(request)
        if message == "release":  # the parent is about to replace the arena: let go of the old one's pages first
            self._release()
            return pickle.dumps(("released", None), protocol=5)
        name, size, metas, extras, out_start, *rest = message
        profile_options = rest[0] if rest else None  # op.profile: after this call, sample repeated ones
        mm = self._attach(name, size)
        kernel = self.kernel
        inputs = tuple(np.ndarray(shape, dtype, buffer=mm, offset=off) for off, shape, dtype in metas)
        arrays, extras = kernel.host_arrays(inputs + tuple(extras))
        call_attrs = kernel.call_attrs(extras)
        findings: list[str] = []

        def outputs_in_arena(plan: Plan) -> tuple[list, tuple]:
            layout, at = [], out_start
            for shape, dtype in plan.outputs:
                dtype = np.dtype(dtype)
                layout.append((at, shape, dtype))
                at = _align(at + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
            if at > size:
                raise ArenaTooSmall(at)
            return layout, tuple(np.ndarray(shape, dtype, buffer=mm, offset=off) for off, shape, dtype in layout)

        def run(plan: Plan) -> list:
            layout, outs = outputs_in_arena(plan)
            for out, value in zip(outs, plan.fill or ()):
                out.fill(value)
            code = plan.runtime.call_buffers(plan.address, arrays, outs)
            if code:
                retry(code, plan, arrays, outs)  # converts what the buffer protocol refused, or raises
            return layout

        def first(plan: Plan) -> list:  # as in the parent: guarded, and kept only if in bounds
            layout, outs = outputs_in_arena(plan)
            guarded = run_guarded(plan, tuple(contiguous(a, i) for i, a in enumerate(arrays)))
            if guarded.violations:
                raise ContractViolation(kernel.name, GuardReport(guarded.violations, guarded.findings,
                                                                 guarded.buffers), guarded=True)
            for out, result in zip(outs, guarded.outputs):
                np.copyto(out, result)
            findings.extend(guarded.findings)
            plan.fill = fill_values(plan.outputs, guarded.buffers)  # outputs left unwritten: filled from now on
            return layout

        try:
            layout = kernel.plans.call(signature_key(arrays, call_attrs), lambda: kernel.plan(arrays, call_attrs),
                                       run, first if kernel.spec.guard else None)
        except ArenaTooSmall as grow:
            return pickle.dumps(("grow", grow.size), protocol=5)
        finally:
            if kernel.library.emulator:  # what the emulator noted belongs to this call
                from .emulation import take_report

                code, message = take_report(kernel.library)
        if kernel.library.emulator and code:
            from .emulation import raise_report_from

            raise_report_from(kernel.name, code, message)
        if profile_options is not None:
            from .profiling import sample

            key = signature_key(arrays, call_attrs)
            raw = sample(kernel.runtime, lambda: kernel.plans.call(key, lambda: kernel.plan(arrays, call_attrs), run,
                                                                   None), **profile_options)
            return pickle.dumps(("ok", (layout, findings, raw)), protocol=5)
        return pickle.dumps(("ok", (layout, findings)), protocol=5)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when a call is abandoned
    from . import prints

    prints.use_worker_stdout()  # fd 1 is a file the parent shows on its sys.stdout after each call
    requests = Connection(int(argv[1]), writable=False)
    replies = Connection(int(argv[2]), readable=False)
    try:
        server = Server(**pickle.loads(requests.recv_bytes()))
    except EOFError:
        return 0
    except Exception as exc:  # noqa: BLE001 - every failure is the parent's to raise
        replies.send_bytes(_error_reply(exc))
        return 1
    replies.send_bytes(pickle.dumps(("ready", os.getpid()), protocol=5))
    while True:
        try:
            request = requests.recv_bytes()
        except EOFError:  # the parent closed the op, or died
            return 0
        try:
            reply = server.call(request)
        except Exception as exc:  # noqa: BLE001 - every failure is the parent's to raise, as the same class
            reply = _error_reply(exc)
        prints.flush()  # what the kernel printed is in the file before the parent reads it
        replies.send_bytes(reply)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
