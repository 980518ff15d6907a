"""Finding and running the binary tools the views read: objdump for host code, cuobjdump and nvdisasm for CUDA.

The CUDA tools are looked for the way nvcc is (:func:`aotbench.build.nvcc.candidates`): PATH, ``CUDA_HOME``,
``CUDA_PATH``, pip's site-packages (``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm`` put them beside pip's
nvcc), the folder of the nvcc in use and ``/usr/local/cuda``. None of them needs a GPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ...build import nvcc
from ...errors import ToolchainNotFoundError, ToolFailedError

#: How long one tool run may take; a kernel library is small, so this only stops a hung tool.
TIMEOUT_S = 120

_HINTS = {
    "objdump": "install GNU binutils (Debian/Ubuntu: apt-get install binutils; it comes with g++)",
    "cuobjdump": ("pip install '.[nvcc]' in aotbench's clone (it brings nvidia-cuda-cuobjdump), or install the CUDA "
                  "toolkit"),
    "nvdisasm": ("pip install '.[nvcc]' in aotbench's clone (it brings nvidia-cuda-nvdisasm), or install the CUDA "
                 "toolkit"),
}


def cuda_tool_candidates(tool: str) -> list[Path]:
    """Where a CUDA binary tool may be, in the order it is looked for."""
    found = [Path(p) for p in [shutil.which(tool)] if p]
    found += [Path(os.environ[v]) / "bin" / tool for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    for entry in sys.path:
        if entry and os.path.isdir(entry):
            found += [Path(entry, "nvidia", "cu13", "bin", tool), Path(entry, "nvidia", f"cuda_{tool}", "bin", tool)]
    try:
        found.append(Path(nvcc.find_nvcc()).parent / tool)
    except ToolchainNotFoundError:
        pass
    found.append(Path("/usr/local/cuda/bin") / tool)
    return found


def find(tool: str) -> str:
    """The path of ``objdump``, ``cuobjdump`` or ``nvdisasm`` (looked up at call time), or
    :class:`ToolchainNotFoundError` naming how to get it."""
    paths = [Path(p) for p in [shutil.which(tool)] if p] if tool == "objdump" else cuda_tool_candidates(tool)
    for path in paths:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    raise ToolchainNotFoundError(tool, _HINTS[tool])


def run(argv: list[str], cwd: Path | None = None) -> str:
    """A tool's standard output; a failure is a :class:`ToolFailedError` with the command and what it said."""
    try:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, errors="replace", timeout=TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolFailedError(f"{Path(argv[0]).name} could not be run ({exc})", tool=Path(argv[0]).name) from exc
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip()[-600:] or "no output"
        raise ToolFailedError(f"{Path(argv[0]).name} failed (exit {proc.returncode}) on {argv[-1]}: {said}",
                              tool=Path(argv[0]).name)
    return proc.stdout
