"""Device timing: CUDA events around each call, the L2 flushed between calls, host launch overhead apart.

:func:`aotbench.bench` comes here for a gpu op, or for any callable given device arrays. The method (triton's
``do_bench``, in our own words), on a private blocking stream:

1. one call, synchronized (it plans the signature and loads the kernel's module);
2. an estimate: five launches back to back between two events;
3. warm-up launches worth about a tenth of the budget (or ``warmup`` of them);
4. samples. With ``flush_cache=True`` (the default) each sample is one launch: read a buffer of twice the L2
   (at least 64 MiB; :class:`L2Flush`), record the start event, launch, record the end event. The flush evicts
   the L2 and leaves it clean (no write-back lands in the kernel), so each call starts cold; and it keeps the
   GPU busy while the host enqueues the launch, so the start event is followed directly by the kernel: the
   events time the kernel, not the host's launch latency. The flush is outside the events. With
   ``flush_cache=False`` a sample is a batch of back-to-back launches (warm L2, the launch gap amortised), long
   enough for the events' resolution;
5. the host launch overhead: host wall time per launch, measured apart over up to 100 launches.

``graph=True`` captures the sample's launches into a CUDA graph once, on the same blocking stream, and replays
it per sample, which takes the host out of the loop. A gpu op is timed through its
:class:`~aotbench.run.gpu.Launcher`: outputs allocated once, no synchronization inside; a CUDA error
raises at the end. Results are :class:`~aotbench.tools.timing.Timing`\\ s with
``device="gpu"`` and ``clock="cuda events"``.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .timing import DEFAULT_FLUSH_BYTES, Timing
from ..run.gpu_availability import require_gpu

ESTIMATE_CALLS = 5
MIN_BATCH_NS = 100_000  # a warm batch lasts at least this long: CUDA events resolve about 0.5 us
MAX_BATCH = 1000
HOST_LAUNCHES = 100


def l2_bytes(cp: Any) -> int:
    """The current GPU's L2 cache size in bytes (0 if the driver does not say)."""
    try:  # one property, not Device().attributes (which asks for every attribute and may fail on one)
        return int(cp.cuda.runtime.getDeviceProperties(cp.cuda.runtime.getDevice())["l2CacheSize"])
    except Exception:  # noqa: BLE001 - an attribute query is never worth failing a benchmark for
        return 0


def device_flush_bytes(cp: Any) -> int:
    """Bytes zeroed before each cold sample: twice the L2, at least 64 MiB."""
    return max(DEFAULT_FLUSH_BYTES, 2 * l2_bytes(cp))


class L2Flush:
    """Evicts the L2 between samples and leaves it clean: a reduction READS a buffer of twice the L2 into one
    float. Zeroing a buffer instead (a write) would leave the L2 full of dirty lines, whose write-back then
    lands inside the next timed kernel (2-3 % of a large memory-bound kernel, more of a small one)."""

    def __init__(self, cp: Any, nbytes: int):
        self.buffer = cp.empty(nbytes // 4, dtype=cp.float32)
        self.buffer.fill(0)  # once, so the reads below see numbers
        self.sink = cp.empty((), dtype=cp.float32)

    def __call__(self) -> None:
        self.buffer.sum(out=self.sink)


def _launcher(fn: Callable, args: tuple, cp: Any) -> tuple[Callable[[], Any], Callable[[], None], str]:
    """(launch, finish, label): a gpu op's prepared launch, or ``fn(*args)`` for cupy code."""
    spec = getattr(fn, "spec", None)
    if getattr(spec, "target", None) == "gpu" and hasattr(fn, "launcher"):
        launch = fn.launcher(*args)
        return launch, launch.finish, fn.name

    def finish() -> None:
        cp.cuda.get_current_stream().synchronize()

    return (lambda: fn(*args)), finish, getattr(fn, "name", getattr(fn, "__name__", ""))


def _elapsed_ns(cp: Any, body: Callable[[], Any]) -> float:
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    body()
    end.record()
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) * 1e6


def capture(cp: Any, launch: Callable[[], Any], number: int):
    """A CUDA graph of ``number`` launches, captured on the current stream. Make it a blocking stream: a launch
    that ignores its stream and goes to the legacy default stream then breaks the capture with an error, where
    on a non-blocking stream it would run at once and leave the graph empty."""
    stream = cp.cuda.get_current_stream()
    stream.begin_capture()
    try:
        for _ in range(number):
            launch()
    except BaseException:
        with contextlib.suppress(Exception):  # end the capture; the launch's own error is the one to report
            stream.end_capture()
        raise
    return stream.end_capture()


def host_launch_ns(launch: Callable[[], Any], finish: Callable[[], None], count: int = HOST_LAUNCHES) -> float:
    """Host wall time per launch (the GPU idle at the start, the queue far from full), in ns."""
    finish()
    start = time.perf_counter_ns()
    for _ in range(count):
        launch()
    elapsed = time.perf_counter_ns() - start
    finish()
    return elapsed / count


def bench_device(fn: Callable, *args: Any, budget_ms: float = 200.0, warmup: int | None = None,
                 flush_cache: bool = True, graph: bool = False, min_samples: int = 5, max_samples: int = 10_000,
                 label: str | None = None) -> Timing:
    """Time ``fn(*args)`` on the device with CUDA events (see the module's method). Checked arguments come from
    :func:`aotbench.bench`."""
    cp = require_gpu(label or getattr(fn, "name", "this callable"))
    cp.cuda.Device().synchronize()  # inputs made on other streams are ready
    # A blocking stream: a kernel that launches on the default stream instead of its `stream` argument is still
    # ordered between the events (the default stream waits for, and is waited for by, blocking streams).
    with cp.cuda.Stream(non_blocking=False):
        launch, finish, name = _launcher(fn, args, cp)
        launch()
        finish()
        estimate_ns = max(_elapsed_ns(cp, lambda: [launch() for _ in range(ESTIMATE_CALLS)]) / ESTIMATE_CALLS, 1.0)
        flush = L2Flush(cp, device_flush_bytes(cp)) if flush_cache else None
        if flush is not None:
            flush()  # the reduction's first run may compile it: not what the flush costs
        flush_ns = _elapsed_ns(cp, flush) if flush is not None else 0.0
        budget_ns = budget_ms * 1e6
        for _ in range(warmup if warmup is not None else int(min(0.1 * budget_ns / estimate_ns, 10_000))):
            launch()
        number = 1 if flush_cache else int(min(max(math.ceil(MIN_BATCH_NS / estimate_ns), 1), MAX_BATCH))
        count = min(max(int(budget_ns / (number * estimate_ns + flush_ns)), min_samples), max_samples)
        if graph:
            # Captured on this blocking stream: a launch on the legacy default stream during the capture then
            # fails (cudaErrorStreamCaptureImplicit, with its hint) instead of running eagerly outside an empty
            # graph, as it would on a non-blocking stream.
            replay = capture(cp, launch, number)
            body: Callable[[], Any] = replay.launch
        else:
            def body() -> None:
                for _ in range(number):
                    launch()
        starts = [cp.cuda.Event() for _ in range(count)]
        ends = [cp.cuda.Event() for _ in range(count)]
        for start, end in zip(starts, ends):
            if flush is not None:
                flush()
            start.record()
            body()
            end.record()
        ends[-1].synchronize()
        finish()
        samples = tuple(cp.cuda.get_elapsed_time(s, e) * 1e6 / number for s, e in zip(starts, ends))
        launch_ns = host_launch_ns(launch, finish, min(HOST_LAUNCHES, max(count * number, 10)))
    timing = Timing(samples, number=number, label=label if label is not None else name, device="gpu",
                    flushed=flush_cache, clock="cuda events", launch_overhead_ns=launch_ns, graph=graph)
    return replace(timing, notes=_notes(timing, flush_ns))


def _notes(timing: Timing, flush_ns: float) -> tuple[str, ...]:
    """When the host, not the kernel, may set the measured time, in words."""
    launch_ns = timing.launch_overhead_ns or 0.0
    if timing.graph:
        return ()
    host, kernel = f"{launch_ns / 1e3:.1f} us", f"{timing.median_ns / 1e3:.1f} us"
    if timing.flushed and launch_ns > flush_ns:
        note = (f"the host takes {host} per launch, longer than the {flush_ns / 1e3:.1f} us L2 flush that hides "
                "it, so the samples may include launch gaps: use graph=True")
        return (note,)
    if not timing.flushed and launch_ns > timing.median_ns:
        note = (f"the host takes {host} per launch and the kernel {kernel}: back to back, the host sets the "
                "pace; graph=True times the kernel alone")
        return (note,)
    return ()


def copy_bandwidth_gbps(nbytes: int = 1 << 30, budget_ms: float = 200.0) -> tuple[float, Timing]:
    """Device-to-device copy bandwidth (bytes read plus written, GB/s) of ``nbytes``, timed like a kernel: the
    ceiling a memory-bound kernel is measured against, in the same run."""
    cp = require_gpu("the device copy")
    src = cp.empty(nbytes, dtype=cp.uint8)
    src.fill(1)
    dst = cp.empty_like(src)

    def copy() -> None:
        cp.copyto(dst, src)

    timing = bench_device(copy, budget_ms=budget_ms, label="device copy")
    return 2 * nbytes / timing.median_ns, timing


__all__ = ["L2Flush", "bench_device", "capture", "copy_bandwidth_gbps", "device_flush_bytes", "host_launch_ns", "l2_bytes"]
