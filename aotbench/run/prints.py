"""What a kernel prints: its stdout shown on ``sys.stdout``, in order with the caller's own prints, once per call.

A kernel writes to file descriptor 1 through libc (``printf``, ``std::cout``), which in a notebook is ipykernel's
pipe, read by a thread of its own: the text arrived after the cell's later ``print`` output, or not before the
next flush when it had no newline. So a call of a library that can write output
(:func:`aotbench.native.elf.output_symbols`, decided once per library: ``KernelLibrary.prints``, copied to each
``Plan.prints``) runs inside :func:`shown`: libc's buffers are flushed, fd 1 points at a memory file for the
call, is flushed and restored after it, and what was written goes to ``sys.stdout`` (ipykernel's stream in a
notebook), where the caller's prints go. Only fd 1 is taken:
stderr stays where it was, so a crash report or an ``abort()`` message still reaches the terminal.

fd 1 belongs to the whole process, so captures hold one lock: calls of printing kernels in several threads run
one at a time, and what another thread writes to fd 1 during a capture is shown with it. :func:`discarded`
sends a call's output nowhere (the guarded first call's confirming second run: the user's kernel printed
already). In an isolated op's worker (:func:`use_worker_stdout`) the worker's fd 1 is already a file the parent
reads after each call, so :func:`shown` only flushes.
"""

from __future__ import annotations

import ctypes
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.RLock()  # fd 1 is process-wide
_local = threading.local()  # .depth: how many shown() blocks this thread is inside
_capture: dict = {}  # "fd": the memory file a capture writes into (made once per process), "file": its owner
_worker = False  # True in an isolated op's worker: fd 1 is the parent's file already
_IOLBF = 1


def _libc() -> ctypes.CDLL:
    lib = _capture.get("libc")
    if lib is None:
        lib = _capture["libc"] = ctypes.CDLL(None)
        lib.fflush.argtypes = [ctypes.c_void_p]
        lib.fflush.restype = ctypes.c_int
    return lib


def flush() -> None:
    """Write out what libc's streams hold (``printf`` output without a newline sits in stdout's buffer;
    ``std::cout`` writes through it)."""
    _libc().fflush(None)


def needs_capture() -> bool:
    """Whether a call made now must be wrapped in :func:`shown` (not already inside one on this thread, and not
    in a worker, whose output its parent reads)."""
    return not _worker and not getattr(_local, "depth", 0)


def _memory_file() -> int:
    fd = _capture.get("fd")
    if fd is None:
        try:
            fd = os.memfd_create("aotbench-prints", os.MFD_CLOEXEC)
        except (AttributeError, OSError):  # no memfd: an unlinked temporary file does the same
            handle = _capture["file"] = tempfile.TemporaryFile()  # noqa: SIM115 - kept for the process's life
            fd = handle.fileno()
        _capture["fd"] = fd
    return fd


@contextmanager
def shown(active: bool = True) -> Iterator[None]:
    """Capture what is written to fd 1 while the block runs and write it to ``sys.stdout`` afterwards (also when
    the block raises). Nested blocks on one thread share the outermost capture; ``active=False`` does nothing."""
    if not active or not needs_capture():  # (a worker flushes after each call: see run.worker_process)
        yield
        return
    with _lock:
        flush()  # what C code printed before the call goes where it was going
        saved = _dup_stdout()
        if saved < 0:  # no fd 1 to take (closed): nothing to show
            yield
            return
        fd = _memory_file()
        try:
            _capture["saved"] = saved  # the real fd 1, for a child forked meanwhile (_after_fork_in_child)
            os.dup2(fd, 1)
            _local.depth = 1
            yield
        finally:
            _local.depth = 0
            _capture.pop("saved", None)
            _restore(saved)
            size = os.lseek(fd, 0, os.SEEK_END)
            data = os.pread(fd, size, 0) if size else b""
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            show(data)


@contextmanager
def discarded(active: bool = True) -> Iterator[None]:
    """Send what is written to fd 1 while the block runs nowhere (``active=False``: do nothing)."""
    if not active:
        yield
        return
    with _lock:
        flush()  # the output before the block (the first run's) is kept
        saved = _dup_stdout()
        if saved < 0:
            yield
            return
        try:
            _capture["saved"] = saved
            null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.dup2(null, 1)
            finally:
                os.close(null)
            yield
        finally:
            _capture.pop("saved", None)
            _restore(saved)


def _dup_stdout() -> int:
    """A copy of fd 1 to restore it from, or -1 when there is no fd 1."""
    try:
        return os.dup(1)
    except OSError:
        return -1


def _restore(saved: int) -> None:
    """Flush libc's buffers into whatever fd 1 is now, then put ``saved`` back as fd 1."""
    try:
        flush()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def show(data: bytes) -> None:
    """Write a kernel's output bytes to ``sys.stdout`` as text (UTF-8, undecodable bytes replaced)."""
    if not data:
        return
    stream = sys.stdout
    if stream is None:  # no Python stream (pythonw): the bytes go where they were going
        os.write(1, data)
        return
    text = data.decode("utf-8", "replace")
    try:
        stream.write(text)
    except UnicodeEncodeError:
        encoding = getattr(stream, "encoding", None) or "ascii"
        stream.write(text.encode(encoding, "replace").decode(encoding))


def use_worker_stdout() -> None:
    """In an isolated op's worker: fd 1 is a file the parent shows after each call, so :func:`shown` only
    flushes; libc's stdout is made line-buffered, so whole lines printed before a crash reach the parent too."""
    global _worker
    _worker = True
    libc = _libc()
    try:
        stdout = ctypes.c_void_p.in_dll(libc, "stdout")
        libc.setvbuf.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t]
        libc.setvbuf(stdout, None, _IOLBF, 0)
    except (AttributeError, ValueError):  # pragma: no cover - a libc without a stdout symbol: fully buffered
        pass


def _after_fork_in_child() -> None:
    """The memory file's offset is shared with the parent after fork: the child makes its own."""
    global _lock
    _lock = threading.RLock()
    saved = _capture.pop("saved", None)
    if saved is not None:  # forked while another thread's call had fd 1: give the child its real stdout back
        try:
            os.dup2(saved, 1)
            os.close(saved)
        except OSError:
            pass
    _capture.pop("fd", None)
    _capture.pop("file", None)


os.register_at_fork(after_in_child=_after_fork_in_child)

__all__ = ["discarded", "flush", "needs_capture", "show", "shown", "use_worker_stdout"]
