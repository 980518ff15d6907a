"""The gpu run path's host side, where no GPU is: aotbench.run.gpu, gpu_timing and check mode's device side run
against tests/support/host_cupy.py (cupy's interface over host memory) and a C++ kernel with the gpu entry points.

This checks what the host does around a device (conversions, plans, workspaces, pointer order, the stream
handle, the launch-error probe, errors at synchronization, event timing, the once-per-op copy note). Real
launches, real CUDA errors and real device times are tests/run/test_gpu.py's, on a GPU.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.run import gpu_availability as devices

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
import host_cupy

KERNEL = f"{Path(__file__).resolve().parents[1] / 'support' / 'kernels' / 'host_device_axpy.cc'}:Axpy"
FAULTS = f"{Path(__file__).resolve().parents[1] / 'support' / 'kernels' / 'check_faults.cc'}:Fault"
NULL_STREAM = 0


@pytest.fixture
def cp(monkeypatch):
    """host_cupy as ``cupy``, and a device reported usable, for this test only."""
    host_cupy.reset()
    monkeypatch.setitem(sys.modules, "cupy", host_cupy)
    monkeypatch.setattr(devices, "_usable", True)
    return host_cupy


def axpy(a: float = 2.5, stream: int = NULL_STREAM, **attrs):
    return aotbench.Custom(KERNEL, None, np.float32, target="gpu",
                           attrs={"a": a, "stream": stream, "refuse": False, **attrs})


def device(cp, rng, *shape):
    return cp.asarray(rng.standard_normal(shape, dtype=np.float32))


def test_device_inputs_give_device_outputs_through_a_device_workspace(cp, rng):
    n = int(rng.integers(10, 5000))
    x, y = device(cp, rng, n), device(cp, rng, n)
    a = float(rng.uniform(-3, 3))
    op = axpy(a)
    cp.allocations.clear()
    out = op(x, y)
    assert isinstance(out, cp.ndarray) and out.shape == (n,)
    np.testing.assert_allclose(out.get(), a * x.get() + y.get(), rtol=1e-6, atol=1e-6)
    ws = op.plan_info(x, y)["workspaces"][0]
    assert ws["requested"] == 4 * n
    # the plan's workspace and the output came from the device allocator (the kernel read x through it)
    assert ws["allocated"] + 64 in cp.allocations and 4 * n in cp.allocations
    cp.allocations.clear()
    op(x, y)
    assert cp.allocations == [4 * n]  # a repeated call allocates only its output: the plan is reused


def test_outputs_larger_than_the_device_memory_are_refused_before_allocating(cp, rng):
    """The limit for a gpu op is the device's total memory (cupy's mem_info), not the host's: an output that does
    not fit is a ShapeError naming the GPU, and nothing was allocated on it."""
    n = int(rng.integers(2000, 5000))
    x, y = device(cp, rng, n), device(cp, rng, n)
    cp.device_memory[0] = 4 * n - 4  # one float short of the output
    cp.allocations.clear()
    with pytest.raises(aotbench.ShapeError, match="GPU 0's memory") as info:
        axpy(1.5)(x, y)
    assert f"({n},) float32" in str(info.value) and cp.allocations == []
    cp.device_memory[0] = 80 << 30
    np.testing.assert_allclose(axpy(1.5)(x, y).get(), 1.5 * x.get() + y.get(), rtol=1e-6)


def test_the_current_streams_handle_reaches_the_kernel(cp, rng):
    x = device(cp, rng, 64)
    with cp.cuda.Stream(ptr=0xABC0):
        np.testing.assert_allclose(axpy(1.0, stream=0xABC0)(x, x).get(), 2 * x.get(), rtol=1e-6)
        with pytest.raises(aotbench.KernelError, match="returned 5"):
            axpy(1.0, stream=NULL_STREAM)(x, x)  # it got 0xABC0, not the null stream


def test_numpy_inputs_are_copied_once_noted(cp, rng):
    op = axpy(0.5)
    x, y = (rng.standard_normal(33, dtype=np.float32) for _ in range(2))
    with pytest.warns(aotbench.HostCopyWarning, match=r"input\(s\) 0, 1 were numpy arrays") as record:
        out = op(x, y)
    assert record[0].filename == __file__  # the warning points at the user's call, not into aotbench
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        op(x, y)
    np.testing.assert_allclose(out.get(), 0.5 * x + y, rtol=1e-6)


def test_a_launch_error_left_in_the_librarys_runtime_is_a_cuda_error(cp, rng):
    x = device(cp, rng, 8)
    with pytest.raises(aotbench.CudaError) as info:
        axpy(refuse=True)(x, x)
    err = info.value
    assert (err.error, err.when, err.sticky) == ("cudaErrorInvalidConfiguration", "at launch", False)
    assert isinstance(err, aotbench.KernelError) and "Axpy: CUDA error" in str(err)
    assert "1024 threads per block" in str(err)
    axpy()(x, x)  # the probe cleared it: the next call is clean


def test_an_error_at_synchronization_is_a_sticky_cuda_error(cp, rng):
    x = device(cp, rng, 8)
    cp.pending_error.append(700)
    with pytest.raises(aotbench.CudaError) as info:
        axpy()(x, x)
    assert info.value.error == "cudaErrorIllegalAddress" and info.value.sticky
    assert "while it ran" in str(info.value) and "restart the Python kernel" in str(info.value)
    assert "compute_sanitizer" in str(info.value)


@pytest.mark.slow
def test_bad_inputs_are_refused_before_the_kernel(cp, rng):
    op = axpy()
    x = device(cp, rng, 8)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    with pytest.raises(aotbench.ArgumentError, match="cannot be copied to the GPU"):
        op(np.ones(8, dtype=ml_dtypes.bfloat16), x)
    with cp.cuda.Device(1):
        other = cp.asarray(np.ones(8, np.float32))
    with pytest.raises(aotbench.ArgumentError, match="on GPU 1 but the current device is GPU 0"):
        op(other, x)


def test_the_launcher_reuses_its_outputs_and_does_not_synchronize(cp, rng):
    x, y = device(cp, rng, 100), device(cp, rng, 100)
    launch = axpy(3.0).launcher(x, y)
    assert launch.__name__ == "Axpy"  # timing tools name what they time by it (cupyx.profiler.benchmark does)
    cp.allocations.clear()
    for _ in range(3):
        launch()
    assert cp.allocations == []  # nothing allocated per launch
    cp.pending_error.append(700)
    launch()  # no synchronization: a fault is seen at finish()
    with pytest.raises(aotbench.CudaError, match="cudaErrorIllegalAddress"):
        launch.finish()
    np.testing.assert_allclose(launch.result.get(), 3 * x.get() + y.get(), rtol=1e-6)
    with pytest.raises(aotbench.ArgumentError, match="cpu op"):
        aotbench.Custom(FAULTS, None, np.float32, attrs={"mode": "ok", "extra": 0, "delta": 0.0}).launcher(x)


@pytest.mark.slow
def test_bench_of_a_gpu_op_takes_the_device_path(cp, rng):
    x, y = device(cp, rng, 1000), device(cp, rng, 1000)
    cp.allocations.clear()
    private = cp.Stream().ptr  # timing runs on a stream of its own (the kernel checks the handle it gets)
    timing = aotbench.bench(axpy(stream=private), x, y, budget_ms=20)
    assert (timing.device, timing.clock, timing.flushed, timing.number) == ("gpu", "cuda events", True, 1)
    assert timing.count >= 5 and timing.launch_overhead_ns > 0 and timing.median_ns > 0
    assert max(cp.allocations) == max(64 << 20, 2 * (48 << 20))  # the L2 flush buffer: twice the L2
    assert "device time from cuda events" in str(timing) and "host launch" in str(timing)
    warm = aotbench.bench(axpy(stream=private), x, y, budget_ms=20, flush_cache=False)
    assert not warm.flushed and warm.number >= 1
    cupy_code = aotbench.bench(lambda a, b: a * 2 + b, x, y, budget_ms=10)  # device arrays: device timing
    assert cupy_code.device == "gpu"
    with pytest.raises(aotbench.ArgumentError, match="graph=True"):
        aotbench.bench(lambda a: a, np.ones(3), graph=True)


def test_the_l2_flush_reads_its_buffer_and_writes_nothing_there(cp, rng):
    """Between samples the L2 is evicted by READING twice its size: a write would leave dirty lines whose
    write-back lands in the timed kernel."""
    from aotbench.tools.gpu_timing import L2Flush

    flush = L2Flush(cp, 4 * int(rng.integers(1000, 5000)))
    flush.buffer[...] = cp.asarray(rng.standard_normal(flush.buffer.size, dtype=np.float32))
    before = flush.buffer.get()
    flush()
    np.testing.assert_array_equal(flush.buffer.get(), before)
    assert float(flush.sink) == pytest.approx(float(before.sum(dtype=np.float64)), rel=1e-3, abs=1e-2)


def test_graph_capture_runs_on_a_blocking_stream(cp, rng):
    """On a blocking stream a launch that goes to the legacy default stream breaks the capture (an error with a
    hint); on a non-blocking one it would run eagerly and leave an empty graph, timed as the kernel."""
    from aotbench.run.gpu import HINTS

    x, y = device(cp, rng, 64), device(cp, rng, 64)
    timing = aotbench.bench(axpy(stream=-1), x, y, budget_ms=5, graph=True)  # the stand-in's graph is empty
    assert timing.graph and [c["non_blocking"] for c in cp.captures] == [False]
    assert "default stream" in HINTS["cudaErrorStreamCaptureImplicit"]


@pytest.mark.slow
def test_compare_and_sweep_of_a_gpu_op(cp, rng):
    x, y = device(cp, rng, 500), device(cp, rng, 500)
    result = aotbench.compare({"op": axpy(2.0, stream=-1), "ref": lambda a, b: 2 * a + b}, x, y, budget_ms=20)
    assert [r.timing.device for r in result.rows] == ["gpu", "gpu"] and result.rows[1].max_abs_error < 1e-5
    assert result.bytes_moved == 3 * 500 * 4
    sweep = aotbench.sweep(axpy(2.0, stream=-1), [16, 256], reference=lambda a, b: 2 * a + b, budget_ms=10, seed=1)
    assert all(p.timing.device == "gpu" and p.max_abs_error < 1e-5 for p in sweep.points)


@pytest.mark.slow
def test_a_gpu_sweep_records_its_shapes_and_the_devices_roofline(cp, rng, monkeypatch):
    """The sweep asks the op's device: the input shapes of device arrays are recorded (they are not numpy
    arrays), and the roofline is the device's copy bandwidth, not the host's numpy copy."""
    from aotbench.tools import bandwidth
    from aotbench.run import devices as seam
    from aotbench.tools import gpu_timing as gpu_timing

    monkeypatch.setattr(seam, "_device_copy_gbps", lambda: 4321.0)
    monkeypatch.setattr(bandwidth, "memory_bandwidth_gbps", lambda *a, **k: pytest.fail("the host's copy was asked"))
    sweep = aotbench.sweep(axpy(2.0, stream=-1), [16, (3, 40)], reference=lambda a, b: 2 * a + b, budget_ms=5,
                           seed=2)
    assert [p.shapes for p in sweep.points] == [((16,), (16,)), ((3, 40), (3, 40))]
    assert sweep.bandwidth_gbps == 4321.0 and sweep.roofline_source == "device-to-device copy"
    assert "device-to-device copy" in str(sweep)
    assert callable(gpu_timing.copy_bandwidth_gbps)  # what the device measures with on a real GPU


def test_check_mode_guards_device_buffers(cp, rng):
    fault = aotbench.Custom(FAULTS, None, np.float32, target="gpu", attrs={"mode": "ok", "extra": 0, "delta": 0.0})
    x = device(cp, rng, 40)
    report = fault.check(x, reference=lambda a: 2 * a)
    assert report.ok, report
    assert isinstance(report.outputs, cp.ndarray)
    np.testing.assert_allclose(report.outputs.get(), 2 * x.get(), rtol=1e-6)
    bad = fault.with_attrs(mode="past_end", extra=3).check(x)
    assert any("wrote 12 bytes past the end" in p for p in bad.problems)
    ws = fault.with_attrs(mode="ws_floats").check(x)
    assert any("was it an element count" in p for p in ws.problems)
    unwritten = fault.with_attrs(mode="unwritten")
    unwritten.check_next_call = True  # what --check sets: the next call runs in check mode
    with pytest.raises(aotbench.ContractViolation, match="never written"):
        unwritten(x)
    np.testing.assert_allclose(unwritten(x).get()[::3], 2 * x.get()[::3], rtol=1e-6)  # then plain calls


def test_gpu_ops_refuse_isolation_and_cpu_sanitizers():
    for options in ({"isolate": True}, {"sanitize": "address"}):
        with pytest.raises(aotbench.ArgumentError, match="compute_sanitizer"):
            aotbench.Custom(KERNEL, None, np.float32, target="gpu", attrs={"a": 1.0}, **options)


def test_device_timing_says_when_the_host_sets_the_pace():
    """The notes a device Timing carries, and how it prints (pure: no device, no stand-in)."""
    from dataclasses import replace

    from aotbench.tools.gpu_timing import _notes

    warm = aotbench.Timing((1000.0, 1100.0, 900.0, 1000.0, 1050.0), device="gpu", clock="cuda events",
                           launch_overhead_ns=8000.0)
    assert "the host sets the pace" in _notes(warm, 0.0)[0]
    cold = replace(warm, flushed=True)
    assert "launch gaps" in _notes(cold, 5000.0)[0] and _notes(cold, 20_000.0) == ()
    assert _notes(replace(warm, graph=True), 0.0) == ()
    text = str(replace(cold, notes=_notes(cold, 5000.0)))
    assert "L2 flushed" in text and "device time from cuda events" in text and "host launch 8 us" in text
    assert "note: the host takes 8.0 us" in text
