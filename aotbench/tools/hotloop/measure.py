"""The loop's measured speed (:func:`measure_iterations`): its iterations per call counted by an execute
breakpoint on its branch (:class:`aotbench.native.perf_events.ExecutionCounter`) when that costs little enough,
and the time and cycles per iteration that follow, at the CPU clock :func:`cpu_clock` reads."""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...errors import AotbenchError, ArgumentTypeError, ArgumentValueError
from ...native import perf_events
from .finding import Loop
from .mca import Prediction

#: How long counting the loop's iterations with a breakpoint may take, in seconds, by default.
DEFAULT_BUDGET_S = 2.0


@dataclass(frozen=True)
class Clock:
    """The CPU clock the cycle figures assume: ``mhz`` and where it was read (``source``)."""

    mhz: float
    source: str


def cpu_clock() -> Clock | None:
    """The CPU's clock now: sysfs ``scaling_cur_freq`` of CPU 0 where the kernel exposes it, else the mean
    ``cpu MHz`` of ``/proc/cpuinfo`` (in a VM often the nominal clock, not the current one); None when neither
    can be read."""
    sysfs = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq")
    try:
        khz = float(sysfs.read_text().strip())
        if khz > 0:
            return Clock(khz / 1000.0, str(sysfs))
    except (OSError, ValueError):
        pass
    try:
        found = [float(m) for m in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", Path("/proc/cpuinfo").read_text(),
                                              re.MULTILINE)]
    except (OSError, ValueError):
        found = []
    found = [f for f in found if f > 0]
    if found:
        return Clock(statistics.fmean(found), "/proc/cpuinfo cpu MHz")
    return None


@dataclass(frozen=True)
class Measured:
    """The loop's measured speed.

    ``time_per_call_ns``: one call's time (median of a few, without the breakpoint); ``loop_ns_per_call``:
    that times the loop's share of the samples; ``estimated_iterations``: what the predicted cycles per
    iteration (or 1 cycle, the most iterations possible, without a prediction) and ``clock`` make of it;
    ``iterations_per_call``: how often the loop's branch executed per call, counted by an execute breakpoint
    (None when not counted, and ``reason`` says why); ``ns_per_iteration`` and ``cycles_per_iteration``
    (at ``clock``) follow from these.
    """

    time_per_call_ns: float
    loop_ns_per_call: float
    estimated_iterations: float | None
    clock: Clock | None
    iterations_per_call: float | None = None
    calls_counted: int = 0
    hit_ns: float | None = None
    reason: str | None = None

    @property
    def ns_per_iteration(self) -> float | None:
        if not self.iterations_per_call:
            return None
        return self.loop_ns_per_call / self.iterations_per_call

    @property
    def cycles_per_iteration(self) -> float | None:
        ns = self.ns_per_iteration
        return None if ns is None or self.clock is None else ns * self.clock.mhz / 1000.0

    @property
    def text(self) -> str:
        """One line: the measured time per iteration, or why the iterations were not counted."""
        per_call = (f"{_ns(self.time_per_call_ns)} of CPU time per call (all its threads), "
                    f"{_ns(self.loop_ns_per_call)} of it in the loop")
        if self.iterations_per_call is None:
            return f"Measured: {per_call}; iterations not counted ({self.reason})"
        cycles = (f" = {self.cycles_per_iteration:.2f} cycles at {self.clock.mhz:.0f} MHz ({self.clock.source})"
                  if self.cycles_per_iteration is not None else " (no CPU clock found for cycles)")
        return (f"Measured: {self.iterations_per_call:,.0f} iterations per call (breakpoint on the branch), "
                f"{self.ns_per_iteration:.3g} ns/iteration{cycles}; {per_call}")

    def __str__(self) -> str:
        return self.text


def _ns(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.3g} ms"
    if value >= 1e3:
        return f"{value / 1e3:.3g} us"
    return f"{value:.3g} ns"


def _time_call(call: Callable[[], object], budget_s: float = 0.2, most: int = 25) -> float:
    """The median time of up to ``most`` calls of ``call`` that fit in ``budget_s`` (at least one), in ns, after
    one untimed call."""
    call()
    times: list[float] = []
    started = time.perf_counter()
    while not times or (len(times) < most and time.perf_counter() - started < budget_s):
        t0 = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times)


def measure_iterations(loop: Loop, call: Callable[[], object], address_of: Callable[[int], int],
                       tids: Sequence[int], *, prediction: Prediction | None = None,
                       budget_s: float = DEFAULT_BUDGET_S, time_per_call_ns: float | None = None,
                       clock: Clock | None = None) -> Measured:
    """How many times the loop iterates per call and how long an iteration takes.

    ``call()`` runs the op once; ``address_of(offset)`` maps a library offset (the loop's ``branch``) to its
    loaded address; ``tids`` are the threads that run the kernel (for an in-process call, the calling
    thread's ``threading.get_native_id()``). The iterations are counted with an execute breakpoint on the
    loop's branch, which executes once per iteration (once more where the test comes first, as -O0 builds
    loops: a jump to the test, the body, then the test), during one call; each hit stops the thread for a
    while (``breakpoint_hit_ns``), so the count is made only when the estimated iterations (the loop's time
    over the predicted cycles per iteration at the CPU clock, or over 1 cycle without a prediction) times
    that cost fits in ``budget_s``; otherwise ``reason`` says why not. The time per call is measured without
    the breakpoint (or given as ``time_per_call_ns``).
    """
    if not isinstance(loop, Loop):
        raise ArgumentTypeError(f"measure_iterations takes a Loop (from find_hot_loop), not {type(loop).__name__}")
    if not callable(call) or not callable(address_of):
        raise ArgumentTypeError("call and address_of must be callables: call() runs the op once, "
                                "address_of(offset) gives a library offset's loaded address")
    if not isinstance(budget_s, (int, float)) or not budget_s > 0:
        raise ArgumentValueError(f"budget_s={budget_s!r}: give the seconds counting may take (> 0)")
    tids = [int(t) for t in tids]
    if not tids:
        raise ArgumentValueError("tids is empty: give the native ids of the threads that run the kernel")
    clock = clock if clock is not None else cpu_clock()
    per_call = float(time_per_call_ns) if time_per_call_ns is not None else _time_call(call)
    in_loop = per_call * loop.share
    cycles = prediction.cycles_per_iteration if prediction is not None and prediction.ok else None
    mhz = clock.mhz if clock is not None else 5000.0  # without a clock, a fast one: the most iterations
    estimate = in_loop * mhz / 1000.0 / (cycles or 1.0)
    base = dict(time_per_call_ns=per_call, loop_ns_per_call=in_loop, estimated_iterations=estimate, clock=clock)
    try:
        hit_ns = float(perf_events.breakpoint_hit_ns())
    except (AotbenchError, OSError) as exc:
        return Measured(**base, reason=f"execute breakpoints do not open here: {_first_line(exc)}")
    cost_s = estimate * hit_ns / 1e9
    if cost_s > budget_s:
        return Measured(**base, hit_ns=hit_ns,
                        reason=f"about {estimate:,.0f} iterations per call at {hit_ns / 1e3:.1f} us per breakpoint "
                               f"hit would take {cost_s:.3g} s, over the {budget_s:g} s budget for counting")
    try:
        with perf_events.ExecutionCounter(address_of(loop.branch), tids) as counter:
            counter.start()
            try:
                call()
            finally:
                counter.stop()
            count = counter.read()
    except (AotbenchError, OSError) as exc:
        return Measured(**base, hit_ns=hit_ns, reason=f"the loop's branch could not be counted: {_first_line(exc)}")
    if count <= 0:
        return Measured(**base, hit_ns=hit_ns, calls_counted=1,
                        reason="the breakpoint on the loop's branch never fired during the call: the loop did "
                               "not run on the threads given (tids), or address_of gave another address")
    return Measured(**base, iterations_per_call=float(count), calls_counted=1, hit_ns=hit_ns)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
