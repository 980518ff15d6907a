"""Loading a ``-ffast-math`` / ``-Ofast`` build leaves the process's floating-point mode as it was.

GCC links ``crtfastmath.o`` into such a library; its constructor turns on flush-to-zero and
denormals-are-zero when the library is loaded. Each case runs in a fresh interpreter, so a regression cannot
leave the test process computing with denormals flushed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
KERNEL = ROOT / "tests" / "support" / "kernels" / "trust_scratch.cc"

SCRIPT = r"""
import json, sys, warnings
import numpy as np
import aotbench

tiny = np.float32(1e-39)  # a float32 denormal
flags = sys.argv[2:]

def numpy_keeps_denormals():
    return bool(tiny * np.float32(1) != 0) and bool((np.full(8, tiny) * np.float32(1) != 0).all())

report = {"before": numpy_keeps_denormals()}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    op = aotbench.Custom(sys.argv[1] + ":Tiny", lambda a, b: a, np.float32, flags=flags)
    report["after_load"] = numpy_keeps_denormals()
    again = aotbench.Custom(sys.argv[1] + ":Tiny", lambda a, b: a, np.float32, flags=flags)  # a second load
    rng = np.random.default_rng()
    x = rng.uniform(1, 2, 64).astype(np.float32)
    x[::2] = tiny * rng.uniform(1, 2, 32).astype(np.float32)  # half denormal inputs
    y = np.ones(64, np.float32)
    first, second = op(x, y), again(x, y)  # the guarded first call, then the fast path
    report["fast_path_again"] = again(x, y).tolist() == second.tolist()
report["after_calls"] = numpy_keeps_denormals()
report["kernel_flushed"] = bool((first[::2] == 0).all() and (second[::2] == 0).all())
report["kernel_normal_exact"] = bool((first[1::2] == x[1::2]).all() and (second[1::2] == x[1::2]).all())
report["warnings"] = [str(w.message) for w in caught if w.category is aotbench.FastMathWarning]
report["other_warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught
                            if w.category is not aotbench.FastMathWarning]
print(json.dumps(report))
"""


def run(flags: list[str], cache: Path) -> dict:
    env = dict(os.environ, AOTBENCH_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(KERNEL), *flags], capture_output=True, text=True, check=False,
                         env=env, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("flag", ["-ffast-math", "-Ofast"])
def test_fast_math_library_leaves_numpy_denormals_alone(flag, session_cache):
    report = run([flag], session_cache)
    assert report["before"] is True
    assert report["after_load"] is True, "loading the library flushed denormals for the whole process"
    assert report["after_calls"] is True, "calling the kernel left the process flushing denormals"
    assert report["other_warnings"] == []


@pytest.mark.parametrize("flag", ["-ffast-math", "-Ofast"])
def test_fast_math_kernel_runs_in_the_mode_it_was_built_for_and_says_so_once(flag, session_cache):
    report = run([flag], session_cache)
    assert report["kernel_flushed"] is True  # its calls see denormal inputs as zero, as built
    assert report["kernel_normal_exact"] is True
    assert report["fast_path_again"] is True
    assert len(report["warnings"]) == 1, report["warnings"]  # once, though the library was loaded twice
    text = report["warnings"][0]
    assert flag in text and "crtfastmath.o" in text
    assert "flush-to-zero" in text and "denormals-are-zero" in text


def test_an_ordinary_build_computes_with_denormals_and_warns_nothing(session_cache):
    report = run(["-O2"], session_cache)
    assert report["after_load"] is True and report["after_calls"] is True
    assert report["warnings"] == []
    assert report["kernel_flushed"] is False  # the denormal products are kept
    assert report["kernel_normal_exact"] is True
