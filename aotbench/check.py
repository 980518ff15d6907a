"""Check mode: run a kernel once with guarded, poisoned buffers and report how it broke its contract.

Every output and workspace gets guard zones before and after it (a canary byte pattern) and is poisoned before
the call (outputs: NaN for floating types, a byte sentinel otherwise; workspaces: a pattern that reads as NaN
in float32 and float64). Afterwards the buffers say what the kernel did: bytes written past either end,
output elements never written, workspace writes beyond the requested size (with the likely cause when the
overrun is 4x or 8x: a size in elements instead of bytes), poison that leaked into the outputs as NaN, and,
with a reference, the mismatch. With ``dynamic=`` it also runs ``Init`` as MindSpore's graph mode would, with
-1 dims, and warns when the workspace it computes is absurd.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .accuracy import to_host
from .dtypes import dtype_string
from .errors import AotbenchError, ArgumentError
from .plan import _tensor_arrays, call_infer_shape, make_plan

if TYPE_CHECKING:
    from .op import Op

GUARD_BEFORE = 256  # bytes of canary before every buffer (a multiple of 64 keeps the data aligned)
MIN_GUARD_AFTER = 256  # at least this many canary bytes after every buffer
CANARY = 0xCB
OUTPUT_SENTINEL = 0x5A  # poison byte for integer, bool and other non-float outputs
# Output poison: quiet NaNs with a payload of their own, so a NaN the kernel computed (which carries the payload
# of the NaN it read, e.g. workspace poison) is told apart from an element it never wrote.
_OUTPUT_NAN = {2: np.array([0x7E5A], np.uint16), 4: np.array([0x7FC0A5A5], np.uint32),
               8: np.array([0x7FF8A5A5A5A5A5A5], np.uint64)}
# Workspace poison: a NaN whether read as float32 (both halves) or float64.
WORKSPACE_POISON = np.array([0x7FF800007FC00000], dtype=np.uint64).view(np.uint8)
ABSURD_WORKSPACE = 1 << 40  # bytes: what a -1 dim turns into when multiplied as an unsigned size
SHOW_INDICES = 5


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
    nonfinite: int = 0  # output NaN/Inf values among the written ones


@dataclass
class CheckReport:
    """The outcome of :func:`check`: ``ok``, ``problems`` (plain sentences), the details, and the outputs."""

    ok: bool
    problems: list[str]
    warnings: list[str]
    buffers: list[BufferReport]
    mismatches: list[dict]
    outputs: tuple

    def __str__(self) -> str:
        head = "check passed" if self.ok else f"check found {len(self.problems)} problem(s)"
        lines = [head] + [f"  - {p}" for p in self.problems] + [f"  ! {w}" for w in self.warnings]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        color = "#1b7f3b" if self.ok else "#b00020"
        items = "".join(f"<li>{html.escape(p)}</li>" for p in self.problems)
        items += "".join(f"<li><i>warning:</i> {html.escape(w)}</li>" for w in self.warnings)
        title = "check passed" if self.ok else f"check found {len(self.problems)} problem(s)"
        return f"<div style='border-left:4px solid {color};padding-left:0.6em'><b>{title}</b><ul>{items}</ul></div>"


def _guarded(nbytes: int, after: int) -> tuple[np.ndarray, int]:
    """A canary-filled byte buffer with ``nbytes`` of room after GUARD_BEFORE bytes, 64-byte aligned."""
    raw = np.empty(GUARD_BEFORE + nbytes + after + 64, dtype=np.uint8)
    shift = -raw.ctypes.data % 64
    raw = raw[shift:shift + GUARD_BEFORE + nbytes + after]
    raw[:] = CANARY
    return raw, GUARD_BEFORE


def _output_poison(dtype: np.dtype) -> np.ndarray:
    """The poison bytes of one element of an output of ``dtype``."""
    part = dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
    if dtype.kind in "fc" and part in _OUTPUT_NAN:
        return np.tile(_OUTPUT_NAN[part].view(np.uint8), dtype.itemsize // part)
    return np.full(dtype.itemsize, OUTPUT_SENTINEL, dtype=np.uint8)


def _changed(now: np.ndarray, before: np.ndarray) -> np.ndarray:
    return np.flatnonzero(now != before)


def check(op: Op, *args: Any, reference: Any = None, rtol: float | None = None, atol: float | None = None,
          dynamic: list | None = None) -> CheckReport:
    """Run ``op`` once on ``args`` under guards and poison and report every contract violation found.

    A gpu op runs on the device: the guarded, poisoned buffers are built here, copied to the GPU, the kernel runs
    on them, and they are copied back for the same inspection; the outputs returned are cupy arrays.
    """
    device = _Device(op) if op.spec.target == "gpu" else None
    if device is not None:
        arrays, extras = device.inputs(args)
    else:
        arrays, extras = op._split(args)
        arrays = tuple(op._contiguous(a, i) for i, a in enumerate(arrays))
    attrs = op._attr_list + op._typed_call_attrs(extras)
    plan = make_plan(op.spec, op._host, op.library, arrays, attrs)
    problems: list[str] = []
    buffers: list[BufferReport] = []

    outputs, out_raw, out_snapshots = [], [], []
    for shape, dtype in plan.outputs:
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        raw, at = _guarded(nbytes, max(MIN_GUARD_AFTER, nbytes))
        data = raw[at:at + nbytes].view(dtype).reshape(shape)
        raw[at:at + nbytes] = np.resize(_output_poison(dtype), nbytes)
        outputs.append(data)
        out_raw.append(raw)
        out_snapshots.append(raw.copy())

    ws_raw, ws_snapshots = [], []
    for requested, allocated in plan.workspaces:
        raw, at = _guarded(requested, allocated - requested + MIN_GUARD_AFTER)
        body = raw[at:]
        body[:] = np.resize(WORKSPACE_POISON, body.size)
        ws_raw.append(raw)
        ws_snapshots.append(raw.copy())

    if device is not None:
        device.run(plan, arrays, out_raw, ws_raw)
    else:
        pointers = [a.ctypes.data for a in arrays] + [o.ctypes.data for o in outputs] + \
            [r.ctypes.data + GUARD_BEFORE for r in ws_raw]
        code = op._call_pointers(plan, pointers)
        if code:
            op._host.raise_for(code, op.name, 0, plan.attrs)

    for i, ((shape, dtype), raw, snap, data) in enumerate(zip(plan.outputs, out_raw, out_snapshots, outputs)):
        buffers.append(_inspect_output(f"output {i}", shape, dtype, raw, snap, data, problems))
    for j, ((requested, _), raw, snap) in enumerate(zip(plan.workspaces, ws_raw, ws_snapshots)):
        buffers.append(_inspect_workspace(f"workspace {j}", requested, raw, snap, problems))

    if any(b.nonfinite for b in buffers):
        for b in buffers:
            if b.name.startswith("workspace") and b.extent < b.size:
                problems.append(f"{b.name}: the kernel wrote only its first {b.extent} of {b.size} bytes, and read "
                                "the rest: check the loop that fills it")
    mismatches = _compare(outputs, reference, arrays, rtol, atol, problems) if reference is not None else []
    warnings = _graph_mode_pass(op, dynamic, arrays, attrs, plan) if dynamic is not None else []
    result = tuple(device.upload(o) if device else o.copy() for o in outputs)
    return CheckReport(not problems, problems, warnings, buffers, mismatches,
                       result[0] if len(result) == 1 else result)


class _Device:
    """Check mode's device side: inputs on the GPU, the guarded host buffers mirrored there for the call."""

    def __init__(self, op: Op):
        from . import gpu

        self._gpu, self._op = gpu, op
        self._cp = gpu.require_gpu(op.name)

    def inputs(self, args) -> tuple[tuple, tuple]:
        return self._gpu.device_inputs(self._op, self._cp, args)

    def upload(self, array: np.ndarray):
        return self._cp.asarray(array)

    def run(self, plan, arrays, out_raw: list[np.ndarray], ws_raw: list[np.ndarray]) -> None:
        """Copy every guarded buffer to the device, run the kernel there, copy them back into ``*_raw``."""
        mirrors = [self._cp.asarray(raw) for raw in out_raw + ws_raw]
        pointers = [a.data.ptr for a in arrays] + [m.data.ptr + GUARD_BEFORE for m in mirrors]
        self._gpu.enqueue(self._op, plan, pointers, self._cp.cuda.get_current_stream().ptr)
        self._gpu.synchronize(self._op, self._cp)
        for raw, mirror in zip(out_raw + ws_raw, mirrors):
            raw[:] = mirror.get()


def _inspect_output(name, shape, dtype, raw, snap, data, problems) -> BufferReport:
    nbytes = data.nbytes
    report = BufferReport(name, nbytes)
    before = _changed(raw[:GUARD_BEFORE], snap[:GUARD_BEFORE])
    if before.size:
        report.written_before = GUARD_BEFORE - int(before[0])
        problems.append(f"{name}: the kernel wrote {report.written_before} bytes before the start of the buffer")
    after = _changed(raw[GUARD_BEFORE + nbytes:], snap[GUARD_BEFORE + nbytes:])
    if after.size:
        report.written_past_end = int(after[-1]) + 1
        whole = " (the whole guard: maybe further)" if report.written_past_end == raw.size - GUARD_BEFORE - nbytes else ""
        problems.append(f"{name}: the kernel wrote {report.written_past_end} bytes past the end of its "
                        f"{nbytes}-byte buffer{whole}; check which shape its output loop uses")
    if data.size:
        item = dtype.itemsize
        body_now = raw[GUARD_BEFORE:GUARD_BEFORE + nbytes].reshape(-1, item)
        body_then = snap[GUARD_BEFORE:GUARD_BEFORE + nbytes].reshape(-1, item)
        unwritten = np.flatnonzero((body_now == body_then).all(axis=1))
        report.unwritten = int(unwritten.size)
        report.first_unwritten = [tuple(int(v) for v in np.unravel_index(k, shape)) for k in unwritten[:SHOW_INDICES]]
        if unwritten.size:
            problems.append(f"{name}: {unwritten.size} of {data.size} elements were never written (first at "
                            f"{', '.join(map(str, report.first_unwritten))})")
        if dtype.kind in "fc":
            written = np.ones(data.size, dtype=bool)
            written[unwritten] = False
            report.nonfinite = int((~np.isfinite(data.reshape(-1)) & written).sum())
            if report.nonfinite:
                problems.append(f"{name}: {report.nonfinite} written values are NaN or Inf — likely the poison of "
                                "workspace or output memory the kernel read before writing it")
    return report


def _inspect_workspace(name, requested, raw, snap, problems) -> BufferReport:
    report = BufferReport(name, requested)
    before = _changed(raw[:GUARD_BEFORE], snap[:GUARD_BEFORE])
    if before.size:
        report.written_before = GUARD_BEFORE - int(before[0])
        problems.append(f"{name}: the kernel wrote {report.written_before} bytes before the start of the workspace")
    written = _changed(raw[GUARD_BEFORE:], snap[GUARD_BEFORE:])
    report.extent = int(written[-1]) + 1 if written.size else 0
    if report.extent > requested:
        report.written_past_end = report.extent - requested
        ratio = report.extent / requested if requested else float("inf")
        cause = ""
        for factor in (8, 4):  # the element sizes a byte count is most often confused with
            if requested and (factor - 0.5) * requested <= report.extent <= factor * requested:
                cause = (f" — the workspace size is in bytes; Init asked for {requested}, the kernel wrote "
                         f"{factor}x that: was it an element count?")
                break
        problems.append(f"{name}: Init asked for {requested} bytes but the kernel wrote up to byte {report.extent} "
                        f"({ratio:.1f}x){cause}")
    return report


def _default_tolerance(dtype: np.dtype) -> float:
    if dtype.kind not in "fc":
        return 0.0
    return {2: 1e-2 if dtype.name == "bfloat16" else 1e-3, 4: 1e-5, 8: 1e-5, 16: 1e-12}.get(dtype.itemsize, 1e-5)


def _compare(outputs, reference, arrays, rtol, atol, problems) -> list[dict]:
    expected = reference(*arrays) if callable(reference) else reference
    if len(outputs) == 1 and not (isinstance(expected, tuple) and len(expected) == 1):
        expected = (expected,)  # one output: a list is that output's values, not one reference per output
    elif not isinstance(expected, (tuple, list)):
        expected = (expected,)
    if len(expected) != len(outputs):
        problems.append(f"the reference gives {len(expected)} outputs, the op {len(outputs)}")
        return []
    found = []
    for i, (out, ref) in enumerate(zip(outputs, expected)):
        ref = to_host(ref)
        if out.shape != ref.shape:
            problems.append(f"output {i}: shape {out.shape} (from the shape rule) but the reference has {ref.shape}")
            continue
        tol = _default_tolerance(out.dtype)
        r, a = (tol if rtol is None else rtol), (tol if atol is None else atol)
        wide = np.complex128 if "c" in (out.dtype.kind, ref.dtype.kind) else np.float64
        got, want = out.astype(wide), ref.astype(wide)
        bad = ~np.isclose(got, want, rtol=r, atol=a, equal_nan=False)
        err = np.abs(got - want)[bad]
        rel = err / np.maximum(np.abs(want[bad]), np.finfo(float).tiny)
        entry = {"output": i, "mismatched": int(bad.sum()),
                 "max_abs_error": float(err.max()) if err.size else 0.0,  # NaN when any mismatch is NaN
                 "max_rel_error": float(rel.max()) if rel.size else 0.0,
                 "nonfinite": int((~np.isfinite(got[bad])).sum()),
                 "first": [tuple(int(v) for v in idx) for idx in np.argwhere(bad)[:SHOW_INDICES]]}
        found.append(entry)
        if entry["mismatched"]:
            nan = f", {entry['nonfinite']} of them NaN/Inf" if entry["nonfinite"] else ""
            problems.append(f"output {i}: {entry['mismatched']} of {out.size} values differ from the reference{nan} "
                            f"(max abs error {entry['max_abs_error']:.3g}, max rel error {entry['max_rel_error']:.3g}; "
                            f"first at {', '.join(map(str, entry['first']))})")
    return found


def _graph_mode_pass(op: Op, dynamic: list, arrays, attrs, plan) -> list[str]:
    """Run Init with -1 for the dims declared dynamic (``None`` or a name; ``None`` for a whole shape is an
    unknown rank), as MindSpore's graph mode does once; warn when the workspace it computes is absurd."""
    if len(dynamic) != len(arrays):
        raise ArgumentError(f"dynamic= gives {len(dynamic)} shapes for {len(arrays)} inputs")
    if not op.library.init:
        return []
    shapes = [(-2,) if s is None else tuple(-1 if d is None or isinstance(d, str) else int(d) for d in s)
              for s in dynamic]
    host = op._host
    extra = host.new_extra(attrs)
    try:
        if op.spec.out_shape is None:
            out_shapes = [tuple(s) for s in call_infer_shape(op.spec, host, op.library, shapes, extra, attrs)]
        else:
            out_shapes = [shape for shape, _ in plan.outputs]
        names = [dtype_string(a.dtype) for a in arrays] + [dtype_string(d) for _, d in plan.outputs]
        init_arrays = _tensor_arrays(shapes + out_shapes, names)
        try:
            host.call_init(op.library.init, *init_arrays[:3], extra, function=f"{op.name}Init", attrs=attrs)
        except AotbenchError as exc:
            return [f"with -1 dims (graph mode) {op.name}Init failed ({exc}); MindSpore's graph mode would fail too"]
        sizes = host.workspace_sizes(extra)
    finally:
        host.free_extra(extra)
    return [f"with -1 dims, as MindSpore's graph mode calls it once, {op.name}Init asks for {size} bytes for "
            f"workspace {j}: this kernel would misbehave in MindSpore's graph mode (compute workspace sizes only "
            "from known dims, or guard against -1)" for j, size in enumerate(sizes) if size >= ABSURD_WORKSPACE]
