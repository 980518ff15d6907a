"""Guarded calls: run a kernel once on fenced, poisoned buffers and read back what it did to them.

Every output and workspace gets guard zones before and after it (a canary byte pattern): at least
MIN_GUARD bytes, growing with the buffer — or with the call's largest tensor, whose shape a wrong loop most often
takes — up to MAX_GUARD_AFTER, so a realistic overrun lands in the guard instead of in memory someone else owns. Outputs are poisoned with NaNs of a payload of their
own (a byte sentinel for integer types), workspaces with a pattern that reads as NaN in float32 and float64.
Afterwards the buffers say what the kernel did, in two kinds of sentence:

* *violations*: bytes written outside any buffer the kernel was given (before an output, past its end, past
  the memory allocated for a workspace) — in an unguarded call that memory belongs to someone else;
* *findings*: output elements never written, poison that reached the outputs, workspace writes beyond what
  Init asked for but inside the padding aotbench allocates (harmless here, a bug all the same), writes into
  the inputs (:mod:`aotbench.run.inputs`).

Check mode (:mod:`aotbench.tools.check`) reports both as problems. The op's first call of every new input signature
(:func:`first_call`, on by default) raises :class:`~aotbench.errors.ContractViolation` for a violation and warns
with :class:`~aotbench.errors.ContractWarning` for findings.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .._userframe import user_stacklevel
from ..errors import ContractViolation, ContractWarning
from . import prints
from .calls import call_pointers, raise_for
from .inputs import CHUNK_BYTES, SHOW_INDICES, dtype_hint, input_writes, snapshot, writable
from .inputs import chunks as _chunks
from .inputs import words as _words
from .plan import fill_values

if TYPE_CHECKING:
    from .plan import Plan

GUARD_BEFORE = 4096  # bytes of canary before every buffer (a multiple of 64 keeps the data aligned)
MIN_GUARD = 4096  # at least this many canary bytes after every buffer
MAX_GUARD_AFTER = 64 << 20  # the guard after a buffer grows with it up to this
CANARY = 0xCB
OUTPUT_SENTINEL = 0x5A  # poison byte for integer, bool and other non-float outputs
OUTPUT_SENTINEL_2 = 0xA5  # the confirming run's (a kernel that really wrote 0x5A bytes writes them again)
# Output poison: quiet NaNs with a payload of their own, so a NaN the kernel computed (which carries the payload
# of the NaN it read, e.g. workspace poison) is told apart from an element it never wrote.
_OUTPUT_NAN = {2: np.array([0x7E5A], np.uint16), 4: np.array([0x7FC0A5A5], np.uint32),
               8: np.array([0x7FF8A5A5A5A5A5A5], np.uint64)}
_OUTPUT_NAN_2 = {2: np.array([0x7E35], np.uint16), 4: np.array([0x7FC05A5A], np.uint32),
                 8: np.array([0x7FF85A5A5A5A5A5A], np.uint64)}
# Workspace poison: a NaN whether read as float32 (both halves) or float64; the confirming run's differs.
WORKSPACE_POISON = np.array([0x7FF800007FC00000], dtype=np.uint64).view(np.uint8)
WORKSPACE_POISON_2 = np.array([0x7FFD5A5A7FE5A5A5], dtype=np.uint64).view(np.uint8)
ISOLATE_HINT = ("a write further than that would corrupt this process's memory: run the op with isolate=True "
                "(or %%aot_kernel --isolate) to try it in a worker process")


def guard_after(nbytes: int, largest: int = 0) -> int:
    """Canary bytes after a buffer of ``nbytes`` in a call whose largest tensor has ``largest`` bytes.

    A few KiB at least, and as much as the larger of the two up to a cap: the realistic overrun is a loop that
    takes its length from the wrong tensor (the aot tutorial's reduction writes input 2's size into its output).
    """
    return max(MIN_GUARD, min(max(nbytes, largest), MAX_GUARD_AFTER))


@dataclass
class BufferReport:
    """What the kernel did to one output or workspace."""

    name: str  # "output 0", "workspace 1"
    size: int  # bytes the kernel was entitled to
    written_before: int = 0  # bytes of the guard before the start that changed
    written_past_end: int = 0  # how far past the end the kernel wrote, in bytes
    unwritten: int = 0  # output elements never written
    first_unwritten: list = field(default_factory=list)
    extent: int = 0  # workspace: one past the furthest byte written
    nonfinite: int = 0  # written output values that are NaN/Inf and changed with the poison
    changed: int = 0  # written output values that changed with the poison (computed from unwritten memory)


@dataclass
class GuardedRun:
    """One guarded call: the outputs (views into their guarded buffers), what happened to every buffer, and
    the sentences that say so, split into violations (memory not the kernel's) and findings (the rest)."""

    outputs: list[np.ndarray]
    buffers: list[BufferReport]
    violations: list[str]
    findings: list[str]
    raw_sizes: list[int] = field(default_factory=list)  # bytes of each output's guarded buffer, guards included


@dataclass
class GuardReport:
    """What :func:`first_call` raises with (as ``ContractViolation.report``): the same fields check mode's
    report has, so either can be read the same way."""

    problems: list[str]
    warnings: list[str]
    buffers: list[BufferReport]
    ok: bool = False
    mismatches: list = field(default_factory=list)
    outputs: tuple = ()

    def __str__(self) -> str:
        lines = [f"the guarded first call found {len(self.problems)} violation(s)"]
        return "\n".join(lines + [f"  - {p}" for p in self.problems] + [f"  ! {w}" for w in self.warnings])


def _guarded(nbytes: int, after: int) -> np.ndarray:
    """A canary-filled byte buffer with ``nbytes`` of room after GUARD_BEFORE bytes, 64-byte aligned."""
    raw = np.empty(GUARD_BEFORE + nbytes + after + 64, dtype=np.uint8)
    shift = -raw.ctypes.data % 64
    raw = raw[shift:shift + GUARD_BEFORE + nbytes + after]
    raw.fill(CANARY)
    return raw


def output_poison(dtype: np.dtype, variant: int = 0) -> np.ndarray:
    """The poison bytes of one element of an output of ``dtype`` (``variant`` 1: a second, different poison,
    for the confirming run)."""
    part = dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
    table = _OUTPUT_NAN if variant == 0 else _OUTPUT_NAN_2
    if dtype.kind in "fc" and part in table:
        return np.tile(table[part].view(np.uint8), dtype.itemsize // part)
    return np.full(dtype.itemsize, OUTPUT_SENTINEL if variant == 0 else OUTPUT_SENTINEL_2, dtype=np.uint8)


def _fill(region: np.ndarray, pattern: np.ndarray) -> None:
    """Fill a byte region with a repeating byte pattern, in place, without a temporary of the region's size."""
    k, n = pattern.size, region.size
    whole = n - n % k
    if k in (1, 2, 4, 8) and region.ctypes.data % k == 0:
        region[:whole].view(f"u{k}").fill(pattern.view(f"u{k}")[0])
    elif whole:
        region[:whole].reshape(-1, k)[:] = pattern
    region[whole:] = pattern[:n - whole]


def _changed_span(region: np.ndarray, pattern: np.ndarray | int) -> tuple[int, int] | None:
    """The first and last index of the bytes of ``region`` that differ from a byte value or a repeating byte
    pattern (whose period divides CHUNK_BYTES), or None; scanned in chunks, from each end, so that neither a
    pattern nor a mask of the region's size is ever built."""
    pattern = np.array([pattern], np.uint8) if isinstance(pattern, int) else pattern
    tile = np.tile(pattern, CHUNK_BYTES // pattern.size)
    first = None
    for a, b in _chunks(region.size, CHUNK_BYTES):
        diff = np.flatnonzero(region[a:b] != tile[:b - a])
        if diff.size:
            first = a + int(diff[0])
            break
    if first is None:
        return None
    for a, b in _chunks(region.size, CHUNK_BYTES, reverse=True):
        diff = np.flatnonzero(region[a:b] != tile[:b - a])
        if diff.size:
            return first, a + int(diff[-1])
    return first, first  # pragma: no cover - the forward scan found a byte


class Mirror:
    """Where a guarded call runs when not on the host: the device side (:class:`aotbench.run.gpu.
    GuardMirror` for CUDA) gives the inputs as it wants them, and runs the kernel on device copies of the
    guarded host buffers, copying them back into the same buffers for inspection."""

    def inputs(self, args) -> tuple[tuple, tuple]:
        raise NotImplementedError

    def upload(self, array: np.ndarray):
        raise NotImplementedError

    def run(self, plan: Plan, arrays, raws: list[np.ndarray]) -> None:
        raise NotImplementedError


@dataclass
class _Buffers:
    """One set of guarded, poisoned outputs and workspaces for a call (``variant`` picks the poisons)."""

    outputs: list[np.ndarray]
    out_raw: list[np.ndarray]
    ws_raw: list[np.ndarray]


def _prepare(plan: Plan, largest: int, variant: int) -> _Buffers:
    outputs, out_raw, ws_raw = [], [], []
    for shape, dtype in plan.outputs:
        nbytes = _nbytes(shape, dtype)
        raw = _guarded(nbytes, guard_after(nbytes, largest))
        _fill(raw[GUARD_BEFORE:GUARD_BEFORE + nbytes], output_poison(dtype, variant))
        outputs.append(raw[GUARD_BEFORE:GUARD_BEFORE + nbytes].view(dtype).reshape(shape))
        out_raw.append(raw)
    for requested, allocated in plan.workspaces:
        raw = _guarded(requested, allocated - requested + guard_after(allocated, largest))
        _fill(raw[GUARD_BEFORE:], WORKSPACE_POISON if variant == 0 else WORKSPACE_POISON_2)
        ws_raw.append(raw)
    return _Buffers(outputs, out_raw, ws_raw)


def _nbytes(shape, dtype) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def _call(plan: Plan, arrays: tuple, buffers: _Buffers, device: Mirror | None) -> None:
    if device is not None:
        device.run(plan, arrays, buffers.out_raw + buffers.ws_raw)
        return
    pointers = [a.ctypes.data for a in arrays] + [o.ctypes.data for o in buffers.outputs] + \
        [r.ctypes.data + GUARD_BEFORE for r in buffers.ws_raw]
    raise_for(plan, call_pointers(plan, pointers))


def run_guarded(plan: Plan, arrays: tuple, device: Mirror | None = None) -> GuardedRun:
    """Call the kernel of ``plan`` with guarded, poisoned outputs and workspaces; inspect them.

    ``arrays`` are the inputs as the plan expects them (C-contiguous, native order; device arrays with
    ``device``). Raises what the kernel's return code or exception says, like any call. When output elements
    look unwritten or NaN/Inf, or a workspace was not written to its end, the kernel runs once more on buffers
    with other poisons, and only what the two
    runs agree on is reported: an element is unwritten if it holds each run's poison, and a written value came
    from memory the kernel never wrote if it changed with the poison (a kernel that writes the poison's bytes
    itself, or computes a real NaN, is not blamed).
    """
    sizes = [_nbytes(shape, dtype) for shape, dtype in plan.outputs]
    largest = max([a.nbytes for a in arrays] + sizes + [0])
    readonly: list[bool] = [False] * len(arrays)
    if device is None:  # read-only inputs copied; device inputs are the mirror's business
        arrays, readonly = writable(arrays)
    inputs_before = snapshot(arrays) if device is None else []
    first = _prepare(plan, largest, 0)
    with prints.shown(plan.prints):  # what the kernel prints is shown once: the confirming run's is dropped
        _call(plan, arrays, first, device)
    findings: list[str] = []
    written = input_writes(arrays, inputs_before, readonly, findings)
    suspicious = any(_suspicious(dtype, out) for (_, dtype), out in zip(plan.outputs, first.outputs)) or any(
        _unfilled(raw, requested) for (requested, _), raw in zip(plan.workspaces, first.ws_raw))
    second = None
    if suspicious:
        for k in written:  # the confirming run sees the inputs the first one saw (an in-place kernel)
            np.copyto(arrays[k], inputs_before[k])
        second = _prepare(plan, largest, 1)
        with prints.discarded(plan.prints):
            _call(plan, arrays, second, device)

    violations: list[str] = []
    in_dtypes = [str(a.dtype) for a in arrays]
    buffers = [_inspect_output(f"output {i}", shape, dtype, first.out_raw[i], first.outputs[i],
                               second.outputs[i] if second else None, violations, findings, in_dtypes)
               for i, (shape, dtype) in enumerate(plan.outputs)]
    buffers += [_inspect_workspace(f"workspace {j}", requested, allocated, raw, violations, findings)
                for j, ((requested, allocated), raw) in enumerate(zip(plan.workspaces, first.ws_raw))]
    if any(b.changed for b in buffers):
        for b in buffers:
            if b.name.startswith("workspace") and b.extent < b.size:
                findings.append(f"{b.name}: the kernel wrote only its first {b.extent} of {b.size} bytes, and read "
                                "the rest: check the loop that fills it")
    return GuardedRun(first.outputs, buffers, violations, findings, [r.size for r in first.out_raw])


def _is_poison(words: np.ndarray, poison: np.ndarray) -> np.ndarray:
    if words.ndim == 1:
        return words == poison.view(words.dtype)[0]
    return (words == poison).all(axis=1)


def _unfilled(raw: np.ndarray, requested: int) -> bool:
    """Whether the kernel left the end of a workspace unwritten (it may have read it: worth a second run)."""
    written = _changed_span(raw[GUARD_BEFORE:GUARD_BEFORE + requested], WORKSPACE_POISON)
    return requested > 0 and (written is None or written[1] + 1 < requested)


def _suspicious(dtype: np.dtype, data: np.ndarray) -> bool:
    """Whether an output of the first run has elements that look unwritten or NaN/Inf (worth a second run)."""
    if not data.size:
        return False
    words, poison = _words(data), output_poison(dtype)
    flat = data.reshape(-1)
    step = max(CHUNK_BYTES // dtype.itemsize, 1)
    for a, b in _chunks(flat.size, step):
        if _is_poison(words[a:b], poison).any() or (dtype.kind in "fc" and not np.isfinite(flat[a:b]).all()):
            return True
    return False


def _inspect_output(name, shape, dtype, raw, data, again, violations, findings, in_dtypes=()) -> BufferReport:
    """Guards, unwritten elements and poison-dependent values of one output; ``again`` is the same output of
    the confirming run (None when the first run showed nothing suspicious); ``in_dtypes`` the inputs' dtypes
    (named when the bytes written suggest the kernel expects another dtype)."""
    nbytes = data.nbytes
    report = BufferReport(name, nbytes)
    before = _changed_span(raw[:GUARD_BEFORE], CANARY)
    if before:
        report.written_before = GUARD_BEFORE - before[0]
        violations.append(f"{name}: the kernel wrote {report.written_before} bytes before the start of the buffer")
    after = _changed_span(raw[GUARD_BEFORE + nbytes:], CANARY)
    if after:
        report.written_past_end = after[1] + 1
        whole = (f" (the whole guard: maybe further; {ISOLATE_HINT})"
                 if report.written_past_end == raw.size - GUARD_BEFORE - nbytes else "")
        violations.append(f"{name}: the kernel wrote {report.written_past_end} bytes past the end of its "
                          f"{nbytes}-byte buffer{whole}; check which shape its output loop uses"
                          f"{dtype_hint(dtype, nbytes, nbytes + report.written_past_end, in_dtypes)}")
    if again is None or not data.size:
        return report
    words, words2 = _words(data), _words(again)
    poison, poison2 = output_poison(dtype), output_poison(dtype, 1)
    flat = data.reshape(-1)
    step = max(CHUNK_BYTES // dtype.itemsize, 1)
    first: list[int] = []
    changed = nonfinite = 0
    for a, b in _chunks(flat.size, step):
        unwritten = _is_poison(words[a:b], poison) & _is_poison(words2[a:b], poison2)
        count = int(unwritten.sum())
        if count and len(first) < SHOW_INDICES:
            first += [a + int(k) for k in np.flatnonzero(unwritten)[:SHOW_INDICES - len(first)]]
        report.unwritten += count
        differs = words[a:b] != words2[a:b] if words.ndim == 1 else (words[a:b] != words2[a:b]).any(axis=1)
        differs &= ~unwritten
        changed += int(differs.sum())
        if dtype.kind in "fc":
            nonfinite += int((differs & ~np.isfinite(flat[a:b])).sum())
    report.first_unwritten = [tuple(int(v) for v in np.unravel_index(k, shape)) for k in first]
    report.nonfinite, report.changed = nonfinite, changed
    if report.unwritten:
        span = _changed_span(raw[GUARD_BEFORE:GUARD_BEFORE + nbytes], poison)
        hint = dtype_hint(dtype, nbytes, span[1] + 1, in_dtypes) if span and span[0] < dtype.itemsize else ""
        findings.append(f"{name}: {report.unwritten} of {data.size} elements were never written (first at "
                        f"{', '.join(map(str, report.first_unwritten))}){hint}")
    if nonfinite:
        findings.append(f"{name}: {nonfinite} written values are NaN or Inf — likely the poison of "
                        "workspace or output memory the kernel read before writing it")
    elif changed:
        findings.append(f"{name}: {changed} written values changed with the poison — the kernel computed them "
                        "from workspace or output memory it read before writing it")
    return report


def _inspect_workspace(name, requested, allocated, raw, violations, findings) -> BufferReport:
    report = BufferReport(name, requested)
    before = _changed_span(raw[:GUARD_BEFORE], CANARY)
    if before:
        report.written_before = GUARD_BEFORE - before[0]
        violations.append(f"{name}: the kernel wrote {report.written_before} bytes before the start of the "
                          "workspace")
    written = _changed_span(raw[GUARD_BEFORE:], WORKSPACE_POISON)
    report.extent = written[1] + 1 if written else 0
    if report.extent > requested:
        report.written_past_end = report.extent - requested
        ratio = report.extent / requested if requested else float("inf")
        cause = ""
        for factor in (8, 4):  # the element sizes a byte count is most often confused with
            if requested and (factor - 0.5) * requested <= report.extent <= factor * requested:
                cause = (f" — the workspace size is in bytes; Init asked for {requested}, the kernel wrote "
                         f"{factor}x that: was it an element count?")
                break
        sentence = (f"{name}: Init asked for {requested} bytes but the kernel wrote up to byte {report.extent} "
                    f"({ratio:.1f}x){cause}")
        if report.extent > allocated:
            violations.append(f"{sentence}; that is past the {allocated} bytes aotbench allocates for it")
        else:
            findings.append(sentence)
    return report


def first_call(plan: Plan, arrays: tuple, device: Mirror | None = None) -> Any:
    """The first call of a new input signature, guarded: the outputs (copies), or ContractViolation.

    A write outside the kernel's buffers raises with check mode's sentences and returns nothing; findings
    that leave memory intact (unwritten elements, leaked poison, a workspace overrun inside the padding) are
    one :class:`~aotbench.errors.ContractWarning`, and the call returns.
    """
    name = plan.library.name
    run = run_guarded(plan, arrays, device)
    if run.violations:
        raise ContractViolation(name, GuardReport(run.violations, run.findings, run.buffers), guarded=True)
    if run.findings:
        warn_findings(name, [tuple(a.shape) for a in arrays], run.findings)
    plan.fill = fill_values(plan.outputs, run.buffers)
    # An output that is most of its guarded buffer is returned as a view into it (no copy of a large output);
    # a small one is copied, so that its guards (up to MAX_GUARD_AFTER) are not kept alive with it.
    result = tuple(device.upload(o) if device else (o if 2 * o.nbytes >= raw else o.copy())
                   for o, raw in zip(run.outputs, run.raw_sizes))
    return result[0] if plan.single else result


_collectors = threading.local()  # per thread: a list that takes the warnings instead (see collected_warnings)


@contextmanager
def collected_warnings() -> Iterator[list[ContractWarning]]:
    """While the block runs, this thread's guarded first calls append their ContractWarning to the list it
    yields instead of issuing it (the explore panel shows them itself; other threads are not affected)."""
    previous = getattr(_collectors, "sink", None)
    _collectors.sink = sink = []
    try:
        yield sink
    finally:
        _collectors.sink = previous


def current_collector() -> list | None:
    """The list this thread's :func:`collected_warnings` block collects into, if one is open."""
    return getattr(_collectors, "sink", None)


def warn_findings(name: str, shapes: list, findings: list[str]) -> None:
    """One ContractWarning for what a guarded first call found, pointed at the user's line."""
    listing = "\n".join(f"  - {f}" for f in findings)
    warning = ContractWarning(
        f"{name}, first call with input shapes {', '.join(map(str, shapes))} (a guarded call):\n{listing}\n"
        "op.check(...) gives the full report; guard=False (--no-guard) turns this first-call check off.")
    sink = getattr(_collectors, "sink", None)
    if sink is not None:
        sink.append(warning)
    else:
        warnings.warn(warning, stacklevel=user_stacklevel())


__all__ = [
    "GUARD_BEFORE",
    "BufferReport",
    "GuardReport",
    "GuardedRun",
    "Mirror",
    "collected_warnings",
    "current_collector",
    "first_call",
    "guard_after",
    "run_guarded",
    "warn_findings",
]
