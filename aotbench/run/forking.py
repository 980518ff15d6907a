"""OpenMP after ``os.fork()``: refuse the call that would hang.

GNU OpenMP (libgomp) keeps a pool of worker threads from its first parallel region on; ``fork()`` copies only the
calling thread, so in the child the pool's threads are gone while libgomp still counts on them, and the child's
first parallel region waits for them for ever. An op whose library depends on libgomp (``DT_NEEDED``, or libgomp
came in with it: ``KernelLibrary.openmp``, decided when it is loaded) marks the process when its first plan is made (every run of a kernel goes through one); in a
child forked after that, such an op raises :class:`~aotbench.errors.ForkedOpenMPError` instead of hanging. Ops
without OpenMP are not affected, nor is the fast path: the child drops the OpenMP ops' plans (see ``run/kernel.py``), so
their next call comes here.
"""

from __future__ import annotations

from pathlib import Path

from ..native.loading import KernelLibrary
from ..errors import ForkedOpenMPError

_ran = False  # an OpenMP op was prepared to run in this process
_forked_after_openmp = False  # this process is a fork of one where an OpenMP op had run


def uses_libgomp(lib: KernelLibrary) -> bool:
    """Whether ``lib`` uses GNU OpenMP's runtime: its ``DT_NEEDED`` names ``libgomp``, or its loading brought
    libgomp into the process (through a library of its own); decided when it was loaded."""
    return lib.openmp


def before_run(lib: KernelLibrary) -> None:
    """Called before a plan of ``lib`` is made: remember that OpenMP ran here, or refuse in a child forked
    after it did."""
    global _ran
    if not uses_libgomp(lib):
        return
    if _forked_after_openmp:
        raise ForkedOpenMPError(
            f"{lib.name} uses OpenMP (its library {Path(lib.path).name} depends on libgomp), and this process was "
            "made by os.fork() after its parent had run an OpenMP op: libgomp's thread pool does not survive a "
            "fork, so this call would hang for ever. Start child processes with multiprocessing's 'spawn' or "
            "'forkserver' start method (multiprocessing.get_context('spawn')), or make the op with isolate=True "
            "(its calls run in a fresh worker process), or make the first OpenMP call only after forking.")
    _ran = True


def after_fork_in_child() -> bool:
    """Run in a forked child: whether the parent had run an OpenMP op (its OpenMP ops are then refused)."""
    global _forked_after_openmp
    _forked_after_openmp = _forked_after_openmp or _ran
    return _forked_after_openmp


__all__ = ["after_fork_in_child", "before_run", "uses_libgomp"]
