"""Every notebook runs top to bottom through JupyterLab's Run > Run All Cells, after README's notebook install
line and nothing else, in a fresh clone named ``aotbench`` (what ``git clone`` gives).

This is a newcomer's first hour, done for real: a virtual environment with only the ``notebook`` extra (no test
packages), this machine's CUDA compiler on PATH and no ``cuobjdump`` or ``nvdisasm`` of the system's (as on a
machine with a bare CUDA compiler: the extra must bring what notebook 04 reads SASS with), ``jupyter lab`` from
that environment, Debian's Chromium clicking the menu, and the notebook saved through the File menu and read back:
every code cell has run, and only cells tagged ``raises-exception`` hold an error (the stored execution counts are
cleared before the notebook opens, and JupyterLab's Run All stops at any other error, so a cell without an
execution count is one the run never reached).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import browser_support as support
import checkout
import pytest

ROOT = checkout.ROOT
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXPECTED_ERROR_TAG = "raises-exception"
PAGE_TIMEOUT_MS = 120_000
RUN_TIMEOUT_MS = 900_000  # one notebook's Run All, on two shared cores
CUDA_TOOLS_HIDDEN = ("cuobjdump", "nvdisasm")

marker = support.process_marker("playwright")


def readme_notebook_line() -> str:
    """README's command that installs what the notebooks need and opens them in JupyterLab."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    lines = [line for block in blocks for line in block.splitlines() if "'.[notebook]'" in line]
    assert len(lines) == 1, f"README.md must give one notebook install line, found {lines}"
    return lines[0]


def _path_without(tools: tuple[str, ...], shadow: Path) -> str:
    """PATH with every folder holding one of ``tools`` replaced by ``shadow``: links to the folder's other
    programs (nvcc stays found where it is found now)."""
    shadow.mkdir(parents=True, exist_ok=True)
    folders = []
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        here = Path(folder)
        if not any((here / tool).exists() for tool in tools):
            folders.append(folder)
            continue
        for program in here.iterdir():
            if program.name not in tools and not (shadow / program.name).exists():
                (shadow / program.name).symlink_to(program)
        if str(shadow) not in folders:
            folders.append(str(shadow))
    return os.pathsep.join(folders)


@pytest.fixture(scope="module")
def notebook_install(tmp_path_factory):
    """A clean clone in a folder named ``aotbench``, with README's notebook line run in it (jupyter lab is
    started by the test itself, on a port and token of its own)."""
    if shutil.which("bash") is None:
        pytest.skip("bash is needed to run README's line as written")
    base = tmp_path_factory.mktemp("newcomer")
    repo = base / "aotbench"
    checkout.copy_checkout(repo)
    env = checkout.child_env()
    env["PATH"] = _path_without(CUDA_TOOLS_HIDDEN, base / "path-shadow")
    for var in ("CUDA_HOME", "CUDA_PATH"):
        env.pop(var, None)
    line = readme_notebook_line()
    install, _, opening = line.rpartition(" && ")
    assert opening.startswith(".venv/bin/jupyter lab"), f"README's notebook line should end by opening JupyterLab: {line}"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", ".venv"], cwd=repo, check=True, timeout=300)
    done = subprocess.run(["bash", "-c", install], cwd=repo, env=env, capture_output=True, text=True, timeout=1200,
                          check=False)
    assert done.returncode == 0, f"{install}\n{done.stdout}\n{done.stderr}"
    print(f"README's notebook install: {time.perf_counter() - start:.0f} s")
    python = repo / ".venv" / "bin" / "python"
    has = subprocess.run([str(python), "-c", "import importlib.util as u; print([m for m in ('pytest', 'hypothesis') "
                          "if u.find_spec(m)])"], env=env, capture_output=True, text=True, timeout=120, check=True)
    assert has.stdout.strip() == "[]", f"the notebook venv should hold no test packages: {has.stdout}"
    return repo, env


def _lab_env(env: dict, root: Path, marker: str) -> dict:
    dirs = {name: root / name for name in ("config", "data", "runtime", "ipython", "settings", "workspaces")}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    news = dirs["settings"] / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text(json.dumps({"fetchNews": "false"}))
    env = {k: v for k, v in env.items() if not k.startswith(("JUPYTER", "JPY_"))}
    env.update({"JUPYTER_CONFIG_DIR": str(dirs["config"]), "JUPYTER_DATA_DIR": str(dirs["data"]),
                "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]), "IPYTHONDIR": str(dirs["ipython"]),
                "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]),
                "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]),
                "AOTBENCH_CACHE_DIR": str(root / "cache"), support.MARKER_VAR: marker})
    return env


def _click_menu(page, menu: str, command: str, label: str) -> None:
    """Open ``menu`` in JupyterLab's menu bar and click its item for ``command`` (found by its label)."""
    page.locator("#jp-MainMenu .lm-MenuBar-item", has_text=re.compile(f"^{menu}$")).first.click()
    item = page.locator(".lm-Menu .lm-Menu-item", has=page.locator(".lm-Menu-itemLabel",
                                                                  has_text=re.compile(f"^{label}$")))
    item.first.click()


# The notebook in view (each opens in a workspace of its own, so it is the only one; this guards that too).
SHOWN = ".jp-NotebookPanel:not(.lm-mod-hidden)"
# Every code cell's prompt has a number and none is queued or running ("[*]"), and the kernel is idle.
FINISHED = r"""
(n) => {
  const shown = document.querySelectorAll('%s');
  if (shown.length !== 1) return false;
  const prompts = [...shown[0].querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(p => p.textContent);
  const idle = document.querySelector(".jp-Notebook-ExecutionIndicator[data-status='idle']") !== null;
  return prompts.length === n && idle && !prompts.some(t => t.includes('*'));
}
""" % SHOWN


def _forget_execution_counts(path: Path) -> int:
    """Clear the stored execution counts (the outputs stay, as a newcomer finds them), so that a cell the run
    never reached shows as such; the number of code cells."""
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    for cell in code:
        cell["execution_count"] = None
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return len(code)


def _run_all(page, url: str, path: Path, console: list[str], log: Path) -> dict:
    """Open the notebook, Run > Run All Cells, wait, File > Save, and return the saved notebook."""
    n_code = _forget_execution_counts(path)
    page.goto(url, wait_until="domcontentloaded", timeout=PAGE_TIMEOUT_MS)
    try:
        page.wait_for_function(f"() => [...document.querySelectorAll('{SHOWN}')].map(p => "
                               f"p.querySelectorAll('.jp-CodeCell').length).join() === '{n_code}'",
                               timeout=PAGE_TIMEOUT_MS)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=PAGE_TIMEOUT_MS)
    except Exception as exc:
        raise AssertionError(f"{path.name} did not open with an idle kernel: {exc}\n{support.tail(log)}\n"
                             + "\n".join(console[-30:])) from exc
    before = path.stat().st_mtime_ns
    start = time.perf_counter()
    _click_menu(page, "Run", "notebook:run-all-cells", "Run All Cells")
    page.wait_for_timeout(2000)  # the queue shows "[*]" before the first cell ends
    page.wait_for_function(FINISHED, arg=n_code, timeout=RUN_TIMEOUT_MS, polling=1000)
    print(f"{path.name}: Run All in {time.perf_counter() - start:.0f} s")
    _save(page, path, before, log)
    return json.loads(path.read_text())


def _saved(page, path: Path, before: int, seconds: float) -> bool:
    """Whether the file is written within ``seconds``. The wait is the page's: Playwright's sync API serves the
    page's requests (routed through :func:`browser_support.local_page`, the save's PUT among them) only while
    a call into it is under way, so a ``time.sleep`` here would hold the save back."""
    deadline = time.monotonic() + seconds
    while path.stat().st_mtime_ns == before and time.monotonic() < deadline:
        page.wait_for_timeout(200)
    return path.stat().st_mtime_ns != before


def _save(page, path: Path, before: int, log: Path) -> None:
    """File > Save, as a user saves; if the file stays unwritten, the assertion shows what the page displays."""
    page.keyboard.press("Escape")  # whatever the run left focused or open
    _click_menu(page, "File", "docmanager:save", "Save( Notebook)?")
    if _saved(page, path, before, 60):
        return
    shot = log.with_name(f"{path.stem}-not-saved.png")
    page.screenshot(path=str(shot))
    dialogs = page.locator(".jp-Dialog").all_inner_texts()
    dirty = page.locator(".lm-TabBar-tab.jp-mod-dirty").all_inner_texts()
    raise AssertionError(f"{path.name} was not saved through File > Save; dialogs: {dialogs}; unsaved tabs: "
                         f"{dirty}; screenshot: {shot}\n{support.tail(log)}")


def _problems(nb: dict) -> list[str]:
    """Cells the run never reached, and errors in cells not tagged to raise."""
    found = []
    for i, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        tagged = EXPECTED_ERROR_TAG in cell.get("metadata", {}).get("tags", [])
        errors = [o for o in cell["outputs"] if o["output_type"] == "error"]
        if cell.get("execution_count") is None:  # cleared before the run: a cell the run never reached
            found.append(f"code cell {i} never ran: {cell['source'][:80]!r}")
        elif errors and not tagged:
            found.append(f"code cell {i} raised {errors[0]['ename']}: {errors[0]['evalue'][:300]}")
        elif tagged and not errors:
            found.append(f"code cell {i} is tagged {EXPECTED_ERROR_TAG} but raised nothing")
    return found


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not NOTEBOOKS, reason="no notebooks in notebooks/")
def test_every_notebook_runs_all_in_jupyterlab_after_the_readme_install(notebook_install, marker, tmp_path):
    from playwright.sync_api import sync_playwright

    repo, env = notebook_install
    for tool in CUDA_TOOLS_HIDDEN:  # the system's are hidden: what notebook 04 uses must come from the extra
        assert shutil.which(tool, path=env["PATH"]) is None
    lab_env = _lab_env(env, tmp_path / "jupyter", marker)
    token = uuid.uuid4().hex
    log = tmp_path / "jupyter-lab.log"
    proc, port = support.start_server(
        lambda port: support.jupyter_lab_argv(str(repo / ".venv" / "bin" / "python"), port, token, repo),
        lambda port: f"http://127.0.0.1:{port}/api", repo, lab_env, log, marker, "jupyter lab")
    problems: dict[str, list[str]] = {}
    console: list[str] = []
    try:
        with sync_playwright() as pw:
            browser = support.launch(pw, marker)
            try:
                origin = f"http://127.0.0.1:{port}"
                page = support.local_page(browser, {"width": 1400, "height": 900}, origin, console)
                for source in NOTEBOOKS:
                    path = repo / "notebooks" / source.name
                    # a workspace per notebook: JupyterLab would otherwise reopen the last one beside it
                    url = f"{origin}/lab/workspaces/run-{source.stem}/tree/notebooks/{source.name}?token={token}"
                    nb = _run_all(page, url, path, console, log)
                    problems[source.name] = _problems(nb)
            finally:
                browser.close()
    finally:
        support.stop(proc, marker)
    assert not any(problems.values()), json.dumps(problems, indent=1) + "\n" + support.tail(log)
