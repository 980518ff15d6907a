"""The stop button on an in-process kernel: the Python side of the native host's SIGINT handler.

A kernel runs on the calling thread with the GIL released, so an endless loop would keep Ctrl-C (and
JupyterLab's stop button, which sends SIGINT to the kernel process) waiting for ever. The host's own SIGINT
handler (``native/src/runtime.cc``) chains to Python's, which records the ``KeyboardInterrupt``; if the main thread is
inside a kernel call that has not returned :data:`GRACE_S` later, the host abandons it (a ``longjmp`` back into
the host) and the call raises :class:`~aotbench.errors.KernelInterrupted`.

ipykernel puts its own SIGINT handler in place at the start of every execute request, so the host's is installed
again from an IPython ``pre_run_cell`` callback (registered here when a host loads inside IPython), and on every
slow-path call (the first call of a signature). Outside IPython the handler installed when the host loaded stays
until the program calls ``signal.signal(SIGINT, ...)`` itself; the next first call of a signature installs it again.
"""

from __future__ import annotations

import os
import signal
import sys
import types
import weakref

from ..errors import KernelInterrupted

__all__ = ["GRACE_S", "PLANS", "KernelInterrupted", "abandoned", "is_retired", "keep", "real_stderr_fd",
           "retire_abandoned", "watch"]

#: How long a kernel call may take to return after SIGINT before it is abandoned.
GRACE_S = 0.5

_HOSTS: weakref.WeakSet = weakref.WeakSet()  # every loaded host: all of them reinstall on pre_run_cell
_IPYTHON_HOOKED: set[int] = set()  # ids of the IPython shells the callback is registered with


def real_stderr_fd() -> int:
    """Where a dying process's last words reach a person: fd 2, or inside ipykernel (whose fd 2 is a pipe read
    by a thread that dies with the process) the copy of the original stderr ipykernel kept; -1 when only fd 2."""
    fd = getattr(sys.stderr, "_original_stdstream_copy", None)  # ipykernel's OutStream (what its fileno() gives)
    return fd if isinstance(fd, int) and fd >= 0 and fd != 2 else -1


def _reinstall(*_args) -> None:
    for host in list(_HOSTS):
        host.install_signal_handlers()
        break  # the first host's handlers serve them all


def python_signal_handler(handler_of) -> int | None:
    """The address of Python's own C-level signal handler (the host replaces and chains to it alone), learnt by
    installing a Python handler on a real-time signal nobody uses, then putting SIG_DFL back; None when that
    cannot be asked here (not the main thread, or the signal is in use)."""
    probe = signal.SIGRTMAX
    try:
        if signal.getsignal(probe) not in (signal.SIG_DFL, None):
            return None
        signal.signal(probe, lambda *_: None)
    except (ValueError, OSError, AttributeError):  # not the main thread, or no real-time signals
        return None
    try:
        return handler_of(probe) or None
    finally:
        signal.signal(probe, signal.SIG_DFL)


def program_handles_sigint() -> bool:
    """True when SIGINT's Python handler is the program's own (not ``default_int_handler``, which raises
    KeyboardInterrupt, as ipykernel's cells and plain scripts have): the host then leaves SIGINT alone, so a
    handler that lets the kernel finish ("stop after this batch") never sees its call abandoned."""
    try:
        return signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    except (ValueError, TypeError):
        return True


def _reinstall_in_child() -> None:
    """A forked child has no watchdog thread (threads do not survive fork): start the handlers' again."""
    _reinstall()


os.register_at_fork(after_in_child=_reinstall_in_child)


def watch(host) -> None:
    """Keep ``host``'s handlers installed across IPython cells (when running inside IPython)."""
    _HOSTS.add(host)
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None) if ipython is not None else None
    shell = get() if get is not None else None
    if shell is None or id(shell) in _IPYTHON_HOOKED or not hasattr(shell, "events"):
        return
    shell.events.register("pre_run_cell", _reinstall)  # runs after ipykernel's pre_handler_hook
    _IPYTHON_HOOKED.add(id(shell))


def abandoned(function: str) -> KernelInterrupted:
    """The honest account of an abandoned call of ``function``."""
    return KernelInterrupted(
        f"{function} did not return within {GRACE_S:g} s of the interrupt, so its call was abandoned mid-run: "
        "its outputs were not returned and the memory it allocated is leaked; your variables are kept and the op "
        "stays usable (its next call prepares afresh). Not safe: if the kernel was stopped while holding a lock "
        "(inside malloc or new, printf or another stdio call, an OpenMP region, a mutex), this process may hang "
        "later; OpenMP worker threads of that call may keep running, and later OpenMP regions on this thread may "
        "run on one thread; save your work and restart the kernel when convenient. For a "
        "kernel that may loop, use isolate=True (Custom(..., isolate=True), %%aot_kernel --isolate): its worker "
        "process is ended instead.")


# What abandoned calls used, never freed: their plans (the kernel data may be inconsistent, so DestructKernelData
# must not run on it) and the tracebacks of their KeyboardInterrupts, whose frames hold the call's inputs, outputs
# and guarded buffers (an OpenMP worker of the call may still be writing into them).
RETIRED: list = []
_RETIRED_IDS: set[int] = set()


def retire_abandoned(host) -> bool:
    """If the host abandoned a call since this was last asked, keep that call's plan alive for ever without
    freeing its kernel data, and return True."""
    address = host.take_abandoned()
    if not address:
        return False
    plan = PLANS.pop(address, None)
    if plan is not None:
        plan.release.detach()
        RETIRED.append(plan)
        _RETIRED_IDS.add(id(plan))
    return True


def is_retired(plan) -> bool:
    """Whether ``plan`` served an abandoned call (an op drops such plans from its cache)."""
    return id(plan) in _RETIRED_IDS


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def keep(traceback) -> None:
    """Keep what an abandoned call used alive for ever: the locals of aotbench's own frames in its traceback (its
    inputs, outputs, guarded buffers), not the frames themselves, which would keep every caller's locals too."""
    while traceback is not None:
        frame = traceback.tb_frame
        if frame.f_code.co_filename.startswith(_PACKAGE):  # less exceptions and frames, which lead to the callers
            RETIRED.append({name: value for name, value in frame.f_locals.items()
                            if not isinstance(value, (BaseException, types.TracebackType, types.FrameType))})
        traceback = traceback.tb_next


#: Every plan the slow path made, by its call record's address (what the host names an abandoned call by).
PLANS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
