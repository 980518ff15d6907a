"""The device side of ``bench/gpu_check.py``: the phases that touch CUDA, each run in a child process of its own
(``gpu_check.py --phase NAME``). Every result is a row appended to ``rows.jsonl`` as soon as it exists; a row
that raises records its error and the phase goes on to the next one."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "tests" / "support" / "kernels"
COPY_TARGET = 0.80  # a memory-bound example's bandwidth as a share of a device-to-device copy
AGREEMENT_TARGET = 0.05  # aotbench's events against cupyx's GPU times, like with like
OVERHEAD_TARGET = 2.0  # op(x) on a tiny array against cupy's own kernel, both synchronized


class RowLog:
    """Rows of one phase, each appended (and flushed to disk) the moment it is complete."""

    def __init__(self, out: Path, phase: str):
        self.path = out / "rows.jsonl"
        self.phase = phase
        self.started = time.monotonic()

    def row(self, **fields) -> None:
        record = {"phase": self.phase, "t_s": round(time.monotonic() - self.started, 2), **fields}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
        shown = {k: v for k, v in record.items() if k not in ("facts", "notes")}
        print(f"row: {json.dumps(shown, default=str)[:600]}", flush=True)

    @contextlib.contextmanager
    def case(self, name: str, **fields):
        """A row named ``name``: the body fills it in; an exception becomes its ``error`` (traceback to the log)."""
        row: dict = dict(fields)
        try:
            yield row
        except Exception as exc:  # noqa: BLE001 - one row's failure is recorded; the next row still runs
            traceback.print_exc()
            row["error"] = f"{type(exc).__name__}: {exc}"[:600]
            row["ok"] = False
        finally:
            self.row(case=name, **row)


def run(phase: str, out: Path, quick: bool) -> int:
    log = RowLog(out, phase)
    {"environment": environment, "probes": probes, "benchmarks": benchmarks}[phase](log, quick)
    return 0


# -- environment ------------------------------------------------------------------------------------------------

def environment(log: RowLog, quick: bool) -> None:
    facts: dict = {}
    try:
        import aotbench
        from aotbench.build import nvcc
        from aotbench.run.gpu_availability import gpu_unavailable_reason

        facts["aotbench"] = aotbench.__version__
        facts["unusable"] = gpu_unavailable_reason()
        choice = nvcc.choose_archs(nvcc.find_nvcc())
        facts["gencode"], facts["arch_reason"] = " ".join(choice.gencode), choice.reason
        if facts["unusable"] is None:
            import cupy

            device = cupy.cuda.Device()
            props = cupy.cuda.runtime.getDeviceProperties(device.id)
            try:  # cupy compiles its own kernels (NVRTC and the CUDA headers): the flush and references need it
                facts["cupy_kernel_check"] = float((cupy.arange(4, dtype=cupy.float32) * 2).sum()) == 12.0
            except Exception as exc:  # noqa: BLE001 - a cupy that cannot compile makes every row fail: say why
                facts["unusable"] = f"cupy cannot compile or run its own kernels ({type(exc).__name__}: {exc})"
            facts.update(cupy=cupy.__version__, device=props["name"].decode(errors="replace"),
                         compute_capability=device.compute_capability, sms=props["multiProcessorCount"],
                         l2_mib=props["l2CacheSize"] / 2**20, memory_gib=round(device.mem_info[1] / 2**30, 1),
                         driver=cupy.cuda.runtime.driverGetVersion(), runtime=cupy.cuda.runtime.runtimeGetVersion())
    except Exception as exc:  # noqa: BLE001 - whatever broke is the reason this machine cannot be checked
        traceback.print_exc()
        facts.setdefault("unusable", None)
        facts["unusable"] = facts["unusable"] or f"{type(exc).__name__}: {exc}"
    log.row(case="environment", facts=facts)


# -- probes -----------------------------------------------------------------------------------------------------

def _saxpy(**options):
    import aotbench

    return aotbench.Custom(f"{aotbench.examples_dir() / 'saxpy.cu'}:Saxpy", lambda s0, s1: s0, np.float32,
                           attrs={"a": 2.0}, **options)


def _per_call_us(pairs: dict, calls: int = 200, repeats: int = 15) -> dict:
    """Median host wall time per call of each callable, in us, their batches interleaved (same conditions)."""
    times: dict = {name: [] for name in pairs}
    for fn in pairs.values():
        fn()
    for _ in range(repeats):
        for name, fn in pairs.items():
            start = time.perf_counter_ns()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter_ns() - start) / calls / 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def probes(log: RowLog, quick: bool) -> None:
    import cupy

    import aotbench

    rng = np.random.default_rng()
    with log.case("host overhead of op(x), 1024 floats", target=f"<= {OVERHEAD_TARGET}x cupy's own kernel") as row:
        op = _saxpy()
        x, y = (cupy.asarray(rng.standard_normal(1024, dtype=np.float32)) for _ in range(2))
        kernel = cupy.ElementwiseKernel("float32 a, float32 x, float32 y", "float32 z", "z = a * x + y",
                                        "aotb_check_saxpy")
        out = cupy.empty_like(x)
        device = cupy.cuda.Device()
        launch = op.launcher(x, y)
        a = np.float32(2.0)

        def ours() -> None:  # allocate the output, launch, read the probe, synchronize
            op(x, y)

        def theirs() -> None:  # allocate the output, launch, synchronize
            kernel(a, x, y)
            device.synchronize()

        def ours_enqueue() -> None:
            launch()

        def theirs_enqueue() -> None:
            kernel(a, x, y, out)

        synced = _per_call_us({"ours": ours, "cupy": theirs})
        enqueued = _per_call_us({"ours": ours_enqueue, "cupy": theirs_enqueue}, calls=100)
        device.synchronize()
        ratio = synced["ours"] / synced["cupy"]
        cupy.testing.assert_allclose(op(x, y), 2 * x + y, rtol=1e-6, atol=1e-6)
        row.update(op_us=synced["ours"], cupy_us=synced["cupy"], ratio=ratio, launcher_us=enqueued["ours"],
                   cupy_enqueue_us=enqueued["cupy"], ok=ratio <= OVERHEAD_TARGET,
                   result=(f"op(x) {synced['ours']:.1f} us vs cupy kernel {synced['cupy']:.1f} us per call, "
                           f"both allocating and synchronizing ({ratio:.2f}x); enqueue only: launcher "
                           f"{enqueued['ours']:.1f} us vs cupy {enqueued['cupy']:.1f} us"))
    with log.case("no-GPU build (sm_80 + compute_80 PTX) on this GPU", target="runs and agrees with cupy") as row:
        op = _saxpy(arch="sm_80")  # the gencode a machine without a GPU chooses (CUDA 12 adds sm_70)
        n = (1 << 20) + 3
        x, y = (cupy.asarray(rng.standard_normal(n, dtype=np.float32)) for _ in range(2))
        row["gencode"] = " ".join(op.command[5:op.command.index("--use_fast_math")])
        try:
            error = float(cupy.abs(op(x, y) - (2 * x + y)).max())
        except aotbench.CudaError as exc:
            row.update(ok=False, result=f"{exc.error}: {exc}"[:500])
        else:
            row.update(ok=error < 1e-5, result=f"ran (PTX compiled by the driver); max |error| {error:.1e}")
    with log.case("graph capture of a launch on the legacy stream",
                  target="cudaErrorStreamCaptureImplicit with its hint, not an empty graph") as row:
        op = aotbench.Custom(f"{ROOT / 'bench' / 'kernels' / 'legacy_stream.cu'}:LegacyScale", lambda s: s,
                             np.float32)
        x = cupy.asarray(rng.standard_normal(1 << 16, dtype=np.float32))
        cupy.testing.assert_allclose(op(x), 3 * x, rtol=1e-6)  # a plain call still waits for it
        try:
            timing = aotbench.bench(op, x, budget_ms=20, graph=True)
        except aotbench.CudaError as exc:
            row.update(ok=exc.error in ("cudaErrorStreamCaptureImplicit", "cudaErrorStreamCaptureInvalidated")
                       and "stream" in exc.hint, result=f"{exc.error}; hint: {exc.hint[:120]}")
        else:
            row.update(ok=False, result=f"no error: the graph timed {timing.median_ns / 1e3:.2f} us")
        cupy.testing.assert_allclose(op(x), 3 * x, rtol=1e-6)  # and the context is still usable
    with log.case("memcheck finds the write past the end", target="gpu_faults.cu:12 in add_one") as row:
        faults = aotbench.Custom(f"{KERNELS / 'gpu_faults.cu'}:GpuFaults", lambda s: s, np.float32,
                                 attrs={"mode": 3})
        x = cupy.asarray(rng.standard_normal(1000, dtype=np.float32))
        report = faults.compute_sanitizer(x, tool="memcheck", timeout_s=80)
        first = report.findings[0] if report.findings else None
        row.update(result=str(report).replace("\n", " | ")[:600], api_errors=len(report.api_errors),
                   ok=first is not None and Path(first.file).name == "gpu_faults.cu" and first.line == 12
                   and first.kernel == "add_one")


# -- benchmarks -------------------------------------------------------------------------------------------------

def _cupyx_median_ns(launch, repeat: int) -> tuple[float, float]:
    """cupyx.profiler.benchmark's median GPU time and median host time of the call, in ns."""
    from cupyx.profiler import benchmark

    result = benchmark(launch, n_repeat=repeat, n_warmup=max(repeat // 10, 3))
    return float(np.median(result.gpu_times)) * 1e9, float(np.median(result.cpu_times)) * 1e9


def measure(op, args: tuple, bytes_moved: int, copy_gbps: float, reference, budget_ms: float) -> dict:
    """One example: correctness, aotbench's events (L2 flushed), cupyx on the same launcher, graph replay."""
    import cupy

    import aotbench

    out = op(*args)
    want = reference(*args)
    error = float(cupy.abs(out - want).max() / max(float(cupy.abs(want).max()), 1e-30))
    timing = aotbench.bench(op, *args, budget_ms=budget_ms)
    graph = aotbench.bench(op, *args, budget_ms=budget_ms, graph=True)
    repeat = int(min(max(budget_ms * 1e6 / timing.median_ns, 20), 500))
    theirs_ns, their_host_ns = _cupyx_median_ns(op.launcher(*args), repeat)
    launch_ns = timing.launch_overhead_ns or 0.0
    # cupyx records its start event, then calls the launcher on the host: its GPU time includes the host's
    # launch; aotbench's flush hides it. Like with like: cupyx's GPU time less its own host time of the call,
    # measured by cupyx in the same repeats.
    like = theirs_ns - their_host_ns
    gbps = bytes_moved / timing.median_ns
    return {"bytes": bytes_moved, "median_us": timing.median_ns / 1e3, "iqr_us": timing.iqr_ns / 1e3,
            "gbps": gbps, "of_copy": gbps / copy_gbps, "cupyx_us": theirs_ns / 1e3,
            "cupyx_host_us": their_host_ns / 1e3, "cupyx_less_launch_us": like / 1e3, "vs_cupyx": timing.median_ns / like - 1,
            "graph_us": graph.median_ns / 1e3, "launch_us": launch_ns / 1e3, "rel_error": error,
            "notes": list(timing.notes),
            "ok": gbps / copy_gbps >= COPY_TARGET and abs(timing.median_ns / like - 1) <= AGREEMENT_TARGET
            and error < 1e-4}


def benchmarks(log: RowLog, quick: bool) -> None:
    import cupy

    import aotbench
    from aotbench.tools.gpu_timing import copy_bandwidth_gbps

    rng = np.random.default_rng()
    budget = 150.0 if quick else 400.0
    n = 1 << (26 if quick else 28)  # 256 MiB or 1 GiB per float32 array
    side = 1 << (13 if quick else 14)  # 8192^2 (256 MiB) or 16384^2 (1 GiB) per input
    copy_gbps = 0.0
    with log.case(f"device copy {4 * n >> 20} MiB") as row:
        copy_gbps, copy = copy_bandwidth_gbps(4 * n, budget_ms=budget)
        row.update(bytes=8 * n, median_us=copy.median_ns / 1e3, iqr_us=copy.iqr_ns / 1e3, gbps=copy_gbps,
                   of_copy=1.0, notes=list(copy.notes))
    if not copy_gbps:
        return
    with log.case(f"saxpy n=2^{n.bit_length() - 1}", target=f">= {COPY_TARGET:.0%} of copy") as row:
        x, y = (cupy.asarray(rng.standard_normal(n, dtype=np.float32)) for _ in range(2))
        row.update(measure(_saxpy(), (x, y), 12 * n, copy_gbps, lambda p, q: 2.0 * p + q, budget))
        del x, y
    a, b = (cupy.asarray(rng.standard_normal((side, side), dtype=np.float32)) for _ in range(2))
    for axis in (1, 0):
        with log.case(f"fused add+sum {side}^2 axis={axis}", target=f">= {COPY_TARGET:.0%} of copy") as row:
            fused = aotbench.Custom(f"{aotbench.examples_dir() / 'add_reduce.cu'}:AddReduce", None, np.float32,
                                    attrs={"axis": axis, "keep_dim": False})
            row.update(measure(fused, (a, b), 8 * side * side + 4 * side, copy_gbps,
                               lambda p, q, axis=axis: (p + q).sum(axis=axis), budget))


if __name__ == "__main__":
    sys.exit(run(sys.argv[1], Path(sys.argv[2]), "--quick" in sys.argv))
