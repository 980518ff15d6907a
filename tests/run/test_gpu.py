"""The gpu target on a real device: cupy in and out, the current stream, CUDA errors named, device timing,
check mode and compute-sanitizer. Marked ``gpu``: skipped where no usable device is (see conftest.py), run by
``bench/gpu_check.py`` on a lent GPU machine."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import aotbench

pytestmark = pytest.mark.gpu
KERNELS = Path(__file__).resolve().parents[1] / "support" / "kernels"
AXPY = f"{KERNELS / 'nvcc_axpy.cu'}:Axpy"
FAULTS = f"{KERNELS / 'gpu_faults.cu'}:GpuFaults"


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


@pytest.fixture(scope="module")
def axpy():
    return aotbench.Custom(AXPY, None, np.float32, attrs={"a": 2.5, "transpose": False})


def faults(mode: int):
    return aotbench.Custom(FAULTS, lambda s: s, np.float32, attrs={"mode": mode})


def random_device(cp, rng, shape):
    return cp.asarray(rng.standard_normal(shape, dtype=np.float32))


def test_cupy_inputs_give_cupy_outputs_equal_to_the_cupy_reference(cp, axpy, rng):
    """out = a*x + y on the device, for a random size that is not a multiple of the block; InferShape on the host."""
    n = int(rng.integers(1000, 100_000))
    x, y = random_device(cp, rng, n), random_device(cp, rng, n)
    out = axpy(x, y)
    assert isinstance(out, cp.ndarray) and out.shape == (n,) and out.dtype == np.float32
    cp.testing.assert_allclose(out, 2.5 * x + y, rtol=1e-6, atol=1e-6)
    rows, cols = (int(v) for v in rng.integers(2, 40, 2))
    m = random_device(cp, rng, (rows, cols))
    assert axpy.with_attrs(transpose=True)(m, m).shape == (cols, rows)
    assert axpy.plan_info(x, y)["workspaces"][0]["requested"] == n * 4  # Init ran on the host


def test_numpy_inputs_are_copied_with_one_note(cp, rng):
    op = aotbench.Custom(AXPY, None, np.float32, attrs={"a": -1.5, "transpose": False})
    x, y = (rng.standard_normal(777, dtype=np.float32) for _ in range(2))
    with pytest.warns(aotbench.HostCopyWarning, match="copied to the GPU"):
        out = op(x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        op(x, y)  # said once per op
    assert isinstance(out, cp.ndarray)
    np.testing.assert_allclose(out.get(), -1.5 * x + y, rtol=1e-6, atol=1e-6)


def test_the_kernel_runs_on_the_current_stream(cp, axpy, rng):
    """Inside ``with stream:`` the op's result is complete when it returns (it synchronizes that stream)."""
    x, y = random_device(cp, rng, 1 << 20), random_device(cp, rng, 1 << 20)
    # The inputs were copied on the legacy default stream, which a non-blocking stream does not wait for: the
    # copies must be done before the kernel reads them there.
    cp.cuda.Device().synchronize()
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        out = axpy(x, y)
        assert stream.done
    cp.testing.assert_allclose(out, 2.5 * x + y, rtol=1e-6, atol=1e-6)


def test_a_refused_launch_is_a_cuda_error_naming_the_kernel(cp, rng):
    x = random_device(cp, rng, 4096)
    with pytest.raises(aotbench.CudaError) as info:
        faults(1)(x)
    err = info.value
    assert err.error == "cudaErrorInvalidConfiguration" and err.when == "at launch" and not err.sticky
    assert "add_one" in str(err) and "1024 threads per block" in str(err)
    cp.testing.assert_allclose(faults(0)(x), x + 1)  # not sticky: the process goes on


def test_an_illegal_address_is_named_in_a_child_process():
    """Sticky errors ruin the context, so this runs in a child: CudaError names the error and the kernel."""
    script = textwrap.dedent(f"""
        import numpy as np, cupy, aotbench
        op = aotbench.Custom({FAULTS!r}, lambda s: s, np.float32, attrs={{"mode": 2}})
        try:
            op(cupy.ones(1000, dtype=cupy.float32))
        except aotbench.CudaError as e:
            print("ERROR", e.error, e.sticky, e)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=90,
                         check=False).stdout
    assert "ERROR cudaErrorIllegalAddress True" in out and "add_one" in out and "compute_sanitizer" in out


@pytest.mark.parametrize("axis, keep_dim", [(0, False), (1, False), (0, True), (1, True)])
def test_fused_add_reduce_example(cp, rng, axis, keep_dim):
    op = aotbench.Custom(str(aotbench.examples_dir() / "add_reduce.cu") + ":AddReduce", None, np.float32,
                         attrs={"axis": axis, "keep_dim": keep_dim})
    for shape in [(int(rng.integers(1, 300)), int(rng.integers(1, 3000))), (257, 1024), (1, 5)]:
        a, b = random_device(cp, rng, shape), random_device(cp, rng, shape)
        want = (a.astype(cp.float64) + b).sum(axis=axis, keepdims=keep_dim)
        cp.testing.assert_allclose(op(a, b), want, rtol=1e-4, atol=1e-3 * np.sqrt(shape[axis]))


def test_saxpy_example_any_size(cp, rng):
    op = aotbench.Custom(str(aotbench.examples_dir() / "saxpy.cu") + ":Saxpy", lambda s0, s1: s0, np.float32,
                         attrs={"a": 0.75})
    for n in (1, 3, 4, int(rng.integers(5, 1 << 20))):
        x, y = random_device(cp, rng, n), random_device(cp, rng, n)
        cp.testing.assert_allclose(op(x, y), 0.75 * x + y, rtol=1e-6, atol=1e-6)
    x = random_device(cp, rng, 1001)
    cp.testing.assert_allclose(op(x[1:], x[:-1]), 0.75 * x[1:] + x[:-1], rtol=1e-6, atol=1e-6)  # unaligned


def test_device_timing_agrees_with_cupyx_benchmark(cp, rng):
    """Events per call with the L2 flushed, host launch reported apart; within 20% of cupyx's GPU times less
    the host launch (the 5% target is bench/gpu_check.py's)."""
    from cupyx.profiler import benchmark

    op = aotbench.Custom(str(aotbench.examples_dir() / "saxpy.cu") + ":Saxpy", lambda s0, s1: s0, np.float32,
                         attrs={"a": 2.0})
    x, y = random_device(cp, rng, 1 << 26), random_device(cp, rng, 1 << 26)
    timing = aotbench.bench(op, x, y, budget_ms=300)
    assert timing.device == "gpu" and timing.clock == "cuda events" and timing.flushed
    assert timing.launch_overhead_ns > 0 and timing.count >= 5
    launch = op.launcher(x, y)
    # cupyx's events include the host's launch (it records the start, then calls); aotbench's flush hides it
    result = benchmark(launch, n_repeat=50, n_warmup=5)
    theirs = float(np.median(result.gpu_times)) * 1e9
    like = theirs - float(np.median(result.cpu_times)) * 1e9
    assert 0.8 < timing.median_ns / like < 1.2, (timing, theirs)
    graph = aotbench.bench(op, x, y, budget_ms=300, graph=True)
    assert graph.graph and 0.5 < graph.median_ns / timing.median_ns < 2
    cp.testing.assert_allclose(launch.result, 2.0 * x + y, rtol=1e-6, atol=1e-6)


def test_compare_and_sweep_time_on_the_device(cp, axpy, rng):
    x, y = random_device(cp, rng, 1 << 18), random_device(cp, rng, 1 << 18)
    result = aotbench.compare({"op": axpy, "cupy": lambda a, b: 2.5 * a + b}, x, y, budget_ms=100)
    assert all(r.timing.device == "gpu" for r in result.rows) and result.rows[1].max_abs_error < 1e-5
    sweep = aotbench.sweep(axpy, [1 << 10, 1 << 16], reference=lambda a, b: 2.5 * a + b, budget_ms=50)
    assert all(p.max_abs_error < 1e-5 for p in sweep.points)


def test_check_mode_on_device_buffers(cp, rng):
    x = random_device(cp, rng, 1000)
    report = faults(0).check(x, reference=lambda a: a + 1)
    assert report.ok, report
    assert isinstance(report.outputs, cp.ndarray)
    bad = faults(3).check(x)
    assert not bad.ok and any("past the end" in p for p in bad.problems)


def _sanitize(op, *args, tool):
    try:
        return op.compute_sanitizer(*args, tool=tool, timeout_s=90)
    except (aotbench.DeviceUnavailableError, aotbench.ToolchainNotFoundError) as exc:
        pytest.skip(f"compute-sanitizer cannot run here: {str(exc)[:200]}")


def test_compute_sanitizer_memcheck_and_racecheck(cp, rng):
    x = random_device(cp, rng, 1000)
    clean = _sanitize(faults(0), x, tool="memcheck")
    assert clean.ok, clean
    report = _sanitize(faults(3), x, tool="memcheck")
    assert not report.ok and report.findings[0].kernel == "add_one"
    assert Path(report.findings[0].file).name == "gpu_faults.cu" and report.findings[0].line == 12
    races = _sanitize(faults(4), x, tool="racecheck")
    assert not races.ok and any("racy_shift" in f.kernel or "ace" in f.what for f in races.findings)


def test_gpu_cell_runs_like_custom_on_the_file(cp, rng):
    """A %%aot_kernel gpu cell builds the same command (but for the paths) and computes the same values."""
    pytest.importorskip("IPython")
    from IPython import get_ipython
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython() or get_ipython()
    ip.run_line_magic("load_ext", "aotbench")
    ip.user_ns["np"] = np
    source = (KERNELS / "nvcc_axpy.cu").read_text()
    cell = ip.run_cell_magic("aot_kernel", "gpu --func Axpy --attr a=2.5 --attr transpose=False", source)
    x, y = random_device(cp, rng, 5000), random_device(cp, rng, 5000)
    ref = aotbench.Custom(AXPY, None, np.float32, attrs={"a": 2.5, "transpose": False})
    cp.testing.assert_array_equal(cell(x, y), ref(x, y))
