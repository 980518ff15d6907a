"""Every notebook in ``notebooks/`` runs top to bottom through a real Jupyter kernel, and is stored as run.

A cell may fail only if its metadata tags include ``raises-exception`` (and then it must fail). The runner
itself is checked first on small notebooks written here, so a broken runner cannot pass the real ones.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient.exceptions import CellExecutionError
from nbformat.v4 import new_code_cell, new_notebook

pytestmark = pytest.mark.slow

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
import notebook_runner

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
KERNEL_SOURCE = r'''
#include <cstdint>
extern "C" int Twice(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
                     void* stream, void* extra) {
  auto* x = static_cast<float*>(params[0]);
  auto* y = static_cast<float*>(params[1]);
  int64_t n = 1;
  for (int i = 0; i < ndims[0]; ++i) n *= shapes[0][i];
  for (int64_t i = 0; i < n; ++i) y[i] = 2 * x[i];
  return 0;
}
'''


def _code_cells(nb):
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def _write(tmp_path: Path, *cells) -> Path:
    path = tmp_path / "nb" / "probe.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(new_notebook(cells=list(cells), metadata={"kernelspec": kernelspec}), path)
    return path


# --- the runner, on notebooks made here -------------------------------------------------------------------------

def test_runner_uses_this_interpreter_a_fresh_cache_and_compiles_for_real(tmp_path):
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb" / "twice.cc").write_text(KERNEL_SOURCE)
    path = _write(
        tmp_path,
        new_code_cell("import os, sys; print(sys.executable); print(os.environ['AOTBENCH_CACHE_DIR']); "
                      "print(os.getcwd())"),
        new_code_cell("import numpy as np, aotbench\n"
                      "op = aotbench.Custom('twice.cc:Twice', lambda s: s, np.float32)\n"
                      "print(op(np.arange(4, dtype=np.float32)))"),
        new_code_cell("raise ValueError('shown on purpose')", metadata={"tags": ["raises-exception"]}),
        new_code_cell("print('after the expected error')"),
    )
    nb = notebook_runner.run_notebook(path, tmp_path / "work")
    first, built, failing, last = _code_cells(nb)
    executable, cache_dir, cwd = first.outputs[0]["text"].split()
    assert Path(executable) == Path(sys.executable)
    assert Path(cache_dir) == tmp_path / "work" / "aotbench-cache"
    assert Path(cwd) == path.parent
    assert built.outputs[0]["text"] == "[0. 2. 4. 6.]\n"
    assert list((tmp_path / "work" / "aotbench-cache").glob("twice-*.so")), "the kernel was not built there"
    assert notebook_runner.error_outputs(failing)[0]["ename"] == "ValueError"
    assert last.outputs[0]["text"] == "after the expected error\n"
    assert path.read_text().count('"outputs": []') == 4, "the runner must not rewrite the notebook file"


def test_runner_fails_on_an_untagged_error(tmp_path):
    path = _write(tmp_path, new_code_cell("x = 1"), new_code_cell("1 / 0"), new_code_cell("print('unreached')"))
    with pytest.raises(CellExecutionError, match="ZeroDivisionError"):
        notebook_runner.run_notebook(path, tmp_path / "work")


def test_runner_fails_when_a_tagged_cell_does_not_raise(tmp_path):
    path = _write(tmp_path, new_code_cell("x = 1", metadata={"tags": ["raises-exception"]}))
    with pytest.raises(AssertionError, match="tagged 'raises-exception' but raised nothing"):
        notebook_runner.run_notebook(path, tmp_path / "work")


def test_runner_enforces_the_cell_timeout(tmp_path):
    path = _write(tmp_path, new_code_cell("import time; time.sleep(30)"))
    start = time.monotonic()
    with pytest.raises(Exception, match="(?i)timed? ?out"):
        notebook_runner.run_notebook(path, tmp_path / "work", cell_timeout_s=2)
    assert time.monotonic() - start < 25


# --- the notebooks in the repository ----------------------------------------------------------------------------

needs_notebooks = pytest.mark.skipif(not NOTEBOOKS, reason="no notebooks in notebooks/ yet")


@needs_notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, tmp_path):
    nb = notebook_runner.run_notebook(path, tmp_path)
    unexpected = [i for i, cell in enumerate(nb.cells)
                  if notebook_runner.error_outputs(cell) and not notebook_runner.expected_to_fail(cell)]
    assert unexpected == []


@needs_notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_stored_notebook_was_saved_after_a_clean_run(path):
    """Stored with the outputs of one top-to-bottom run, so it reads well on a repository page."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    cells = [cell for cell in _code_cells(nb) if cell.source.strip()]
    assert cells, f"{path.name} has no code"
    counts = [cell.execution_count for cell in cells]
    assert None not in counts, f"{path.name}: cells {[i for i, c in enumerate(counts) if c is None]} never ran"
    assert counts == sorted(counts) and len(set(counts)) == len(counts), \
        f"{path.name}: execution counts {counts} are not one run from top to bottom"
    assert any(cell.outputs for cell in cells), f"{path.name} was saved without outputs"
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        errors = notebook_runner.error_outputs(cell)
        if notebook_runner.expected_to_fail(cell):
            assert errors, f"{path.name} cell {i} is tagged raises-exception but its stored output shows no error"
        else:
            assert not errors, f"{path.name} cell {i} was saved with an error: {errors[0].get('ename')}"



GPU_NOTEBOOK = ROOT / "notebooks" / "04_gpu_prototyping.ipynb"
STAND_IN_SETUP = f"""\
# TEST ONLY: tests/support/host_cupy.py (cupy over host memory) as cupy, and the device reported usable
import sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[1] / "support")!r})
import host_cupy
sys.modules["cupy"] = host_cupy
from aotbench.run import gpu_availability as availability
availability._usable = True
"""
STAND_IN_KERNEL = f"""\
# TEST ONLY: the same saxpy as a host kernel with the gpu entry points, so the stand-in can run it
saxpy = aotbench.Custom({str(Path(__file__).resolve().parents[1] / 'support' / 'kernels' / 'host_device_axpy.cc') + ':Axpy'!r},
                        None, np.float32, target="gpu", attrs={{"a": 2.0, "stream": -1, "refuse": False}})
"""


def test_the_gpu_notebooks_device_cells_run_against_the_host_stand_in(tmp_path):
    """Notebook 04's `if HAVE_GPU:` branches never run where there is none (Binder and CI take the other
    branch, on the CUDA emulator). Run them, and the cells after them, here against
    the host stand-in for cupy (tests/support/host_cupy.py) and a host kernel with saxpy's arithmetic: no real device
    and no real timing, but every name, call and plot in them is exercised, so they cannot fail on a GPU for a
    reason a CPU run would have shown."""
    nb = nbformat.read(GPU_NOTEBOOK, as_version=4)
    first_gpu = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "if HAVE_GPU:" in c.source)
    gpu_sources = [c.source for c in nb.cells if c.cell_type == "code" and "if HAVE_GPU:" in c.source]
    nb.cells.insert(first_gpu, new_code_cell(STAND_IN_KERNEL))
    nb.cells.insert(0, new_code_cell(STAND_IN_SETUP))
    path = tmp_path / "nb" / GPU_NOTEBOOK.name
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)
    ran = notebook_runner.run_notebook(path, tmp_path)
    outputs = {c.source: c.outputs for c in ran.cells if c.cell_type == "code"}
    assert all(not notebook_runner.error_outputs(c) for c in ran.cells if c.cell_type == "code")

    def text(source: str) -> str:
        return "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in outputs[source])

    def images(source: str) -> int:
        return sum("image/png" in o.get("data", {}) for o in outputs[source])

    assert "GPU available: True" in text(ran.cells[2].source)
    run, compare, timings = gpu_sources
    check = next(c.source for c in nb.cells if c.cell_type == "code" and "saxpy.check(" in c.source)
    assert "ndarray (16777216,) max |error| vs cupy: 0.0" in text(run)
    assert "device-to-device copy:" in text(compare) and images(compare) == 1
    assert "cuda events" in text(timings) and "graph" in text(timings) and images(timings) == 1
    assert "check passed" in text(check)
