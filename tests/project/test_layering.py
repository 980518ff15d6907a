"""The core stays light and one-way: no UI library is imported by the core, and ``import aotbench`` is fast."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "aotbench"

# The layers, bottom first: a module may import, at module level, only modules of its own layer or a lower one
# (within a layer the imports must not form a cycle). Lazy imports inside functions are the accessors' way up
# (op.check, op.bench, op.explore, errors rendering themselves in IPython) and are not checked here.
LAYERS = [
    ["aotbench.errors", "aotbench._version", "aotbench._userframe", "aotbench.native"],
    ["aotbench.build"],
    ["aotbench.spec"],
    ["aotbench.run"],
    ["aotbench.op"],
    ["aotbench.tools"],
    ["aotbench.mindspore", "aotbench.plots"],
    ["aotbench.notebook", "aotbench.cli"],
    ["aotbench", "aotbench.__main__"],
]
TOP_LEVEL = {"__init__", "__main__", "_userframe", "_version", "errors", "plots"}
UI_MODULES = {"aotbench.notebook.magic", "aotbench.notebook.widgets", "aotbench.plots"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# examples/ holds kernels and the tutorial's own MindSpore script: data shipped with the package, not its code
MODULES = sorted(_module_name(p) for p in PACKAGE.rglob("*.py") if "examples" not in p.relative_to(PACKAGE).parts)
CORE = [m for m in MODULES if m not in UI_MODULES and not m.endswith("__main__")]
UI = ["IPython", "ipywidgets", "matplotlib", "cupy", "tqdm"]


def _rank(module: str) -> int:
    best = None
    for rank, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or (prefix != "aotbench" and module.startswith(prefix + "."))) and \
                    (best is None or len(prefix) > best[1]):
                best = (rank, len(prefix))
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[0]


def _module_level_imports(module: str) -> set[str]:
    """The aotbench modules ``module`` imports when it is imported (not inside functions or TYPE_CHECKING)."""
    path = PACKAGE.joinpath(*module.split(".")[1:])
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            continue
        for sub in ast.walk(node) if isinstance(node, (ast.Try, ast.If)) else [node]:
            if isinstance(sub, ast.Import):
                found |= {a.name for a in sub.names if a.name.startswith("aotbench")}
            elif isinstance(sub, ast.ImportFrom):
                base = sub.module or ""
                if sub.level:
                    parent = package.split(".")[: len(package.split(".")) - sub.level + 1]
                    base = ".".join(parent + ([base] if base else []))
                if not base.startswith("aotbench"):
                    continue
                for alias in sub.names:
                    candidate = f"{base}.{alias.name}"
                    found.add(candidate if candidate in MODULES else base)
    return found - {module}


def test_every_module_is_in_a_layer_and_few_stay_at_the_top():
    top = [m for m in MODULES if m.count(".") == 1 and (PACKAGE / (m.split(".")[1] + ".py")).exists()]
    assert {m.split(".")[1] for m in top} <= TOP_LEVEL, top
    for module in MODULES:
        _rank(module)


@pytest.mark.parametrize("module", MODULES)
def test_module_level_imports_go_down_the_layers(module):
    upward = [(target, _rank(target)) for target in _module_level_imports(module) if _rank(target) > _rank(module)]
    assert upward == [], f"{module} (layer {_rank(module)}) imports higher layers at module level: {upward}"


def test_no_module_level_import_cycle():
    graph = {m: _module_level_imports(m) & set(MODULES) for m in MODULES}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join(trail[trail.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for module in MODULES:
        if module not in state:
            visit(module, [module])


def test_no_module_is_much_over_400_lines():
    long = {m: n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 450
            for m in [_module_name(p)]}
    assert long == {}, long


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return out.stdout


@pytest.mark.parametrize("module", CORE)
@pytest.mark.slow
def test_core_module_imports_no_ui_library(module):
    """Each core module, imported alone in a fresh interpreter, leaves every UI library unimported."""
    loaded = json.loads(_run(f"import sys, json, {module}; print(json.dumps(sorted(sys.modules)))"))
    leaked = [m for m in loaded if m.split(".")[0] in UI]
    assert leaked == [], f"{module} imported {leaked}"


@pytest.mark.slow
def test_import_is_fast_relative_to_numpy(tmp_path):
    """``import aotbench`` costs little beyond numpy itself (ratio, not absolute time: the machine is noisy).
    Both are measured byte-compiled, as an installed package is: the source tree's modules get their .pyc files
    in a folder of the test's own (with PYTHONDONTWRITEBYTECODE set, the tree would be compiled on every run)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(tmp_path / "pycache")
    code = ("import time; t=time.perf_counter(); import numpy; t1=time.perf_counter(); import aotbench; "
            "t2=time.perf_counter(); print(t1-t, t2-t1)")

    def run() -> tuple[float, float]:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                             env=env)
        return tuple(map(float, out.stdout.split()))

    run()  # writes the .pyc files
    samples = [run() for _ in range(5)]
    numpy_s = min(s[0] for s in samples)
    ours_s = min(s[1] for s in samples)
    assert ours_s < max(2 * numpy_s, 0.05), f"import aotbench took {ours_s:.3f}s after numpy's {numpy_s:.3f}s"


def test_import_does_not_touch_cache_or_compiler(tmp_path):
    """Importing computes no cache directory and runs no compiler: nothing appears in AOTBENCH_CACHE_DIR."""
    cache = tmp_path / "cache"
    subprocess.run([sys.executable, "-c", "import aotbench"], cwd=ROOT, check=True,
                   env={"AOTBENCH_CACHE_DIR": str(cache), "PATH": "/nonexistent"})
    assert not cache.exists()


# The device's own modules (the seam, the gpu's run path and availability, the two clocks)
DEVICE_MODULES = {"aotbench.run.devices", "aotbench.run.gpu", "aotbench.run.gpu_availability", "aotbench.tools.timing",
                  "aotbench.tools.gpu_timing"}
# Outside the device's own modules, the only places that may name the gpu: choosing and validating the target (custom), the
# cell file's suffix (.cu), the magic's argument and the doctor's report line.
DEVICE_AWARE = {"aotbench.op.custom", "aotbench.build.cells", "aotbench.notebook.magic", "aotbench.cli.doctor"}


def test_the_cpu_gpu_seam_is_one_place():
    """Which device a call runs on is asked of :mod:`aotbench.run.devices`, not tested for in each module."""
    offenders = {}
    for path in PACKAGE.rglob("*.py"):
        module = _module_name(path)
        if module in DEVICE_MODULES or module in DEVICE_AWARE:
            continue
        text = path.read_text()
        hits = [token for token in ("__cuda_array_interface__", '== "gpu"', '!= "gpu"', "import cupy") if token in text]
        if hits:
            offenders[module] = hits
    assert offenders == {}, offenders
