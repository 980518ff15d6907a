"""The benchmarks run and report every target as a measured ratio (values are not asserted: the machine is
noisy; the numbers are for people)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_core.py"


@pytest.mark.slow
def test_bench_core_quick_reports_all_targets(tmp_path):
    out = subprocess.run([sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, check=True,
                         cwd=tmp_path, timeout=600).stdout
    rows = [line for line in out.splitlines() if "target" in line]
    assert len(rows) == 6, out
    per_call = re.search(r"op\(x\).*?([\d.]+) us.*raw ctypes ([\d.]+) us\s+([\d.]+)x", out)
    assert per_call, out
    ours, raw, ratio = map(float, per_call.groups())
    assert ours > 0 and raw > 0 and abs(ours / raw - ratio) <= 0.1 * ratio  # the printed values are rounded
    assert re.search(r"with a workspace\s+[\d.]+ us\s+raw ctypes [\d.]+ us\s+[\d.]+x", out)
    assert re.search(r"cache hit\s+[\d.]+ ms", out)
    assert len(re.findall(r"bare g\+\+ \d+ ms\s+[\d.]+x", out)) == 3
    assert re.search(r"rebuild, edited cell.*bare g\+\+ \d+ ms\s+[\d.]+x\s+target <= 0\.6x", out)


FUSED = BENCH.parent / "bench_fused.py"


@pytest.mark.slow
def test_bench_fused_quick_reports_all_targets(tmp_path):
    # The checkout's aotbench, not an installed copy (the script imports aotbench from its own sys.path).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(FUSED.parents[1]),
                                                                      os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, str(FUSED), "--quick"], capture_output=True, text=True, check=True,
                         cwd=tmp_path, timeout=600, env=env).stdout
    rows = [line for line in out.splitlines() if "target" in line]
    assert len(rows) == 8, out
    for axis in (1, 0):
        for pattern in (rf"one-core vs numpy \(axis={axis}\): ([\d.]+)x \(target >= 2.5x\) (ok|MISSED)",
                        rf"one-core bandwidth \(axis={axis}\): (\d+)% of the 1-thread copy \(target >= 75%\) (ok|MISSED)",
                        rf"parallel bandwidth \(axis={axis}\): (\d+)% of the \d+-thread copy \(target >= 80%\) "
                        r"(ok|MISSED)",
                        rf"parallel vs one-core \(axis={axis}\): ([\d.]+)x \(target >= 1.7x\) (ok|MISSED)"):
            match = re.search(pattern, out)
            assert match and float(match.group(1)) > 0, (pattern, out)


PROFILE = BENCH.parent / "bench_profile.py"


@pytest.mark.slow
def test_bench_profile_quick_prices_the_sampler(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PROFILE.parents[1]),
                                                                      os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, str(PROFILE), "--quick"], capture_output=True, text=True, check=True,
                         cwd=tmp_path, timeout=600, env=env).stdout
    times = re.search(r"CPU time per call: unsampled ([\d.]+) us; sampled every 1 ms ([\d.]+) us", out)
    rate = re.search(r"(\d+) samples/s; implied cost per sample: ([\d.]+) us", out)
    overhead = re.search(r"overhead: ([+-][\d.]+)% \(target < 10%\) (ok|MISSED)", out)
    hot = re.search(r"hottest line's share: (\d+)% of the samples", out)
    assert times and rate and overhead and hot, out
    plain, sampled = float(times.group(1)), float(times.group(2))
    assert plain > 0 and sampled > 0 and abs(100 * (sampled / plain - 1) - float(overhead.group(1))) < 0.2
    assert 100 <= int(rate.group(1)) <= 1100 and int(hot.group(1)) > 30
