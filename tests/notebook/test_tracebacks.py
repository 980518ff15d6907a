"""In a notebook, an aotbench error shows the user's line and the message, not aotbench's own frames.

A real Jupyter kernel (nbclient + ipykernel, tests/support/notebook_runner.py) runs one cell per error kind: an
``AttrError`` at a call, a ``ContractViolation`` from the guarded first call, a ``KernelCrashedError`` from an
isolated kernel that dereferences null (built with -g: its frames name the kernel's file and line), a
``SanitizerError`` from AddressSanitizer, and a ``ShapeError`` caused by the user's own ``out_shape`` function.
The rendered traceback IPython sends is checked: no frame of a file of the aotbench package (its real directory,
not any path that merely contains "aotbench/"), the user's line present, the message present. The kernels are
copied into ``<tmp>/aotbench/tests/support/kernels`` first, as in a clone in a folder named ``aotbench`` (what
``git clone`` gives): their paths in the messages then contain "aotbench/" and must not count as aotbench's frames.
The same renderer is also checked directly, without a kernel, on a nested call.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

import aotbench
from aotbench.notebook.tracebacks import user_traceback

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
import notebook_runner

KERNELS = Path(__file__).resolve().parents[1] / "support" / "kernels"
PACKAGE = str(Path(aotbench.__file__).resolve().parent)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# A frame's file as aotbench's renderer writes it (File "path", line n) and as IPython's own does (File path:n).
FRAME_FILE = re.compile(r'^\s*File "(?P<quoted>[^"]+)", line \d+|^\s*File (?P<bare>\S+?):\d+', re.MULTILINE)
CLONE_KERNELS = Path("aotbench", "tests", "support", "kernels")  # where a clone named aotbench has them
COPIED = ("trust_inputs.cc", "iso_modes.cc", "san_faults.cc")


def package_frames(text: str) -> list[str]:
    """The files of the frames in a rendered traceback that lie in the aotbench package's own directory."""
    files = [m["quoted"] or m["bare"] for m in FRAME_FILE.finditer(text)]
    return [f for f in files if Path(os.path.realpath(f)).is_relative_to(PACKAGE)]


SETUP = """
import numpy as np, aotbench
KERNELS = {kernels!r}
TUTORIAL = str(aotbench.examples_dir() / "tutorial" / "kernel.cc")
rng = np.random.default_rng()
x = rng.standard_normal((4, 5)).astype(np.float32)
"""

# (name, cell source, the user's line that must be shown, text of the message that must be shown)
CASES = [
    ("AttrError",
     ("rows = aotbench.Custom(KERNELS + '/trust_inputs.cc:Rows', (2,), np.int64, attrs={'rows': [[]], 'mode': 2})\n"
     "rows(x)"),
     "rows(x)", "read attribute 'rows' as Attr<std::vector<int64_t>>"),
    ("ContractViolation",
     ("reduce = aotbench.Custom(TUTORIAL + ':CustomKernel', None, np.float32, attrs={'axis': 1, 'keep_dim': True})\n"
     "reduce(x, x)"),
     "reduce(x, x)", "64 bytes past the end of its 16-byte buffer"),
    ("KernelCrashedError",
     ("reg = (aotbench.CustomRegOp('IsoFault').input(0, 'x').input(0, 'y').output(0, 'sum').output(0, 'prod')\n"
     "       .attr('alpha', 'required', 'float', value=1.0).attr('mode', 'required', 'str').target('CPU')\n"
     "       .get_op_info())\n"
     "crashy = aotbench.Custom(KERNELS + '/iso_modes.cc:IsoFault', None, None, reg_info=reg, isolate=True,\n"
     "                         flags=['-g'])\n"
     "crashy(x, x, 'segv')"),
     "crashy(x, x, 'segv')", "IsoFault at iso_modes.cc:"),
    ("SanitizerError",
     ("reg = aotbench.CustomRegOp('faulty').input(0, 'x').output(0, 'y').attr('mode', 'required', 'int').get_op_info()\n"
     "faulty = aotbench.Custom(KERNELS + '/san_faults.cc:Faulty', lambda s: s, np.float32, reg_info=reg,\n"
     "                         sanitize='address', timeout_s=60)\n"
     "faulty(x, 1)"),
     "faulty(x, 1)", "heap-buffer-overflow"),
    ("ShapeError",
     ("def half(shape):\n"
     "    return (shape[0] // 0,)\n"
     "echo = aotbench.Custom(KERNELS + '/trust_inputs.cc:Echo', half, np.float32)\n"
     "echo(x)"),
     "echo(x)", "out_shape((4, 5),) raised ZeroDivisionError"),
]


CELL_KERNEL = """%%aot_kernel cpu --isolate --flags "-g" --out-shape "lambda x: x"
#include <cstdint>

extern "C" int CellCrash(int nparam, void **params, int *ndims, int64_t **shapes,
                         const char **dtypes, void *stream, void *extra) {
  float *out = static_cast<float *>(params[1]);
  float *nowhere = nullptr;
  out[0] = *nowhere;
  return 0;
}
"""
CELL_CRASH_LINE = 7  # out[0] = *nowhere; counted in the cell body (the magic line is not part of it)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, tuple[str, str]]:
    """Run the cases in one real kernel: {error name: (rendered traceback text, evalue)}, plus "cell crash"."""
    work = tmp_path_factory.mktemp("tracebacks")
    kernels = work / "checkouts" / CLONE_KERNELS  # not beside the notebook: a folder aotbench there is imported
    kernels.mkdir(parents=True)
    for name in COPIED:
        shutil.copy2(KERNELS / name, kernels / name)
    expected = {"tags": [notebook_runner.EXPECTED_ERROR_TAG]}
    setup = SETUP.format(kernels=str(kernels))
    nb = new_notebook(cells=[new_code_cell(setup), new_code_cell("%load_ext aotbench"), new_code_cell(CELL_KERNEL),
                             new_code_cell("CellCrash(x)", metadata=expected)]
                      + [new_code_cell(source, metadata=expected) for _, source, _, _ in CASES])
    path = work / "errors.ipynb"
    nbformat.write(nb, path)
    done = notebook_runner.run_notebook(path, work, cell_timeout_s=600)
    (crash,) = notebook_runner.error_outputs(done.cells[3])
    out = {"cell crash": (ANSI.sub("", "\n".join(crash["traceback"])), crash["evalue"]),
           "kernels": (str(kernels), "")}
    for (name, _, _, _), cell in zip(CASES, done.cells[4:]):
        (error,) = notebook_runner.error_outputs(cell)
        assert error["ename"] == name, (name, error["ename"], error["evalue"])
        out[name] = (ANSI.sub("", "\n".join(error["traceback"])), error["evalue"])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name,line,message", [(c[0], c[2], c[3]) for c in CASES], ids=[c[0] for c in CASES])
def test_notebook_traceback_shows_the_users_line_and_no_aotbench_frame(rendered, name, line, message):
    text, evalue = rendered[name]
    assert PACKAGE not in text and package_frames(text) == [], text
    assert line in text, text
    assert message in text and message in evalue, text
    assert re.search(r"Cell In\[\d+\], line \d+", text), text
    assert text.rstrip().splitlines()[-1] != line  # the message comes after the user's line


@pytest.mark.slow
def test_a_kernel_in_a_folder_named_aotbench_is_not_an_aotbench_frame(rendered):
    """The clone-named-aotbench case: the message names the kernel by a path containing "aotbench/" (so a check
    for that text would fail), yet no frame of the package is shown."""
    kernels, _ = rendered["kernels"]
    text, _ = rendered["SanitizerError"]
    assert f"{kernels}/san_faults.cc:" in text and "/aotbench/tests/support/kernels/" in text, text
    assert PACKAGE not in text and package_frames(text) == [], text


def test_package_frames_tells_the_packages_files_from_paths_that_contain_aotbench(tmp_path):
    """The check itself can fail: a frame in the package's directory (either rendering) is found; a file in
    another folder named aotbench, and a non-frame mention of one, are not."""
    inside = str(Path(PACKAGE, "run", "calls.py"))
    clone = str(tmp_path / CLONE_KERNELS / "helper.py")
    text = (f'  File "{inside}", line 12, in call\n  File {inside}:40, in _slow\n'
            f'  File "{clone}", line 3, in helper\nSanitizerError: at {tmp_path}/aotbench/k.cc:16\n')
    assert package_frames(text) == [inside, inside]
    assert package_frames(text.replace(inside, clone)) == []


@pytest.mark.slow
def test_crash_traceback_names_the_kernels_frames_not_the_workers(rendered):
    text, _ = rendered["KernelCrashedError"]
    assert "_worker.py" not in text and "Fatal Python error" not in text and "aotbench-frame" not in text, text
    line = next(n for n, row in enumerate((KERNELS / "iso_modes.cc").read_text().splitlines(), 1) if "*p = 1;" in row)
    assert f"IsoFault at iso_modes.cc:{line}" in text and "*p = 1;" in text, text


@pytest.mark.slow
def test_a_cell_kernels_crash_names_the_cells_line(rendered):
    """A %%aot_kernel cell built with -g crashes at a line counted in the cell, shown with its text."""
    text, evalue = rendered["cell crash"]
    assert f"CellCrash at <cell>:{CELL_CRASH_LINE}" in evalue and "out[0] = *nowhere;" in evalue, evalue
    lines = CELL_KERNEL.splitlines()
    assert lines[CELL_CRASH_LINE].strip() == "out[0] = *nowhere;"  # line 1 is the one after the magic line
    assert PACKAGE not in text and package_frames(text) == [] and "CellCrash(x)" in text


@pytest.mark.slow
def test_the_users_own_cause_is_shown_with_its_frames(rendered):
    """The user's out_shape function raised: its frame and line are shown first, as Python shows a cause."""
    text, _ = rendered["ShapeError"]
    assert "return (shape[0] // 0,)" in text and "ZeroDivisionError: integer division or modulo by zero" in text
    assert text.index("ZeroDivisionError") < text.index("ShapeError")


def _outer(op, x):
    return op(x)


def test_renderer_keeps_user_frames_and_drops_aotbench_frames(rng):
    """Without a kernel: a user's helper function and the calling line are kept; every frame between them and
    the raise, inside aotbench, is left out; the message is the last line."""
    op = aotbench.Custom(f"{KERNELS}/trust_inputs.cc:Ranked", (1,) * 65, "float32")
    try:
        _outer(op, rng.standard_normal(3).astype("float32"))
    except aotbench.ShapeError as exc:
        lines = user_traceback(exc)
        full = exc
    else:  # pragma: no cover - the call must fail
        pytest.fail("65 dimensions were accepted")
    text = "\n".join(lines)
    assert "return op(x)" in text and "_outer(op," in text and __file__ in text
    assert PACKAGE not in text
    assert lines[-1].startswith("ShapeError: ") and "65 dimensions" in lines[-1]
    # the full traceback does pass through aotbench (so the filter did something)
    import traceback

    assert PACKAGE in "".join(traceback.format_exception(full))
    assert full._render_traceback_() == lines
