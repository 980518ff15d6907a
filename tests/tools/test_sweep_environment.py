"""Each sweep point records the facts of the process that timed it; the Sweep's notes flag where they differ from
the client's or distort the reference. Real worker processes, plain numpy functions as the op, tiny budgets."""

from __future__ import annotations

import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import numpy as np
import pytest

from aotbench.tools import environment, sweeping
from aotbench.tools.environment import ProcessFacts, process_facts, sweep_notes

BUDGET_MS = 4.0
SIZES = [(64, 64), (128, 64)]
TRIM = "MALLOC_TRIM_THRESHOLD_"
CLIENT = ProcessFacts("here", "Some CPU", 8, (), (), "3.11.9", "2.1.0", False, 1)


# Module level so that they pickle by reference into a worker process.
def add(x, y):
    return np.add(x, y)


def add_reference(x, y):
    return x + y


def two_matrices(size, rng):
    return rng.standard_normal(size, dtype=np.float32), rng.standard_normal(size, dtype=np.float32)


def facts_and_pid():
    return process_facts(), os.getpid()


def _distortion_notes(result):
    return [n for n in result.notes if TRIM in n and "distorts the reference" in n]


def test_facts_of_this_process():
    facts = process_facts()
    assert facts.pid == os.getpid() and facts.host and facts.cpus >= 1
    assert facts.numpy == np.__version__ and facts.python == ".".join(map(str, sys.version_info[:3]))
    assert not facts.dask_worker
    assert all(name in environment.MALLOC_VARS for name, _ in facts.malloc)
    assert dict(facts.threads) == {k: os.environ[k] for k in environment.THREAD_VARS if k in os.environ}


def test_malloc_facts_come_from_the_environment_the_process_started_with(monkeypatch):
    """glibc reads its variables once at start: setting one in os.environ later changes nothing, so is not recorded."""
    if not os.path.exists("/proc/self/environ"):
        pytest.skip("needs /proc/self/environ (Linux)")
    started_with = environment._initial_environ().get("MALLOC_ARENA_MAX")
    monkeypatch.setenv("MALLOC_ARENA_MAX", "3" if started_with != "3" else "5")
    assert environment._initial_environ().get("MALLOC_ARENA_MAX") == started_with


def test_a_forked_worker_reports_its_own_facts():
    """The memo is per process id: a forked child does not hand back its parent's."""
    mine = process_facts()
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork")) as pool:
        theirs, pid = pool.submit(facts_and_pid).result()
    assert pid != os.getpid() and theirs.pid == pid and mine.pid == os.getpid()
    assert (theirs.host, theirs.malloc) == (mine.host, mine.malloc)


def test_an_in_process_sweep_records_facts_and_has_no_environment_notes():
    client = process_facts()
    if environment.distorting_malloc(client):
        pytest.skip(f"this test process itself started with {environment.distorting_malloc(client)}")
    result = sweeping.sweep(add, SIZES, reference=add_reference, budget_ms=BUDGET_MS)
    assert result.notes == () and result.client_facts == client
    assert all(p.facts == client for p in result.points)
    assert "note:" not in str(result) and "aotbench-notes" not in result._repr_html_()


def test_workers_started_with_a_malloc_trim_threshold_get_a_distortion_note(monkeypatch):
    """Set before the spawn, as Dask's nanny does: the workers' malloc really runs with it."""
    if environment.distorting_malloc(process_facts()):
        pytest.skip("this test process itself started with a malloc tunable set")
    monkeypatch.setenv(TRIM, "65536")
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        result = sweeping.sweep(add, SIZES, reference=add_reference, executor=pool, budget_ms=BUDGET_MS)
    assert all(dict(p.facts.malloc).get(TRIM) == "65536" and p.facts.pid != os.getpid() for p in result.points)
    assert f"{TRIM}=65536 (here unset)" in " ".join(result.notes)
    (note,) = _distortion_notes(result)
    assert "2 of 2 points" in note and "speed-up" in note
    assert f"note: {note}" in str(result) and "size" in str(result).splitlines()[1]  # the table is still there
    assert TRIM in result._repr_html_() and "<table" in result._repr_html_()


def test_without_a_reference_the_distortion_is_not_claimed(monkeypatch):
    if environment.distorting_malloc(process_facts()):
        pytest.skip("this test process itself started with a malloc tunable set")
    monkeypatch.setenv(TRIM, "65536")
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        result = sweeping.sweep(add, SIZES[:1], inputs=two_matrices, executor=pool, budget_ms=BUDGET_MS)
    assert not _distortion_notes(result) and any(TRIM in n for n in result.notes)  # still a difference


def test_old_constructors_keep_working():
    point = sweeping.measure_point(add, (8, 8), two_matrices, add_reference, BUDGET_MS, 3)
    rebuilt = sweeping.SweepPoint(point.size, point.shapes, point.bytes_moved, point.timing, point.gbps)
    assert point.facts == process_facts() and rebuilt.facts is None
    assert sweeping.Sweep((rebuilt,), None).notes == ()


# --- notes from synthetic facts ------------------------------------------------------------------------------------
def test_same_facts_or_unknown_facts_give_no_notes():
    assert sweep_notes(CLIENT, [CLIENT, replace(CLIENT, pid=2), None], True) == []


def test_another_machine_is_named():
    other = replace(CLIENT, host="node-7", cpu="Other CPU", cpus=2)
    notes = sweep_notes(CLIENT, [CLIENT, other, other], False)
    assert any("2 of 3 points" in n and "node-7 (Other CPU)" in n and "here (Some CPU)" in n for n in notes)
    assert any("2 CPUs, this process 8" in n for n in notes)
    assert any("Other CPU" in n for n in sweep_notes(CLIENT, [replace(CLIENT, cpu="Other CPU")], False))


def test_environment_and_version_differences_are_named():
    worker = replace(CLIENT, threads=(("OMP_NUM_THREADS", "1"),), numpy="1.26.4")
    client = replace(CLIENT, threads=(("OMP_NUM_THREADS", "4"),))
    notes = " ".join(sweep_notes(client, [worker], True))
    assert "OMP_NUM_THREADS=1 (here 4)" in notes and "numpy 1.26.4" in notes
    assert environment.environ_differences(client, [client]) == []
    unset_there = environment.environ_differences(client, [CLIENT])
    assert unset_there == ["OMP_NUM_THREADS=unset (here 4)"]


@pytest.mark.parametrize("name", ["MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_"])
def test_a_distorting_malloc_variable_is_flagged_even_when_the_client_has_it(name):
    worker = replace(CLIENT, malloc=((name, "65536"),))
    (note,) = [n for n in sweep_notes(worker, [worker], True) if "distorts the reference" in n]
    assert f"{name}=65536" in note and "1 of 1 points" in note and "pre-spawn-environ" not in note
    assert not [n for n in sweep_notes(replace(CLIENT, malloc=(("MALLOC_ARENA_MAX", "2"),)),
                                       [replace(CLIENT, malloc=(("MALLOC_ARENA_MAX", "2"),))], True)]


def test_in_a_dask_worker_the_note_gives_the_dask_fix():
    worker = replace(CLIENT, malloc=((TRIM, "65536"),), dask_worker=True)
    (note,) = [n for n in sweep_notes(CLIENT, [worker, CLIENT], True) if "distorts the reference" in n]
    assert "1 of 2 points" in note and "distributed.nanny.pre-spawn-environ" in note


@pytest.mark.slow
def test_a_dask_worker_knows_it_is_one():
    distributed = pytest.importorskip("distributed")
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as client:
        facts = client.submit(process_facts, pure=False).result()
    assert facts.dask_worker and not process_facts().dask_worker
