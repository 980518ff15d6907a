"""bench/bench_emulator.py runs (``--quick``) and prints each of its three targets as a measured number with its
verdict, and the fiber-stack memory line (values are not asserted: the machine is shared and noisy)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_emulator.py"
NUMBER = r"(\d+(?:\.\d+)?)"


@pytest.mark.slow
def test_bench_emulator_quick_reports_its_three_targets(tmp_path):
    # The checkout's aotbench, not an installed copy (the script imports aotbench from its own sys.path).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(BENCH.parents[1]),
                                                                      os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=600, env=env)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    patterns = [
        rf"elementwise, emulator \(\d+ cores\) vs plain loop: {NUMBER}x \(target <= 5x\) (met|MISSED); "
        rf"on 1 thread {NUMBER}x",
        rf"block reduction: {NUMBER} ns per thread per barrier on \d+ cores.*\(target <= 20 ns\) (met|MISSED); "
        rf"on 1 thread {NUMBER} ns",
        rf"scaling, block reduction, 1 thread -> \d+ cores: {NUMBER}x \(target >= 1.7x\) (met|MISSED)",
    ]
    for pattern in patterns:
        found = re.search(pattern, out)
        assert found, f"no line matching {pattern!r} in:\n{out}"
        numbers = [float(group) for group in found.groups() if group not in ("met", "MISSED")]
        assert all(value > 0 for value in numbers), found.group(0)
    assert len(re.findall(r" (met|MISSED)\b", out)) == 3, out
    memory = re.search(rf"fiber stacks: .* x {NUMBER} KiB of address space.*peak RSS \(ru_maxrss\) {NUMBER} -> "
                       rf"{NUMBER} MiB", out)
    assert memory and float(memory.group(1)) > 0, out
