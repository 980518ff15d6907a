"""The runner seam: every way an op runs is one :class:`~aotbench.run.runner.Runner`, and "key -> plan -> guarded
first call -> remember" is written once, in the plan cache of the build (:mod:`aotbench.run.plan_cache`)."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.op.isolated import IsolatedOp
from aotbench.op.op import Op
from aotbench.run.runner import InProcess, Runner
from aotbench.run.worker import InWorker

PACKAGE = Path(aotbench.__file__).resolve().parent
SCRATCH = Path(__file__).resolve().parents[1] / "support" / "kernels" / "trust_scratch.cc"


def scratch(**options) -> Op:
    return aotbench.Custom(f"{SCRATCH}:Scratch", lambda s: s, np.float32, attrs={"sleep_us": 0}, **options)


class Recording(Runner):
    """A runner of the test's own: counts the calls and the builds it is given, runs them in this process."""

    name = "recording"

    def __init__(self) -> None:
        self.inner = InProcess()
        self.calls = 0
        self.builds: list = []

    @property
    def device(self):
        return self.inner.device

    def start(self, kernel) -> None:
        self.builds.append(kernel)

    def call(self, kernel, args):
        self.calls += 1
        return self.inner.call(kernel, args)


def _calls_of(name: str) -> dict[str, int]:
    """Per module of the package, how many calls of a function or method named ``name`` it makes."""
    found: dict[str, int] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if called == name:
                    key = str(path.relative_to(PACKAGE))
                    found[key] = found.get(key, 0) + 1
    return found


def test_a_new_way_to_run_is_one_small_runner(rng):
    made = scratch()
    runner = Recording()
    op = Op(made.spec, made.library, made.kernel.runtime, made.artifact, made.source_path, runner=runner)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(op(x), 3 * x)
    assert runner.calls == 3  # not fast: every call goes to the runner, none to the in-process fast path
    assert op.device is aotbench.run.devices.CPU and runner.builds == [op.kernel]
    assert len(op.kernel.plans) == 1  # the plan was made once, on the first call, and kept by the build


def test_the_runner_is_chosen_once_by_the_op(rng):
    plain, isolated = scratch(), scratch(isolate=True)
    try:
        assert type(plain.runner) is InProcess and plain.runner.fast
        assert isinstance(isolated, IsolatedOp) and type(isolated.runner) is InWorker and not isolated.runner.fast
        x = rng.standard_normal(7).astype(np.float32)
        np.testing.assert_array_equal(isolated(x), 3 * x)
        assert len(isolated.kernel.plans) == 0  # the worker keeps the plans; the parent only forwards
        assert isolated.worker_pid is not None
    finally:
        isolated.close()


def test_a_plan_belongs_to_the_build_it_was_made_for(rng):
    """A reload gives the op a new build with plans of its own: a call still planning on the old build
    remembers its plan there, where the op no longer looks."""
    op = scratch()
    x = rng.standard_normal(9).astype(np.float32)
    op(x)
    old = op.kernel
    assert len(old.plans) == 1
    op.reload_from(scratch())
    assert op.kernel is not old and len(op.kernel.plans) == 0 and len(old.plans) == 0
    old.plans.remember(("late",), next(iter(scratch_plans(rng))))  # as a racing call on the old build would
    np.testing.assert_array_equal(op(x), 3 * x)
    assert ("late",) not in op.kernel.plans.table and len(op.kernel.plans) == 1


def scratch_plans(rng):
    other = scratch()
    other(rng.standard_normal(4).astype(np.float32))
    return list(other.kernel.plans.table.values())  # the plans outlive the op that made them


def test_plans_are_made_in_one_place_and_kept_in_one_place():
    assert _calls_of("make_plan") == {"run/kernel.py": 1}  # Kernel.plan: every runner and verb plans through it
    assert set(_calls_of("first_call")) == {"run/runner.py", "run/gpu.py"}  # the two runners that guard here
    stores = [path for path in PACKAGE.rglob("*.py") for node in ast.walk(ast.parse(path.read_text()))
              if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Attribute) and node.value.attr in ("table", "_plans")]
    assert {str(p.relative_to(PACKAGE)) for p in stores} == {"run/plan_cache.py"}


def test_threads_racing_a_new_signature_keep_one_plan_and_right_results(rng):
    op = scratch()
    x = rng.standard_normal((64, 8)).astype(np.float32)
    results, errors = [], []

    def call():
        try:
            results.append(op(x))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(results) == 8
    for r in results:
        np.testing.assert_array_equal(r, 3 * x)
    assert len(op.kernel.plans) == 1


@pytest.mark.parametrize("kind", ["check", "export"])
def test_one_shot_wrappers_run_once_then_the_fast_path_resumes(rng, kind):
    op = scratch()
    x = rng.standard_normal(11).astype(np.float32)
    op(x)
    seen = []
    op.call_next_through(kind, lambda call, args: seen.append(len(args)) or call(args))
    assert op._plans is not op.kernel.plans.table  # the fast path is off while a wrapper waits
    np.testing.assert_array_equal(op(x), 3 * x)
    np.testing.assert_array_equal(op(x), 3 * x)
    assert seen == [1] and op._plans is op.kernel.plans.table
    with pytest.raises(aotbench.ArgumentError, match="kind='trace'"):
        op.call_next_through("trace", None)
