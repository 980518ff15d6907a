"""What a user pastes into a bug report: versions, compilers, CUDA's binary tools, GPU, optional packages and the
build cache.

``report()`` only looks: it runs each tool with an argv list and a timeout, reads package versions from their
installed metadata (IPython, ipywidgets, matplotlib and cupy are never imported), never creates the cache
directory, and never raises: a missing or broken tool is reported as such. ``python -m aotbench doctor``
prints it (``--json`` for :meth:`Report.as_dict`).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .._version import __version__
from ..build import cache, nvcc, toolchain
from ..run.memory import size_text
from ..errors import ToolchainNotFoundError
from ..tools.codeview import binaries

NOT_INSTALLED = "not installed"
#: What needs each CUDA binary tool and how to get it, for the doctor's "not found" line.
CUDA_TOOL_HINTS = {
    "cuobjdump": ("op.disassemble() on CUDA ops needs it; pip install '.[nvcc]' or '.[notebook]' in the clone "
                  "(they bring nvidia-cuda-cuobjdump), or install the CUDA toolkit"),
    "nvdisasm": ("op.disassemble() on CUDA ops needs it; pip install '.[nvcc]' or '.[notebook]' in the clone "
                 "(they bring nvidia-cuda-nvdisasm), or install the CUDA toolkit"),
}

@dataclass(frozen=True)
class Report:
    """The environment as aotbench sees it. ``str(report)`` is the block to paste; ``as_dict()`` is for JSON."""

    aotbench_version: str
    aotbench_location: str
    python_version: str
    python_executable: str
    platform: str
    numpy: str
    ml_dtypes: str
    gxx_path: str | None  # None: not found
    gxx_version: str  # first line of ``g++ --version``, or why there is none
    nvcc_path: str | None
    nvcc_source: str | None  # where it was found: PATH, CUDA_HOME, CUDA_PATH, pip (site-packages) or /usr/local/cuda
    nvcc_version: str
    cuobjdump_path: str | None  # None: not found (looked for where op.disassemble() looks)
    cuobjdump_source: str | None  # PATH, CUDA_HOME, CUDA_PATH, pip (site-packages), beside nvcc or /usr/local/cuda
    cuobjdump_version: str  # the "release" line of ``--version``, or why there is none and how to get it
    nvdisasm_path: str | None
    nvdisasm_source: str | None
    nvdisasm_version: str
    gpu: str  # ``nvidia-smi -L`` lines, or why there are none
    cupy: str  # "<distribution> <version>" (cupy, cupy-cuda12x, ...) or "not installed"
    ipython: str
    ipykernel: str
    ipywidgets: str
    matplotlib: str
    cache_dir: str
    cache_exists: bool
    cache_size_bytes: int
    cache_libraries: int  # the ``*.so`` files at the top of the cache directory

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        gxx = f"{self.gxx_version} ({self.gxx_path})" if self.gxx_path else self.gxx_version
        nvcc = _located(self.nvcc_version, self.nvcc_path, self.nvcc_source)
        if self.cache_exists:
            cache_line = (f"{self.cache_dir} ({size_text(self.cache_size_bytes)}, {self.cache_size_bytes} bytes; "
                          f"{self.cache_libraries} libraries)")
        else:
            cache_line = f"{self.cache_dir} (does not exist yet)"
        rows = [
            ("aotbench", f"{self.aotbench_version} ({self.aotbench_location})"),
            ("python", f"{self.python_version} ({self.python_executable})"),
            ("platform", self.platform),
            ("numpy", self.numpy),
            ("ml_dtypes", self.ml_dtypes),
            ("g++", gxx),
            ("nvcc", nvcc),
            ("cuobjdump", _located(self.cuobjdump_version, self.cuobjdump_path, self.cuobjdump_source)),
            ("nvdisasm", _located(self.nvdisasm_version, self.nvdisasm_path, self.nvdisasm_source)),
            ("gpu", self.gpu),
            ("cupy", self.cupy),
            ("ipython", self.ipython),
            ("ipykernel", self.ipykernel),
            ("ipywidgets", self.ipywidgets),
            ("matplotlib", self.matplotlib),
            ("cache", cache_line),
        ]
        width = max(len(name) for name, _ in rows)
        lines = ["aotbench doctor"]
        for name, value in rows:
            first, *rest = str(value).splitlines() or [""]
            lines.append(f"  {name.ljust(width)}  {first}")
            lines.extend(f"  {' ' * width}  {line}" for line in rest)
        return "\n".join(lines)


def _located(version: str, path: str | None, source: str | None) -> str:
    return f"{version} ({path}, from {source})" if path else version


def report(cache_dir: str | os.PathLike | None = None, *, timeout_s: float = 20.0) -> Report:
    """Look at the environment (each external tool gets ``timeout_s`` seconds) and return a :class:`Report`."""
    gxx_path, gxx_version = _guarded(_gxx, lambda why: (None, why), timeout_s)
    nvcc_path, nvcc_source, nvcc_version = _guarded(_nvcc, lambda why: (None, None, why), timeout_s)
    cuobjdump = _guarded(_cuda_tool, lambda why: (None, None, why), "cuobjdump", timeout_s)
    nvdisasm = _guarded(_cuda_tool, lambda why: (None, None, why), "nvdisasm", timeout_s)
    try:
        root = Path(cache_dir).expanduser() if cache_dir is not None else cache.default_cache_dir()
    except RuntimeError:  # "~user" that does not expand: report the path as written
        root = Path(cache_dir if cache_dir is not None else os.environ.get("AOTBENCH_CACHE_DIR", ""))
    exists, size, libraries = _guarded(_cache_usage, lambda why: (False, 0, 0), root)
    return Report(
        aotbench_version=__version__,
        aotbench_location=str(Path(__file__).resolve().parents[1]),
        python_version=platform.python_version(),
        python_executable=sys.executable or "unknown",
        platform=f"{platform.platform()} ({platform.machine()})",
        numpy=_dist_version("numpy"),
        ml_dtypes=_dist_version("ml_dtypes"),
        gxx_path=gxx_path,
        gxx_version=gxx_version,
        nvcc_path=nvcc_path,
        nvcc_source=nvcc_source,
        nvcc_version=nvcc_version,
        cuobjdump_path=cuobjdump[0],
        cuobjdump_source=cuobjdump[1],
        cuobjdump_version=cuobjdump[2],
        nvdisasm_path=nvdisasm[0],
        nvdisasm_source=nvdisasm[1],
        nvdisasm_version=nvdisasm[2],
        gpu=_guarded(_gpu, lambda why: why, timeout_s),
        cupy=_cupy(),
        ipython=_dist_version("ipython"),
        ipykernel=_dist_version("ipykernel"),
        ipywidgets=_dist_version("ipywidgets"),
        matplotlib=_dist_version("matplotlib"),
        cache_dir=str(root.absolute()),
        cache_exists=exists,
        cache_size_bytes=size,
        cache_libraries=libraries,
    )


def _guarded(probe, fallback, *args):
    """``probe(*args)``, or ``fallback(reason)`` when a strange environment makes it fail unexpectedly."""
    try:
        return probe(*args)
    except Exception as exc:  # noqa: BLE001 - the report must come out whatever the environment holds
        return fallback(f"could not be checked ({type(exc).__name__}: {exc})")


def _run(argv: list[str], timeout_s: float) -> tuple[bool, str]:
    """Run a tool; (True, its output) when it exits 0, else (False, a one-line reason). Never raises."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout_s,
                             stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout_s:g} s"
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return False, f"could not be run ({exc})"
    if out.returncode != 0:
        detail = _first_line(out.stderr) or _first_line(out.stdout)
        return False, f"exited with status {out.returncode}" + (f": {detail}" if detail else "")
    return True, out.stdout


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _gxx(timeout_s: float) -> tuple[str | None, str]:
    try:
        path = toolchain.find_cxx()  # the compiler aotbench would build with
    except ToolchainNotFoundError as exc:
        return None, f"not found: {exc.hint}"
    ok, text = _run([path, "--version"], timeout_s)
    if not ok:
        return path, f"broken: {text}"
    return path, _first_line(text) or "unknown (no output from --version)"


def _nvcc(timeout_s: float) -> tuple[str | None, str | None, str]:
    for source, path in nvcc.candidates():
        try:
            usable = path.is_file() and os.access(path, os.X_OK)
        except OSError:
            usable = False
        if not usable:
            continue
        return str(path), source, _cuda_version(path, timeout_s)
    return None, None, f"not found: {nvcc.NVCC_HINT}"


def _cuda_tool(tool: str, timeout_s: float) -> tuple[str | None, str | None, str]:
    """``cuobjdump`` or ``nvdisasm`` where op.disassemble() finds it (:func:`binaries.find`): path, source, version."""
    try:
        path = Path(binaries.find(tool))
    except ToolchainNotFoundError:
        return None, None, f"not found: {CUDA_TOOL_HINTS[tool]}"
    return str(path), _cuda_tool_source(tool, path), _cuda_version(path, timeout_s)


def _cuda_tool_source(tool: str, path: Path) -> str:
    """Which of :func:`binaries.cuda_tool_candidates`' places ``path`` is, in the words nvcc's source uses."""
    if str(path) == shutil.which(tool):
        return "PATH"
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var) and path == Path(os.environ[var]) / "bin" / tool:
            return var
    if any(entry and path.parts[:-4] == Path(entry).parts and path.parts[-4] == "nvidia" for entry in sys.path):
        return "pip (site-packages)"
    if path.parent == Path("/usr/local/cuda/bin"):
        return "/usr/local/cuda"
    return "beside nvcc"


def _cuda_version(path: Path, timeout_s: float) -> str:
    """The ``release`` line of a CUDA tool's ``--version`` (nvcc, cuobjdump and nvdisasm print the same block)."""
    ok, text = _run([str(path), "--version"], timeout_s)
    if not ok:
        return f"broken: {text}"
    release = next((line.strip() for line in text.splitlines() if "release" in line), "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return release or (lines[-1] if lines else "unknown (no output from --version)")


def _gpu(timeout_s: float) -> str:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "no nvidia-smi"
    ok, text = _run([smi, "-L"], timeout_s)
    if not ok:
        return f"nvidia-smi {text}"
    gpus = [line.strip() for line in text.splitlines() if line.strip()]
    return "\n".join(gpus) if gpus else "nvidia-smi lists no GPU"


def _dist_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return NOT_INSTALLED
    except Exception as exc:  # noqa: BLE001 - damaged metadata must not stop the report
        return f"unreadable metadata ({exc})"


_CUPY_DIST = re.compile(r"^cupy([-_.]cuda\w*|[-_.]rocm[\w.-]*)?$", re.IGNORECASE)


def _cupy() -> str:
    """cupy's distribution (``cupy``, ``cupy-cuda12x``, ...) and version, from metadata: cupy is not imported."""
    found = []
    try:
        for dist in importlib.metadata.distributions():
            name = dist.metadata["Name"] or ""
            if _CUPY_DIST.match(name):
                found.append(f"{name} {dist.version}")
    except Exception as exc:  # noqa: BLE001 - damaged metadata must not stop the report
        return f"unreadable metadata ({exc})"
    return ", ".join(sorted(set(found))) or NOT_INSTALLED


def _cache_usage(root: Path) -> tuple[bool, int, int]:
    """(exists, total bytes of the regular files under it, number of top-level ``*.so``); symlinks not followed."""
    try:
        if not root.is_dir():
            return False, 0, 0
    except OSError:
        return False, 0, 0
    size = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                size += st.st_size
    try:
        with os.scandir(root) as entries:
            libraries = sum(1 for e in entries if e.name.endswith(".so") and e.is_file(follow_symlinks=False))
    except OSError:
        libraries = 0
    return True, size, libraries
