"""Against real MindSpore (the CPU wheel, mindspore==2.10.0): exported ops pass their own tests in PyNative and
graph mode, the same kernels agree bit for bit through MindSpore and aotbench, and the tutorial's own two files
run through both. The wheel (an 800 MB download, 2.8 GB on disk) is installed into a virtual environment kept
between runs in ``~/.cache/aotbench-tests`` (``AOTBENCH_MINDSPORE_PYTHON`` names an interpreter that already has
it); deselect these tests with ``-m "not mindspore"``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench import CustomRegOp

pytestmark = [pytest.mark.mindspore, pytest.mark.slow]

MINDSPORE = "mindspore==2.10.0"
ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "tests" / "support" / "kernels" / "ms_roundtrip.cc"
FIXED = aotbench.examples_dir() / "add_reduce.cc"
TUTORIAL = aotbench.examples_dir() / "tutorial"
HEADER = Path(aotbench.get_include()) / "custom_aot_extra.h"


def _has_mindspore(python: Path) -> bool:
    code = "import mindspore, pytest, sys; sys.exit(mindspore.__version__ != '2.10.0')"
    probe = subprocess.run([str(python), "-c", code], check=False, capture_output=True, timeout=300)
    return probe.returncode == 0


@pytest.fixture(scope="session")
def mindspore_python() -> Path:
    """An interpreter with MindSpore 2.10.0 and pytest (installed on first use; a failed install fails, it never
    skips)."""
    given = os.environ.get("AOTBENCH_MINDSPORE_PYTHON")
    if given:
        assert _has_mindspore(Path(given)), f"AOTBENCH_MINDSPORE_PYTHON={given} cannot import {MINDSPORE} and pytest"
        return Path(given)
    home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "aotbench-tests" / "mindspore-2.10.0"
    python = home / "bin" / "python"
    if python.exists() and _has_mindspore(python):
        return python
    shutil.rmtree(home, ignore_errors=True)
    venv.create(home, with_pip=True)
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", MINDSPORE, "pytest"], check=False,
                             capture_output=True, text=True, timeout=1800)
    assert install.returncode == 0, f"pip install {MINDSPORE} failed:\n{install.stdout}\n{install.stderr}"
    assert _has_mindspore(python)
    return python


def in_mindspore(python: Path, args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """Run ``python args`` in MindSpore's environment, with this checkout importable as ``aotbench``."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "GLOG_v": "3", **env}
    return subprocess.run([str(python), *args], check=False, cwd=cwd, capture_output=True, text=True, timeout=900,
                          env=environ)


def exports(root: Path, rng: np.random.Generator) -> list[tuple[Path, str]]:
    """Export one op of each kind: attributes of all eight kinds and a call attribute, a workspace with
    InferShape in four dtypes, two outputs (also with list-valued rules), a one-output tuple, and the tutorial's
    fixed kernel with attributes."""
    from test_export_mindspore import mix_op

    made = [mix_op().export_mindspore(root / "mix", rng.standard_normal((17, 5)).astype(np.float32), 0.37)]
    for dtype in (np.float32, np.float64, np.int32, np.int64):
        scan = aotbench.Custom(f"{KERNELS}:Scan", None, dtype)
        made.append(scan.export_mindspore(root / f"scan_{np.dtype(dtype).name}",
                                          (rng.standard_normal((6, 11)) * 100).astype(dtype)))
    stats = aotbench.Custom(f"{KERNELS}:RowStats", None, (np.float32, np.float32),
                            reg_info=CustomRegOp("row_stats").input(0, "x").output(0, "s").output(1, "m")
                            .target("CPU").get_op_info())
    made.append(stats.export_mindspore(root / "stats", rng.standard_normal((9, 13)).astype(np.float32)))
    # Output rules given as lists, and a one-output tuple with InferShape: written in forms MindSpore takes.
    listed = aotbench.Custom(f"{KERNELS}:RowStats", [[9], [9]], [np.float32, np.float32])
    made.append(listed.export_mindspore(root / "listed", rng.standard_normal((9, 13)).astype(np.float32)))
    one = aotbench.Custom(f"{KERNELS}:Scan", None, (np.float64,))
    made.append(one.export_mindspore(root / "one", rng.standard_normal((2, 3))))
    reduce = aotbench.Custom(f"{FIXED}:CustomKernel", None, np.float32, attrs={"axis": 0, "keep_dim": True})
    x, y = (rng.standard_normal((33, 7)).astype(np.float32) for _ in range(2))
    made.append(reduce.export_mindspore(root / "reduce", x, y))
    return [(e.directory, e.test) for e in made]


def test_exported_ops_pass_their_tests_in_mindspore(mindspore_python, tmp_path, rng):
    made = exports(tmp_path, rng)
    for folder, test in made:
        done = in_mindspore(mindspore_python, [test], folder)
        assert done.returncode == 0, f"{folder.name}:\n{done.stdout}\n{done.stderr[-3000:]}"
        assert done.stdout.count("equal aotbench's bit for bit") == 2, done.stdout  # PYNATIVE and GRAPH
    folder, test = made[-1]
    # The folder MindSpore just ran in (it left custom_kernel_meta/ there) takes a new export of the same op.
    reduce = aotbench.Custom(f"{FIXED}:CustomKernel", None, np.float32, attrs={"axis": 0, "keep_dim": True})
    x, y = (rng.standard_normal((33, 7)).astype(np.float32) for _ in range(2))
    assert (folder / "custom_kernel_meta").is_dir()
    reduce.export_mindspore(folder, x, y)
    assert in_mindspore(mindspore_python, [test], folder).returncode == 0
    with np.load(folder / "expected.npz") as saved:
        changed = saved["arr_0"].copy()
    changed[0, 3] += 1.0
    np.savez(folder / "expected.npz", changed)
    done = in_mindspore(mindspore_python, [test], folder)
    assert done.returncode == 1 and "output 0: 1 of 7 values differ from aotbench's" in done.stdout


def test_the_same_kernels_agree_bit_for_bit_through_mindspore_and_aotbench(mindspore_python, tmp_path):
    report = tmp_path / "side_by_side.json"
    done = in_mindspore(mindspore_python, [str(ROOT / "bench" / "mindspore_side_by_side.py"), "--quick",
                                           "--no-timing", "--json", str(report)], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    rows = json.loads(report.read_text())
    assert len(rows) == 8
    assert all(r["pynative_equal"] and r["graph_equal"] for r in rows), rows


def tutorial_copy(folder: Path) -> Path:
    folder.mkdir()
    for name in ("kernel.cc", "test_custom_aot.py"):
        shutil.copyfile(TUTORIAL / name, folder / name)
    shutil.copyfile(HEADER, folder / "custom_aot_extra.h")  # MindSpore compiles with -I<the kernel's folder>
    return folder


def test_the_tutorial_files_through_both(mindspore_python, tmp_path):
    ms_run = in_mindspore(mindspore_python, ["test_custom_aot.py"], tutorial_copy(tmp_path / "ms"))
    assert ms_run.returncode == 0, ms_run.stderr[-3000:]
    # What MindSpore prints is whatever its memory held where the kernel never wrote (ABI.md, section 7).
    assert ms_run.stdout.strip().splitlines()[-1] == "[8. 0. 0. 0.]"
    ours = subprocess.run([sys.executable, "-m", "aotbench", "run", "test_custom_aot.py"], check=False,
                          cwd=tutorial_copy(tmp_path / "aotbench"), capture_output=True, text=True, timeout=300)
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.strip() == "[nan nan nan nan]" and "ContractWarning" in ours.stderr


def test_a_mindspore_style_pytest_file_passes_in_both(mindspore_python, tmp_path):
    folder = tmp_path / "style"
    folder.mkdir()
    shutil.copyfile(ROOT / "tests" / "support" / "mindspore_scripts" / "add_reduce_ms.py", folder / "test_add_reduce.py")
    shutil.copyfile(FIXED, folder / "add_reduce.cc")
    shutil.copyfile(HEADER, folder / "custom_aot_extra.h")
    pytest_args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "test_add_reduce.py"]
    theirs = in_mindspore(mindspore_python, pytest_args, folder)
    assert theirs.returncode == 0 and "4 passed" in theirs.stdout, theirs.stdout + theirs.stderr[-2000:]
    ours = subprocess.run([sys.executable, "-m", "aotbench", "run", *pytest_args], check=False, cwd=folder,
                          capture_output=True, text=True, timeout=300)
    assert ours.returncode == 0 and "4 passed" in ours.stdout, ours.stdout + ours.stderr


def test_aotbench_beside_real_mindspore_leaves_it_alone(mindspore_python, tmp_path):
    code = ("import aotbench, aotbench.mindspore, mindspore\n"
            "assert mindspore.Tensor is not aotbench.mindspore.Tensor\n"
            "print(mindspore.__file__)\n")
    done = in_mindspore(mindspore_python, ["-c", code], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "site-packages/mindspore/__init__.py" in done.stdout


INIT_SPY = '''
import os, sys, numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops
ms.set_context(mode=int(sys.argv[1]))
reg = ops.CustomRegOp("init_spy").input(0, "x").output(0, "y").dtype_format(
    ops.DataType.F32_Default, ops.DataType.I64_Default).target("CPU").get_op_info()
class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.op = ops.Custom(sys.argv[2] + ":InitSpy", None, ms.int64, "aot", reg_info=reg)
    def construct(self, x):
        return self.op(x)
net = Net()
net.set_inputs(Tensor(shape=[4, None], dtype=ms.float32))
for cols in (5, 9):
    print(net(Tensor(np.ones((4, cols), np.float32))).asnumpy().tolist())
'''


@pytest.mark.parametrize("mode, mindspore_saw, aotbench_saw", [
    (1, ["[1, 5]", "[1, 5]"], ["[1, 5]", "[2, 9]"]),     # PyNative: once, at the first call's shapes
    # graph: once, with -1 for the unknown dim. aotbench runs Init per shape, and once more with -1 after the
    # first call, to see what MindSpore's graph mode would get (DynamicShapeWarning): hence 3 by the second.
    (0, ["[1, -1]", "[1, -1]"], ["[1, 5]", "[3, 9]"]),
])
def test_mindspore_runs_init_once_for_dynamic_inputs_and_aotbench_per_shape(mindspore_python, tmp_path, mode,
                                                                           mindspore_saw, aotbench_saw):
    """What docs/guide/ops.md says of MindSpore's Init with set_inputs, measured, next to what the stand-in does."""
    kernel = tmp_path / "init_spy.cc"
    kernel.write_text(KERNELS.read_text())
    shutil.copyfile(HEADER, tmp_path / "custom_aot_extra.h")
    (tmp_path / "spy.py").write_text(INIT_SPY)
    theirs = in_mindspore(mindspore_python, ["spy.py", str(mode), str(kernel)], tmp_path)
    assert theirs.stdout.split("\n")[:2] == mindspore_saw, theirs.stdout + theirs.stderr[-2000:]
    ours = subprocess.run([sys.executable, "-m", "aotbench", "run", "spy.py", str(mode), str(kernel)], check=False,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert ours.stdout.split("\n")[:2] == aotbench_saw, ours.stdout + ours.stderr
