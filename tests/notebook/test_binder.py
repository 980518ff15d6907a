"""Binder: the build plan repo2docker derives from ``binder/``, and the notebooks run in what it installs.

repo2docker needs no Docker daemon to print its plan: ``repo2docker --no-build --debug`` renders the
Dockerfile it would build, and its Python API (``Repo2Docker().buildpacks``, ``detect()``, ``render()``) is
what that command calls. The slow test then does what the plan does, minus Docker: a fresh virtual
environment, ``pip install -r binder/requirements.txt`` from a clean copy of the repository's root, and every
notebook executed in that environment through its own Jupyter kernel.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import checkout
import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
BINDER = ROOT / "binder"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
USER = ["--user-id", "1000", "--user-name", "jovyan"]  # as on mybinder.org (repo2docker defaults to the caller)


def _unescape(name: str) -> str:
    """repo2docker names build-context files with escapism ('-2e' is '.', '-2d' is '-', '-2f' is '/')."""
    return re.sub(r"-([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), name)


@pytest.fixture(scope="module")
def plan() -> str:
    """What ``repo2docker --no-build --debug`` prints for this repository: its log lines and the Dockerfile."""
    out = subprocess.run([sys.executable, "-m", "repo2docker", "--no-build", "--debug", *USER, str(ROOT)],
                         capture_output=True, text=True, timeout=300, env=checkout.child_env(), check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout + out.stderr


def test_binder_files_say_what_the_issue_asks():
    assert (BINDER / "runtime.txt").read_text().split() == ["python-3.11"]
    assert "g++" in (BINDER / "apt.txt").read_text().split()
    requirements = [line.split("#")[0].strip() for line in (BINDER / "requirements.txt").read_text().splitlines()]
    assert ".[notebook,nvcc]" in requirements
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[<>=!~ \[]", req)[0].lower() for req in extras["notebook"]}
    assert {"ipython", "ipykernel"} <= names


def test_plan_pins_python_311(plan):
    assert "Building conda environment for python=3.11" in plan
    sources = [_unescape(m) for m in re.findall(r"build_script_files/(\S+) /tmp/env/environment\.lock", plan)]
    assert len(sources) == 1 and "environment.py-3.11-" in sources[0], sources


def test_plan_installs_gxx_from_apt(plan):
    installs = re.findall(r"apt-get install --yes --no-install-recommends ([^&\\]+)", plan)
    assert any("g++" in line.split() for line in installs), installs


def test_plan_installs_the_requirements_from_the_whole_repository(plan):
    """``.`` in the requirements is the repository root: the pip line must come after the full copy, run in
    the repository directory (WORKDIR), as the notebook user."""
    copy_all = plan.index("COPY --chown=1000:1000 src/ ${REPO_DIR}/")
    pip = plan.index('RUN ${KERNEL_PYTHON_PREFIX}/bin/pip install --no-cache-dir -r "binder/requirements.txt"')
    assert plan.index("WORKDIR ${REPO_DIR}") < copy_all < pip
    assert plan.rfind("USER ${NB_USER}", 0, pip) > copy_all


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pythonjsonlogger, imported by repo2docker
def test_python_api_picks_the_python_buildpack(monkeypatch):
    """The same decision through repo2docker's API: which buildpack detects this repository, and its plan."""
    from repo2docker.app import Repo2Docker
    from repo2docker.buildpacks import PythonBuildPack

    r2d = Repo2Docker()
    monkeypatch.chdir(ROOT)  # repo2docker detects relative to the working directory, as its build() does
    picked = next(bp for bp in (BP(base_image=r2d.base_image) for BP in r2d.buildpacks) if bp.detect())
    picked.platform = "linux/amd64"  # as Repo2Docker.build() sets it (mybinder.org builds for amd64)
    assert type(picked) is PythonBuildPack
    assert picked.python_version == "3.11"
    apt = [script for _user, script in picked.get_preassemble_scripts() if "apt-get install" in script]
    assert any("g++" in script.split() for script in apt), apt
    assert any('pip install --no-cache-dir -r "binder/requirements.txt"' in script
               for _user, script in picked.get_assemble_scripts())
    assert not picked._should_preassemble_pip  # a local path in the requirements: install after the full copy
    dockerfile = picked.render({"NB_USER": "jovyan", "NB_UID": "1000"})
    assert 'pip install --no-cache-dir -r "binder/requirements.txt"' in dockerfile


@pytest.mark.slow
@pytest.mark.skipif(not NOTEBOOKS, reason="no notebooks in notebooks/ yet")
def test_binder_requirements_install_and_run_every_notebook(tmp_path):
    repo = tmp_path / "repo"
    checkout.copy_checkout(repo)
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    env = checkout.child_env()
    timings = {}

    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", "binder/requirements.txt"],
                             cwd=repo, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert install.returncode == 0, install.stdout + install.stderr
    # The runner's own needs (Binder runs notebooks through Jupyter's server instead).
    runner_deps = subprocess.run([str(python), "-m", "pip", "install", "-q", "nbclient", "nbformat"],
                                 env=env, capture_output=True, text=True, timeout=600, check=False)
    assert runner_deps.returncode == 0, runner_deps.stdout + runner_deps.stderr
    timings["install"] = time.perf_counter() - start

    where = subprocess.run([str(python), "-c", "import aotbench, IPython, ipykernel; print(aotbench.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(venv), "aotbench must come from the Binder install"

    # Binder has no CUDA toolkit: hide this machine's nvcc, so GPU cells compile with the one pip installed.
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep) if not (Path(d) / "nvcc").exists())
    for var in ("CUDA_HOME", "CUDA_PATH"):
        env.pop(var, None)
    doctor = subprocess.run([str(python), "-m", "aotbench", "doctor", "--json"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert doctor.returncode == 0, doctor.stderr
    assert json.loads(doctor.stdout)["nvcc_source"] == "pip (site-packages)", doctor.stdout

    start = time.perf_counter()
    run = subprocess.run([str(python), str(repo / "tests" / "support" / "notebook_runner.py"), "--work-dir", str(tmp_path / "work"),
                          *(str(repo / "notebooks" / p.name) for p in NOTEBOOKS)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800, check=False)
    timings["notebooks"] = time.perf_counter() - start
    print(f"binder environment: install {timings['install']:.1f} s, notebooks {timings['notebooks']:.1f} s")
    assert run.returncode == 0, run.stdout + run.stderr[-5000:]
    passed = [line.split()[1] for line in run.stdout.splitlines() if line.startswith("ok ")]
    assert passed == [p.name for p in NOTEBOOKS], run.stdout
