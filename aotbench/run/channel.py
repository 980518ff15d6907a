"""The worker process and the shared-memory arena behind an isolated op (:mod:`aotbench.op.isolated`).

:class:`_Channel` owns both: it starts the worker lazily, sends pickled requests over a pipe, grows the arena
(only after the worker unmapped the old one; every arena's pages reserved with ``posix_fallocate``; its name
removed from /dev/shm as soon as the worker has mapped it), turns a dead or silent worker into
``KernelCrashedError`` / ``KernelTimeoutError``, and after ``os.fork()`` lets the child start its own worker.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import itertools
import multiprocessing.util
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import weakref
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path
from typing import Any

import numpy as np

from . import memory, prints
from ..errors import IsolatedCallInterrupted, IsolationMemoryError, KernelCrashedError, KernelTimeoutError

ALIGN = 64
MIN_ARENA = 1 << 16
ARENA_STEP = 64 << 20
START_TIMEOUT_S = 120.0  # importing numpy and aotbench in a fresh interpreter, on a loaded machine
SHM_PREFIX = "aotb_"
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder aotbench is imported from
_names = itertools.count()
_CHANNELS: weakref.WeakSet = weakref.WeakSet()  # every live channel, for the fork handler below


def _forget_channels_after_fork() -> None:
    for channel in list(_CHANNELS):
        channel.forget_after_fork()
    _close_channels_at_exit()


def _close_channels_at_exit(_: object = None) -> None:
    """Stop this process's workers and free its arenas when it exits: a multiprocessing worker exits through
    os._exit after running multiprocessing's finalizers (never atexit), so the cleanup is one of those."""
    multiprocessing.util.Finalize(None, _close_all_channels, exitpriority=10)


os.register_at_fork(after_in_child=_forget_channels_after_fork)
# multiprocessing's child bootstrap clears the finalizers a fork handler registered, then runs these:
_AFTER_FORK_KEY = type("_AfterForkKey", (), {})()
multiprocessing.util.register_after_fork(_AFTER_FORK_KEY, _close_channels_at_exit)


def _arena_size(need: int) -> int:
    """Bytes for an arena that must hold ``need``: a power of two up to 64 MiB (few regrowths for small calls),
    then whole 64 MiB steps (the slack is reserved memory, so it stays bounded)."""
    if need <= ARENA_STEP:
        size = MIN_ARENA
        while size < need:
            size *= 2
        return size
    return -(-need // ARENA_STEP) * ARENA_STEP


def _reserved_arena(need: int) -> SharedMemory:
    """A new shared-memory arena of at least ``need`` bytes whose pages are all reserved (``posix_fallocate``).

    Shared memory is sparse: without the reservation a /dev/shm that filled up meanwhile (Docker's is 64 MiB)
    lets the first process to touch a missing page die of SIGBUS. Refused with IsolationMemoryError when even
    ``need`` bytes cannot be reserved.
    """
    for size in dict.fromkeys([_arena_size(need), need]):
        arena = SharedMemory(name=arena_name(), create=True, size=max(size, 1))
        try:
            fd = getattr(arena, "_fd", -1)
            if fd >= 0:
                os.posix_fallocate(fd, 0, arena.size)
            return arena
        except OSError as exc:
            arena.close()
            arena.unlink()
            if exc.errno not in (errno.ENOSPC, errno.ENOMEM):
                raise
    try:
        st = os.statvfs("/dev/shm")
        free = f"has only {memory.size_text(st.f_bavail * st.f_frsize)} free"
    except OSError:
        free = "cannot hold it"
    raise IsolationMemoryError(
        f"an isolated call passes its inputs and outputs through shared memory, and this one needs "
        f"{memory.size_text(need)} but /dev/shm {free}. Use smaller inputs, free or enlarge /dev/shm (Docker: "
        "--shm-size=4g), or call the op without isolate=True.")


def _close_all_channels() -> None:
    """At the exit of a forked child (a multiprocessing worker exits without atexit): stop its workers and free
    its arenas."""
    for channel in list(_CHANNELS):
        with contextlib.suppress(Exception):  # exiting: there is nobody left to report to
            channel.reset()


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def arena_name() -> str:
    """A fresh shared-memory name, recognisable as this process's (``aotb_<pid>_<n>``)."""
    return f"{SHM_PREFIX}{os.getpid()}_{next(_names)}"


def rebuild_exception(kind: str, module: str, qualname: str, args: tuple, state: dict) -> BaseException:
    """The exception the worker raised, as the same class with the same args and fields (builtins or aotbench)."""
    cls = None
    if module == "builtins" or module == "aotbench" or module.startswith("aotbench."):
        try:
            cls = getattr(importlib.import_module(module), qualname)
        except (ImportError, AttributeError):
            cls = None
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        return RuntimeError(f"{module}.{qualname} in the isolated worker: {args[0] if args else ''}")
    exc = cls.__new__(cls, *args)
    exc.args = args
    exc.__dict__.update(state)
    return exc


class _Worker:
    """One worker process, its request and reply pipes, and the files its stderr (``log``) and stdout (``out``,
    shown on this process's sys.stdout after each call: what the kernel printed) go to."""

    def __init__(self, setup: bytes, env_extra: dict | None = None):
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - open as long as the worker lives (closed in close)
        self.out = tempfile.TemporaryFile()  # noqa: SIM115 - the same
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        env.pop("PYTHONSTARTUP", None)
        env.update(env_extra or {})  # e.g. a sanitizer runtime to preload
        try:
            # A session of its own: the terminal's Ctrl-C reaches only the parent, which then kills the worker.
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "aotbench.run.worker_process", str(req_r), str(rep_w)], pass_fds=(req_r, rep_w),
                stdin=subprocess.DEVNULL, stdout=self.out, stderr=self.log, env=env, start_new_session=True)
        except BaseException:
            for fd in (req_r, req_w, rep_r, rep_w):
                os.close(fd)
            self.log.close()
            self.out.close()
            raise
        os.close(req_r)
        os.close(rep_w)
        self.requests = Connection(req_w, readable=False)
        self.replies = Connection(rep_r, writable=False)
        self.forwarded = 0  # bytes of the log already shown
        self.requests.send_bytes(setup)

    def log_size(self) -> int:
        return os.fstat(self.log.fileno()).st_size

    def log_text(self, start: int = 0) -> str:
        size = self.log_size()
        return os.pread(self.log.fileno(), max(size - start, 0), start).decode("utf-8", "replace")

    def kill(self) -> int | None:
        """Kill the process (if still running) and wait for it; its exit status (negative: the signal)."""
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not fail on Linux
            code = None
        for conn in (self.requests, self.replies):
            conn.close()
        return code

    def show_stdout(self) -> None:
        """Write what the worker printed to stdout since the last time to this process's sys.stdout (the worker
        flushes after each call; :mod:`aotbench.run.prints`), and empty the file: the worker is between calls
        (or dead), and the file's offset, shared with it, goes back to 0 too."""
        fd = self.out.fileno()
        size = os.fstat(fd).st_size
        if size:
            data = os.pread(fd, size, 0)
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            prints.show(data)

    def close(self) -> None:
        self.kill()
        with contextlib.suppress(ValueError, OSError):  # at exit sys.stdout may be closed already
            self.show_stdout()  # what it printed before it crashed, timed out or was interrupted
        self.log.close()
        self.out.close()

    def abandon(self) -> None:
        """In a forked child: close this process's copies of the pipes and log, leave the process alone."""
        for conn in (self.requests, self.replies):
            conn.close()
        self.log.close()
        self.out.close()
        self.proc.returncode = 0  # not our child: Popen must never wait for or signal it from here


class _Channel:
    """What an isolated op's calls go through: the (lazily started) worker and the shared-memory arena.

    Held apart from the op so that ``weakref.finalize`` can release both when the op dies. After ``os.fork()``
    the child's copy forgets both (they are the parent's: its pipes and arena must not be shared) and starts a
    worker of its own on its next call.
    """

    def __init__(self, setup: bytes, env: dict | None = None):
        self.setup = setup
        self.env = env
        self.worker: _Worker | None = None
        self.arena: SharedMemory | None = None
        self._unlinked: str | None = None  # the arena name already removed from /dev/shm (see _unlink_attached)
        self.lock = threading.Lock()
        _CHANNELS.add(self)

    def forget_after_fork(self) -> None:
        """In a forked child: drop the parent's worker and arena without touching them, and take a fresh lock."""
        self.lock = threading.Lock()
        worker, self.worker = self.worker, None
        arena, self.arena = self.arena, None
        if worker is not None:
            worker.abandon()
        if arena is not None:
            try:
                arena.close()  # only this process's mapping; the name stays the parent's to unlink
            except BufferError:
                pass

    def reset(self, setup: bytes | None = None, env: dict | None = None) -> None:
        """Stop the worker (the next call starts one) and free the arena."""
        with self.lock:
            if setup is not None:
                self.setup = setup
                self.env = env
            self._drop_worker()
            self._drop_arena()

    close = reset

    def _drop_worker(self) -> None:
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.close()

    def _drop_worker_despite_ctrl_c(self) -> None:
        """Kill and reap the worker even when Ctrl-C is pressed again meanwhile (a second press must leave no
        live worker and no half-closed one)."""
        worker, self.worker = self.worker, None
        while worker is not None:
            try:
                worker.close()
                return
            except KeyboardInterrupt:
                continue

    def _drop_arena(self) -> None:
        arena, self.arena = self.arena, None
        if arena is not None:
            if self._unlinked != arena.name:
                try:
                    arena.unlink()  # first: a view still alive somewhere must not keep the name in /dev/shm
                except FileNotFoundError:
                    pass
            try:
                arena.close()
            except BufferError:
                pass  # a view is still exported; the mapping goes when it does

    def _ensure_arena(self, worker: _Worker, function: str, need: int) -> SharedMemory:
        """An arena of at least ``need`` bytes. Replacing a smaller one, the worker first unmaps it, so that its
        pages are free before the new arena is written (a small /dev/shm must not hold both)."""
        arena = self.arena
        if arena is None or arena.size < need:
            if arena is not None:
                kind, _ = self._roundtrip(worker, pickle.dumps("release", protocol=5), function, START_TIMEOUT_S)
                if kind != "released":  # pragma: no cover - the worker answers nothing else to "release"
                    raise KernelCrashedError(function, None, None, f"the worker answered {kind!r} to release")
            self._drop_arena()
            self.arena = arena = _reserved_arena(need)
        return arena

    def _unlink_attached(self, arena: SharedMemory) -> None:
        """Remove the arena's name once the worker has mapped it: the memory stays while either process maps it
        and is freed by the kernel when both are gone, so no name is left in /dev/shm even if this process is
        killed (a multiprocessing pool's terminate() sends SIGTERM to its workers)."""
        if self._unlinked != arena.name:
            with contextlib.suppress(FileNotFoundError):
                arena.unlink()
            self._unlinked = arena.name

    def _ensure_worker(self, function: str) -> _Worker:
        worker = self.worker
        if worker is None:
            if self.arena is not None and self._unlinked == self.arena.name:
                self._drop_arena()  # a new worker cannot map an arena by a name that is gone: make another
            worker = self.worker = _Worker(self.setup, self.env)
            kind, payload = self._receive(worker, function, START_TIMEOUT_S, starting=True)
            if kind == "error":
                self._drop_worker()
                raise rebuild_exception(*payload) from None
        return worker

    def call(self, function: str, arrays: tuple, extras: tuple, timeout_s: float | None,
             profile: dict | None = None):
        """One call in the worker: (outputs, findings), and with ``profile`` (run.profiling.sample's options) the
        worker samples repeated calls afterwards: (outputs, findings, RawProfile)."""
        with self.lock:
            worker = self._ensure_worker(function)
            metas, at = [], 0
            for a in arrays:
                metas.append((at, a.shape, a.dtype))
                at = _align(at + a.nbytes)
            out_start = at
            arena = self._ensure_arena(worker, function, max(at, 1))
            copied = None
            while True:
                if copied is not arena:  # a fresh arena: copy the inputs (again)
                    buf = arena.buf
                    for (off, shape, dtype), a in zip(metas, arrays):
                        np.copyto(np.ndarray(shape, dtype, buffer=buf, offset=off), a, casting="no")
                    del buf
                    copied = arena
                message = (arena.name, arena.size, metas, extras, out_start)
                request = pickle.dumps(message if profile is None else (*message, profile), protocol=5)
                try:
                    kind, payload = self._roundtrip(worker, request, function, timeout_s)
                finally:  # mapped by the worker, or useless to the next one: the name can go either way
                    self._unlink_attached(arena)
                if kind == "grow":
                    arena = self._ensure_arena(worker, function, payload)
                    continue
                break
            self._forward_output(worker)
            if kind == "error":
                raise rebuild_exception(*payload) from None
            layout, findings, *raw = payload
            buf = arena.buf
            try:
                outs = [np.ndarray(shape, dtype, buffer=buf, offset=off).copy() for off, shape, dtype in layout]
            finally:
                del buf
        return (outs, findings, *raw)

    def _roundtrip(self, worker: _Worker, request: bytes, function: str, timeout_s: float | None):
        try:
            worker.requests.send_bytes(request)
        except OSError:  # BrokenPipeError: it died before (or while) reading the request
            return self._receive(worker, function, timeout_s)
        return self._receive(worker, function, timeout_s)

    def _receive(self, worker: _Worker, function: str, timeout_s: float | None, starting: bool = False):
        start = worker.forwarded
        try:
            ready = timeout_s is None or worker.replies.poll(timeout_s)
            data = worker.replies.recv_bytes() if ready else None
        except (EOFError, OSError):
            code = worker.kill()
            text = worker.log_text(start)
            self._drop_worker()
            sig = None
            if code is not None and code < 0:
                try:
                    sig = signal.Signals(-code).name
                except ValueError:
                    sig = f"signal {-code}"
            raise KernelCrashedError(function, sig, None if sig else code, text) from None
        except KeyboardInterrupt:  # Ctrl-C while waiting: the reply can no longer be matched to a call
            self._drop_worker_despite_ctrl_c()  # killed and reaped
            raise IsolatedCallInterrupted(function) from None  # one message, not multiprocessing's frames
        except BaseException:
            self._drop_worker()
            raise
        if data is None:  # timed out: kill it
            worker.kill()
            text = worker.log_text(start)
            self._drop_worker()
            if starting:
                raise KernelCrashedError(function, None, None, f"the worker did not start within {timeout_s:g} s\n"
                                         + text)
            raise KernelTimeoutError(function, timeout_s, text)  # type: ignore[arg-type]
        return pickle.loads(data)

    @staticmethod
    def _forward_output(worker: _Worker) -> None:
        """Show what the worker printed since the last call (the kernel's own prints): its stdout on this
        process's sys.stdout, its stderr on sys.stderr."""
        worker.show_stdout()
        size = worker.log_size()
        if size > worker.forwarded:
            text = worker.log_text(worker.forwarded)
            worker.forwarded = size
            sys.stderr.write(text)


__all__ = ["SHM_PREFIX", "arena_name", "rebuild_exception"]
