"""Bad values are clear aotbench errors raised before any allocation or call, naming the value and the limit.

Each case here used to escape as something else: a dim of 2**63 wrapped to -2**63, a 4 TiB output reached numpy
(``MemoryError``) or, isolated, a 4 TiB ``/dev/shm`` arena; 65 dimensions reached numpy's ``ValueError``; a lone
surrogate in a string attribute failed at the first call with ``UnicodeEncodeError``; ``attrs=[("k", 1)]`` and
``cache_dir=123`` were ``AttributeError`` and ``TypeError``; ``[[]]`` could not be read as float rows.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.run import memory
from aotbench.run.channel import SHM_PREFIX

KERNEL = Path(__file__).resolve().parents[1] / "support" / "kernels" / "trust_inputs.cc"


def op(name: str, **kw) -> aotbench.Op:
    return aotbench.Custom(f"{KERNEL}:{name}", None, np.float32, **kw)


def calls(o: aotbench.Op) -> int:
    """How many times Sized, SizedInit and SizedInferShape have run in this process."""
    fn = o.library.handle.trust_calls
    fn.restype = ctypes.c_int64
    return fn()


def printable(err: BaseException) -> str:
    """The message, checked to be writable to a UTF-8 terminal or notebook (a lone surrogate would not be)."""
    text = str(err)
    text.encode("utf-8")
    return text


# -- dims and ranks ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dims", [(2**63,), (2**64 + 5, 1), (3, 2**70)])
@pytest.mark.slow
def test_infer_shape_refuses_dims_outside_int64(dims):
    """op.infer_shape with a dim the kernel cannot read as int64_t is a ShapeError naming the dim, not a wrapped
    value returned as the answer."""
    echo = op("Echo")
    with pytest.raises(aotbench.ShapeError) as info:
        echo.infer_shape(dims)
    bad = next(d for d in dims if not 0 <= d < 2**63)
    assert str(bad) in printable(info.value) and "int64" in str(info.value)


def test_infer_shape_passes_large_valid_dims_through(rng):
    """The largest int64 dims still arrive as they are (the refusal is not a lower limit in disguise)."""
    echo = op("Echo")
    dims = (2**63 - 1, int(rng.integers(1, 2**40)))
    assert echo.infer_shape(dims) == dims
    assert echo.infer_shape((None, 5)) == (None, 5)


def test_out_shape_dim_beyond_int64_is_a_shape_error(rng):
    """A static out_shape with a dim above 2**63 - 1 is refused at the call, with the dim named."""
    bad = aotbench.Custom(f"{KERNEL}:Echo", (2**64 + 5,), np.float32)
    with pytest.raises(aotbench.ShapeError, match=str(2**64 + 5)):
        bad(rng.standard_normal(3).astype(np.float32))


@pytest.mark.parametrize("how", ["InferShape", "out_shape"])
def test_output_rank_above_64_is_a_shape_error(how, rng):
    """65 dimensions, from InferShape or from out_shape, is a ShapeError naming 65 and the limit, before the
    kernel runs; 64 dimensions works."""
    x = rng.standard_normal(4).astype(np.float32)
    if how == "InferShape":
        ranked = lambda rank: op("Ranked", attrs={"rank": rank})
    else:
        ranked = lambda rank: aotbench.Custom(f"{KERNEL}:Ranked", (1,) * rank, np.float32)
    with pytest.raises(aotbench.ShapeError) as info:
        ranked(65)(x)
    assert "65 dimensions" in printable(info.value) and "64" in str(info.value)
    out = ranked(64)(x)
    assert out.shape == (1,) * 64 and out.ravel()[0] == 7.0
    if how == "InferShape":
        with pytest.raises(aotbench.ShapeError, match="65 dimensions"):
            ranked(65).infer_shape((4,))


# -- memory --------------------------------------------------------------------------------------------------

def test_output_larger_than_memory_is_refused_before_anything_runs(rng):
    """A 4 TiB output (float32, 2**40 elements) and one of 1.5x this machine's memory are ShapeErrors naming the
    size and the limit; Init and the kernel never run."""
    x = rng.standard_normal(3).astype(np.float32)
    limit = memory.host_limit_bytes()
    for n in (2**40, limit * 3 // 2 // 4):
        sized = op("Sized", attrs={"n": n, "ws": 16})
        before = calls(sized)
        with pytest.raises(aotbench.ShapeError) as info:
            sized(x)
        text = printable(info.value)
        assert memory.size_text(n * 4) in text and memory.size_text(limit) in text and "memory" in text
        assert calls(sized) == before + 1  # InferShape only: no Init, no kernel, no allocation
    fits = op("Sized", attrs={"n": 1000, "ws": 16})
    assert fits(x)[0] == 1.0


def test_workspace_larger_than_memory_is_refused_before_allocating(rng):
    """Init asking for twice this machine's memory is a WorkspaceError (a MemoryError too) naming the bytes; the
    kernel never runs."""
    limit = memory.host_limit_bytes()
    sized = op("Sized", attrs={"n": 4, "ws": 2 * limit})
    before = calls(sized)
    with pytest.raises(aotbench.WorkspaceError) as info:
        sized(rng.standard_normal(3).astype(np.float32))
    assert isinstance(info.value, MemoryError)
    assert str(2 * limit) in printable(info.value) and memory.size_text(limit) in str(info.value)
    assert calls(sized) == before + 2  # InferShape and Init, not the kernel


def _arenas() -> dict[str, int]:
    return {p.name: p.stat().st_size for p in Path("/dev/shm").glob(f"{SHM_PREFIX}{os.getpid()}_*")}


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs /dev/shm")
def test_isolated_output_larger_than_memory_makes_no_arena(rng):
    """Under isolate=True the worker refuses the 4 TiB output while planning: the parent never creates (or grows
    to) an arena of that size, and the op still works for a sane size afterwards."""
    x = rng.standard_normal(3).astype(np.float32)
    sized = op("Sized", attrs={"n": 2**40, "ws": 16}, isolate=True)
    with pytest.raises(aotbench.ShapeError, match="4.0 TiB"):
        sized(x)
    assert all(size < 1 << 30 for size in _arenas().values()), _arenas()
    small = op("Sized", attrs={"n": 9, "ws": 16}, isolate=True)
    out = small(x)
    assert out.shape == (9,) and out[0] == 1.0


# -- attribute values and arguments --------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["a\ud800", "\udfff", "ok \udc80 then"])
def test_lone_surrogate_string_is_refused_when_the_op_is_made(value):
    """A string attribute that cannot be UTF-8 is an AttrError from Custom, naming the attribute (and the message
    itself stays printable)."""
    with pytest.raises(aotbench.AttrError) as info:
        aotbench.Custom(f"{KERNEL}:Echo", None, np.float32, attrs={"label": value})
    assert "'label'" in printable(info.value) and "surrogate" in str(info.value)


def test_lone_surrogate_attribute_name_is_refused():
    with pytest.raises(aotbench.AttrError) as info:
        aotbench.Custom(f"{KERNEL}:Echo", None, np.float32, attrs={"k\ud800": 1})
    assert "not valid" in printable(info.value)


@pytest.mark.parametrize("attrs,example", [
    ([("k", 1)], "attrs={'k': 1}"),
    ((("a", 2.5), ("b", [1, 2])), "attrs={'a': 2.5, 'b': [1, 2]}"),
    (["k"], "attrs={'k': 1}"),
    ("k=1", "attrs={'k': 1}"),
])
def test_attrs_that_are_not_a_dict_are_an_argument_error(attrs, example):
    with pytest.raises(aotbench.ArgumentError) as info:
        aotbench.Custom(f"{KERNEL}:Echo", None, np.float32, attrs=attrs)
    assert "attrs must be a dict" in str(info.value) and example in str(info.value)


@pytest.mark.parametrize("cache_dir", [123, 4.5, b"/tmp/x", ["/tmp"], ""])
def test_cache_dir_that_is_not_a_path_is_an_argument_error(cache_dir):
    with pytest.raises(aotbench.ArgumentError) as info:
        aotbench.Custom(f"{KERNEL}:Echo", None, np.float32, cache_dir=cache_dir)
    assert "cache_dir must be a directory path" in str(info.value) and repr(cache_dir) in str(info.value)


@pytest.mark.parametrize("rows,mode,expected", [
    ([[]], 0, (1, 0)),
    ([[]], 1, (1, 0)),
    ([[], []], 0, (2, 0)),
    (((), (), ()), 1, (3, 0)),
    ([[], [4, 5]], 0, (2, 2)),
    ([[], [0.5]], 1, (2, 1)),
    ([], 1, (0, 0)),
    ([], 2, (1, 0)),
])
def test_empty_rows_read_as_either_2d_kind(rows, mode, expected, rng):
    """Like [], a list of empty lists carries no element type, so a kernel may read it as int or float rows."""
    reader = aotbench.Custom(f"{KERNEL}:Rows", (2,), np.int64, attrs={"rows": rows, "mode": mode})
    assert tuple(reader(rng.standard_normal(3).astype(np.float32))) == expected


def test_empty_rows_are_not_a_flat_list(rng):
    """[[]] is 2-D: reading it as std::vector<int64_t> is an AttrError naming what it holds and what was asked."""
    reader = aotbench.Custom(f"{KERNEL}:Rows", (2,), np.int64, attrs={"rows": [[]], "mode": 2})
    with pytest.raises(aotbench.AttrError) as info:
        reader(rng.standard_normal(3).astype(np.float32))
    assert "a list of empty lists" in str(info.value) and "std::vector<int64_t>" in str(info.value)


SMALL_SHM = """
import sys, numpy as np, aotbench
op = aotbench.Custom(sys.argv[1] + ":Echo", None, np.float32, isolate=True)
rng = np.random.default_rng()
for mib in (1, 6, 3):
    x = rng.standard_normal(mib << 18).astype(np.float32)  # mib MiB of input, as much output
    try:
        ok = bool(np.array_equal(op(x), x))
        print(mib, "ok", ok)
    except aotbench.AotbenchError as exc:
        print(mib, type(exc).__name__, str(exc).replace(chr(10), " "))
"""


def _private_small_shm_works() -> bool:
    import shutil
    import subprocess

    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=8m tmpfs /dev/shm"],
                           capture_output=True, check=False)
    return probe.returncode == 0


def run_with_small_shm(tmp_path: Path, cache: Path, script_text: str, mib: int):
    """Run a script (argv[1]: this file's kernel) in a private mount namespace whose /dev/shm holds ``mib`` MiB."""
    import subprocess
    import sys

    script = tmp_path / "small_shm_script.py"
    script.write_text(script_text)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), AOTBENCH_CACHE_DIR=str(cache))
    return subprocess.run(["unshare", "-m", "sh", "-c", f'mount -t tmpfs -o size={mib}m tmpfs /dev/shm && exec "$@"',
                           "sh", sys.executable, str(script), str(KERNEL)],
                          capture_output=True, text=True, env=env, timeout=600, check=False)


@pytest.mark.skipif(not _private_small_shm_works(), reason="needs unshare -m and mount (root)")
def test_isolated_call_larger_than_dev_shm_is_a_clear_error(tmp_path, session_cache):
    """With an 8 MiB /dev/shm (Docker's is 64 MiB), in a private mount namespace: a call needing 12 MiB of shared
    memory is an IsolationMemoryError naming both sizes instead of a SIGBUS, and calls that fit still work."""
    proc = run_with_small_shm(tmp_path, session_cache, SMALL_SHM, 8)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines["1"] == "ok True" and lines["3"] == "ok True", proc.stdout
    assert lines["6"].startswith("IsolationMemoryError") and "12.0 MiB" in lines["6"] and "/dev/shm" in lines["6"]


TWO_OPS_SHM = """
import sys, numpy as np, aotbench
a = aotbench.Custom(sys.argv[1] + ":Echo", None, np.float32, isolate=True)
b = aotbench.Custom(sys.argv[1] + ":Echo", None, np.float32, isolate=True, guard=False)
rng = np.random.default_rng()
for name, op, mib in (("a", a, 2.5), ("b", b, 13), ("a", a, 3.75), ("b", b, 10)):
    x = rng.standard_normal(int(mib * (1 << 18))).astype(np.float32)
    try:
        print(name, mib, "ok", bool(np.array_equal(op(x), x)))
    except aotbench.AotbenchError as exc:
        print(name, mib, type(exc).__name__)
"""


@pytest.mark.skipif(not _private_small_shm_works(), reason="needs unshare -m and mount (root)")
def test_an_arena_reused_after_dev_shm_filled_up_is_safe(tmp_path, session_cache):
    """A 32 MiB /dev/shm: op a's arena (8 MiB for a 5 MiB call), then op b asks for 26 MiB, then a reuses its
    arena for 7.5 MiB. With sparse arenas b got its space and a's second call touched pages nobody could hold
    (SIGBUS); with reserved ones b's call is refused cleanly and a's works."""
    proc = run_with_small_shm(tmp_path, session_cache, TWO_OPS_SHM, 32)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stdout} {proc.stderr[-2000:]}"
    assert proc.stdout.split("\n")[:4] == ["a 2.5 ok True", "b 13 IsolationMemoryError", "a 3.75 ok True",
                                           "b 10 ok True"], proc.stdout


@pytest.mark.parametrize("shape", [(0, 2**62, 2**62), (2**62, 2**62, 0), (0, 2**40, 2**40, 2**40)])
def test_an_empty_output_numpy_cannot_make_is_a_shape_error(shape, rng):
    """Zero elements, but dims whose product overflows: numpy refuses such a shape ("array is too big"), so
    aotbench does first, before Init, with its own error."""
    sized = aotbench.Custom(f"{KERNEL}:Sized", shape, np.float32, attrs={"n": 1, "ws": 16})
    before = calls(sized)
    with pytest.raises(aotbench.ShapeError, match="2\\*\\*63 - 1"):
        sized(rng.standard_normal(3).astype(np.float32))
    assert calls(sized) == before  # no Init, no kernel
    empty = aotbench.Custom(f"{KERNEL}:Sized", (0, 7), np.float32, attrs={"n": 1, "ws": 16}, guard=False)
    assert empty(rng.standard_normal(3).astype(np.float32)).shape == (0, 7)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_the_memory_limit_is_the_smallest_of_the_cgroups_above_the_process(tmp_path, version):
    """A limit on a parent cgroup binds a process in a child cgroup (a job inside a limited slice)."""
    if version == "v2":
        lines, base, name = ["0::/jobs/slurm/task7"], tmp_path, "memory.max"
    else:
        lines, base, name = ["4:memory:/jobs/slurm/task7", "3:cpu:/"], tmp_path / "memory", "memory.limit_in_bytes"
    limits = {"": "max" if version == "v2" else str(2**63 - 4096), "jobs": str(3 << 30), "jobs/slurm": str(5 << 30),
              "jobs/slurm/task7": "max" if version == "v2" else str(2**63 - 4096)}
    for folder, value in limits.items():
        (base / folder).mkdir(parents=True, exist_ok=True)
        (base / folder / name).write_text(value + "\n")
    found = memory._cgroup_limits(lines, tmp_path)
    assert min(found) == 3 << 30
