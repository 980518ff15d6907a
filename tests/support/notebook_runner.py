"""Execute notebooks top to bottom through a real Jupyter kernel of *this* interpreter (nbclient + ipykernel).

Used by ``tests/notebook/test_notebooks.py`` (imported) and by ``tests/notebook/test_binder.py`` (run as a script with another
environment's Python: ``python notebook_runner.py --work-dir DIR NOTEBOOK...``, exit status 1 on a failure).

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
import json
import sys
import time
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

KERNEL_NAME = "aotbench-test-python"
EXPECTED_ERROR_TAG = "raises-exception"


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


def run_notebook(path: Path, work_dir: Path, *, cell_timeout_s: int = 300) -> nbformat.NotebookNode:
    """Execute the notebook at ``path`` in its own folder (as Jupyter does) and return the executed copy.

    Raises nbclient's ``CellExecutionError`` for an error in a cell not tagged ``raises-exception``, and
    ``AssertionError`` for a tagged cell that did not raise. The file itself is not modified.
    """
    nb = nbformat.read(path, as_version=4)
    km = kernel_manager(work_dir, {"AOTBENCH_CACHE_DIR": str(work_dir / "aotbench-cache")})
    client = NotebookClient(nb, km=km, timeout=cell_timeout_s, startup_timeout=120,
                            extra_arguments=["--HistoryManager.hist_file=:memory:"],
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    silent = [i for i, cell in enumerate(nb.cells)
              if cell.cell_type == "code" and expected_to_fail(cell) and not error_outputs(cell)]
    if silent:
        raise AssertionError(f"{path.name}: cells {silent} are tagged {EXPECTED_ERROR_TAG!r} but raised nothing")
    return nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, required=True, help="kernelspec, connection files and cache")
    parser.add_argument("--cell-timeout", type=int, default=300)
    parser.add_argument("notebooks", nargs="+", type=Path)
    args = parser.parse_args(argv)
    failed = 0
    for path in args.notebooks:
        start = time.perf_counter()
        work = args.work_dir / path.stem
        work.mkdir(parents=True, exist_ok=True)
        try:
            run_notebook(path, work, cell_timeout_s=args.cell_timeout)
        except (CellExecutionError, AssertionError) as exc:
            failed += 1
            print(f"FAILED {path.name}:\n{exc}", flush=True)
        else:
            print(f"ok {path.name} ({time.perf_counter() - start:.1f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
