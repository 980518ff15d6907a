"""The documentation site (docs/): it builds offline with warnings as errors, and a broken reference makes that
build fail; it has every page (each notebook with its stored outputs, the API from the docstrings, every public
error and warning in the catalogue); every relative link of README.md and the site's pages leads to a file; and
what the pages show runs as they say: the Python snippets, the notebook cells of Getting started, the cluster
snippet as a file and pasted into the Python prompt, and the MindSpore tutorial's commands."""

from __future__ import annotations

import ast
import copy
import html
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import aotbench

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts)
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
GUIDES = ["notebook", "ops", "mindspore", "gpu", "cluster", "debugging", "performance", "threads", "cache", "errors"]


def sphinx(source: Path, out: Path) -> subprocess.CompletedProcess:
    """The build README gives (-W --keep-going), from scratch (-E), on this checkout's package."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html",
                           str(source), str(out)], capture_output=True, text=True, env=env, timeout=300)


def public_classes(*, exceptions: bool) -> list[str]:
    return sorted(n for n in aotbench.__all__ if isinstance(getattr(aotbench, n), type)
                  and issubclass(getattr(aotbench, n), BaseException) is exceptions)


def text_of(page: Path) -> str:
    """A built page's text, tags dropped and entities read, white space collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page.read_text())).split())


# -- the build ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = sphinx(DOCS, out)
    assert built.returncode == 0, f"the site does not build with -W:\n{built.stdout[-3000:]}\n{built.stderr[-6000:]}"
    return out


@pytest.mark.slow
def test_every_page_is_built(site):
    for page in PAGES:
        assert (site / page.relative_to(DOCS).with_suffix(".html")).is_file(), page
    for name in ["index", "getting-started", *[f"guide/{g}" for g in GUIDES], "reference/api", "reference/errors"]:
        assert (site / f"{name}.html").is_file(), name
    index = (site / "index.html").read_text()
    for guide in GUIDES:
        assert f'href="guide/{guide}.html"' in index, guide  # in the toctree


@pytest.mark.slow
def test_each_notebook_page_shows_its_stored_outputs(site):
    assert len(NOTEBOOKS) == 5
    for notebook in NOTEBOOKS:
        page = site / "notebooks" / notebook.with_suffix(".html").name
        assert page.is_file(), page
        cells = json.loads(notebook.read_text())["cells"]
        with_output = [c for c in cells if c["cell_type"] == "code" and c.get("outputs")]
        assert with_output, f"{notebook.name} has no stored outputs to show"
        built = page.read_text()
        assert built.count('class="cell_output') == len(with_output), notebook.name
        texts = [line.strip() for c in with_output for o in c["outputs"] if o["output_type"] == "stream"
                 for line in "".join(o["text"]).splitlines() if len(line.strip()) > 12]
        shown = text_of(page)
        assert texts and " ".join(texts[0].split()) in shown, (notebook.name, texts[:1])


@pytest.mark.slow
def test_the_api_page_documents_the_public_api(site):
    api = (site / "reference" / "api.html").read_text()
    names = [n for n in aotbench.__all__ if not (isinstance(getattr(aotbench, n), type)
                                                  and issubclass(getattr(aotbench, n), BaseException))]
    missing = [n for n in names if f'id="aotbench.{n}"' not in api]
    assert missing == [], missing
    assert 'id="aotbench.Op.profile"' in api and 'id="aotbench.Op.export_mindspore"' in api  # the op's methods


@pytest.mark.slow
def test_the_catalogue_has_every_public_error_and_warning(site):
    catalogue = (site / "reference" / "errors.html").read_text()
    classes = public_classes(exceptions=True)
    assert len(classes) > 40 and "ContractWarning" in classes and "KernelInterrupted" in classes
    missing = [n for n in classes if f'id="aotbench.{n}"' not in catalogue]
    assert missing == [], f"not in docs/reference/errors.md: {missing}"
    source = (DOCS / "reference" / "errors.md").read_text()
    for name in classes:  # each with what to do, in its own entry
        entry = source.split(f".. autoexception:: aotbench.{name}\n", 1)[1].split(".. autoexception::", 1)[0]
        assert "**What to do:**" in entry, name


@pytest.mark.slow
def test_a_broken_reference_fails_the_build(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs, symlinks=False, ignore=shutil.ignore_patterns("_build"))  # notebooks copied
    page = docs / "guide" / "cache.md"
    page.write_text(page.read_text() + textwrap.dedent("""
        See [a page that is not there](no-such-page.md), {py:func}`aotbench.no_such_function` and
        {py:func}`aotbench.run.guard.no_such_function`.
        """))
    built = sphinx(docs, tmp_path / "out")
    assert built.returncode != 0
    for broken in ("no-such-page.md", "aotbench.no_such_function", "aotbench.run.guard.no_such_function"):
        assert broken in built.stderr, (broken, built.stderr[-3000:])
    # the build itself is clean: the copy without the broken references builds (so the failure was theirs)
    page.write_text(page.read_text().split("\nSee [a page that is not there]")[0] + "\n")
    rebuilt = sphinx(docs, tmp_path / "out2")
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]


# -- links ----------------------------------------------------------------------------------------------------------
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
DOC_ROLE = re.compile(r"\{doc\}`(?:[^`<]*<)?([^`>]+)>?`")


def relative_links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_every_relative_link_of_readme_and_the_site_leads_to_a_file():
    broken, count = [], 0
    for path in [ROOT / "README.md", *PAGES]:
        for target in relative_links(path):
            count += 1
            if not (path.parent / target.split("#")[0]).exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
        for target in DOC_ROLE.findall(path.read_text()):
            base = DOCS if target.startswith("/") else path.parent
            if not any((base / f"{target.lstrip('/')}{s}").exists() for s in (".md", ".ipynb")):
                broken.append(f"{path.relative_to(ROOT)}: {{doc}}{target}")
    assert count > 40
    assert broken == [], broken


def test_the_notebook_pages_are_the_notebooks_themselves():
    """docs/notebooks/ holds relative links to notebooks/ (what Binder opens), not copies that could drift."""
    linked = sorted((DOCS / "notebooks").iterdir())
    assert [p.name for p in linked] == [p.name for p in NOTEBOOKS]
    for link in linked:
        assert link.is_symlink() and not os.path.isabs(os.readlink(link)), link
        assert link.resolve() == (ROOT / "notebooks" / link.name).resolve()


def test_the_mindspore_wheel_is_said_to_take_what_it_takes():
    """2.8 GB on disk (an 800 MB download), measured: nowhere "about 800 MB" alone any more."""
    for path in [ROOT / "README.md", DOCS / "getting-started.md", DOCS / "guide" / "mindspore.md"]:
        text = " ".join(path.read_text().split())
        assert "800 MB download that takes 2.8 GB on disk" in text, path
    for path in [ROOT / "README.md", ROOT / "pyproject.toml", *PAGES]:
        assert "about 800 MB" not in path.read_text(), path


# -- what the pages show runs as they say -------------------------------------------------------------------------
def blocks(page: Path, language: str) -> list[str]:
    return re.findall(rf"```{re.escape(language)}\n(.*?)```", page.read_text(), re.DOTALL)


def needs_a_gpu(block: str) -> bool:
    return "import cupy" in block


@pytest.mark.slow
def test_the_python_snippets_run_as_written(tmp_path, monkeypatch):
    """Getting started's snippets top to bottom in one namespace, then each guide's in a copy of it (a reader who
    did Getting started); a snippet that needs a GPU is only parsed where there is none, and must not rebind the
    names the others use. The cluster's snippet has tests of its own (below)."""
    monkeypatch.chdir(tmp_path)
    start: dict = {}
    for block in blocks(DOCS / "getting-started.md", "python"):
        exec(compile(block, "getting-started.md", "exec"), start)  # noqa: S102 -- running the page is the test
    op, x, y = start["op"], start["x"], start["y"]
    np.testing.assert_allclose(op(x, y), (x + y).sum(axis=1), rtol=1e-5)
    assert op.infer_shape((4, None), (4, None)) == (4,)
    ran = {}
    for guide in GUIDES:
        if guide == "cluster":
            continue
        namespace = copy.copy(start)
        with warnings.catch_warnings():
            for block in blocks(DOCS / "guide" / f"{guide}.md", "python"):
                if needs_a_gpu(block) and not aotbench.gpu_available():
                    tree = ast.parse(block)
                    bound = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) for t in node.targets
                             if isinstance(t, ast.Name)}
                    assert not bound & {"op", "x", "y"}, bound
                    continue
                exec(compile(block, f"guide/{guide}.md", "exec"), namespace)  # noqa: S102
        ran[guide] = namespace
    assert "without optimisation" in ran["performance"]["notes"].note
    assert ran["performance"]["asm"].functions[0].name == "CustomKernel"
    assert ran["performance"]["fast"].vectorized_lines and not ran["performance"]["notes"].vectorized_lines
    assert ran["performance"]["prof"].hottest(3)
    np.testing.assert_allclose(ran["gpu"]["out"], 2 * x + y, rtol=1e-6)
    assert "300" in str(ran["notebook"]["panel"].set(axis=0, m=300).summary())


NOTEBOOK_CELLS = r"""
import json, re, sys
import numpy as np
from IPython.core.interactiveshell import InteractiveShell

text = open(sys.argv[1]).read()
section = text.split("## Your first kernel, in a notebook")[1].split("## Your first kernel, from Python")[0]
cells = re.findall(r"```(?:ipython|c\+\+)\n(.*?)```", section, re.S)
shell = InteractiveShell.instance()
ok = [shell.run_cell(cell).success for cell in cells]
x = shell.user_ns["x"]
right = bool(np.array_equal(shell.user_ns["AddTwo"](x, x), 2 * x))
kernel = [c for c in cells if c.startswith("%%aot_kernel")][0]
rerun = shell.run_cell(kernel.replace("i < n", "i <= n")).success
try:
    shell.user_ns["AddTwo"](x, x)
    error = ""
except Exception as exc:
    error = f"{type(exc).__name__}: {exc}"
print(json.dumps({"cells": len(cells), "ok": ok, "right": right, "rerun": rerun, "error": error}))
"""


@pytest.mark.slow
def test_the_notebook_cells_of_getting_started_run_as_pasted(tmp_path):
    """The three cells, in IPython; then the cell with the off-by-one the page suggests, refused as it says."""
    env = {**os.environ, "AOTBENCH_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", NOTEBOOK_CELLS, str(DOCS / "getting-started.md")], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["cells"] == 3 and all(result["ok"]) and result["right"] and result["rerun"], result
    assert result["error"].startswith("ContractViolation"), result
    assert "wrote 4 bytes past the end of its 48-byte buffer" in result["error"], result


def cluster_snippet() -> str:
    (snippet,) = blocks(DOCS / "guide" / "cluster.md", "python")
    return snippet


def without_malloc_settings() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}  # as in a fresh shell


def test_the_cluster_snippet_needs_only_the_cluster_extra():
    text = (DOCS / "guide" / "cluster.md").read_text()
    assert "pip install -q '.[cluster]'" in text
    toml = (ROOT / "pyproject.toml").read_text()
    cluster = re.search(r"^cluster = \[(.*?)\]", toml, re.MULTILINE)
    assert cluster and "distributed" in cluster.group(1)
    imported = {n.names[0].name.split(".")[0] if isinstance(n, ast.Import) else n.module.split(".")[0]
                for n in ast.walk(ast.parse(cluster_snippet())) if isinstance(n, ast.Import | ast.ImportFrom)}
    assert imported == {"dask", "distributed", "numpy", "aotbench"}  # dask comes with distributed


@pytest.mark.slow
def test_the_cluster_snippet_runs_as_a_file(tmp_path):
    script = tmp_path / "sweep_on_cluster.py"
    script.write_text(cluster_snippet())
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                          env=without_malloc_settings(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "256x256" in done.stdout and "512x512" in done.stdout, done.stdout
    assert "MALLOC" not in done.stdout, done.stdout  # the config line did its job: no note about the workers


CONSOLE = r"""
import code, json, sys

class Console(code.InteractiveConsole):
    errors = []
    def showsyntaxerror(self, filename=None, **kwargs):
        self.errors.append("SyntaxError: " + repr(sys.exc_info()[1]))
        super().showsyntaxerror(filename)
    def showtraceback(self):
        self.errors.append("exception: " + repr(sys.exc_info()[1]))
        super().showtraceback()

console = Console(locals={"__name__": "__main__"})
more = False
for line in sys.stdin.read().splitlines():
    more = console.push(line)  # one line at a time, as the prompt takes a paste
more = console.push("") if more else more  # the Enter that closes the last block
print(json.dumps({"errors": Console.errors, "pending": more, "done": "on_cluster" in console.locals}))
"""


@pytest.mark.slow
def test_the_cluster_snippet_pastes_into_the_python_prompt(tmp_path):
    done = subprocess.run([sys.executable, "-c", CONSOLE], input=cluster_snippet(), cwd=tmp_path,
                          capture_output=True, text=True, env=without_malloc_settings(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"errors": [], "pending": False, "done": True}, (result, done.stderr[-3000:])
    assert "512x512" in done.stdout


@pytest.mark.slow
def test_the_mindspore_tutorial_commands_run_as_given(tmp_path):
    """The round-trip page's commands, pasted into bash with this environment's python first on PATH."""
    (commands,) = blocks(DOCS / "guide" / "mindspore.md", "bash")
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
           "AOTBENCH_CACHE_DIR": str(tmp_path / "cache")}
    lines = [line.split("  #")[0] for line in commands.strip().splitlines()]
    outputs = []
    for i in range(len(lines)):  # each command's output apart; the cd of the first line holds for the others
        script = "set -e\n" + "\n".join(lines[: i + 1]) if i == 0 else f"set -e\ncd tutorial\n{lines[i]}"
        done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, env=env,
                              timeout=300)
        outputs.append(done)
        assert done.returncode == 0, (lines[i], done.stdout[-2000:], done.stderr[-3000:])
    assert "[nan nan nan nan]" in outputs[1].stdout and "ContractWarning" in outputs[1].stderr
    assert "workspace 0: the kernel wrote only its first 16 of 80 bytes, and read the rest" in outputs[1].stderr
    assert re.search(r"\b[1-9]\d* passed", outputs[2].stdout), outputs[2].stdout[-2000:]
