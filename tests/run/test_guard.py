"""The guarded first call: every new input signature's first call runs on fenced, poisoned buffers.

A write outside the kernel's buffers raises ContractViolation (no output returned, the plan not kept, so the next
call is guarded again); unwritten elements, leaked poison and a workspace overrun inside aotbench's padding warn
(ContractWarning) and the call returns; later calls of a signature that passed take the fast path, unchanged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench import ContractViolation, ContractWarning
from aotbench.run import guard
from aotbench.run.guard import MAX_GUARD_AFTER, MIN_GUARD, guard_after

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from ipython_shell import aotbench_shell

ROOT = Path(__file__).resolve().parents[2]
FAULTS = ROOT / "tests" / "support" / "kernels" / "check_faults.cc"
TUTORIAL = aotbench.examples_dir() / "tutorial" / "kernel.cc"
CORRECTED = aotbench.examples_dir() / "add_reduce.cc"


def rand(rng, *shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def fault(mode: str, **options):
    attrs = {"mode": mode, "extra": options.pop("extra", 0), "delta": 0.0}
    return aotbench.Custom(f"{FAULTS}:Fault", None, np.float32, attrs=attrs, **options)


def tutorial(**attrs):
    return aotbench.Custom(f"{TUTORIAL}:CustomKernel", None, np.float32,
                           attrs={"axis": attrs.pop("axis", 1), "keep_dim": attrs.pop("keep_dim", False)}, **attrs)


def no_warnings(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn(*args)


# -- the aot tutorial's kernel, called plainly ------------------------------------------------------------------
@pytest.mark.slow
def test_tutorial_kernel_first_call_warns_with_check_modes_sentences_and_shows_poison(rng):
    op = tutorial()
    x, y = rand(rng, 4, 5), rand(rng, 4, 5)
    with pytest.warns(ContractWarning) as caught:
        out = op(x, y)
    text = str(caught[0].message)
    assert "first call with input shapes (4, 5), (4, 5)" in text
    assert "workspace 0: the kernel wrote only its first 16 of 80 bytes, and read the rest" in text
    assert "written values are NaN or Inf" in text and "guard=False" in text
    assert np.isnan(out).any()  # the poison it read, where an unguarded call returns garbage
    assert caught[0].filename == __file__  # pointed at the user's line
    no_warnings(op, x, y)  # the signature passed the bounds check: the next call is the fast path, silent


def test_tutorial_kernel_with_keep_dim_is_stopped_at_its_first_call(rng):
    op = tutorial(keep_dim=True)
    x, y = rand(rng, 4, 5), rand(rng, 4, 5)
    for _ in range(2):  # the plan is not kept: every call of this signature is guarded, and refused
        with pytest.raises(ContractViolation) as info:
            op(x, y)
        assert info.value.guarded is True
        assert "output 0: the kernel wrote 64 bytes past the end of its 16-byte buffer" in str(info.value)
        assert "memory is intact" in str(info.value)
        assert info.value.report.buffers[0].written_past_end == 64
    assert op._plans == {}
    # the process is fine and a correct kernel still runs
    good = aotbench.Custom(f"{CORRECTED}:CustomKernel", None, np.float32, attrs={"axis": 1, "keep_dim": True})
    np.testing.assert_allclose(no_warnings(good, x, y), (x + y).sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)


def test_overruns_as_long_as_an_input_are_caught_without_harm(rng):
    """With keep_dim the tutorial's reduction writes input 2's 300 x 5 floats into a 1 x 5 output, 5980 bytes
    past its end: the guard grows with the call's largest tensor, so even that lands in it."""
    op = tutorial(axis=0, keep_dim=True)
    x, y = rand(rng, 300, 5), rand(rng, 300, 5)
    with pytest.raises(ContractViolation) as info:
        op(x, y)
    assert info.value.report.buffers[0].written_past_end == 300 * 5 * 4 - 5 * 4
    assert "maybe further" not in str(info.value)
    with pytest.raises(ContractViolation, match="1180 bytes past the end of its 20-byte buffer"):
        tutorial(axis=0)(x, y)  # docs/guide/notebook.md's panel.set(axis=0, m=300)


@pytest.mark.parametrize("extra", [1, 900, 250_000])
def test_writes_past_the_end_raise_and_return_nothing(rng, extra):
    n = 300_000 if extra > 1000 else 12
    op = fault("past_end", extra=extra)
    x = rand(rng, n)
    with pytest.raises(ContractViolation) as info:
        op(x)
    assert f"wrote {4 * extra} bytes past the end of its {4 * n}-byte buffer" in str(info.value)


def test_write_before_the_start_raises(rng):
    with pytest.raises(ContractViolation, match="4 bytes before the start"):
        fault("before_start")(rand(rng, 3, 4))


def test_a_write_past_the_whole_guard_says_to_isolate(rng):
    """When every guard byte changed, the write may have gone further: the sentence says to use isolate=True."""
    from aotbench.run import guard

    n = int(rng.integers(1, 50))
    raw = guard._guarded(4 * n, guard.guard_after(4 * n))
    data = raw[guard.GUARD_BEFORE:guard.GUARD_BEFORE + 4 * n].view(np.float32)
    data[:] = rand(rng, n)
    raw[guard.GUARD_BEFORE + 4 * n:] = 0  # the whole guard overwritten
    violations, findings = [], []
    report = guard._inspect_output("output 0", (n,), np.dtype(np.float32), raw, data, None, violations, findings)
    assert report.written_past_end == guard.MIN_GUARD
    assert len(violations) == 1 and "maybe further" in violations[0] and "isolate=True" in violations[0]
    assert findings == []
    raw[guard.GUARD_BEFORE + 4 * n + 10:] = guard.CANARY  # only the first 10 bytes: no such hint
    violations = []
    guard._inspect_output("output 0", (n,), np.dtype(np.float32), raw, data, None, violations, findings)
    assert "10 bytes past the end" in violations[0] and "isolate" not in violations[0]


def test_unwritten_elements_warn_and_the_call_returns(rng):
    x = rand(rng, 5, 6)
    with pytest.warns(ContractWarning, match=r"output 0: 10 of 30 elements were never written \(first at \(0, 1\)"):
        out = fault("unwritten")(x)
    flat = np.arange(30)
    np.testing.assert_array_equal(out.reshape(-1)[flat % 3 != 1], 2 * x.reshape(-1)[flat % 3 != 1])


def test_element_count_workspace_inside_the_padding_warns_with_the_hint(rng):
    x = rand(rng, 4, 5)
    with pytest.warns(ContractWarning, match="was it an element count"):
        out = fault("ws_floats")(x)
    np.testing.assert_array_equal(out, 2 * x)


def test_a_correct_kernel_is_silent_and_exact_on_every_signature(rng):
    op = aotbench.Custom(f"{CORRECTED}:CustomKernel", None, np.float32, attrs={"axis": 1, "keep_dim": False})
    for shape in [(4, 5), (7, 3), tuple(int(d) for d in rng.integers(1, 40, size=2))]:
        x, y = rand(rng, *shape), rand(rng, *shape)
        np.testing.assert_allclose(no_warnings(op, x, y), (x + y).sum(axis=1), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(no_warnings(op, x, y), (x + y).sum(axis=1), rtol=1e-4, atol=1e-4)


SCRATCH = ROOT / "tests" / "support" / "kernels" / "trust_scratch.cc"


@pytest.mark.parametrize("dtype", ["uint8", "int8", "float32", "float64", "float16"])
def test_a_kernel_writing_the_poisons_bytes_or_real_nans_is_not_blamed(rng, dtype):
    """A correct copy whose data holds the poison's own bytes (0x5A) or real NaN and Inf: the confirming run
    sees the same values under another poison, so there is no warning and the values are exact."""
    copy = aotbench.Custom(f"{SCRATCH}:Copy", lambda s: s, lambda d: d)
    n = int(rng.integers(50, 400))
    if np.dtype(dtype).kind == "f":
        x = rng.standard_normal(n).astype(dtype)
        x[rng.integers(0, n, 9)] = np.nan
        x[rng.integers(0, n, 3)] = np.inf
        x[:4].view(f"u{x.itemsize}")[:] = guard.output_poison(np.dtype(dtype)).view(f"u{x.itemsize}")[0]
    else:
        x = rng.integers(-100 if dtype == "int8" else 0, 100, n).astype(dtype)
        x[rng.integers(0, n, 11)] = guard.OUTPUT_SENTINEL if dtype == "uint8" else np.int8(90)
    out = no_warnings(copy, x)
    assert out.view(np.uint8).tobytes() == x.view(np.uint8).tobytes()


def test_finite_values_computed_from_unwritten_workspace_are_found(rng):
    """A kernel that never writes its workspace but reads it into a finite result: the two runs' poisons give
    different values, which is what the warning says."""
    garbage = aotbench.Custom(f"{SCRATCH}:Garbage", lambda s: s, np.float32)
    x = rand(rng, 6, 7)
    with pytest.warns(aotbench.ContractWarning) as caught:
        garbage(x)
    text = str(caught[0].message)
    assert "42 written values changed with the poison" in text and "wrote only its first 0 of 168 bytes" in text


MEMORY = """
import sys, tracemalloc, numpy as np, aotbench
n = 1 << 26  # 256 MiB of float32
op = aotbench.Custom(sys.argv[1] + ":Scale", lambda s: s, np.float32, guard=sys.argv[2] == "guard")
x = np.random.default_rng().standard_normal(n, dtype=np.float32)
op(np.ones(4, np.float32))  # the library and host loaded, a small plan made
tracemalloc.start()  # numpy reports its allocations to tracemalloc: the peak is exact, unlike the RSS
out = op(x)
assert out[12345] == 2 * x[12345]
print(tracemalloc.get_traced_memory()[1])
"""


@pytest.mark.slow
def test_a_large_first_call_costs_about_the_output_and_its_guard(tmp_path, session_cache):
    """Peak memory (tracemalloc) of the first call on a 256 MiB output, guarded against unguarded, in fresh processes:
    the guarded one needs the output, its guard (64 MiB at most) and a few chunks of inspection, not a
    multiple of the output."""
    kernel = ROOT / "bench" / "kernels" / "scale.cc"
    env = dict(os.environ, AOTBENCH_CACHE_DIR=str(session_cache), PYTHONPATH=str(ROOT))
    grown = {}
    for mode in ("guard", "plain"):
        proc = subprocess.run([sys.executable, "-c", MEMORY, str(kernel), mode], capture_output=True, text=True,
                              env=env, timeout=600, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
        grown[mode] = int(proc.stdout.split()[-1])
    output = 4 << 26
    assert grown["plain"] >= 0.9 * output, grown
    assert grown["guard"] <= output + guard.MAX_GUARD_AFTER + 64 * guard.CHUNK_BYTES, grown


def test_later_calls_take_the_fast_path(rng, monkeypatch):
    from aotbench.run import guard

    op = fault("ok")
    x = rand(rng, 6, 2)
    calls = []
    real = guard.first_call
    monkeypatch.setattr(guard, "first_call", lambda *a, **k: calls.append(1) or real(*a, **k))
    for _ in range(3):
        np.testing.assert_array_equal(op(x), 2 * x)
    assert calls == [1]
    op(rand(rng, 3, 3))  # a new signature: guarded again
    assert calls == [1, 1]


def test_guard_false_turns_it_off(rng):
    op = fault("unwritten", guard=False)
    assert op.spec.guard is False
    x = rand(rng, 4, 4)
    no_warnings(op, x)
    with pytest.raises(aotbench.ArgumentError, match="guard must be True or False"):
        fault("ok", guard="yes")


def test_a_sanitized_op_has_the_sanitizer_instead():
    op = fault("ok", sanitize="address")
    assert op.spec.guard is False


def test_guard_zone_sizes():
    assert guard_after(16) == MIN_GUARD
    assert guard_after(16, 6000) == 6000
    assert guard_after(1 << 20) == 1 << 20
    assert guard_after(1 << 40) == MAX_GUARD_AFTER


def test_a_pickled_op_keeps_its_guard_setting():
    import pickle

    assert pickle.loads(pickle.dumps(fault("ok", guard=False))).spec.guard is False
    assert pickle.loads(pickle.dumps(fault("ok"))).spec.guard is True


# -- isolated ops: the worker guards, the parent raises or warns -------------------------------------------------
def test_isolated_op_first_call_is_guarded_in_the_worker(rng):
    x, y = rand(rng, 4, 5), rand(rng, 4, 5)
    bad = tutorial(keep_dim=True, isolate=True)
    try:
        with pytest.raises(ContractViolation, match="64 bytes past the end") as info:
            bad(x, y)
        assert info.value.guarded is True
        assert bad.worker_pid is not None  # the worker did not crash: the write landed in the guard
    finally:
        bad.close()
    warned = tutorial(isolate=True)
    try:
        with pytest.warns(ContractWarning, match="wrote only its first 16 of 80 bytes"):
            warned(x, y)
        no_warnings(warned, x, y)
    finally:
        warned.close()


# -- the magic ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ip(tmp_path_factory):
    with aotbench_shell(tmp_path_factory.mktemp("guard-notebook")) as shell:
        yield shell


def test_cells_are_guarded_by_default_and_no_guard_turns_it_off(ip, rng):
    guarded = ip.run_cell_magic("aot_kernel", "cpu --attr axis=1 --attr keep_dim=True --name g_on",
                                TUTORIAL.read_text())
    assert guarded.spec.guard is True
    ip.user_ns["gx"], ip.user_ns["gy"] = rand(rng, 4, 5), rand(rng, 4, 5)
    result = ip.run_cell("g_on(gx, gy)")
    assert isinstance(result.error_in_exec, ContractViolation)
    off = ip.run_cell_magic("aot_kernel", "cpu --no-guard --attr axis=1 --attr keep_dim=False --name g_off",
                            TUTORIAL.read_text())
    assert off.spec.guard is False


# -- the panel, on the tutorial kernel, as docs/guide/notebook.md shows it ---------------------------------------
PANEL = r"""
import json, sys
import numpy as np
import aotbench
op = aotbench.Custom(sys.argv[1] + ":CustomKernel", None, np.float32, attrs={"axis": 1, "keep_dim": False})
rng = np.random.default_rng()
x, y = (rng.standard_normal((4, 5)).astype(np.float32) for _ in range(2))
panel = op.explore(x, y, reference=lambda x, y, axis, keep_dim: (x + y).sum(axis=axis, keepdims=keep_dim),
                   dynamic=[("m", "n"), ("m", "n")], debounce_ms=0, budget_ms=2)
lines = [panel.set(axis=0, m=300).summary(), panel.set(axis=1, keep_dim=True, m=4).summary(),
         panel.set(axis=0, keep_dim=True, m=2000, n=7).summary()]
print(json.dumps(lines))
"""


@pytest.mark.slow
def test_the_panel_survives_the_tutorial_kernel_writing_out_of_bounds(session_cache):
    pytest.importorskip("ipywidgets")
    env = dict(os.environ, AOTBENCH_CACHE_DIR=str(session_cache), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", PANEL, str(TUTORIAL)], capture_output=True, text=True, env=env, check=False,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 0, f"the process died ({out.returncode}): {out.stderr[-2000:]}"
    lines = json.loads(out.stdout.strip().splitlines()[-1])
    assert all("ContractViolation" in line and "past the end" in line for line in lines), lines
