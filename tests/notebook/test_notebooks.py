"""Every notebook in ``notebooks/`` runs top to bottom through a real Jupyter kernel, and is stored as run, with
outputs that read the same on any machine.

A cell may fail only if its metadata tags include ``raises-exception`` (and then it must fail). The runner
itself is checked first on small notebooks written here, so a broken runner cannot pass the real ones; so is its
storing step (``python tests/support/notebook_runner.py --store``), whose placeholders the stored notebooks explain.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbclient.exceptions import CellExecutionError
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

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

@pytest.mark.slow
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


@pytest.mark.slow
def test_runner_fails_on_an_untagged_error(tmp_path):
    path = _write(tmp_path, new_code_cell("x = 1"), new_code_cell("1 / 0"), new_code_cell("print('unreached')"))
    with pytest.raises(CellExecutionError, match="ZeroDivisionError"):
        notebook_runner.run_notebook(path, tmp_path / "work")


@pytest.mark.slow
def test_runner_fails_when_a_tagged_cell_does_not_raise(tmp_path):
    path = _write(tmp_path, new_code_cell("x = 1", metadata={"tags": ["raises-exception"]}))
    with pytest.raises(AssertionError, match="tagged 'raises-exception' but raised nothing"):
        notebook_runner.run_notebook(path, tmp_path / "work")


@pytest.mark.slow
def test_runner_enforces_the_cell_timeout(tmp_path):
    path = _write(tmp_path, new_code_cell("import time; time.sleep(30)"))
    start = time.monotonic()
    with pytest.raises(Exception, match="(?i)timed? ?out"):
        notebook_runner.run_notebook(path, tmp_path / "work", cell_timeout_s=2)
    assert time.monotonic() - start < 25


# --- the notebooks in the repository ----------------------------------------------------------------------------

needs_notebooks = pytest.mark.skipif(not NOTEBOOKS, reason="no notebooks in notebooks/ yet")


@pytest.mark.slow
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


@pytest.mark.slow
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


# --- stored outputs that read the same on any machine -----------------------------------------------------------

def _texts(value, key: str = ""):
    """Every string of an output (or of stored widget state), with its MIME key; images are not text."""
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, list):
        for v in value:
            yield from _texts(v, key)
    elif isinstance(value, dict):
        for k, v in value.items():
            if not k.startswith("image/"):
                yield from _texts(v, k if "/" in k else key)


def _stored_texts(nb):
    """(where, text) for every text of every stored output of ``nb`` and of its stored widget state."""
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            for key, text in _texts(dict(out)):
                yield f"cell {i} {out.get('output_type')} {key}".rstrip(), text
    for key, text in _texts(dict(nb.metadata.get("widgets", {}))):
        yield f"widget state {key}".rstrip(), text


def _machine_paths() -> list[str]:
    """This machine's folders that no stored output may name: the checkout, the package, the interpreter's
    environment, the temporary folder and the home."""
    import aotbench

    folders = {ROOT, Path(aotbench.__file__).parent, Path(sys.prefix), Path(tempfile.gettempdir()), Path.home()}
    return sorted({form for f in folders for form in (str(f), os.path.realpath(f)) if form.count("/") >= 1
                   and form not in ("/", "/usr", "/usr/local")}, key=len, reverse=True)


#: Paths that name the machine that stored a notebook, wherever it stored it.
MACHINE_PATTERNS = {
    "IPython's temporary file for a cell": re.compile(r"ipykernel_\d+/\d+\.py"),
    "a build cache folder": re.compile(r"/(?:[^\s/\"'<>]+/)*(?:aotbench-cache|\.cache/aotbench)\b"),
    "a folder of the aotbench package": re.compile(r"/(?:[^\s/\"'<>]+/)*aotbench/(?:native|examples|__init__\.py)\b"),
    "a Python environment's site-packages": re.compile(r"/(?:[^\s/\"'<>]+/)+(?:site|dist)-packages\b"),
    "an interpreter's path": re.compile(r"/(?:[^\s/\"'<>]+/)+bin/python[\d.]*\b"),
    "a user's home": re.compile(r"(?<![\w.-])(?:/home/[^\s/\"'<>]+|/Users/[^\s/\"'<>]+|/root)(?=/|\b)"),
    "the temporary folder": re.compile(r"(?<![\w.-])/tmp/"),
}


def _machine_specific(nb) -> list[str]:
    found = []
    own = _machine_paths()
    for where, text in _stored_texts(nb):
        for what, pattern in MACHINE_PATTERNS.items():
            for m in pattern.finditer(text):
                found.append(f"{where}: {what}: ...{text[max(0, m.start() - 40):m.end() + 40]!r}...")
        found += [f"{where}: this machine's {path}" for path in own if path in text]
    return found


@needs_notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_stored_outputs_read_the_same_on_any_machine(path):
    """No stored output names the machine that stored it: no checkout folder, cache folder, IPython temporary file,
    interpreter or site-packages path, temporary folder or home (``--store`` writes placeholders instead)."""
    found = _machine_specific(nbformat.read(path, as_version=4))
    assert not found, f"{path.name} was stored with machine-specific paths (store it with " \
                      f"`python tests/support/notebook_runner.py --store`):\n" + "\n".join(found[:20])


@needs_notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_the_placeholders_in_stored_outputs_are_explained(path):
    """A placeholder the storing step wrote (``<cache>``, ``<aotbench>`` ...) is explained in a markdown cell of the
    same notebook, so a reader knows a live run prints the real path there."""
    nb = nbformat.read(path, as_version=4)
    used = {p for p in notebook_runner.PLACEHOLDERS for _, text in _stored_texts(nb)
            if p in text or p.replace("<", "&lt;").replace(">", "&gt;") in text}
    prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    unexplained = sorted(p for p in used if f"`{p}`" not in prose)
    assert not unexplained, f"{path.name}: stored outputs use {unexplained}, which no markdown cell explains"


def _random_folder(rng, depth: int) -> str:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz0123456789_"))
    return "".join("/" + "".join(rng.choice(letters, int(rng.integers(3, 9)))) for _ in range(depth))


def test_portable_replaces_whole_folders_only(rng):
    """The storing step's rewrite: a folder becomes its placeholder as a whole path or as the leading folders of one
    (also after -I), the most specific first, IPython's cell file becomes <cell>; a longer name is left alone."""
    root = _random_folder(rng, int(rng.integers(1, 4)))
    cache, package = root + "/aotbench-cache", root + "/checkout/aotbench"
    folders = sorted([(cache, "<cache>"), (package, "<aotbench>"), (root, "<tmp>")], key=lambda p: -len(p[0]))
    key = "".join(rng.choice(list("0123456789abcdef"), 20))
    n = int(rng.integers(1, 10**6))
    text = (f"/usr/bin/g++ -I{package}/native/include -o {cache}/k-{key}.so {cache}/cells/k.cc\n"
            f"{root}/ipykernel_{n}/{n + 1}.py:{n % 50}: ContractWarning: k\n"
            f"aotbench ({package}) {root}x/other {root}/other {package}2 /x{root}")
    assert notebook_runner.portable(text, folders) == (
        f"/usr/bin/g++ -I<aotbench>/native/include -o <cache>/k-{key}.so <cache>/cells/k.cc\n"
        f"<cell>:{n % 50}: ContractWarning: k\n"
        f"aotbench (<aotbench>) {root}x/other <tmp>/other <tmp>/checkout/aotbench2 /x{root}")
    html = notebook_runner.portable(f"<pre>{cache}/k.so</pre>", folders, escape_html=True)
    assert html == "<pre>&lt;cache&gt;/k.so</pre>"


STORE_PROBE = [
    "import os, shlex, sys, warnings\nfrom pathlib import Path\nimport numpy as np, aotbench\n"
    "from IPython.display import HTML, display",
    "op = aotbench.Custom('twice.cc:Twice', lambda s: s, np.float32)\n"
    "live = '\\n'.join([shlex.join(op.command), sys.executable, str(Path(aotbench.__file__).parent),\n"
    "                   repr(os.environ.get('AOTBENCH_PCH'))])\n"
    "Path('live.txt').write_text(live)\nprint(live)",
    "warnings.warn('from the cell')",
    "display(HTML(f\"<code>{os.environ['AOTBENCH_CACHE_DIR']}</code>\"))",
]


@pytest.mark.slow
def test_store_writes_the_live_outputs_with_placeholders(tmp_path, monkeypatch):
    """``--store`` runs with the configuration a user gets (an AOTBENCH_PCH=0 of the caller does not reach the
    kernel) and writes back the live outputs with this machine's folders as placeholders, nothing else changed."""
    monkeypatch.setenv("AOTBENCH_PCH", "0")
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb" / "twice.cc").write_text(KERNEL_SOURCE)
    path = _write(tmp_path, *map(new_code_cell, STORE_PROBE))
    notebook_runner.store_notebook(path, tmp_path / "work")
    assert os.environ["AOTBENCH_PCH"] == "0", "the caller's environment was not restored"
    live = (tmp_path / "nb" / "live.txt").read_text()
    stored = nbformat.read(path, as_version=4)
    built, warned, shown = (c.outputs for c in _code_cells(stored)[1:])
    folders = notebook_runner.machine_folders(tmp_path / "work" / notebook_runner.CACHE_FOLDER)
    assert built[0]["text"] == notebook_runner.portable(live, folders) + "\n"
    command, python, package, pch = built[0]["text"].splitlines()
    assert command.startswith(f"{shlex.split(live)[0]} -std=c++17") and " -I<aotbench>/native/include " in command
    assert re.search(r" -o <cache>/twice-[0-9a-f]+\.so ", command)
    assert (python, package, pch) == ("<python>", "<aotbench>", "None")
    assert warned[0]["text"].startswith("<cell>:1: UserWarning: from the cell")
    assert shown[0]["data"]["text/html"] == "<code>&lt;cache&gt;</code>"
    assert not _machine_specific(stored)


@pytest.mark.slow
def test_store_leaves_a_notebook_that_fails_as_it_was(tmp_path):
    path = _write(tmp_path, new_code_cell("print('ran')"), new_code_cell("1 / 0"))
    before = path.read_bytes()
    with pytest.raises(CellExecutionError, match="ZeroDivisionError"):
        notebook_runner.store_notebook(path, tmp_path / "work")
    assert path.read_bytes() == before
    assert notebook_runner.main(["--store", str(path)]) == 1 and path.read_bytes() == before


@pytest.mark.slow
@needs_notebooks
def test_stored_compile_commands_are_what_a_live_run_shows(tmp_path, monkeypatch):
    """Notebook 01's commands, built again here through the magic in a fresh cache (as a user's first run builds
    them) and made portable, are the stored ones: the same flags, pre-includes and files; only the library's key,
    which hashes the machine's paths, may differ."""
    from ipython_shell import aotbench_shell

    quickstart = nbformat.read(ROOT / "notebooks" / "01_quickstart.ipynb", as_version=4)
    cells = _code_cells(quickstart)
    first = next(c for c in cells if c.source.startswith("%%aot_kernel") and "AddKernel" in c.source)
    printed = next(c for c in cells if "shlex.join(AddKernel.command)" in c.source)
    verbose = next(c for c in cells if c.source.startswith("%%aot_kernel") and "--verbose" in c.source)
    stored = [printed.outputs[0]["text"].splitlines()[0],
              next(o["text"] for o in verbose.outputs if o.get("name") == "stdout").splitlines()[0]]
    cache = tmp_path / "cache"
    monkeypatch.setenv("AOTBENCH_CACHE_DIR", str(cache))
    monkeypatch.delenv("AOTBENCH_PCH", raising=False)
    folders = notebook_runner.machine_folders(cache)
    live = []
    with aotbench_shell(tmp_path) as shell:
        for cell in (first, verbose):
            assert shell.run_cell(cell.source).success
            live.append(notebook_runner.portable(shlex.join(shell.user_ns["AddKernel"].command), folders))
    key = re.compile(r"-[0-9a-f]{20}\.so\b")
    assert [key.sub("-KEY.so", s) for s in stored] == [key.sub("-KEY.so", "command: " * i + s)
                                                       for i, s in enumerate(live)]


# --- without the CUDA tools -------------------------------------------------------------------------------------

HIDE_TOOLS = '''\
# TEST ONLY: {tools} are not installed. aotbench also looks in fixed places (site-packages, /usr/local/cuda), so
# PATH cannot hide them: os.access refuses to run any file of these names, and each lookup must now fail.
import os
_access, _hidden = os.access, {tools!r}
os.access = lambda path, mode, *args, **kwargs: (os.path.basename(os.fspath(path)) not in _hidden
                                                 and _access(path, mode, *args, **kwargs))
from aotbench.build import nvcc as _nvcc
from aotbench.errors import ToolchainNotFoundError as _Missing
from aotbench.tools.codeview import binaries as _binaries
for _tool in _hidden:
    try:
        _nvcc.find_nvcc() if _tool == "nvcc" else _binaries.find(_tool)
    except _Missing:
        continue
    raise AssertionError(f"{{_tool}} is still found")
'''
ALL_CUDA_TOOLS = ("nvcc", "cuobjdump", "nvdisasm")


@pytest.mark.slow
@needs_notebooks
@pytest.mark.parametrize("name, hidden, last", [
    ("01_quickstart.ipynb", ALL_CUDA_TOOLS, None),
    ("04_gpu_prototyping.ipynb", ("cuobjdump", "nvdisasm"), "saxpy.plan_info("),
    ("04_gpu_prototyping.ipynb", ALL_CUDA_TOOLS, "saxpy.plan_info("),
], ids=["01-no-nvcc", "04-no-cuobjdump", "04-no-nvcc"])
def test_notebooks_go_on_without_the_cuda_tools(name, hidden, last, tmp_path):
    """Run All does not stop where nvcc, cuobjdump or nvdisasm is missing: each cell that needs one says in one
    line which is missing and that `pip install '.[nvcc]'` brings it, and every later cell runs (notebook 04 up to
    its planning cell, past the views that need the tools)."""
    from aotbench.run.gpu_availability import gpu_available

    if gpu_available():
        pytest.skip("a usable GPU: its gpu cells build with nvcc (no emulator to fall back on)")
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    if last is not None:
        end = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and last in c.source)
        nb.cells = nb.cells[:end + 1]
    nb.cells.insert(1, new_code_cell(HIDE_TOOLS.format(tools=set(hidden))))
    path = tmp_path / "nb" / name
    path.parent.mkdir()
    nbformat.write(nb, path)
    ran = notebook_runner.run_notebook(path, tmp_path / "work")
    cells = _code_cells(ran)
    assert not [c.source[:60] for c in cells if notebook_runner.error_outputs(c)
                and not notebook_runner.expected_to_fail(c)]
    degrading = [c for c in cells if "except aotbench.ToolchainNotFoundError" in c.source]
    assert degrading, f"{name} has no cell that goes on without a CUDA tool"
    notes = []
    for cell in degrading:
        text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
        missing = re.findall(r"\b(nvcc|cuobjdump|nvdisasm) is not installed here\b", text)
        if missing:
            assert text.count("\n") == 1 and "`pip install '.[nvcc]'`" in text, text
            assert set(missing) <= set(hidden)
            notes.append(missing[0])
        else:  # this view's tools are all here: it showed the view
            assert "annotate()" in cell.source and "nvcc" not in hidden and cell.outputs, cell.source
    assert notes and all(tool in hidden for tool in notes)
    if last is not None:
        assert "outputs" in str(cells[-1].outputs[0].get("data", {}).get("text/plain", "")), "planning did not run"
    else:
        assert cells[-1].outputs, "the last cell did not run"


# --- the notebooks' kernels -------------------------------------------------------------------------------------

@pytest.mark.slow
@needs_notebooks
def test_notebook_02s_kernel_refuses_an_axis_it_does_not_handle(tmp_path, rng):
    """Notebook 02's slider offers axis -2 and -1: its kernel's InferShape refuses them (and any other axis but 0
    and 1, and a rank but 2) with a clear error before reading a dimension, so no call and no panel ever shows a
    shape read out of bounds; axis 0 and 1 keep numpy's shapes."""
    import aotbench

    nb = nbformat.read(ROOT / "notebooks" / "02_attributes_and_shapes.ipynb", as_version=4)
    sources = [c.source.partition("\n")[2] for c in _code_cells(nb) if c.source.startswith("%%aot_kernel")]
    assert len(sources) == 3, "notebook 02 should have its kernel, the slip and the fix"
    m, n = (int(v) for v in rng.integers(1, 40, 2))
    x, y = (rng.standard_normal((m, n)).astype(np.float32) for _ in range(2))
    bad = [-1, -2, int(rng.integers(2, 1000)), -int(rng.integers(3, 1000))]
    for i, source in enumerate(sources):
        (tmp_path / f"kernel{i}.cc").write_text(source)
        op = aotbench.Custom(f"{tmp_path / f'kernel{i}.cc'}:CustomKernel", None, np.float32,
                             attrs={"axis": 1, "keep_dim": False})
        for axis in (0, 1):
            for keep_dim in (False, True):
                expected = (x + y).sum(axis=axis, keepdims=keep_dim)
                dynamic = {(0, False): (None,), (0, True): (1, None), (1, False): (m,), (1, True): (m, 1)}
                assert op.with_attrs(axis=axis, keep_dim=keep_dim).infer_shape((m, None), (m, None)) == \
                    dynamic[axis, keep_dim]
                assert op.with_attrs(axis=axis, keep_dim=keep_dim)(x, y).shape == expected.shape
        for axis in bad:
            refused = op.with_attrs(axis=axis, keep_dim=bool(rng.integers(2)))
            refusal = rf"InferShape threw .*axis must be 0 or 1, not {axis}\b"
            for call in (lambda: refused.infer_shape((m, n), (m, n)), lambda: refused(x, y)):
                with pytest.raises(aotbench.KernelError, match=refusal):
                    call()
        with pytest.raises(aotbench.KernelError, match="must be 2-D"):
            op.infer_shape((m,), (m,))
    pytest.importorskip("ipywidgets")
    panel = op.explore(x, y, reference=lambda x, y, axis, keep_dim: (x + y).sum(axis=axis, keepdims=keep_dim),
                       dynamic=[("m", "n"), ("m", "n")])
    for axis in (-1, -2):
        summary = panel.set(axis=axis).summary()
        assert f"axis must be 0 or 1, not {axis}" in summary and "output shape (" not in summary, summary
        assert "<code>" not in panel.shape.value, panel.shape.value
    assert f"output shape ({m},)" in panel.set(axis=1, keep_dim=False).summary()
