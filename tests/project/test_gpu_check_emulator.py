"""bench/gpu_check_emulator.py, the emulator phase of the device check, where there is no GPU: with
``--emulator-only`` every case runs on aotbench's CUDA emulator against its numpy reference and writes its row; and
the comparison it makes against a GPU says "not bit-exact" for one ulp, holds a case to its stated bound and
refuses a wrong shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import gpu_check_emulator  # noqa: E402 - bench/ is not a package


@pytest.mark.slow
def test_emulator_only_runs_every_case_against_numpy_and_writes_its_rows(tmp_path, rng):
    seed = int(rng.integers(2**32))
    proc = subprocess.run([sys.executable, str(BENCH / "gpu_check_emulator.py"), "--emulator-only", "--out",
                           str(tmp_path), "--seed", str(seed)], capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert all(r["phase"] == "emulator" and r["against"] == "numpy" and r["seed"] == seed for r in rows)
    *cases, summary = rows
    names = [c.name for c in gpu_check_emulator.all_cases(seed)]
    assert [r["case"] for r in cases] == names and len(names) >= 30
    assert any(n.startswith("saxpy.cu") for n in names) and sum(n.startswith("add_reduce.cu") for n in names) == 4
    for row in cases:
        if row["ok"] is None:  # a case whose module is missing says so and is not counted
            assert row["result"].startswith("not run: ml_dtypes")
            continue
        assert row["ok"] is True and "error" not in row, row
        assert row["draws"] == len(row["shapes"]) >= 2
        if row["rule"] == gpu_check_emulator.EXACT:
            assert row["bit_exact"] and row["max_abs_error"] == 0 and row["of_allowed"] is None
        else:
            assert row["rule"].startswith("within a stated bound: ") and 0 <= row["of_allowed"] <= 1
    ran = [r for r in cases if r["ok"] is not None]
    assert summary["case"] == "emulator summary" and summary["ok"] is True and summary["failed"] == []
    assert summary["cases"] == len(cases) and summary["ran"] == summary["agreed"] == len(ran)
    assert summary["bit_exact_cases"] == sum(r["bit_exact"] for r in ran)
    assert f"{len(ran)} of {len(ran)} cases agree with numpy" in summary["result"]


def test_without_a_gpu_and_without_emulator_only_it_ends_with_the_reason(tmp_path):
    from aotbench.run.gpu_availability import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason is None:
        pytest.skip("a GPU is usable here: the script would cross-check for real")
    assert gpu_check_emulator.main(["--out", str(tmp_path)]) == 2
    assert not (tmp_path / "rows.jsonl").exists()


def test_compare_is_bit_for_bit_or_within_the_bound_element_by_element():
    want = np.array([1.0, -2.0, 3.0], np.float32)
    one_ulp = np.nextafter(want, np.float32(np.inf))
    exact = gpu_check_emulator.compare(want.copy(), want, None)
    assert exact["ok"] and exact["bit_exact"] and exact["max_abs_error"] == 0
    off = gpu_check_emulator.compare(one_ulp, want, None)
    assert not off["ok"] and not off["bit_exact"] and off["max_abs_error"] > 0
    bound = 2 * gpu_check_emulator.EPS * np.abs(want)  # one ulp of each is within it
    within = gpu_check_emulator.compare(one_ulp, want.astype(np.float64), bound)
    assert within["ok"] and not within["bit_exact"] and 0 < within["of_allowed"] <= 1
    tight = gpu_check_emulator.compare(one_ulp, want, bound / 4)
    assert not tight["ok"] and tight["of_allowed"] > 1
    wrong = gpu_check_emulator.compare(want[:2], want, None)
    assert not wrong["ok"] and "shape" in wrong["problem"]
    merged = gpu_check_emulator.merge(exact, tight)
    assert not merged["ok"] and not merged["bit_exact"] and merged["of_allowed"] == tight["of_allowed"]
