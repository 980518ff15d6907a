"""The axis=0 path of ``examples/add_reduce.cu`` (the two-pass column sum), run ON THE HOST through a stand-in
for the CUDA runtime (tests/support/kernels/cuda_on_host.h): each launch becomes a loop over the grid's blocks and
threads. This is not a GPU run (test_gpu.py has those); it checks, where no GPU exists, what a host can show:
the chunking of the rows, the indices of both passes, and that Init's workspace is exactly what the launches
use, against numpy on fresh random inputs of awkward shapes."""

from __future__ import annotations

import ctypes
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import aotbench

HERE = Path(__file__).resolve().parents[1] / "support"
SHIM = HERE / "kernels" / "cuda_on_host.h"


def launches_as_loops(source: str) -> str:
    """``k<<<grid, block[, shared, stream]>>>(args)`` -> ``aotb_run_grid(k, grid, block, args)``."""
    out, pos = [], 0
    for match in re.finditer(r"([A-Za-z_]\w*(?:<[^<>;]*>)?)<<<", source):
        if match.start() < pos:
            continue
        end = source.index(">>>", match.end())
        config, depth, parts, current = source[match.end():end], 0, [], ""
        for ch in config:
            depth += ch in "(["
            depth -= ch in ")]"
            if ch == "," and depth == 0:
                parts.append(current)
                current = ""
            else:
                current += ch
        parts.append(current)
        assert source[end + 3] == "(", "a launch's arguments follow its configuration"
        out.append(source[pos:match.start()])
        out.append(f"aotb_run_grid({match[1]}, {parts[0].strip()}, {parts[1].strip()}, ")
        pos = end + 4
    return "".join(out) + source[pos:]


@pytest.fixture(scope="module")
def on_host(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    work = tmp_path_factory.mktemp("cuda-on-host")
    shutil.copy(SHIM, work / SHIM.name)
    source = (aotbench.examples_dir() / "add_reduce.cu").read_text()
    (work / "add_reduce_on_host.cc").write_text(f'#include "{SHIM.name}"\n' + launches_as_loops(source))
    return work / "add_reduce_on_host.cc"


def test_the_rewrite_keeps_the_arguments_and_drops_stream_and_shared_bytes():
    text = "f<<<dim3(a, b), kT, 0, s>>>(x, y);\nrow<true><<<n, 256>>>(p);"
    assert launches_as_loops(text) == "aotb_run_grid(f, dim3(a, b), kT, x, y);\naotb_run_grid(row<true>, n, 256, p);"


@pytest.mark.parametrize("keep_dim", [False, True])
@pytest.mark.slow
def test_column_sums_on_the_host_match_numpy(on_host, rng, keep_dim):
    op = aotbench.Custom(f"{on_host}:AddReduce", None, np.float32, attrs={"axis": 0, "keep_dim": keep_dim},
                         guard=True)
    grids = ctypes.CDLL(str(op.library.path)).AotbGridsRun
    shapes = [(int(rng.integers(1, 400)), int(rng.integers(1, 700))), (1, 1), (33, 257), (1000, 3), (2, 513)]
    for rows, cols in shapes:
        a, b = (rng.standard_normal((rows, cols), dtype=np.float32) for _ in range(2))
        before = grids()
        got = op(a, b)
        want = (a.astype(np.float64) + b).sum(axis=0, keepdims=keep_dim)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(rows))
        assert grids() - before == 2  # both passes ran
        workspace = op.plan_info(a, b)["workspaces"][0]["requested"]
        chunks = workspace // (4 * cols)
        assert workspace == 4 * cols * chunks and 1 <= chunks <= min(rows, 32)
