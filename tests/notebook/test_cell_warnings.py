"""An aotbench warning raised from a notebook cell names the cell as IPython does (``Cell In[n], line m``), not
ipykernel's temporary file for it (``/tmp/ipykernel_1234/2745139043.py:3``); other warnings, and aotbench's
warnings in a plain script, keep Python's standard form. Checked through a real Jupyter kernel
(tests/support/notebook_runner.py) and a real ``python`` process."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

import aotbench
from aotbench.errors import ContractWarning
from aotbench.notebook import display

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
import notebook_runner

TUTORIAL = aotbench.examples_dir() / "tutorial" / "kernel.cc"
ROOT = Path(__file__).resolve().parents[2]


def tutorial_call(rows: int, cols: int) -> str:
    """Code whose last line calls the tutorial's kernel, which reads workspace it never wrote: a ContractWarning."""
    return (f"import numpy as np, aotbench\n"
            f"reduce = aotbench.Custom({str(TUTORIAL)!r} + ':CustomKernel', None, np.float32,\n"
            f"                         attrs={{'axis': 1, 'keep_dim': False}})\n"
            f"x = np.ones(({rows}, {cols}), np.float32)\n"
            f"out = reduce(x, x)\n")


def stderr_of(cell) -> str:
    return "".join(o["text"] for o in cell.get("outputs", []) if o.get("output_type") == "stream"
                   and o.get("name") == "stderr")


@pytest.mark.slow
def test_a_cells_aotbench_warning_names_the_cell_not_the_temporary_file(tmp_path, rng):
    rows, cols = (int(v) for v in rng.integers(2, 9, size=2))
    call = tutorial_call(rows, cols)
    plain = "import warnings\nwarnings.warn('not aotbench', UserWarning)\n"
    nb = new_notebook(cells=[new_code_cell("1 + 1"), new_code_cell(call), new_code_cell(plain)])
    path = tmp_path / "warnings.ipynb"
    nbformat.write(nb, path)
    done = notebook_runner.run_notebook(path, tmp_path, cell_timeout_s=300)

    ours = stderr_of(done.cells[1])
    line = call.splitlines().index("out = reduce(x, x)") + 1
    assert ours.startswith(f"Cell In[2], line {line}: ContractWarning: CustomKernel, first call with input shapes "
                           f"({rows}, {cols}), ({rows}, {cols})"), ours
    assert ours.rstrip().splitlines()[-1] == "  out = reduce(x, x)", ours  # the cell's line, as Python shows it
    assert "ipykernel_" not in ours and not re.search(r"\.py:\d+", ours), ours

    # Not aotbench's: Python's standard form, the temporary file included (nothing of it is rewritten).
    theirs = stderr_of(done.cells[2])
    assert re.match(r"\S+\.py:2: UserWarning: not aotbench", theirs), theirs


@pytest.mark.slow
def test_a_plain_script_keeps_pythons_standard_form(tmp_path, rng):
    rows, cols = (int(v) for v in rng.integers(2, 9, size=2))
    script = tmp_path / "script.py"
    script.write_text(tutorial_call(rows, cols))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(f"{script}:5: ContractWarning: CustomKernel, first call"), done.stderr
    assert "Cell In[" not in done.stderr


def test_the_format_is_only_for_aotbench_warnings_from_known_cells(tmp_path, rng, monkeypatch):
    """Without a kernel: a file IPython does not know as a cell, or a warning not aotbench's, is formatted by the
    function the hook replaced; the hook is installed once however often it is asked."""
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # as it was, after the test
    display.install_warning_format()
    hooked = warnings.formatwarning
    display.install_warning_format()
    assert warnings.formatwarning is hooked and getattr(hooked, "aotbench_cells", False)
    lineno = int(rng.integers(1, 1000))
    where = str(tmp_path / "module.py")
    assert display.cell_warning_text("m", ContractWarning, where, lineno) is None
    assert display.cell_warning_text("m", UserWarning, where, lineno) is None
    assert hooked("m", ContractWarning, where, lineno, "") == f"{where}:{lineno}: ContractWarning: m\n"


GPU_CELL = """%%aot_kernel gpu --out-shape "lambda x: x"
#include <cstdint>
__global__ void twice(const float *x, float *out, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = 2 * x[i];
}
extern "C" int Twice(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                     void *extra) {
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; d++) n *= shapes[0][d];
  twice<<<(n + 255) / 256, 256, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<const float *>(params[0]),
                                                                    static_cast<float *>(params[1]), n);
  return 0;
}
"""


@pytest.mark.slow
def test_a_warning_from_a_magic_names_the_cell_not_ipythons_machinery(tmp_path):
    """``%%aot_kernel gpu`` without a usable GPU warns that the op is emulated: from inside the magic, which IPython
    calls, so the warning must skip IPython's frames as well as aotbench's and name the cell."""
    from aotbench.run.gpu_availability import gpu_unavailable_reason

    if gpu_unavailable_reason() is None:
        pytest.skip("a usable GPU here: the op is not emulated, so there is no EmulationWarning to place")
    nb = new_notebook(cells=[new_code_cell("%load_ext aotbench"), new_code_cell(GPU_CELL)])
    path = tmp_path / "magic_warning.ipynb"
    nbformat.write(nb, path)
    done = notebook_runner.run_notebook(path, tmp_path, cell_timeout_s=300)
    text = stderr_of(done.cells[1])
    assert text.startswith("Cell In[2], line 1: EmulationWarning: Twice runs on aotbench's CUDA emulator"), text
    assert "IPython" not in text and "interactiveshell" not in text and not re.search(r"\.py:\d+", text), text
    # The cell's line as typed, not the call IPython compiled it into (which holds the whole body).
    assert text.rstrip().splitlines()[-1] == '  %%aot_kernel gpu --out-shape "lambda x: x"', text
