"""What ``op.profile`` adds to its samples: counters per call, and the hottest loop's predicted and measured speed.

Counters come from ``perf_event_open`` (:mod:`aotbench.native.perf_events`), user space only, for the threads the
profile sampled: cycles, instructions, cache and branch misses where the machine exposes hardware counters; where it
does not (a VM without a virtual PMU, Docker's default seccomp profile, Binder) one line says why, and the software
counters (task-clock, page faults) that still open are given instead. The hottest loop is
:mod:`aotbench.tools.hotloop`'s: found in the disassembly from the samples per instruction, predicted by llvm-mca,
its iterations counted with an execute breakpoint when that is cheap enough. Both need the op's threads in this
process, so an isolated op gets the prediction only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..errors import AotbenchError
from ..native import perf_events
from . import hotloop

COUNT_SECONDS = 0.2  # calls counted for at least this long (and at least 3 calls)


@dataclass(frozen=True)
class CounterReport:
    """Counters per call over ``calls`` calls (summed over the kernel's threads); ``reason``: why hardware
    counters are missing ("" when they were counted)."""

    per_call: dict[str, float]
    calls: int
    hardware: bool
    reason: str

    def lines(self) -> list[str]:
        c = self.per_call
        out = []
        if self.hardware:
            parts = [f"{c[k]:,.0f} {k}" for k in ("cycles", "instructions") if k in c]
            if c.get("cycles") and "instructions" in c:
                parts.append(f"IPC {c['instructions'] / c['cycles']:.2f}")
            for miss, of in (("cache-misses", "cache-references"), ("branch-misses", "branch-instructions")):
                if miss in c:
                    share = f" ({100 * c[miss] / c[of]:.1f}% of {of})" if c.get(of) else ""
                    parts.append(f"{c[miss]:,.0f} {miss}{share}")
            out.append(f"hardware counters per call ({self.calls} calls): " + ", ".join(parts))
        else:
            out.append(f"hardware counters: none here: {self.reason}")
            soft = [f"task-clock {c['task-clock'] / 1e6:.3f} ms" if "task-clock" in c else "",
                    f"{c['page-faults']:,.1f} page faults" if "page-faults" in c else "",
                    f"{c['context-switches']:,.2f} context switches" if "context-switches" in c else ""]
            if any(soft):
                out.append(f"software counters per call ({self.calls} calls): " + ", ".join(s for s in soft if s))
        return out


def count(call, tids: list[int]) -> CounterReport | str:
    """Counters per call of ``call()`` on the threads ``tids``; a sentence when none open."""
    support = perf_events.probe()
    events = perf_events.HARDWARE_EVENTS if support.hardware else perf_events.SOFTWARE_EVENTS
    if not support.hardware and not support.software:
        return f"no counters open here: {support.reason}"
    try:
        with perf_events.Counters(tids, events) as counters:
            counters.start()
            calls, start = 0, time.perf_counter()
            while calls < 3 or time.perf_counter() - start < COUNT_SECONDS:
                call()
                calls += 1
            counters.stop()
            totals = counters.read()
    except (AotbenchError, OSError) as exc:
        return f"the counters could not be read: {exc}"
    return CounterReport({k: v / calls for k, v in totals.items()}, calls, support.hardware, support.reason)


def add_extras(op, arrays: tuple, result, *, counters: bool, hot_loop: bool | str) -> dict:
    """The fields of ``result`` (a Profile) that counters and the hot loop fill."""
    isolated = not getattr(op.runner, "fast", True) and hasattr(op.runner, "profile")
    tids = list(result.raw.threads) if result.raw is not None else []
    call = lambda: op(*arrays)  # noqa: E731
    found: dict = {}
    notes = list(result.notes)
    if counters:
        if isolated:
            notes.append("counters are read in this process only: not for an isolated op's worker")
        else:
            report = count(call, tids)
            if isinstance(report, str):
                notes.append(report)
            else:
                found["counters"] = report
    if hot_loop:
        # Counting iterations arms a hardware execute breakpoint inside the kernel's threads; a stray debug trap
        # (SIGTRAP) was seen to end the process in this VM, so it runs only when asked for: hot_loop="count".
        loop, why = _hot_loop(op, result, call, tids, measure=hot_loop == "count" and not isolated)
        found["hot_loop"], found["hot_loop_note"] = loop, why
    found["notes"] = tuple(notes)
    return found


def _hot_loop(op, result, call, tids, *, measure: bool):
    functions = result.mapping.functions
    if not functions:
        return None, ("no host disassembly to find it in (" + (result.mapping.note or "the emulator's build") + ")")
    weights = {address: max(1, round(share * 1e6)) for address, share in result.by_instruction.items()}
    found = hotloop.report(functions, weights, total=max(10 ** 6, sum(weights.values())))
    if found.loop is None:
        return None, found.why_none
    per_call = sum(result.raw.thread_cpu_ns) / max(result.raw.calls, 1)  # CPU time, all the kernel's threads
    if not measure:  # the time in the loop, from the samples; iterations only when counting was asked for
        from dataclasses import replace

        cycles = found.prediction.cycles_per_iteration if found.prediction is not None and found.prediction.ok \
            else None
        clock = hotloop.cpu_clock()
        estimate = (per_call * found.loop.share * clock.mhz / 1000.0 / cycles) if cycles and clock else None
        return replace(found, measured=hotloop.Measured(
            per_call, per_call * found.loop.share, estimate, clock,
            reason="profile(..., hot_loop=\"count\") counts them with a hardware "
                   "breakpoint on the loop's branch")), ""
    if found.prediction is not None:
        base = _library_base(result)
        if base is not None:
            from dataclasses import replace

            measured = hotloop.measure_iterations(found.loop, call, lambda offset: base + offset, tids,
                                                  prediction=found.prediction, time_per_call_ns=per_call)
            found = replace(found, measured=measured)
    return found, ""


def _library_base(result) -> int | None:
    """Where the op's library is loaded: a sampled address less its offset in the library."""
    raw = result.raw
    library = result.library
    for pc, loc in raw.locations.items():
        if loc.module == library:
            return pc - loc.address
    return None
