"""bench/gpu_check.py, the script a lent GPU machine runs, where it can be tested without one: it ends at once
with a clear message and its JSON where no GPU is usable; a phase that hangs or crashes is stopped at its limit
(with the processes it started) and keeps the rows it wrote; a test that hangs stops only itself; a "no usable
GPU" skip fails the run on a GPU machine; carried packages stay on PYTHONPATH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import gpu_check
from gpu_check_device import RowLog

from aotbench.run.gpu_availability import gpu_unavailable_reason


@pytest.mark.slow
def test_without_a_usable_gpu_it_ends_at_once_with_the_reason_and_its_json(tmp_path):
    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is usable here: the check would run for minutes")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(BENCH / "gpu_check.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and time.monotonic() - started < 60
    assert f"no usable GPU here: {gpu_unavailable_reason()}" in proc.stdout
    assert "targets: none measured" in proc.stdout
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["exit"] == 2 and report["no_usable_gpu"] == gpu_unavailable_reason()
    assert report["environment"]["nvcc_version"] and "arch_reason" in report["environment"]


def _child(tmp_path: Path, body: str) -> list[str]:
    """A phase child: writes rows with gpu_check_device.RowLog, then does ``body``."""
    script = tmp_path / "phase.py"
    script.write_text(textwrap.dedent(f"""
        import os, subprocess, sys, time
        from pathlib import Path
        sys.path.insert(0, {str(BENCH)!r})
        from gpu_check_device import RowLog
        log = RowLog(Path({str(tmp_path)!r}), "probes")
        log.row(case="first", ok=True, result="written before the trouble")
        with log.case("second") as row:
            raise RuntimeError("this row fails, the next one still runs")
        log.row(case="third", ok=True)
    """) + textwrap.dedent(body))
    return [sys.executable, str(script)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.mark.slow
def test_a_hanging_phase_is_stopped_at_its_limit_with_its_children_and_keeps_its_rows(tmp_path):
    argv = _child(tmp_path, """
        child = subprocess.Popen(["sleep", "300"])
        Path(sys.argv[0]).with_name("grandchild.pid").write_text(str(child.pid))
        print("hanging now", flush=True)
        time.sleep(300)
    """)
    started = time.monotonic()
    phase = gpu_check.run_phase("probes", argv, 4, tmp_path)
    assert phase.status == "timed out after 4 s" and time.monotonic() - started < 30
    rows = gpu_check.read_jsonl(tmp_path / "rows.jsonl")
    assert [r["case"] for r in rows] == ["first", "second", "third"]
    assert rows[1]["ok"] is False and "RuntimeError: this row fails" in rows[1]["error"]
    assert "hanging now" in (tmp_path / "probes.log").read_text()
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(grandchild)
    assert any("RuntimeError: this row fails" in m for m in gpu_check.targets_missed(rows))


def test_a_crashing_phase_is_named_by_its_signal_and_a_row_cut_short_is_dropped(tmp_path):
    argv = _child(tmp_path, """
        with open(Path(sys.argv[0]).with_name("rows.jsonl"), "a") as f:
            f.write('{"phase": "probes", "case": "cut sh')
        os.abort()
    """)
    phase = gpu_check.run_phase("probes", argv, 30, tmp_path)
    assert phase.status == "failed (signal SIGABRT)"
    assert [r["case"] for r in gpu_check.read_jsonl(tmp_path / "rows.jsonl")] == ["first", "second", "third"]


@pytest.mark.slow
def test_a_hung_test_stops_only_itself_and_no_gpu_skips_fail_on_a_gpu_machine(tmp_path):
    tests = tmp_path / "fake_tests"
    tests.mkdir()
    (tests / "test_fake.py").write_text(textwrap.dedent("""
        import time, pytest
        def test_passes(): assert sum(range(5)) == 10
        def test_hangs(): time.sleep(300)
        def test_skips_without_gpu(): pytest.skip("no usable GPU: the driver reports no CUDA device")
        def test_skips_for_another_reason(): pytest.skip("compute-sanitizer cannot run here")
        def test_fails(): assert [1, 2] == [2, 1]
    """))
    out = tmp_path / "out"
    out.mkdir()
    started = time.monotonic()
    phase = gpu_check.run_tests(out, 90, gpu_machine=True, tests=["fake_tests/test_fake.py"], test_limit_s=3,
                                cwd=tmp_path)
    assert time.monotonic() - started < 80
    d = phase.detail
    assert d["stopped_the_run"] == ["fake_tests/test_fake.py::test_hangs"] and d["pytest_runs"] == 2
    assert d["passed"] == 1 and d["failed"] == ["fake_tests/test_fake.py::test_fails"]
    assert d["no_gpu_skips_on_a_gpu_machine"] == ["fake_tests/test_fake.py::test_skips_without_gpu"]
    assert d["skipped"]["fake_tests/test_fake.py::test_skips_for_another_reason"].startswith("compute-sanitizer")
    assert phase.status.startswith("failed")
    assert "Timeout" in (out / "tests.log").read_text()  # the hung test's stacks reached the log
    records = gpu_check.read_jsonl(out / "tests.outcomes.jsonl")
    on_cpu = gpu_check.summarize_tests(records, [], gpu_machine=False, status="ok", runs=1, limit_s=1)
    assert on_cpu.detail["no_gpu_skips_on_a_gpu_machine"] == []  # without a GPU a gpu skip is expected


def test_children_find_this_checkout_first_and_keep_carried_packages(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/carried/wheels")
    path = gpu_check.child_env(tmp_path)["PYTHONPATH"].split(os.pathsep)
    assert path == [str(gpu_check.ROOT), str(BENCH), "/carried/wheels"]


def test_the_table_says_what_each_number_includes_and_misses_are_listed(tmp_path):
    log = RowLog(tmp_path, "benchmarks")
    log.row(case="saxpy n=2^26", median_us=250.0, iqr_us=2.0, gbps=3200.0, of_copy=0.9, cupyx_us=262.0,
            cupyx_less_launch_us=252.0, vs_cupyx=-0.008, graph_us=249.0, launch_us=10.0, rel_error=1e-7, ok=True)
    log.row(case="fused add+sum 8192^2 axis=0", median_us=400.0, iqr_us=3.0, gbps=1400.0, of_copy=0.42,
            cupyx_us=410.0, cupyx_less_launch_us=400.0, vs_cupyx=0.0, graph_us=399.0, launch_us=10.0,
            rel_error=1e-7, ok=False, result="42% of copy", target=">= 80% of copy")
    rows = gpu_check.read_jsonl(tmp_path / "rows.jsonl")
    text = gpu_check.table(rows)
    assert "saxpy n=2^26" in text and "90.0%" in text and "-0.80%" in text
    assert "includes the host's launch" in text and "L2 flushed" in text
    assert gpu_check.targets_missed(rows) == ["fused add+sum 8192^2 axis=0: 42% of copy (target: >= 80% of copy)"]
