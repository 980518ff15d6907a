"""``aotbench.cli.doctor``: the bug-report block, checked against the real tools of this machine."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aotbench.build import cache, nvcc
from aotbench.cli import doctor
from aotbench.errors import ToolchainNotFoundError
from aotbench.tools.codeview import binaries

ROOT = Path(__file__).resolve().parents[2]
KEYS = {
    "aotbench_version", "aotbench_location", "python_version", "python_executable", "platform", "numpy",
    "ml_dtypes", "gxx_path", "gxx_version", "nvcc_path", "nvcc_source", "nvcc_version", "cuobjdump_path",
    "cuobjdump_source", "cuobjdump_version", "nvdisasm_path", "nvdisasm_source", "nvdisasm_version", "gpu", "cupy",
    "ipython", "ipykernel", "ipywidgets", "matplotlib", "cache_dir", "cache_exists", "cache_size_bytes",
    "cache_libraries",
}


def _env(**extra: str) -> dict[str, str]:
    """The environment for a child interpreter that imports this tree's aotbench and writes no bytecode."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return env


def _only_python_on_path(tmp_path: Path) -> Path:
    """A directory holding only a link to this interpreter, to put alone on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    return bin_dir


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_reports_the_real_gxx_version(tmp_path):
    expected = subprocess.run(["g++", "--version"], capture_output=True, text=True, check=True).stdout
    r = doctor.report(tmp_path / "cache")
    assert r.gxx_path == shutil.which("g++")
    assert r.gxx_version == expected.splitlines()[0].strip()
    assert r.gxx_version in str(r)


def test_reports_python_aotbench_and_numpy(tmp_path):
    import numpy

    import aotbench

    r = doctor.report(tmp_path)
    assert r.python_executable == sys.executable
    assert r.python_version == "{}.{}.{}".format(*sys.version_info[:3])
    assert r.aotbench_version == aotbench.__version__
    assert Path(r.aotbench_location) == Path(aotbench.__file__).resolve().parent
    assert r.numpy == numpy.__version__


def test_missing_gxx_is_reported_not_raised(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(_only_python_on_path(tmp_path)))
    assert shutil.which("g++") is None
    r = doctor.report(tmp_path / "cache")
    assert r.gxx_path is None
    assert r.gxx_version.startswith("not found")
    assert "apt-get install g++" in r.gxx_version  # the install hint aotbench gives when a build needs g++
    assert r.gpu == "no nvidia-smi"
    assert "not found" in str(r)


def test_broken_and_hanging_gxx_are_reported(tmp_path, monkeypatch):
    sleep = shutil.which("sleep")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir / "g++", 'echo "g++: fatal: licence expired" >&2; exit 3')
    monkeypatch.setenv("PATH", str(bin_dir))
    r = doctor.report(tmp_path / "cache")
    assert r.gxx_path == str(bin_dir / "g++")
    assert r.gxx_version == "broken: exited with status 3: g++: fatal: licence expired"

    _script(bin_dir / "g++", f"exec {sleep} 30")
    r = doctor.report(tmp_path / "cache", timeout_s=0.5)
    assert r.gxx_version == "broken: timed out after 0.5 s"

    (bin_dir / "g++").write_bytes(b"\x7fELF not really")  # executable bit set, but not a runnable program
    r = doctor.report(tmp_path / "cache")
    assert r.gxx_version.startswith("broken: could not be run")


def test_gpu_line_comes_from_nvidia_smi(tmp_path, monkeypatch):
    if shutil.which("nvidia-smi"):
        expected = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60, check=False).stdout
        assert doctor.report(tmp_path).gpu == expected.strip()
    else:
        assert doctor.report(tmp_path).gpu == "no nvidia-smi"
    bin_dir = _only_python_on_path(tmp_path)
    _script(bin_dir / "nvidia-smi", 'echo "NVIDIA-SMI has failed because it could not communicate" ; exit 9')
    monkeypatch.setenv("PATH", str(bin_dir))
    assert doctor.report(tmp_path).gpu == (
        "nvidia-smi exited with status 9: NVIDIA-SMI has failed because it could not communicate")


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_finds_nvcc_on_path_cuda_home_and_pip_layout(tmp_path, monkeypatch):
    real = shutil.which("nvcc")
    out = subprocess.run([real, "--version"], capture_output=True, text=True, timeout=120, check=True).stdout
    release = next(line.strip() for line in out.splitlines() if "release" in line)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)

    r = doctor.report(tmp_path / "cache")
    assert (r.nvcc_path, r.nvcc_source, r.nvcc_version) == (real, "PATH", release)

    # Off PATH, under CUDA_HOME: the same compiler, reached through a link in a toolkit-shaped folder.
    monkeypatch.setenv("PATH", str(_only_python_on_path(tmp_path)))
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "nvcc").symlink_to(real)
    monkeypatch.setenv("CUDA_HOME", str(home))
    r = doctor.report(tmp_path / "cache")
    assert (r.nvcc_path, r.nvcc_source, r.nvcc_version) == (str(home / "bin" / "nvcc"), "CUDA_HOME", release)

    # Off PATH, no CUDA_HOME: pip's nvidia-cuda-nvcc layout in a directory on sys.path.
    monkeypatch.delenv("CUDA_HOME")
    site = tmp_path / "site-packages"
    pip_nvcc = site / "nvidia" / "cu13" / "bin" / "nvcc"
    pip_nvcc.parent.mkdir(parents=True)
    pip_nvcc.symlink_to(real)
    monkeypatch.syspath_prepend(str(site))
    r = doctor.report(tmp_path / "cache")
    assert (r.nvcc_path, r.nvcc_source, r.nvcc_version) == (str(pip_nvcc), "pip (site-packages)", release)


def test_no_nvcc_anywhere_is_not_found(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(_only_python_on_path(tmp_path)))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(nvcc, "PIP_NVCC", ())  # ignore a pip-installed nvcc of this environment
    r = doctor.report(tmp_path / "cache")
    if Path("/usr/local/cuda/bin/nvcc").exists():
        assert r.nvcc_source == "/usr/local/cuda"
    else:
        assert (r.nvcc_path, r.nvcc_source) == (None, None)
        assert r.nvcc_version.startswith("not found") and "nvidia-cuda-nvcc" in r.nvcc_version


def _fake_cuda_tool(path: Path, rng) -> str:
    """A stand-in ``cuobjdump``/``nvdisasm`` printing a fresh random release in the real tools' block; its line."""
    major, minor, build = (int(v) for v in rng.integers(10, 99, size=3))
    release = f"Cuda compilation tools, release {major}.{minor}, V{major}.{minor}.{build}"
    path.parent.mkdir(parents=True, exist_ok=True)
    _script(path, f'echo "{path.name}: NVIDIA (R) tool"; echo "Copyright (c) NVIDIA"; echo "{release}"; '
                  f'echo "Build cuda_{major}.{minor}"')
    return release


def _no_pip_cuda_tools(monkeypatch):
    """sys.path without the site-packages that hold pip's CUDA wheels (this venv's cuobjdump and nvdisasm)."""
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not (p and Path(p, "nvidia").is_dir())])


@pytest.mark.parametrize("tool", ["cuobjdump", "nvdisasm"])
def test_cuda_binary_tool_is_reported_where_disassemble_finds_it(tool, tmp_path):
    """The doctor names the same cuobjdump/nvdisasm op.disassemble() would run, with its real release line."""
    r = doctor.report(tmp_path / "cache")
    path, source, version = (getattr(r, f"{tool}_{k}") for k in ("path", "source", "version"))
    try:
        expected = binaries.find(tool)
    except ToolchainNotFoundError:
        assert (path, source) == (None, None)
        assert version.startswith("not found: op.disassemble() on CUDA ops needs it")
        return
    out = subprocess.run([expected, "--version"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert path == expected
    assert version == next(line.strip() for line in out.splitlines() if "release" in line)
    assert source in ("PATH", "CUDA_HOME", "CUDA_PATH", "pip (site-packages)", "beside nvcc", "/usr/local/cuda")
    assert f"{version} ({path}, from {source})" in str(r)


@pytest.mark.parametrize("tool", ["cuobjdump", "nvdisasm"])
def test_cuda_binary_tool_on_path_cuda_home_and_pip_layout(tool, tmp_path, monkeypatch, rng):
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    bin_dir = _only_python_on_path(tmp_path)
    monkeypatch.setenv("PATH", str(bin_dir))

    release = _fake_cuda_tool(bin_dir / tool, rng)
    r = doctor.report(tmp_path / "cache")
    assert (getattr(r, f"{tool}_path"), getattr(r, f"{tool}_source"), getattr(r, f"{tool}_version")) == (
        str(bin_dir / tool), "PATH", release)
    line = next(line for line in str(r).splitlines() if line.split()[0] == tool)
    assert line.split(None, 1)[1] == f"{release} ({bin_dir / tool}, from PATH)"

    (bin_dir / tool).unlink()
    home = tmp_path / "cuda"
    release = _fake_cuda_tool(home / "bin" / tool, rng)
    monkeypatch.setenv("CUDA_HOME", str(home))
    r = doctor.report(tmp_path / "cache")
    assert (getattr(r, f"{tool}_path"), getattr(r, f"{tool}_source"), getattr(r, f"{tool}_version")) == (
        str(home / "bin" / tool), "CUDA_HOME", release)

    monkeypatch.delenv("CUDA_HOME")
    site = tmp_path / "site-packages"
    release = _fake_cuda_tool(site / "nvidia" / f"cuda_{tool}" / "bin" / tool, rng)  # CUDA 12 wheels' layout
    monkeypatch.syspath_prepend(str(site))
    r = doctor.report(tmp_path / "cache")
    assert (getattr(r, f"{tool}_path"), getattr(r, f"{tool}_source"), getattr(r, f"{tool}_version")) == (
        str(site / "nvidia" / f"cuda_{tool}" / "bin" / tool), "pip (site-packages)", release)


def test_cuda_binary_tools_missing_say_what_needs_them_and_how_to_get_them(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(_only_python_on_path(tmp_path)))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(nvcc, "PIP_NVCC", ())
    _no_pip_cuda_tools(monkeypatch)
    r = doctor.report(tmp_path / "cache")
    for tool, wheel in (("cuobjdump", "nvidia-cuda-cuobjdump"), ("nvdisasm", "nvidia-cuda-nvdisasm")):
        beside_nvcc = [p for p in (Path("/usr/local/cuda/bin") / tool,) if p.exists()]
        if beside_nvcc:  # a system toolkit's copy is found whatever the environment says
            assert getattr(r, f"{tool}_source") == "/usr/local/cuda"
            continue
        assert (getattr(r, f"{tool}_path"), getattr(r, f"{tool}_source")) == (None, None)
        version = getattr(r, f"{tool}_version")
        assert version.startswith("not found: op.disassemble() on CUDA ops needs it")
        assert "pip install '.[nvcc]'" in version and "'.[notebook]'" in version and wheel in version
        line = next(line for line in str(r).splitlines() if line.split()[0] == tool)
        assert line.split(None, 1)[1] == version


def test_broken_cuda_binary_tool_is_reported(tmp_path, monkeypatch, rng):
    bin_dir = _only_python_on_path(tmp_path)
    status = int(rng.integers(1, 100))
    _script(bin_dir / "cuobjdump", f'echo "cuobjdump: cannot load libnvelf" >&2; exit {status}')
    monkeypatch.setenv("PATH", str(bin_dir))
    r = doctor.report(tmp_path / "cache")
    assert r.cuobjdump_path == str(bin_dir / "cuobjdump")
    assert r.cuobjdump_version == f"broken: exited with status {status}: cuobjdump: cannot load libnvelf"


def test_cache_size_and_library_count(tmp_path):
    root = tmp_path / "cache"
    files = {
        "add-0123.so": 1000, "add-0123.json": 321, "reduce-4567.so": 4096,
        "index/abc.json": 77, "tmp/partial.so": 12, "locks/abc.lock": 0,
    }
    for rel, size in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(os.urandom(size))
    (root / "link.so").symlink_to(root / "add-0123.so")  # neither counted as a library nor its bytes twice
    r = doctor.report(root)
    assert r.cache_dir == str(root)
    assert r.cache_exists is True
    assert r.cache_size_bytes == sum(files.values())
    assert r.cache_libraries == 2
    assert f"{sum(files.values())} bytes; 2 libraries" in str(r)


def test_missing_cache_is_reported_and_not_created(tmp_path):
    root = tmp_path / "nowhere" / "cache"
    r = doctor.report(root)
    assert (r.cache_exists, r.cache_size_bytes, r.cache_libraries) == (False, 0, 0)
    assert "does not exist yet" in str(r)
    assert not root.exists() and not root.parent.exists()


def test_default_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("AOTBENCH_CACHE_DIR", str(tmp_path / "env-cache"))
    assert doctor.report().cache_dir == str(cache.default_cache_dir()) == str(tmp_path / "env-cache")


def test_report_is_frozen_and_printable(tmp_path):
    r = doctor.report(tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.gxx_version = "x"  # type: ignore[misc]
    assert set(r.as_dict()) == KEYS
    text = str(r)
    assert text.startswith("aotbench doctor\n")
    for value in (r.aotbench_version, r.python_executable, r.numpy, r.cupy, r.ipython, r.cache_dir, r.gpu):
        assert value in text


def test_cli_json(tmp_path):
    out = subprocess.run([sys.executable, "-m", "aotbench", "doctor", "--json", "--cache-dir", str(tmp_path)],
                         capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data) == KEYS
    assert data["cache_dir"] == str(tmp_path)
    assert data["cache_exists"] is True
    assert data["python_executable"] == sys.executable


def test_cli_text(tmp_path):
    out = subprocess.run([sys.executable, "-m", "aotbench", "doctor", "--cache-dir", str(tmp_path / "c")],
                         capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("aotbench doctor\n")
    assert "g++" in out.stdout and "nvcc" in out.stdout and "does not exist yet" in out.stdout
    tools = {line.split()[0] for line in out.stdout.splitlines()[1:]}
    assert {"cuobjdump", "nvdisasm"} <= tools


def test_report_imports_no_ui_or_gpu_library(tmp_path):
    """Reporting their versions does not import IPython, ipywidgets, matplotlib or cupy."""
    code = ("import sys, json, aotbench.cli.doctor as d; d.report(); "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('IPython', 'ipywidgets', 'matplotlib', 'cupy', 'ipykernel'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env=_env(AOTBENCH_CACHE_DIR=str(tmp_path / "c")), timeout=120, check=True)
    assert json.loads(out.stdout) == []
