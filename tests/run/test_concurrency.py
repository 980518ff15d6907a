"""Threads and fork: concurrent calls of one op never share scratch memory, and an op keeps working (and gives
right answers) in both processes after ``os.fork()``, isolated or not.

``tests/support/kernels/trust_scratch.cc``'s ``Scratch`` copies its input into its workspace, sleeps so that other calls
run meanwhile, and computes its output from the workspace: a call whose workspace another call wrote returns
wrong numbers.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
from pathlib import Path

import numpy as np
import pytest

import aotbench

pytestmark = pytest.mark.slow

SCRATCH = Path(__file__).resolve().parents[1] / "support" / "kernels" / "trust_scratch.cc"
THREADS = 8
CALLS = 200


def scratch_op(sleep_us: int = 200, **options):
    return aotbench.Custom(f"{SCRATCH}:Scratch", lambda s: s, np.float32, attrs={"sleep_us": sleep_us}, **options)


def hammer(op, shape, calls: int, noncontiguous: bool = False) -> list[int]:
    """Wrong elements per call, for ``calls`` calls of ``op`` on fresh random inputs of one shape."""
    rng = np.random.default_rng()
    wrong = []
    for _ in range(calls):
        x = rng.standard_normal((shape[0], 2 * shape[1]) if noncontiguous else shape).astype(np.float32)
        if noncontiguous:
            x = x[:, ::2]  # the buffer protocol refuses it: the converting path, on workspaces of its own
        wrong.append(int(np.count_nonzero(op(x) != 3 * x)))
    return wrong


def run_threads(target, count: int) -> list:
    results: list = [None] * count
    errors: list = []
    barrier = threading.Barrier(count)

    def body(k):
        try:
            barrier.wait()
            results[k] = target(k)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    return results


def test_eight_threads_on_one_signature_get_their_own_workspaces():
    op = scratch_op()
    shape = (40, 10)
    assert hammer(op, shape, 1) == [0]  # planned (and guarded) once, single-threaded
    wrong = run_threads(lambda k: hammer(op, shape, CALLS // THREADS * 2), THREADS)
    assert sum(map(sum, wrong)) == 0, f"{sum(w > 0 for ws in wrong for w in ws)} calls returned wrong elements"
    plan = next(iter(op._plans.values()))
    assert len(plan._spares) <= THREADS  # the pool grows to the calls that ran at once, no further


def test_threads_mixing_the_fast_and_the_converting_path_do_not_interfere():
    op = scratch_op(100)
    shape = (16, 12)
    hammer(op, shape, 1)
    wrong = run_threads(lambda k: hammer(op, shape, 20, noncontiguous=k % 2 == 1), 6)
    assert sum(map(sum, wrong)) == 0


def test_the_fast_path_is_kept_when_no_other_call_runs():
    """A single thread never leaves the plan's own workspaces: no spare set is ever allocated."""
    op = scratch_op(0)
    hammer(op, (5, 7), 30)
    plan = next(iter(op._plans.values()))
    assert plan._spares == []
    assert plan.record.busy == 0  # released after every call


def test_close_while_other_threads_call_the_op():
    op = scratch_op(30)
    shape = (9, 4)
    hammer(op, shape, 1)
    stop = threading.Event()

    def closer():
        while not stop.is_set():
            op.close()  # every plan dropped: the next calls plan (and guard) again

    t = threading.Thread(target=closer)
    t.start()
    try:
        wrong = run_threads(lambda k: hammer(op, shape, 15), 4)
    finally:
        stop.set()
        t.join()
    assert sum(map(sum, wrong)) == 0


# -- fork ---------------------------------------------------------------------------------------------------
def _child_report(op, shape, calls: int) -> dict:
    wrong = hammer(op, shape, calls)
    return {"wrong": sum(wrong), "calls": len(wrong), "worker": getattr(op, "worker_pid", None)}


def _fork_and_call(op, shape, calls: int = 25) -> tuple[dict, list[int]]:
    """Fork; the child calls ``op`` ``calls`` times and reports through a pipe while the parent calls it too."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 0
        try:
            payload = _child_report(op, shape, calls)
        except BaseException as exc:  # noqa: BLE001 - sent to the parent
            payload, code = {"error": f"{type(exc).__name__}: {exc}"}, 1
        os.write(w, json.dumps(payload).encode())
        os._exit(code)
    os.close(w)
    parent_wrong = hammer(op, shape, calls)
    with os.fdopen(r, "rb") as pipe:
        child = json.loads(pipe.read() or b'{"error": "no report"}')
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), f"the child died: status {status}"
    return child, parent_wrong


@pytest.mark.parametrize("isolate", [False, True])
def test_an_op_used_after_fork_is_right_in_both_processes(isolate):
    op = scratch_op(50, isolate=isolate)
    shape = (8, 9)
    assert hammer(op, shape, 3) == [0, 0, 0]
    parent_worker = getattr(op, "worker_pid", None)
    child, parent_wrong = _fork_and_call(op, shape)
    assert "error" not in child, child["error"]
    assert child["calls"] == 25 and child["wrong"] == 0
    assert sum(parent_wrong) == 0
    if isolate:
        assert child["worker"] is not None and child["worker"] != parent_worker  # a worker of its own
        assert op.worker_pid == parent_worker  # the parent's worker was left alone
    np.testing.assert_array_equal(op(np.arange(72, dtype=np.float32).reshape(shape)),
                                  3 * np.arange(72, dtype=np.float32).reshape(shape))


_POOL_OP = None


def _pool_task(seed: int) -> tuple[int, int]:
    x = np.random.default_rng(seed).standard_normal((6, 7)).astype(np.float32)
    return os.getpid(), int(np.count_nonzero(_POOL_OP(x) != 3 * x))


@pytest.mark.parametrize("isolate", [False, True])
def test_multiprocessing_fork_pool_workers_compute_right(isolate):
    global _POOL_OP
    _POOL_OP = scratch_op(20, isolate=isolate)
    x = np.random.default_rng().standard_normal((6, 7)).astype(np.float32)
    np.testing.assert_array_equal(_POOL_OP(x), 3 * x)  # the parent's worker (if isolated) exists before the fork
    seeds = list(np.random.default_rng().integers(0, 2**31, size=12))
    try:
        with multiprocessing.get_context("fork").Pool(2) as pool:
            results = pool.map(_pool_task, seeds)
        assert all(wrong == 0 for _, wrong in results), results
        assert {pid for pid, _ in results} - {os.getpid()}  # really ran in the children
        np.testing.assert_array_equal(_POOL_OP(x), 3 * x)  # and the parent still works
    finally:
        _POOL_OP = None


def test_a_lock_held_by_another_thread_at_fork_is_free_in_the_child():
    op = scratch_op(0)
    op._lock.acquire()  # as a thread inside with_attrs/close/_remember_plan would hold it
    try:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            ok = op._lock.acquire(timeout=5)
            os.write(w, b"1" if ok else b"0")
            os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as pipe:
            assert pipe.read() == b"1"
        os.waitpid(pid, 0)
    finally:
        op._lock.release()


POOL = """
import multiprocessing as mp, os, sys, numpy as np, aotbench
op = aotbench.Custom(sys.argv[1] + ":Scratch", lambda s: s, np.float32, attrs={"sleep_us": 0}, isolate=True)

def work(n):
    x = np.arange(n, dtype=np.float32)
    return os.getpid(), bool(np.array_equal(op(x), 3 * x))

if __name__ == "__main__":
    pids = set()
    for _ in range(3):
        with mp.get_context("fork").Pool(2) as pool:
            results = pool.map(work, [1 << 18] * 4)
        assert all(ok for _, ok in results), results
        pids |= {pid for pid, _ in results}
    print(" ".join(map(str, sorted(pids))))
"""


def test_multiprocessing_fork_workers_leave_no_shared_memory_behind(tmp_path, session_cache):
    """Pool workers (fork) that used an isolated op exit without atexit; their arenas must still be freed."""
    import subprocess
    import sys

    script = tmp_path / "pool.py"
    script.write_text(POOL)
    env = dict(os.environ, PYTHONPATH=str(SCRATCH.parents[2]), AOTBENCH_CACHE_DIR=str(session_cache))
    proc = subprocess.run([sys.executable, str(script), str(SCRATCH)], capture_output=True, text=True, env=env,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    children = proc.stdout.split()
    assert len(children) >= 2
    left = [p.name for p in Path("/dev/shm").glob("aotb_*") if p.name.split("_")[1] in children]
    assert left == [], left
    assert "leaked shared_memory" not in proc.stderr, proc.stderr[-2000:]
