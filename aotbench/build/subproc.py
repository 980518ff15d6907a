"""Running a compiler so that an interrupt ends all of it.

``g++`` and ``nvcc`` are drivers: the work is done by their children (``cc1plus``, ``as``, ``ld``, ``cicc``,
``ptxas``). Killing only the driver, as ``subprocess`` does, leaves those running for seconds with parent pid 1,
still writing into the cache's ``tmp/``. So each compiler runs in a process group of its own, and any exception
while it runs (``KeyboardInterrupt`` from the notebook's stop button or Ctrl-C included) ends the whole group:
SIGTERM, then SIGKILL, then a wait, before the exception goes on and the caller removes its temporary files.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable

TERM_GRACE_S = 0.5  # how long the group has to exit after SIGTERM before SIGKILL


def run(argv: list[str], during: Callable[[], None] | None = None, **popen) -> subprocess.CompletedProcess:
    """``subprocess.run`` of a compiler (output and errors together, as text) in its own process group, calling
    ``during`` while it runs; what ``during`` or the wait raises ends the group first."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                          stdin=subprocess.DEVNULL, start_new_session=True, **popen) as proc:
        try:
            try:
                if during is not None:
                    during()
            finally:
                out, _ = proc.communicate()  # it finishes either way: nothing writes into tmp/ after we return
        except BaseException:
            end_group(proc)
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out)


def end_group(proc: subprocess.Popen) -> None:
    """End every process of ``proc``'s group (SIGTERM, then SIGKILL after a grace period) and reap ``proc``."""
    pgid = proc.pid  # start_new_session made it the leader of a group of the same number
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + TERM_GRACE_S
    while time.monotonic() < deadline and _group_alive(pgid, proc):
        time.sleep(0.01)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    deadline = time.monotonic() + 2.0  # the driver's children die with SIGKILL; let the kernel finish them
    while time.monotonic() < deadline and _group_alive(pgid, proc):
        time.sleep(0.01)


def _group_alive(pgid: int, proc: subprocess.Popen) -> bool:
    """True while some process of the group still runs (the driver, once exited, is reaped here)."""
    proc.poll()
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return _has_live_member(pgid)


def _has_live_member(pgid: int) -> bool:
    """Whether ``/proc`` shows a member of the group that is not a zombie (True when ``/proc`` is unreadable)."""
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return True
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":  # state, ppid, pgrp
            return True
    return False
