"""``python -m aotbench run -m pytest test_custom_aot.py`` as README documents it: the shipped tutorial file holds
pytest tests that pass beside the tutorial's kernel (its wrong sums marked xfail), pass outright beside the
corrected kernel, and fail for a kernel with a wrong output shape. Without pytest (a notebook-only environment),
``run -m pytest`` says so in one line instead of an ImportError's traceback."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import aotbench

TUTORIAL = aotbench.examples_dir() / "tutorial"
FIXED = aotbench.examples_dir() / "add_reduce.cc"
DOCUMENTED = ["run", "-m", "pytest", "test_custom_aot.py"]  # README's command, after `python -m aotbench`

# Runs `python -m aotbench run ...` (argv after -c) in an interpreter whose import system cannot find pytest: the
# path finder is wrapped so that pytest's packages are not found, as in an environment that never installed them.
HIDE_PYTEST = """
import importlib.machinery, sys
class NoPytest:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] in ("pytest", "_pytest"):
            return None
        return importlib.machinery.PathFinder.find_spec(name, path, target)
    @staticmethod
    def invalidate_caches():
        importlib.machinery.PathFinder.invalidate_caches()
sys.meta_path[:] = [NoPytest if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
try:
    import pytest
except ModuleNotFoundError:
    pass
else:
    raise SystemExit("pytest is still importable")
from aotbench.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def aotbench_cli(args: list[str], cwd: Path, *, hide_pytest: bool = False) -> subprocess.CompletedProcess:
    head = [sys.executable, "-c", HIDE_PYTEST] if hide_pytest else [sys.executable, "-m", "aotbench"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not this run's pytest settings
    extra = ["-p", "no:cacheprovider", "-rfx"] if "pytest" in args else []  # options may follow pytest's file
    return subprocess.run([*head, *args, *extra], cwd=cwd, capture_output=True, text=True, timeout=300, check=False,
                          env=env)


def tutorial_copy(folder: Path, kernel: Path = TUTORIAL / "kernel.cc") -> Path:
    folder.mkdir()
    shutil.copyfile(TUTORIAL / "test_custom_aot.py", folder / "test_custom_aot.py")
    shutil.copyfile(kernel, folder / "kernel.cc")
    return folder


def summary(done: subprocess.CompletedProcess) -> str:
    """pytest's closing line (``1 passed, 1 xfailed, 3 warnings in 2.1s``) without its timing."""
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    return re.sub(r"^=+ | in [\d.]+s.*$", "", last)


@pytest.mark.slow
def test_the_documented_command_runs_the_tutorials_tests_and_they_pass(tmp_path):
    done = aotbench_cli(DOCUMENTED, tutorial_copy(tmp_path / "tutorial"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert summary(done).startswith("1 passed, 1 xfailed"), done.stdout
    # the shape test passed; the value test names the tutorial kernel's bug rather than failing the run
    assert "XFAIL test_custom_aot.py::test_sums_x_plus_y_along_axis_1 - the tutorial's kernel gives" in done.stdout


@pytest.mark.slow
def test_the_tutorials_tests_pass_for_the_corrected_kernel_and_fail_for_a_wrong_shape(tmp_path):
    done = aotbench_cli(DOCUMENTED, tutorial_copy(tmp_path / "fixed", FIXED))
    assert done.returncode == 0, done.stdout + done.stderr
    assert summary(done).startswith("2 passed"), done.stdout

    wrong = tmp_path / "wrong.cc"
    source = (TUTORIAL / "kernel.cc").read_text()
    infer = "return std::vector<int64_t>{shapes[0][1 - axis]};"
    assert source.count(infer) == 1
    wrong.write_text(source.replace(infer, "return std::vector<int64_t>{shapes[0][1 - axis] + 1};"))
    done = aotbench_cli(DOCUMENTED, tutorial_copy(tmp_path / "wrong", wrong))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED test_custom_aot.py::test_output_shape_and_dtype" in done.stdout, done.stdout


def test_the_tutorial_file_runs_as_a_script_without_pytest(tmp_path):
    """The tests import pytest only when they run: the script itself needs none (checked by source, as running
    it would build the kernel; tests/mindspore/test_mindspore_standin.py runs it)."""
    source = (TUTORIAL / "test_custom_aot.py").read_text()
    top_level_imports = [line for line in source.splitlines() if re.match(r"(import|from) ", line)]
    assert top_level_imports and not any("pytest" in line for line in top_level_imports), top_level_imports
    assert 'if __name__ == "__main__":' in source


def test_run_dash_m_pytest_without_pytest_says_how_to_install_it(tmp_path):
    (tmp_path / "test_custom_aot.py").write_text("def test_nothing():\n    pass\n")
    done = aotbench_cli(DOCUMENTED, tmp_path, hide_pytest=True)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip() == (
        "python -m aotbench run: pytest is not installed in this environment: pip install pytest")
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.slow
def test_run_dash_m_with_pytest_present_is_not_refused(tmp_path):
    """The same command with pytest importable gets past the check (pytest runs and finds the test)."""
    (tmp_path / "test_custom_aot.py").write_text("def test_nothing():\n    pass\n")
    done = aotbench_cli(DOCUMENTED, tmp_path)
    assert done.returncode == 0 and summary(done).startswith("1 passed"), done.stdout + done.stderr


def test_run_dash_m_with_an_unknown_module_names_it(tmp_path, rng):
    name = f"no_such_module_{rng.integers(1 << 40):x}"
    done = aotbench_cli(["run", "-m", f"{name}.sub", "x"], tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"no module named {name!r}" in done.stderr and "Traceback" not in done.stderr
    assert "pip install" not in done.stderr  # not a PyPI name aotbench knows: no install advice that may be wrong
