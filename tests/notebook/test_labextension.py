"""The JupyterLab extension ``aotbench-cells`` (``labextension/``): ``%%aot_kernel`` cells are edited as C++.

Without Chromium: the committed build (``labextension/prebuilt``) was made from the sources as they are (the build
records their sha256 in ``prebuilt/SOURCES.sha256``; an edit without ``npm run build`` fails here), pyproject's
data-files ship every built file, and a wheel has them under ``share/jupyter/labextensions/aotbench-cells``.

In Chromium (marker ``browser``): a real ``jupyter lab`` of this interpreter, on 127.0.0.1 with a token, its Jupyter
config, data, runtime, settings and workspace directories under the test's tmp_path, opens a notebook with a cpu
and a gpu ``%%aot_kernel`` cell and a Python cell. The extension is the one installed in ``sys.prefix``
(``share/jupyter/labextensions``, as a wheel installs it, which must equal ``labextension/prebuilt``); an editable
install has none there (setuptools installs no data files in editable mode), and then the test puts a copy of
``labextension/prebuilt`` on ``JUPYTER_PATH``. The checks read the page as a user sees it: the language
CodeMirror gives the editor (``data-language``) and the computed style of tokens against the style of a real
comment and a real string, after the kernel has started (the notebook resets every cell to its kernel's language
then). Typing into an editor must switch it both ways, and a cell added later is seen too. Every process carries a
marker in its environment and whatever is still alive at the end is killed by id. The page may fetch only from
the server. The screenshot goes to ``$AOTBENCH_SCREENSHOT_DIR``, else the test's tmp_path, as
``highlighted_cell.png``; ``pytest -s`` prints its path.
"""

from __future__ import annotations

import contextlib
import filecmp
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
import zipfile
from pathlib import Path

import pytest
import tomllib

import browser_support as support

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "labextension"
PREBUILT = SOURCE / "prebuilt"
NAME = "aotbench-cells"
SHARE = Path("share") / "jupyter" / "labextensions" / NAME
PAGE_TIMEOUT_MS = 90_000            # JupyterLab's first load, then the kernel's start
SWITCH_TIMEOUT_MS = 10_000

CPU_CELL = """%%aot_kernel cpu --attr axis=1
#include "custom_aot_extra.h"
// it's a comment with an apostrophe
extern "C" int CustomKernel(int nparam, void **params, int *ndims, int64_t **shapes,
                            const char **dtypes, void *stream, void *extra) { return 0; }"""
GPU_CELL = """%%aot_kernel gpu
#include "custom_aot_extra.h"
__global__ void AddOne(float *x) { x[threadIdx.x] += 1.0f; }"""
PYTHON_CELL = """# a Python comment
x = "a string"  # it's Python
print(x)"""


# --- the committed build --------------------------------------------------------------------------------------

def _recorded_sources() -> str:
    """What ``labextension/scripts/record-sources.mjs`` writes: ``sha256  path`` per source, sorted by path."""
    paths = ["package.json", "tsconfig.json",
             *(p.relative_to(SOURCE).as_posix() for p in (SOURCE / "src").rglob("*") if p.is_file())]
    return "".join(f"{hashlib.sha256((SOURCE / p).read_bytes()).hexdigest()}  {p}\n" for p in sorted(paths))


def _built_files() -> set[str]:
    return {p.relative_to(PREBUILT).as_posix() for p in PREBUILT.rglob("*") if p.is_file()}


def test_the_committed_build_is_made_from_the_current_sources():
    record = PREBUILT / "SOURCES.sha256"
    assert record.exists(), "labextension/prebuilt has no SOURCES.sha256: build it (CONTRIBUTING.md)"
    assert record.read_text() == _recorded_sources(), (
        "labextension/ changed since prebuilt/ was built: run `npm ci && npm run build` in labextension/ "
        "(CONTRIBUTING.md, 'The JupyterLab extension') and commit prebuilt/")


def test_the_build_is_whole_and_pyproject_ships_all_of_it():
    source = json.loads((SOURCE / "package.json").read_text())
    built = json.loads((PREBUILT / "package.json").read_text())
    assert built["name"] == source["name"] == NAME
    entry = built["jupyterlab"]["_build"]["load"]
    assert (PREBUILT / entry).is_file(), f"prebuilt/package.json loads {entry}, which is not there"
    data_files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    shipped = {}
    for dest, patterns in data_files.items():
        for pattern in patterns:
            for path in ROOT.glob(pattern):
                shipped[(Path(dest) / path.name).as_posix()] = path
    expected = {(SHARE / f).as_posix() for f in _built_files()} | {(SHARE / "install.json").as_posix()}
    assert set(shipped) == expected


@pytest.mark.slow
def test_a_wheel_has_the_extension_under_share(tmp_path):
    """``pip wheel`` of a copy of the tree (setuptools builds in the source folder): the wheel's data files are
    the built extension, byte for byte, where JupyterLab looks."""
    tree = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info", "node_modules", "lib")
    shutil.copytree(ROOT / "aotbench", tree / "aotbench", ignore=ignore)
    shutil.copytree(PREBUILT, tree / "labextension" / "prebuilt")
    for name in ("pyproject.toml", "README.md", "labextension/install.json"):
        shutil.copy(ROOT / name, tree / name)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "wheel"),
                          str(tree)], capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    (wheel,) = (tmp_path / "wheel").glob("aotbench-*.whl")
    prefix = f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.data/data/"
    with zipfile.ZipFile(wheel) as zf:
        data = {name[len(prefix):]: zf.read(name) for name in zf.namelist() if name.startswith(prefix)}
    expected = {(SHARE / f).as_posix(): (PREBUILT / f).read_bytes() for f in _built_files()}
    expected[(SHARE / "install.json").as_posix()] = (SOURCE / "install.json").read_bytes()
    assert data == expected


marker = support.process_marker("jupyterlab", "playwright", "ipykernel")

# --- processes ------------------------------------------------------------------------------------------------

def _extension_path(root: Path) -> tuple[dict[str, str], str]:
    """Where JupyterLab finds the extension: the copy a wheel installed into ``sys.prefix`` (which must be the
    committed build), else, for an editable install, a copy of the committed build on ``JUPYTER_PATH``."""
    installed = Path(sys.prefix) / SHARE
    if installed.is_dir():
        built = _built_files()
        found = {p.relative_to(installed).as_posix() for p in installed.rglob("*") if p.is_file()} - {"install.json"}
        differ = sorted(f for f in built & found if not filecmp.cmp(installed / f, PREBUILT / f, shallow=False))
        assert found == built and not differ, (
            f"{installed} is not labextension/prebuilt (missing {sorted(built - found)}, extra "
            f"{sorted(found - built)}, different {differ}): reinstall aotbench (pip install '.[test]'), or copy "
            "labextension/prebuilt there again")
        return {}, f"installed in {installed}"
    path = root / "jupyter-path"
    shutil.copytree(PREBUILT, path / "labextensions" / NAME)
    return {"JUPYTER_PATH": str(path)}, f"copied from {PREBUILT} (nothing in {installed}: an editable install)"


def _write_notebook(path: Path) -> None:
    cells = [{"cell_type": "code", "id": f"cell-{i}", "metadata": {}, "execution_count": None, "outputs": [],
              "source": source} for i, source in enumerate((CPU_CELL, GPU_CELL, PYTHON_CELL))]
    path.write_text(json.dumps({
        "nbformat": 4, "nbformat_minor": 5, "cells": cells,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                     "language_info": {"name": "python", "codemirror_mode": {"name": "ipython", "version": 3}}},
    }, indent=1))


def _jupyter_env(root: Path) -> dict[str, str]:
    dirs = {name: root / name for name in ("config", "data", "runtime", "ipython", "settings", "workspaces")}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    spec_dir = dirs["data"] / "kernels" / "python3"     # first on Jupyter's path: a kernel of this interpreter
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3", "language": "python",
    }))
    news = dirs["settings"] / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text(json.dumps({"fetchNews": "false"}))   # no "get notified about Jupyter news?" over the cells
    return {"JUPYTER_CONFIG_DIR": str(dirs["config"]), "JUPYTER_DATA_DIR": str(dirs["data"]),
            "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]), "IPYTHONDIR": str(dirs["ipython"]),
            "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]), "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"])}


class LabServer:
    def __init__(self, url: str, log: Path, extension: str):
        self.url, self.log, self.extension = url, log, extension

    def log_tail(self) -> str:
        return f"--- jupyter lab log ({self.log}) ---\n{support.tail(self.log)}"


@pytest.fixture
def lab(tmp_path, marker):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    _write_notebook(notebooks / "cells.ipynb")
    extension_env, extension = _extension_path(tmp_path)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("JUPYTER", "JPY_"))}
    env.update(_jupyter_env(tmp_path / "jupyter"), **extension_env, **{support.MARKER_VAR: marker})
    token = uuid.uuid4().hex
    log = tmp_path / "jupyter-lab.log"
    proc, port = support.start_server(
        lambda port: support.jupyter_lab_argv(sys.executable, port, token, notebooks),
        lambda port: f"http://127.0.0.1:{port}/api", notebooks, env, log, marker, "jupyter lab")
    base = f"http://127.0.0.1:{port}"
    try:
        yield LabServer(f"{base}/lab/tree/cells.ipynb?token={token}", log, extension)
    finally:
        support.stop(proc, marker)


# --- the page -------------------------------------------------------------------------------------------------

# The editor's language and the computed style of the token holding a piece of text, for the code cell at ``i``.
EDITOR = r"""
() => {
  const editor = (i) => document.querySelectorAll('.jp-Notebook .jp-CodeCell .cm-content')[i];
  window.__aotb = {
    count: () => document.querySelectorAll('.jp-Notebook .jp-CodeCell .cm-content').length,
    language: (i) => { const e = editor(i); return e ? e.getAttribute('data-language') : null; },
    style(i, text) {
      const walker = document.createTreeWalker(editor(i), NodeFilter.SHOW_TEXT);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        if (node.textContent.includes(text)) {
          const s = getComputedStyle(node.parentElement);
          return {color: s.color, fontStyle: s.fontStyle, text: node.parentElement.textContent};
        }
      }
      return null;
    },
  };
}
"""


class Editors:
    """The notebook's code cell editors, by index, as the page renders them."""

    def __init__(self, page):
        self.page = page

    def language(self, i: int) -> str | None:
        return self.page.evaluate("(i) => window.__aotb.language(i)", i)

    def style(self, i: int, text: str) -> dict:
        found = self.page.evaluate("([i, t]) => window.__aotb.style(i, t)", [i, text])
        assert found is not None, f"no {text!r} in code cell {i}"
        return found

    def wait_language(self, i: int, language: str) -> None:
        try:
            self.page.wait_for_function("([i, l]) => window.__aotb.language(i) === l", arg=[i, language],
                                        timeout=SWITCH_TIMEOUT_MS)
        except Exception as exc:
            raise AssertionError(f"code cell {i} is {self.language(i)!r}, not {language!r}, "
                                 f"after {SWITCH_TIMEOUT_MS} ms") from exc

    def replace_first_line(self, i: int, text: str) -> None:
        line = self.page.locator(".jp-Notebook .jp-CodeCell").nth(i).locator(".cm-line").first
        line.click()
        self.page.keyboard.press("Home")
        self.page.keyboard.press("Shift+End")
        self.page.keyboard.type(text)


def _shot_path(tmp_path: Path) -> Path:
    return support.screenshot_dir(tmp_path) / "highlighted_cell.png"


def _styles(cell_style: dict) -> tuple[str, str]:
    return cell_style["color"], cell_style["fontStyle"]


@pytest.mark.browser
@pytest.mark.slow
def test_aot_kernel_cells_are_cxx_in_jupyterlab(lab, marker, tmp_path):
    from playwright.sync_api import sync_playwright

    shot = _shot_path(tmp_path)
    console: list[str] = []
    with sync_playwright() as pw:
        browser = support.launch(pw, marker)
        try:
            origin = lab.url.split("/lab/")[0]
            page = support.local_page(browser, {"width": 1400, "height": 900}, origin, console)
            start = time.perf_counter()
            page.goto(lab.url, wait_until="domcontentloaded", timeout=PAGE_TIMEOUT_MS)
            extensions = page.evaluate("""() => JSON.parse(document.getElementById('jupyter-config-data')
                                          .textContent).federated_extensions.map(e => e.name)""")
            assert NAME in extensions, f"JupyterLab did not find {NAME} ({lab.extension}): {extensions}"
            try:
                page.wait_for_function("() => document.querySelectorAll('.jp-CodeCell .cm-content').length === 3",
                                       timeout=PAGE_TIMEOUT_MS)
                # The notebook gives every code cell its kernel's language once the kernel tells it: check after.
                page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']",
                                       timeout=PAGE_TIMEOUT_MS)
            except Exception as exc:
                raise AssertionError(f"the notebook did not open with an idle kernel: {exc}\n{lab.log_tail()}\n"
                                     "--- console ---\n" + "\n".join(console[-30:])) from exc
            loaded_s = time.perf_counter() - start
            page.evaluate(EDITOR)
            editors = Editors(page)

            for i, language in enumerate(["cpp", "cpp", "python"]):  # the editors load their language lazily
                editors.wait_language(i, language)
            assert [editors.language(i) for i in range(3)] == ["cpp", "cpp", "python"]
            comment = _styles(editors.style(2, "# a Python comment"))
            string = _styles(editors.style(2, '"a string"'))
            assert comment != string
            for i in (0, 1):
                include = editors.style(i, "#include")
                assert include["text"] == "#include", include          # a token of its own, not a whole line
                assert _styles(include) != comment, f"#include is styled as a comment in code cell {i}"
                assert _styles(editors.style(i, '"custom_aot_extra.h"')) == string
            # In C++ the apostrophe is inside a // comment: no string starts there, and the next line is code.
            assert _styles(editors.style(0, "// it's a comment")) == comment
            assert _styles(editors.style(0, "s a comment with an apostrophe")) == comment
            assert _styles(editors.style(0, "extern")) not in (comment, string)
            page.locator(".jp-Notebook .jp-CodeCell").first.screenshot(path=str(shot))

            # The first line edited to Python: the cell is Python again, where #include is a comment.
            editors.replace_first_line(0, "x = 1  # no longer a kernel cell")
            editors.wait_language(0, "python")
            assert _styles(editors.style(0, "#include")) == comment
            assert editors.language(1) == "cpp" and editors.language(2) == "python"
            # ... and back.
            editors.replace_first_line(0, "%%aot_kernel cpu")
            editors.wait_language(0, "cpp")
            assert _styles(editors.style(0, "#include")) != comment

            # A cell added later: the kernel line typed into a new cell below the Python one.
            page.locator(".jp-Notebook .jp-CodeCell").nth(2).locator(".jp-InputPrompt").click()
            page.keyboard.press("b")
            page.wait_for_function("() => window.__aotb.count() === 4", timeout=SWITCH_TIMEOUT_MS)
            page.keyboard.press("Enter")
            page.keyboard.type("%%aot_kernel gpu")
            page.keyboard.press("Enter")
            page.keyboard.type("#include <cuda_runtime.h>")
            editors.wait_language(3, "cpp")
            assert _styles(editors.style(3, "#include")) != comment
            assert editors.language(2) == "python"
        except BaseException:
            failed = shot.with_name("labextension_failed.png")
            with contextlib.suppress(Exception):  # the original failure matters, not the screenshot's
                page.screenshot(path=str(failed), full_page=True)
                print(f"\nlabextension: the page at the failure: {failed}")
            raise
        finally:
            browser.close()
    serious = [line for line in console if line.startswith(("error", "pageerror")) and "net::ERR_FAILED" not in line]
    print(f"\nlabextension: {lab.extension}; notebook open with an idle kernel {loaded_s:.1f} s after load; "
          f"highlighted cell {shot}; console errors: {serious or 'none'}")
