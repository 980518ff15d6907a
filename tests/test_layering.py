"""The core stays light and one-way: no UI library is imported by the core, and ``import aotbench`` is fast."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ["aotbench", "aotbench.errors", "aotbench.attrs", "aotbench.dtypes", "aotbench.reg", "aotbench.rules",
        "aotbench.toolchain", "aotbench.cache", "aotbench.build", "aotbench.elf", "aotbench.host",
        "aotbench.library", "aotbench.spec", "aotbench.plan", "aotbench.op", "aotbench.custom", "aotbench.doctor",
        "aotbench.cells", "aotbench.display", "aotbench.nvcc", "aotbench.devices",
        "aotbench.check", "aotbench.cache_admin", "aotbench.isolate", "aotbench._worker", "aotbench.sanitize",
        "aotbench.timing", "aotbench.accuracy", "aotbench.tables", "aotbench.bandwidth",
        "aotbench.comparison", "aotbench.sweeping", "aotbench.exploration", "aotbench.debounce",
        "aotbench.gpu", "aotbench.gpu_timing", "aotbench.gpu_sanitize", "aotbench._gpu_call",
        "aotbench.guard", "aotbench.fpenv", "aotbench.memory", "aotbench.native_stack", "aotbench.tracebacks"]
UI = ["IPython", "ipywidgets", "matplotlib", "cupy", "tqdm"]


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return out.stdout


@pytest.mark.parametrize("module", CORE)
def test_core_module_imports_no_ui_library(module):
    """Each core module, imported alone in a fresh interpreter, leaves every UI library unimported."""
    loaded = json.loads(_run(f"import sys, json, {module}; print(json.dumps(sorted(sys.modules)))"))
    leaked = [m for m in loaded if m.split(".")[0] in UI]
    assert leaked == [], f"{module} imported {leaked}"


def test_import_is_fast_relative_to_numpy():
    """``import aotbench`` costs little beyond numpy itself (ratio, not absolute time: the machine is noisy)."""
    code = ("import time; t=time.perf_counter(); import numpy; t1=time.perf_counter(); import aotbench; "
            "t2=time.perf_counter(); print(t1-t, t2-t1)")
    samples = [tuple(map(float, _run(code).split())) for _ in range(5)]
    numpy_s = min(s[0] for s in samples)
    ours_s = min(s[1] for s in samples)
    assert ours_s < max(2 * numpy_s, 0.05), f"import aotbench took {ours_s:.3f}s after numpy's {numpy_s:.3f}s"


def test_import_does_not_touch_cache_or_compiler(tmp_path):
    """Importing computes no cache directory and runs no compiler: nothing appears in AOTBENCH_CACHE_DIR."""
    cache = tmp_path / "cache"
    subprocess.run([sys.executable, "-c", "import aotbench"], cwd=ROOT, check=True,
                   env={"AOTBENCH_CACHE_DIR": str(cache), "PATH": "/nonexistent"})
    assert not cache.exists()
