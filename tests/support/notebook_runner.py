"""Execute notebooks top to bottom through a real Jupyter kernel of *this* interpreter (nbclient + ipykernel), and
store them with outputs that read the same on any machine.

Used by ``tests/notebook/test_notebooks.py`` (imported) and by ``tests/notebook/test_binder.py`` (run as a script with
another environment's Python: ``python notebook_runner.py --work-dir DIR NOTEBOOK...``, exit status 1 on a failure).

Storing is one command, from the repository root (notebooks/README.md)::

    python tests/support/notebook_runner.py --store notebooks/0*.ipynb

Each notebook runs in a fresh cache with the configuration a user gets (no ``AOTBENCH_*`` setting of the caller
reaches the kernel but the cache folder), and only if every cell runs as the notebook says (an error only in a
cell tagged ``raises-exception``) is it written back, its outputs passed through :func:`portable`: the folders of
this machine in them become the placeholders of :data:`PLACEHOLDERS`, which the notebooks explain.

The kernel is started from a kernelspec written into the work directory whose argv is ``sys.executable -m
ipykernel_launcher``, so no system-wide ``python3`` kernelspec can substitute another interpreter. Its
environment adds ``AOTBENCH_CACHE_DIR`` (a fresh build cache) and ``IPYTHONDIR`` (no profile written to the
home directory); the connection file lives in the work directory too, and the history stays in memory. The
manager is jupyter_client's asynchronous one, as nbclient expects (with the blocking one nbclient's cell
timeout never fires). A cell tagged ``raises-exception`` may
fail (nbclient honours the tag) and, since the notebook says it fails, it must.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

KERNEL_NAME = "aotbench-test-python"
EXPECTED_ERROR_TAG = "raises-exception"
CACHE_FOLDER = "aotbench-cache"  # under the work directory

#: What a stored output says instead of a folder of the machine that stored it (each notebook whose outputs use
#: one explains it in a markdown cell; tests/notebook/test_notebooks.py checks both).
PLACEHOLDERS = {
    "<cache>": "the aotbench build cache (AOTBENCH_CACHE_DIR; by default ~/.cache/aotbench)",
    "<aotbench>": "the folder of the aotbench package",
    "<checkout>": "the repository's folder",
    "<site-packages>": "the Python environment's site-packages folder",
    "<python>": "the Python interpreter running the notebook",
    "<tmp>": "the temporary folder",
}
#: IPython's file for a cell's code (``/tmp/ipykernel_123/456.py``), as a warning's location shows it: ``<cell>``,
#: aotbench's name for the cell (a kernel cell's diagnostics say ``<cell>:7:19`` too).
IPYTHON_CELL_FILE = re.compile(r"(?<![\w.-])(?:/[^\s/\"'<>]+)*/ipykernel_\d+/\d+\.py(?=[:\s\"'),]|$)")
_SKIPPED_DATA = ("image/",)  # base64 payloads: never text to rewrite
# Where a path starts: not inside a longer name or path (``/x/tmp`` holds no ``/tmp``), but after -I, -L, -B.
_PATH_START = r"(?:(?<![\w.-])|(?<=-I)|(?<=-L)|(?<=-B))"


def kernel_manager(work_dir: Path, env: dict[str, str] | None = None) -> AsyncKernelManager:
    """A kernel manager for an ipykernel running on ``sys.executable``, with its files under ``work_dir``."""
    spec_dir = work_dir / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python {sys.version_info[0]}.{sys.version_info[1]} ({sys.executable})",
        "language": "python",
        "env": {"IPYTHONDIR": str(work_dir / "ipython"), **(env or {})},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1))
    ksm = KernelSpecManager(kernel_dirs=[str(work_dir / "kernels")], ensure_native_kernel=False)
    return AsyncKernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=ksm,
                         connection_file=str(work_dir / f"kernel-{time.monotonic_ns()}.json"))


def expected_to_fail(cell) -> bool:
    return EXPECTED_ERROR_TAG in cell.get("metadata", {}).get("tags", [])


def error_outputs(cell) -> list:
    return [out for out in cell.get("outputs", []) if out.get("output_type") == "error"]


def run_notebook(path: Path, work_dir: Path, *, cell_timeout_s: int = 300,
                 env: dict[str, str] | None = None) -> nbformat.NotebookNode:
    """Execute the notebook at ``path`` in its own folder (as Jupyter does) and return the executed copy.

    The kernel builds into ``work_dir/aotbench-cache``; ``env`` adds variables to its environment. Raises
    nbclient's ``CellExecutionError`` for an error in a cell not tagged ``raises-exception``, and
    ``AssertionError`` for a tagged cell that did not raise. The file itself is not modified.
    """
    nb = nbformat.read(path, as_version=4)
    km = kernel_manager(work_dir, {"AOTBENCH_CACHE_DIR": str(work_dir / CACHE_FOLDER), **(env or {})})
    client = NotebookClient(nb, km=km, timeout=cell_timeout_s, startup_timeout=120,
                            extra_arguments=["--HistoryManager.hist_file=:memory:"],
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    silent = [i for i, cell in enumerate(nb.cells)
              if cell.cell_type == "code" and expected_to_fail(cell) and not error_outputs(cell)]
    if silent:
        raise AssertionError(f"{path.name}: cells {silent} are tagged {EXPECTED_ERROR_TAG!r} but raised nothing")
    return nb


# --- outputs that read the same on any machine ------------------------------------------------------------------

def machine_folders(cache_dir: Path, checkout: Path | None = None) -> list[tuple[str, str]]:
    """(folder of this machine, placeholder) pairs for :func:`portable`, most specific first: the run's cache, the
    site-packages folders, the interpreter, the aotbench package, the checkout, the temporary folder, the home."""
    import aotbench  # only when storing: the runner itself also runs under environments without aotbench

    pairs = [(cache_dir, "<cache>")]
    pairs += [(Path(sysconfig.get_paths()[key]), "<site-packages>") for key in ("purelib", "platlib")]
    pairs += [(Path(sys.executable), "<python>"), (Path(aotbench.__file__).parent, "<aotbench>")]
    pairs += [(folder, "<aotbench>") for folder in _kernels_aotbench(cache_dir.parent)]
    if checkout is not None:
        pairs.append((checkout, "<checkout>"))
    pairs += [(Path(tempfile.gettempdir()), "<tmp>"), (Path.home(), "~")]
    out: list[tuple[str, str]] = []
    for folder, placeholder in pairs:
        for form in dict.fromkeys((str(folder), os.path.realpath(folder))):
            if form not in ("", "/") and (form, placeholder) not in out:
                out.append((form, placeholder))
    return sorted(out, key=lambda pair: -len(pair[0]))  # a folder inside another is replaced first


def _kernels_aotbench(work_dir: Path) -> list[Path]:
    """The aotbench package folder a kernel of this interpreter imports (under pytest this process may import the
    checkout's copy while the kernel, started elsewhere, imports the installed one); none if it has none."""
    probe = "import importlib.util as u; s = u.find_spec('aotbench'); print(s.origin if s else '')"
    try:
        done = subprocess.run([sys.executable, "-c", probe], cwd=work_dir if work_dir.is_dir() else None,
                              capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return []
    origin = done.stdout.strip()
    return [Path(origin).parent] if origin else []


def portable(text: str, folders: list[tuple[str, str]], *, escape_html: bool = False) -> str:
    """``text`` with each of ``folders`` (see :func:`machine_folders`) replaced by its placeholder wherever it is a
    whole path or a path's leading folders, and IPython's file for a cell's code by ``<cell>``."""
    text = IPYTHON_CELL_FILE.sub(html.escape("<cell>") if escape_html else "<cell>", text)
    for folder, placeholder in folders:
        shown = html.escape(placeholder) if escape_html else placeholder
        text = re.sub(rf"{_PATH_START}{re.escape(folder)}(?=[/\s\"'),:;<&\]]|$)", lambda _: shown, text)
    return text


def _portable_json(value, folders, escape_html: bool = False):
    if isinstance(value, str):
        return portable(value, folders, escape_html=escape_html)
    if isinstance(value, list):
        return [_portable_json(v, folders, escape_html) for v in value]
    if isinstance(value, dict):
        return {k: v if k.startswith(_SKIPPED_DATA) else _portable_json(v, folders, escape_html or k == "text/html")
                for k, v in value.items()}
    return value


def make_portable(nb: nbformat.NotebookNode, folders: list[tuple[str, str]]) -> nbformat.NotebookNode:
    """Rewrite every output of ``nb`` (and its stored widget state) with :func:`portable`, in place."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [nbformat.from_dict(_portable_json(dict(out), folders)) for out in cell.outputs]
    if "widgets" in nb.metadata:
        nb.metadata.widgets = nbformat.from_dict(_portable_json(dict(nb.metadata.widgets), folders, True))  # HTML
    return nb


def store_notebook(path: Path, work_dir: Path, *, cell_timeout_s: int = 600) -> nbformat.NotebookNode:
    """Run the notebook at ``path`` as a user's kernel would (:func:`run_notebook` without any ``AOTBENCH_*``
    setting of this process but the fresh cache) and, if it ran as it says, write it back with portable outputs.
    Raises as :func:`run_notebook` does, leaving the file as it was."""
    cleared = {k: os.environ.pop(k) for k in [k for k in os.environ if k.startswith("AOTBENCH_")]}
    try:
        nb = run_notebook(path, work_dir, cell_timeout_s=cell_timeout_s)
    finally:
        os.environ.update(cleared)
    checkout = path.resolve().parent.parent
    make_portable(nb, machine_folders(work_dir / CACHE_FOLDER, checkout if (checkout / ".git").exists() else None))
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, help="kernelspec, connection files and cache (default: a fresh "
                        "temporary folder, removed afterwards)")
    parser.add_argument("--store", action="store_true", help="write each notebook back with its outputs, made "
                        "portable, if it ran as it says (a failed one is left as it was)")
    parser.add_argument("--cell-timeout", type=int, default=None, help="seconds per cell (default: 300, 600 with "
                        "--store)")
    parser.add_argument("notebooks", nargs="+", type=Path)
    args = parser.parse_args(argv)
    timeout = args.cell_timeout or (600 if args.store else 300)
    work_root = args.work_dir or Path(tempfile.mkdtemp(prefix="aotbench-notebooks-"))
    failed = 0
    try:
        for path in args.notebooks:
            start = time.perf_counter()
            work = work_root / path.stem
            work.mkdir(parents=True, exist_ok=True)
            try:
                if args.store:
                    store_notebook(path, work, cell_timeout_s=timeout)
                else:
                    run_notebook(path, work, cell_timeout_s=timeout)
            except (CellExecutionError, AssertionError) as exc:
                failed += 1
                print(f"FAILED {path.name}{' (not stored)' if args.store else ''}:\n{exc}", flush=True)
            else:
                print(f"{'stored' if args.store else 'ok'} {path.name} ({time.perf_counter() - start:.1f} s)",
                      flush=True)
    finally:
        if args.work_dir is None:
            shutil.rmtree(work_root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
