"""The worker process of an isolated op: ``python -m aotbench.run.worker_process REQUEST_FD REPLY_FD``.

It reads one setup message (the op's recipe, the library and host paths the parent loaded), answers
``("ready", pid)``, then serves calls until the request pipe closes: inputs are read from the parent's
shared-memory arena, the kernel writes its outputs straight into the arena, and the reply says where they are
(or ``("grow", bytes)`` when they do not fit, or ``("error", ...)`` with the exception to re-raise). A crash
kills only this process; the native host's crash report writes the native stack to stderr first, which the
parent turns into the kernel's frames (:mod:`aotbench.native_stack`). A sanitized worker leaves fatal signals
to the sanitizer, whose report says more.
"""

from __future__ import annotations

import mmap
import os
import pickle
import signal
import sys
import warnings
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

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
    """The ops this worker serves (one per concrete output rule; usually just one) and the mapped arena."""

    def __init__(self, spec, library: str, name: str, host: str, concrete: bool):
        from ..native.runtime import Runtime
        from ..native.loading import load
        from ..op.op import Op

        self._Op = Op
        self.spec = spec
        self.host = Runtime(Path(host))
        self.host.set_abort_report(False)  # the parent reports a crash (KernelCrashedError), not the host
        if spec.sanitize is None:  # before the kernel's library is loaded: its constructors may crash too
            self.host.lib.aotb_install_crash_report(sys.stderr.fileno())
        with warnings.catch_warnings():  # the parent has said it already (a fast-math library, say)
            warnings.simplefilter("ignore")
            self.library = load(Path(library), name)
        self.concrete = concrete
        self.ops: dict = {}
        if not concrete:
            self.ops[None] = Op(spec, self.library, self.host)
        self.arena_name: str | None = None
        self.arena: mmap.mmap | None = None

    def _op(self, override):
        op = self.ops.get(override)
        if op is None:
            shape, dtype = override
            op = self.ops[override] = self._Op(replace(self.spec, out_shape=shape, out_dtype=dtype), self.library,
                                               self.host)
            if len(self.ops) > 64:
                del self.ops[next(iter(self.ops))]
        return op

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
        from .guard import GuardReport, run_guarded
        from .plan import fill_values, make_plan
        from ..errors import ContractViolation
        from ..op.op import MAX_PLANS

        message = pickle.loads(request)
        if message == "release":  # the parent is about to replace the arena: let go of the old one's pages first
            self._release()
            return pickle.dumps(("released", None), protocol=5)
        name, size, metas, extras, override, out_start = message
        mm = self._attach(name, size)
        op = self._op(override)
        inputs = tuple(np.ndarray(shape, dtype, buffer=mm, offset=off) for off, shape, dtype in metas)
        arrays, extras = op._split(inputs + tuple(extras))
        call_attrs = op._typed_call_attrs(extras)
        key = tuple([(a.shape, a.dtype) for a in arrays])  # as Op._call_slow keys its plans
        if call_attrs:
            key += tuple((t.kind, repr(t.value)) for t in call_attrs)
        plan = op._plans.get(key)
        first = plan is None
        if first:
            plan = make_plan(op.spec, op._host, op.library, arrays, op._attr_list + call_attrs)
        layout, at = [], out_start
        for shape, dtype in plan.outputs:
            dtype = np.dtype(dtype)
            layout.append((at, shape, dtype))
            at = _align(at + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
        if at > size:
            return pickle.dumps(("grow", at), protocol=5)
        outs = tuple(np.ndarray(shape, dtype, buffer=mm, offset=off) for off, shape, dtype in layout)
        findings: list[str] = []
        if first and op.spec.guard:  # as Op's first call of a signature: guarded, and kept only if in bounds
            run = run_guarded(op, plan, tuple(op._contiguous(a, i) for i, a in enumerate(arrays)))
            if run.violations:
                raise ContractViolation(op.name, GuardReport(run.violations, run.findings, run.buffers),
                                        guarded=True)
            for out, guarded in zip(outs, run.outputs):
                np.copyto(out, guarded)
            findings = run.findings
            plan.fill = fill_values(plan.outputs, run.buffers)  # outputs left unwritten: filled from now on
        else:
            for out, value in zip(outs, plan.fill or ()):
                out.fill(value)
            code = op._host.call_buffers(plan.address, arrays, outs)
            if code:
                op._retry(code, plan, arrays, outs)  # converts what the buffer protocol refused, or raises
        if first:
            if len(op._plans) >= MAX_PLANS:
                del op._plans[next(iter(op._plans))]
            op._plans[key] = plan
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
