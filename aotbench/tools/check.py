"""Check mode: run a kernel once with guarded, poisoned buffers and report how it broke its contract.

The guarded buffers and their inspection are :mod:`aotbench.run.guard`'s (the op's guarded first call uses the same):
bytes written past either end, output elements never written, workspace writes beyond the requested size (with
the likely cause when the overrun is 4x or 8x: a size in elements instead of bytes), poison that leaked into
the outputs as NaN. Check mode reports all of them as problems and adds, with a reference, the mismatch. With
``dynamic=`` it also runs ``Init`` as MindSpore's graph mode would, with -1 dims, and warns when the workspace
it computes is absurd.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..native.dtypes import dtype_string
from ..run.guard import BufferReport, run_guarded
from ..run.kernel import contiguous
from ..run.plan import call_infer_shape, tensor_arrays
from ..errors import AotbenchError, ArgumentValueError, ContractViolation
from .accuracy import to_host

if TYPE_CHECKING:
    from ..op.op import Op

ABSURD_WORKSPACE = 1 << 40  # bytes: what a -1 dim turns into when multiplied as an unsigned size
SHOW_INDICES = 5


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


def check(op: Op, *args: Any, reference: Any = None, rtol: float | None = None, atol: float | None = None,
          dynamic: list | None = None) -> CheckReport:
    """Run ``op`` once on ``args`` under guards and poison and report every contract violation found
    (``op.check(...)``).

    ``reference`` is the expected output(s) or a function of the inputs; ``dynamic`` lists one shape per input
    with ``None`` for dims MindSpore would see as -1, to also check Init as graph mode calls it. A gpu op runs on
    the device: the guarded, poisoned buffers are built here, copied to the GPU, the kernel runs on them, and they
    are copied back for the same inspection; the outputs returned are cupy arrays.
    """
    try:
        return _check(op, args, reference, rtol, atol, dynamic)
    except KeyboardInterrupt as exc:  # the stop button on an endless kernel: retire what the call used
        op.interrupted(exc)


def _check(op: Op, args: tuple, reference: Any, rtol: float | None, atol: float | None,
           dynamic: list | None) -> CheckReport:
    kernel = op.kernel
    device = op.device.guard_mirror(kernel, op.runner)  # None on the host
    if device is not None:
        arrays, extras = device.inputs(args)
    else:
        arrays, extras = kernel.host_arrays(args)
        arrays = tuple(contiguous(a, i) for i, a in enumerate(arrays))
    call_attrs = kernel.call_attrs(extras)
    attrs = kernel.attrs + call_attrs
    plan = kernel.plan(arrays, call_attrs)
    run = run_guarded(plan, arrays, device)
    problems = run.violations + run.findings
    outputs = run.outputs
    mismatches = _compare(outputs, reference, arrays, rtol, atol, problems) if reference is not None else []
    warnings = _graph_mode_pass(op, dynamic, arrays, attrs, plan) if dynamic is not None else []
    result = tuple(device.upload(o) if device else o.copy() for o in outputs)
    return CheckReport(not problems, problems, warnings, run.buffers, mismatches,
                       result[0] if plan.single else result)


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


def checked_call(op: Op, call: Any, args: tuple) -> Any:
    """The call ``op.check_next_call`` (``%%aot_kernel --check``) asked for: check mode instead of ``call``,
    raising ContractViolation on a problem, else returning the outputs."""
    report = op.check(*args)
    if not report.ok:
        raise ContractViolation(op.name, report)
    caller = op.kernel.caller(args)  # another library's inputs: the outputs go back in it, as a plain call's do
    return report.outputs if caller is None else caller.wrap(report.outputs)


def _graph_mode_pass(op: Op, dynamic: list, arrays, attrs, plan) -> list[str]:
    """Run Init with -1 for the dims declared dynamic, as MindSpore's graph mode does once; warn when the
    workspace it computes is absurd."""
    sizes, failure = graph_mode_workspaces(op, dynamic, arrays, attrs, plan.outputs)
    if failure is not None:
        return [failure]
    return [f"with -1 dims, as MindSpore's graph mode calls it once, {op.name}Init asks for {size} bytes for "
            f"workspace {j}: this kernel would misbehave in MindSpore's graph mode (compute workspace sizes only "
            "from known dims, or guard against -1)" for j, size in enumerate(sizes) if size >= ABSURD_WORKSPACE]


def graph_mode_workspaces(op: Op, dynamic: list, arrays, attrs, outputs) -> tuple[list[int], str | None]:
    """The workspace sizes ``Init`` asks for when called as MindSpore's graph mode calls it, once, with -1 for
    the dims ``dynamic`` declares unknown (``None`` or a name; ``None`` for a whole shape is an unknown rank);
    or a sentence saying why that call failed. ``outputs`` are the concrete outputs' (shape, dtype) pairs (their
    shapes are used when the op has an ``out_shape`` rule instead of InferShape)."""
    if len(dynamic) != len(arrays):
        raise ArgumentValueError(f"dynamic= gives {len(dynamic)} shapes for {len(arrays)} inputs")
    if not op.library.init:
        return [], None
    shapes = [(-2,) if s is None else tuple(-1 if d is None or isinstance(d, str) else int(d) for d in s)
              for s in dynamic]
    host = op.kernel.runtime
    extra = host.new_extra(attrs)
    try:
        out_shapes = [shape for shape, _ in outputs]
        step = f"{op.name}InferShape"
        try:
            if op.spec.out_shape is None:
                out_shapes = [tuple(s) for s in call_infer_shape(op.spec, host, op.library, shapes, extra, attrs)]
            names = [dtype_string(a.dtype) for a in arrays] + [dtype_string(d) for _, d in outputs]
            init_arrays = tensor_arrays(shapes + out_shapes, names)
            step = f"{op.name}Init"
            host.call_init(op.library.init, *init_arrays[:3], extra, function=f"{op.name}Init", attrs=attrs)
        except AotbenchError as exc:
            return [], f"with -1 dims (graph mode) {step} failed ({exc}); MindSpore's graph mode would fail too"
        return host.workspace_sizes(extra), None
    except KeyboardInterrupt:  # perhaps an abandoned Init: its kernel data is not trusted to a destructor (leaked)
        extra = None
        raise
    finally:
        if extra is not None:
            host.free_extra(extra)
