"""Crash isolation (``Custom(..., isolate=True, timeout_s=...)``, ``%%aot_kernel --isolate``): real worker
processes, real signals from real kernels built by the real g++ (``tests/support/kernels/iso_modes.cc``).

Every crash must leave this process untouched, name the signal, and be followed by a correct call; results
and errors must be those of the same op in-process; no shared-memory block may outlive its op.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench import CustomRegOp, Op
from aotbench.errors import (
    AotbenchError,
    ArgumentError,
    AttrError,
    KernelCrashedError,
    KernelError,
    KernelTimeoutError,
)
from aotbench.op.isolated import IsolatedOp

KERNELS = Path(__file__).resolve().parents[1] / "support" / "kernels"
SRC = KERNELS / "iso_modes.cc"
FUNC = f"{SRC}:IsoFault"
PARENT_PID = os.getpid()


def reg(alpha: float | None = 0.5):
    r = CustomRegOp("IsoFault").input(0, "x").input(0, "y").output(0, "sum").output(0, "prod")
    if alpha is not None:
        r = r.attr("alpha", "required", "float", value=alpha)
    return r.attr("mode", "required", "str").target("CPU").get_op_info()


def shm_blocks() -> list[str]:
    """This process's shared-memory names in /dev/shm (arenas are aotb_<pid>_<n>; a name is removed as soon as
    the worker has mapped it, so none should be left between calls)."""
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"aotb_{os.getpid()}_"))


def mapped_arenas() -> set[str]:
    """The arenas this process still maps (their names gone from /dev/shm, the memory alive while mapped)."""
    with open("/proc/self/maps") as fh:
        return {line.split("/dev/shm/")[1].split()[0] for line in fh if f"/dev/shm/aotb_{os.getpid()}_" in line}


def expected(x, y, alpha=0.5):
    return x + np.float32(alpha) * y, x * y


def rand(rng, *shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def assert_correct(op, rng, shape=(37,), alpha=0.5):
    x, y = rand(rng, *shape), rand(rng, *shape)
    s, p = op(x, y, "ok")
    ws, wp = expected(x, y, alpha)
    np.testing.assert_allclose(s, ws, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(p, wp, rtol=1e-6, atol=1e-6)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def iso():
    op = aotbench.Custom(FUNC, None, None, reg_info=reg(), isolate=True, timeout_s=30.0)
    yield op
    op.close()


@pytest.fixture(scope="module")
def inproc():
    return aotbench.Custom(FUNC, None, None, reg_info=reg())


# -- crashes -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode, sig", [("segv", "SIGSEGV"), ("abort", "SIGABRT"), ("fpe", "SIGFPE"),
                                       ("bus", "SIGBUS"), ("stack", "SIGSEGV")])
@pytest.mark.slow
def test_crash_names_the_signal_and_the_next_call_works(iso, rng, mode, sig):
    assert_correct(iso, rng)
    worker = iso.worker_pid
    assert worker is not None and worker != PARENT_PID

    with pytest.raises(KernelCrashedError) as info:
        iso(rand(rng, 8), rand(rng, 8), mode)

    err = info.value
    assert isinstance(err, AotbenchError) and isinstance(err, RuntimeError)
    assert err.signal == sig and err.exitcode is None
    assert err.function == "IsoFault"
    assert sig in str(err)
    # the kernel's native frames (from the worker's crash report), not the worker's Python frames
    assert any(("Recurse" if mode == "stack" else "IsoFault") in f for f in err.frames), str(err)
    assert "aotbench-native-stack" in err.stderr and "aotbench-frame" not in str(err)
    assert "worker_process.py" not in str(err) and "libpython" not in str(err)
    assert os.getpid() == PARENT_PID and pid_alive(PARENT_PID)
    assert not pid_alive(worker)  # killed and reaped
    assert iso.worker_pid is None
    assert_correct(iso, rng, shape=(3, 5))  # a fresh worker
    assert iso.worker_pid not in (None, worker)


@pytest.mark.slow
def test_hang_times_out_and_the_next_call_works(rng):
    op = aotbench.Custom(FUNC, None, None, reg_info=reg(), isolate=True, timeout_s=1.0)
    try:
        assert_correct(op, rng)  # starts the worker (startup is not part of the call's timeout)
        worker = op.worker_pid
        t = time.monotonic()
        with pytest.raises(KernelTimeoutError) as info:
            op(rand(rng, 4), rand(rng, 4), "hang")
        elapsed = time.monotonic() - t
        assert 1.0 <= elapsed < 5.0
        assert isinstance(info.value, TimeoutError) and info.value.timeout_s == 1.0
        assert "timeout_s=1" in str(info.value) and info.value.function == "IsoFault"
        assert not pid_alive(worker)
        assert_correct(op, rng)
    finally:
        op.close()


@pytest.mark.slow
def test_a_crash_while_planning_is_isolated_too(rng, tmp_path):
    """InferShape and Init run in the worker as well: a segfault there is a KernelCrashedError."""
    src = tmp_path / "iso_init_crash.cc"
    src.write_text((KERNELS / "iso_init_crash.cc").read_text())
    op = aotbench.Custom(f"{src}:IsoInitCrash", lambda s: s, np.float32, isolate=True)
    with pytest.raises(KernelCrashedError) as info:
        op(rand(rng, 4))
    assert info.value.signal == "SIGSEGV"
    x = rand(rng, 6)
    np.testing.assert_array_equal(op(x[:5]), x[:5] * 3)  # 5 elements: Init only crashes for 4
    op.close()


def test_what_the_kernel_prints_to_stderr_is_shown_here(iso, rng, capfd):
    capfd.readouterr()
    x, y = rand(rng, 4), rand(rng, 4)
    np.testing.assert_array_equal(iso(x, y, "noisy")[1], x * y)
    assert "iso-noisy-marker" in capfd.readouterr().err
    iso(x, y, "ok")
    assert "iso-noisy-marker" not in capfd.readouterr().err  # shown once, not again on the next call


# -- same results and errors as in-process --------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(), (1,), (4,), (3, 0), (17, 33), (2, 3, 4)])
def test_results_equal_the_in_process_op(iso, inproc, rng, shape):
    x, y = rand(rng, *shape), rand(rng, *shape)
    got, want = iso(x, y, "ok"), inproc(x, y, "ok")
    assert isinstance(got, tuple) and len(got) == 2
    for g, w in zip(got, want):
        assert g.shape == w.shape == shape and g.dtype == w.dtype == np.float32
        np.testing.assert_array_equal(g, w)
    np.testing.assert_allclose(got[0], expected(x, y)[0], rtol=1e-6, atol=1e-6)


def test_large_inputs_grow_the_arena_and_results_are_fresh_arrays(iso, inproc, rng):
    x, y = rand(rng, 1 << 20), rand(rng, 1 << 20)
    s, p = iso(x, y, "ok")
    np.testing.assert_array_equal(s, inproc(x, y, "ok")[0])
    np.testing.assert_array_equal(p, x * y)
    small = iso(x[:4], y[:4], "ok")
    np.testing.assert_array_equal(small[1], x[:4] * y[:4])
    # results own their memory: later calls do not change them
    before = s.copy()
    iso(y, x, "ok")
    np.testing.assert_array_equal(s, before)
    assert s.base is None or s.base.base is None
    # non-contiguous and non-native inputs are converted as in-process
    xs, ys = x[::2][:100], y[::2][:100].astype(">f4")
    np.testing.assert_array_equal(iso(xs, ys, "ok")[1], inproc(xs, ys, "ok")[1])


def test_with_attrs_is_isolated_and_matches_in_process(iso, inproc, rng):
    iso2, in2 = iso.with_attrs(alpha=-2.25), inproc.with_attrs(alpha=-2.25)
    try:
        assert isinstance(iso2, IsolatedOp) and iso2.attrs == {"alpha": -2.25}
        x, y = rand(rng, 5, 7), rand(rng, 5, 7)
        for g, w in zip(iso2(x, y, "ok"), in2(x, y, "ok")):
            np.testing.assert_array_equal(g, w)
        np.testing.assert_allclose(iso2(x, y, "ok")[0], x - 2.25 * y, rtol=1e-5, atol=1e-6)
    finally:
        iso2.close()


def test_callable_out_shape_is_evaluated_in_the_parent(rng):
    """A lambda does not pickle: the parent evaluates the rule and the worker gets concrete shapes."""
    op = aotbench.Custom(FUNC, lambda x, y: (x, y), lambda a, b: (a, b), reg_info=reg(1.5), isolate=True)
    try:
        for shape in [(4,), (2, 9), (4,)]:
            x, y = rand(rng, *shape), rand(rng, *shape)
            s, p = op(x, y, "ok")
            np.testing.assert_allclose(s, x + 1.5 * y, rtol=1e-6, atol=1e-6)
            np.testing.assert_array_equal(p, x * y)
    finally:
        op.close()


def _error(op, *args) -> BaseException:
    with pytest.raises(AotbenchError) as info:
        op(*args)
    return info.value


@pytest.mark.parametrize("mode, cls", [("status", KernelError), ("throw", KernelError), ("bogus", KernelError)])
def test_kernel_errors_are_reraised_with_type_message_and_fields(iso, inproc, rng, mode, cls):
    x, y = rand(rng, 4), rand(rng, 4)
    got, want = _error(iso, x, y, mode), _error(inproc, x, y, mode)
    assert type(got) is type(want) is cls
    assert str(got) == str(want)
    assert vars(got) == vars(want)
    if mode == "status":
        assert got.status == 7 and got.function == "IsoFault"
    assert iso.worker_pid is not None  # an error is not a crash: the worker lives on
    assert_correct(iso, rng)


def test_attr_errors_from_the_worker_keep_their_fields(rng):
    """The kernel reads Attr<float>("alpha"), which this registration lacks: AttrError raised in the worker."""
    iso = aotbench.Custom(FUNC, None, None, reg_info=reg(None), isolate=True)
    inproc = aotbench.Custom(FUNC, None, None, reg_info=reg(None))
    try:
        x, y = rand(rng, 3), rand(rng, 3)
        got, want = _error(iso, x, y, "ok"), _error(inproc, x, y, "ok")
        assert type(got) is type(want) is AttrError and isinstance(got, TypeError)
        assert str(got) == str(want) and got.name == "alpha" and vars(got) == vars(want)
    finally:
        iso.close()


def test_argument_errors_match_in_process(iso, inproc, rng):
    x = rand(rng, 3)
    for args in [(x,), (x, x, 3), (x, x.astype(object), "ok")]:
        got, want = _error(iso, *args), _error(inproc, *args)
        assert type(got) is type(want) and str(got) == str(want)
    assert isinstance(_error(iso, x, x, 3), (ArgumentError, AttrError))


def test_infer_shape_repr_and_pickle(iso, rng):
    assert iso.infer_shape((3, None), (3, None), "ok") == ((3, None), (3, None))
    assert repr(iso).startswith("<aotbench.IsolatedOp IsoFault")
    again = pickle.loads(pickle.dumps(iso))
    try:
        assert isinstance(again.materialize(), IsolatedOp) and again.spec == iso.spec  # built on first use
        assert_correct(again, rng)
    finally:
        again.close()


def test_arguments_are_validated():
    with pytest.raises(ArgumentError, match="isolate=True"):
        aotbench.Custom(FUNC, None, None, reg_info=reg(), timeout_s=1.0)
    with pytest.raises(ArgumentError, match="positive"):
        aotbench.Custom(FUNC, None, None, reg_info=reg(), isolate=True, timeout_s=0)
    plain = aotbench.Custom(FUNC, None, None, reg_info=reg())
    assert type(plain) is Op and type(plain).__call__ is Op.__call__  # the in-process hot path is untouched


# -- shared memory -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_no_shared_memory_leak_after_many_calls_crashes_and_close(rng):
    before, mapped = shm_blocks(), mapped_arenas()  # the module's op maps its own arena
    op = aotbench.Custom(FUNC, None, None, reg_info=reg(), isolate=True, timeout_s=1.0)
    for i in range(300):
        n = int(rng.integers(0, 70_000)) if i % 10 else 1 << (10 + i // 30)
        x, y = rand(rng, n), rand(rng, n)
        s, _ = op(x, y, "ok")
        assert s.shape == (n,)
        assert shm_blocks() == before  # no name left behind, even while the op is in use
        assert len(mapped_arenas() - mapped) == 1  # one arena, replaced (not added to) when it grows
    for mode in ("segv", "hang"):
        with pytest.raises((KernelCrashedError, KernelTimeoutError)):
            op(rand(rng, 4), rand(rng, 4), mode)
        assert shm_blocks() == before and len(mapped_arenas() - mapped) <= 1
    assert_correct(op, rng)
    op.close()
    assert shm_blocks() == before and mapped_arenas() - mapped == set()
    assert_correct(op, rng)  # still usable after close
    del op
    gc.collect()
    assert shm_blocks() == before and mapped_arenas() - mapped == set()


def test_the_worker_exits_when_the_op_is_collected(rng):
    before = shm_blocks()
    op = aotbench.Custom(FUNC, None, None, reg_info=reg(), isolate=True)
    assert_correct(op, rng)
    worker = op.worker_pid
    mapped = mapped_arenas()
    assert shm_blocks() == before and mapped
    del op
    gc.collect()
    assert not pid_alive(worker)
    assert shm_blocks() == before and len(mapped_arenas()) < len(mapped)  # its arena is unmapped, so freed


# -- the magic -----------------------------------------------------------------------------------------------
MAGIC_SCRIPT = r"""
import json, os, sys
import numpy as np
from IPython.testing.globalipapp import start_ipython
from aotbench import Op
from aotbench.op.isolated import IsolatedOp

shell = start_ipython()
shell.run_line_magic("load_ext", "aotbench")
shell.user_ns["np"] = np
cell = open(sys.argv[1]).read()
line = ("cpu --isolate --timeout-s 5 --attr alpha=0.5 --attr mode=\"{}\" "
        "--out-dtype '(np.float32, np.float32)'")
rng = np.random.default_rng()
x, y = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)
out = {"pid": os.getpid()}
op = shell.run_cell_magic("aot_kernel", line.format("ok"), cell)
out["isolated"] = isinstance(op, IsolatedOp) and shell.user_ns["IsoFault"] is op
out["spec"] = [op.spec.isolate, op.spec.timeout_s]
out["ok"] = bool(np.allclose(op(x, y)[0], x + 0.5 * y, rtol=1e-6, atol=1e-6))
again = shell.run_cell_magic("aot_kernel", line.format("segv"), cell)
out["adopted"] = again is op
result = shell.run_cell("IsoFault(np.ones(3, np.float32), np.ones(3, np.float32))")
err = result.error_in_exec
out["crash"] = [type(err).__name__, getattr(err, "signal", None)]
plain = shell.run_cell_magic("aot_kernel", line.replace("--isolate --timeout-s 5 ", "").format("ok"), cell)
out["plain"] = type(plain) is Op and shell.user_ns["IsoFault"] is plain
out["plain_ok"] = bool(np.array_equal(plain(x, y)[1], x * y))
out["pid_after"] = os.getpid()
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_magic_isolate_binds_an_isolated_op(tmp_path):
    """Through IPython's real shell, in a fresh interpreter (globalipapp's shell is one per process, and the
    segfault must leave that process running)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(aotbench.__file__).parents[1]),
                                                       os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", MAGIC_SCRIPT, str(SRC)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr
    out = json.loads(lines[-1][len("RESULT "):])
    assert out["isolated"] and out["spec"] == [True, 5.0] and out["ok"]
    assert out["adopted"]  # re-running the cell rebuilt into the same isolated object
    assert out["crash"] == ["KernelCrashedError", "SIGSEGV"]
    assert out["pid_after"] == out["pid"]
    assert out["plain"] and out["plain_ok"]  # without --isolate: a plain Op, not adopted into the isolated one
