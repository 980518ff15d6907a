"""``op.explore(...)``: an ipywidgets panel that edits an op's attributes and dynamic dims and shows, live, the
inferred output shape, the error against a reference, timings and a plot.

Three parts, kept apart (the way ipywidgets' own ``interact`` separates them):

* ``control_for_attr`` / ``control_for_dim`` — pure functions from an attribute or a dim to one control;
* :class:`ExplorePanel` — the layout, and ``_update``: read the controls, compute with the core
  (:mod:`aotbench.notebook.exploration`, :mod:`aotbench.tools.timing`), write the results; an error lands in the panel and
  the controls keep working;
* :class:`~aotbench.notebook.debounce.Debouncer` — only the latest setting runs: each change restarts a timer on the
  kernel's event loop (or a thread where none runs); ``debounce_ms=0`` runs every change synchronously.
"""

from __future__ import annotations

import ast
import base64
import html
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

try:
    import ipywidgets as W
except ImportError as exc:  # pragma: no cover - exercised only without the notebook extra
    raise ImportError("op.explore needs ipywidgets: pip install '.[notebook]' in aotbench's clone") from exc

from .. import plots
from ..native.attrs import AttrKind, TypedAttr
from ..run import guard
from ..tools.timing import bench, format_ns
from ..errors import AotbenchError, ArgumentTypeError, ArgumentValueError
from ..tools import accuracy
from . import exploration
from .debounce import Debouncer

PASS_STYLE = "background:#1a7f37;color:white;padding:1px 6px;border-radius:3px"
FAIL_STYLE = "background:#cf222e;color:white;padding:1px 6px;border-radius:3px"
LIST_KINDS = (AttrKind.INT_VEC, AttrKind.FLOAT_VEC, AttrKind.INT_2D, AttrKind.FLOAT_2D, AttrKind.EMPTY_LIST,
              AttrKind.EMPTY_ROWS)
AXIS_NAMES = ("axis", "dim", "axes")
PANEL_MIN_SAMPLES = 3  # a slow kernel (a large shape at -O0) still answers a change in a few calls
MAX_DERIVED = 8  # ops with other attribute values kept for quick switching back
PLOT_WIDTH_PX, PLOT_HEIGHT_PX, PLOT_DPI = 560, 320, 100  # drawn at the size it is shown


# -- controls: pure functions from a spec entry to a widget --------------------------------------------------
def control_for_attr(attr: TypedAttr, rank: int) -> W.Widget:
    """One control for one attribute, chosen by its kind, labelled with its name."""
    name, value, kind = attr.name, attr.value, attr.kind
    style = {"description_width": "initial"}
    if kind is AttrKind.BOOL:
        control = W.Checkbox(value=value, description=name, indent=False)
    elif kind is AttrKind.INT:
        if name.lower() in AXIS_NAMES and rank > 0:
            low, high = -rank, rank - 1
        else:
            low, high = min(0, 2 * value, value - 10), max(10, 2 * value, value + 10)
        control = W.IntSlider(value=value, min=low, max=high, description=name, style=style,
                              continuous_update=True)
    elif kind is AttrKind.FLOAT:
        span = abs(value) * 2 if value else 1.0
        low, high = (min(0.0, value - span), max(0.0, value + span)) if np.isfinite(value) else (-1.0, 1.0)
        control = W.FloatSlider(value=value if np.isfinite(value) else 0.0, min=low, max=high,
                                step=(high - low) / 200, description=name, readout_format=".4g", style=style)
    elif kind is AttrKind.STR:
        control = W.Text(value=value, description=name, continuous_update=False, style=style)
    elif kind in LIST_KINDS:
        control = W.Text(value=repr(list(value)), description=name, continuous_update=False, style=style,
                         placeholder="a Python list, e.g. [1, 2]")
    else:
        raise ArgumentTypeError(f"attribute {name!r} of kind {kind.name} has no control")
    control.add_class(f"aotb-attr-{name}")
    control.add_class("aotb-control")
    return control


def control_for_dim(dim: exploration.Dim) -> W.IntSlider:
    """A slider for one dynamic dim, labelled with its name (``m``) or its place (``x1 dim 0``)."""
    control = W.IntSlider(value=dim.value, min=1 if dim.value >= 1 else 0, max=dim.maximum, description=dim.label,
                          style={"description_width": "initial"}, continuous_update=True)
    control.add_class(f"aotb-dim-{dim.label.replace(' ', '-')}")
    control.add_class("aotb-control")
    return control


def read_attr(attr: TypedAttr, control: W.Widget) -> Any:
    """The attribute's current value from its control (list attributes are parsed as Python literals)."""
    if attr.kind in LIST_KINDS:
        try:
            value = ast.literal_eval(control.value.strip() or "[]")
        except (ValueError, SyntaxError) as exc:
            raise ArgumentValueError(f"attribute {attr.name!r}: {control.value!r} is not a Python list literal such "
                                     "as [1, 2] or [[1.0, 2.0]]") from exc
        if not isinstance(value, (list, tuple)):
            raise ArgumentValueError(f"attribute {attr.name!r} is a list; write it as [..]")
        return value
    return control.value


# -- the panel ------------------------------------------------------------------------------------------------
def _html(cls: str) -> W.HTML:
    widget = W.HTML()
    widget.add_class(cls)
    return widget


def _shape_text(shapes) -> str:
    if isinstance(shapes, tuple) and shapes and all(isinstance(s, tuple) or s is None for s in shapes):
        return ", ".join(str(s) for s in shapes)
    return str(shapes)


class ExplorePanel(W.VBox):
    """The panel ``op.explore`` returns. ``controls`` (attribute name -> control) and ``dims`` (dim label ->
    slider) can be set from code; ``last`` holds the latest results (inputs, output, agreement, timings)."""

    def __init__(self, op, examples: tuple, reference: Callable | None, dynamic, debounce_ms: float,
                 budget_ms: float, rtol: float | None, atol: float | None, seed: int | None):
        if op.spec.call_attrs:
            raise ArgumentValueError(f"{op.name} has call attributes ({', '.join(op.spec.call_attrs)}); explore needs "
                                     "every attribute to have a value: register them with value=")
        if not examples:
            raise ArgumentTypeError("explore needs example inputs, one array per input (their ranks and dtypes shape "
                                    "the controls): op.explore(x, y, ...)")
        self.op = op
        self._name = exploration.panel_name(op)  # as the user knows it: add_reduce (CustomKernel)
        self.examples = tuple(accuracy.to_host(e) for e in examples)  # host copies (a gpu op gets device ones)
        self.reference = reference
        self.budget_ms = budget_ms
        self.rtol, self.atol = rtol, atol
        self._rng = np.random.default_rng(seed)
        names = op.spec.reg_info.inputs if op.spec.reg_info and op.spec.reg_info.inputs else None
        self._dims = exploration.parse_dynamic(dynamic, self.examples, names)
        rank = max(e.ndim for e in self.examples)
        self._attrs = list(op.spec.attrs)
        self.controls = {a.name: control_for_attr(a, rank) for a in self._attrs}
        self.dims = {d.label: control_for_dim(d) for d in self._dims}
        self._derived: dict = {}
        self.runs = 0
        self.last: dict[str, Any] = {}
        self._build_lock = threading.Lock()
        self._quiet = False  # set() changes several controls, then runs once

        self.title = _html("aotb-title")
        self.shape = _html("aotb-shape")
        self.stats = _html("aotb-stats")
        self.timing = _html("aotb-timing")
        self.error = _html("aotb-error")
        self.warning = _html("aotb-warning")  # what the guarded first call of a new shape found
        self.status = _html("aotb-status")
        self.plot = W.Image(format="png", layout=W.Layout(width=f"{PLOT_WIDTH_PX}px"))
        self.plot.add_class("aotb-plot")
        columns = []
        if self.controls:
            columns.append(W.VBox([W.HTML("<b>attributes</b>"), *self.controls.values()]))
        if self.dims:
            columns.append(W.VBox([W.HTML("<b>dimensions</b>"), *self.dims.values()]))
        super().__init__([self.title, W.HBox(columns), self.shape, W.HBox([self.stats, self.timing]), self.plot,
                          self.warning, self.error, self.status])
        self.add_class("aotb-explore")

        self._debouncer = Debouncer(self._run_safely, debounce_ms)
        for control in [*self.controls.values(), *self.dims.values()]:
            control.observe(self._changed, names="value")
        self_ref = weakref.ref(self)
        op.on_reload(lambda new_op: (panel := self_ref()) is not None and panel._reloaded(new_op))
        op.on_reload_error(lambda err: (panel := self_ref()) is not None and panel._reload_failed(err))
        self._show_title()
        self.refresh()

    # -- reading the controls
    def attr_values(self) -> dict[str, Any]:
        return {a.name: read_attr(a, self.controls[a.name]) for a in self._attrs}

    def shapes(self) -> list[tuple]:
        return exploration.concrete_shapes(self.examples, self._dims, {k: c.value for k, c in self.dims.items()})

    def set(self, **values: Any) -> ExplorePanel:
        """Set attribute and dim controls by name (``panel.set(axis=0, m=300)``) and run once, now."""
        unknown = sorted(set(values) - set(self.controls) - set(self.dims))
        if unknown:
            raise ArgumentTypeError(f"no control named {', '.join(unknown)}; the controls are "
                                    f"{', '.join([*self.controls, *self.dims])}")
        self._quiet = True
        try:
            for name, value in values.items():
                control = self.controls.get(name) or self.dims[name]
                if isinstance(control, W.Text) and isinstance(value, (list, tuple)):
                    value = repr(list(value))
                elif isinstance(control, (W.IntSlider, W.FloatSlider)):  # code may go past a slider's ends
                    control.max, control.min = max(control.max, value), min(control.min, value)
                control.value = value
        finally:
            self._quiet = False
        self._debouncer.cancel()  # a run pending from an earlier change would only repeat this one
        self.refresh()
        return self

    def summary(self) -> str:
        """The latest result in one line of text: settings, output shape, verdict and timings."""
        settings = ", ".join(f"{k}={v!r}" for k, v in {**self.last.get("attrs", {}), **{
            k: c.value for k, c in self.dims.items()}}.items())
        if "error" in self.last:
            return f"{settings}: {type(self.last['error']).__name__}: {self.last['error']}"
        shape = _shape_text(tuple(np.shape(o) for o in self.last["output"])) if isinstance(
            self.last.get("output"), tuple) else str(np.shape(self.last.get("output")))
        text = f"{settings}: output shape {shape}"
        agreement = self.last.get("agreement")
        if agreement is not None:
            verdict = "PASS" if agreement.ok else "FAIL"
            text += f", {verdict} (max abs error {agreement.max_abs:.3g})"
        if "timing" in self.last:
            text += f", op {format_ns(self.last['timing'].median_ns)}"
        if "reference_timing" in self.last:
            text += f", reference {format_ns(self.last['reference_timing'].median_ns)}"
        return text

    # -- displaying: the live view, and a snapshot for where no widget renders (a stored notebook on GitHub, ...)
    def _repr_mimebundle_(self, **kwargs):
        """ipywidgets' live view, with a text and an HTML snapshot of the panel as it is now in place of the
        widget's bare repr: a frontend with a widget manager shows the view, a notebook viewer the snapshot."""
        data = dict(super()._repr_mimebundle_(**kwargs) or {})
        data["text/plain"] = self._snapshot_text()
        data["text/html"] = self._snapshot_html()
        return data

    def _snapshot_text(self) -> str:
        controls = ", ".join([*self.controls, *self.dims]) or "none"
        compared = "PASS/FAIL against the reference" if self.reference is not None else "the output"
        return (f"op.explore panel of {self._name} [{_target(self.op)}]: controls for {controls}; it shows the "
                f"output shape InferShape gives, {compared}, timings and a plot. Run the cell for the live "
                f"panel.\nwhen shown: {self.summary()}")

    def _snapshot_html(self) -> str:
        settings = " · ".join(f"{html.escape(name)} <code>{html.escape(str(control.value))}</code>"
                              for name, control in [*self.controls.items(), *self.dims.items()])
        plot = ""
        if self.plot.value and self.plot.layout.display != "none":
            png = base64.b64encode(self.plot.value).decode()
            plot = f"<img src='data:image/png;base64,{png}' width='{PLOT_WIDTH_PX}' alt='output against reference'>"
        return (f"<div class='aotb-explore-snapshot' style='border:1px solid #d0d7de;padding:0.5em;"
                f"max-width:{PLOT_WIDTH_PX + 40}px'><div>{self.title.value}</div><div>{settings}</div>"
                f"<div>{self.shape.value}</div><div style='display:flex'><div>{self.stats.value}</div>{self.timing.value}</div>"
                f"{plot}{self.warning.value}{self.error.value}<div><small><i>A snapshot of the op.explore panel "
                f"when the cell ran: run the cell for the live controls.</i></small></div></div>")

    # -- updating
    def _changed(self, change=None) -> None:
        if self._quiet:
            return
        self._show_shape()  # cheap and immediate; the run itself is debounced
        self._debouncer.trigger()

    def refresh(self) -> None:
        """Recompute everything now with the controls' current values (the panel does this on every change)."""
        self._show_shape()
        self._run_safely()

    def _op_for(self, attrs: dict[str, Any]):
        """The op with these attributes: one derived op per recent setting (an isolated one keeps its worker);
        the least recently used beyond ``MAX_DERIVED`` is closed, so no worker processes pile up."""
        key = repr(sorted(attrs.items()))
        with self._build_lock:
            op = self._derived.pop(key, None)
            if op is None:
                op = self.op.with_attrs(**attrs) if attrs != self.op.attrs else self.op
            self._derived[key] = op  # most recent last
            while len(self._derived) > MAX_DERIVED:
                self._release(self._derived.pop(next(iter(self._derived))))
        return op

    def _release(self, op) -> None:
        if op is not self.op:
            op.close()

    def _drop_derived(self) -> None:
        with self._build_lock:
            for op in self._derived.values():
                self._release(op)
            self._derived.clear()

    def close(self) -> None:
        """Close the panel's widgets and the ops it derived (their worker processes, for an isolated op)."""
        if hasattr(self, "_derived"):  # ipywidgets also calls close() on a panel whose __init__ raised
            self._drop_derived()
        super().close()

    def _show_shape(self) -> None:
        try:
            attrs = self.attr_values()
            inferred = self._op_for(attrs).infer_shape(*self.shapes())
        except Exception as exc:  # noqa: BLE001 - shown in the panel; the controls keep working
            self.shape.value = f"output shape: <i>unknown</i> ({html.escape(type(exc).__name__)})"
            return
        self.shape.value = f"output shape <code>{html.escape(_shape_text(inferred))}</code>"

    def _run_safely(self) -> None:
        started = time.perf_counter()
        self.warning.value = ""
        try:
            self._run()
            self.error.value = ""
        except Exception as exc:  # noqa: BLE001 - every failure is shown in the panel, never raised
            self.last = {"attrs": self._settings_or_empty(), "error": exc}
            self.error.value = self._error_html(exc)
            # Nothing of the previous run stays next to the error: its numbers and plot are not this setting's.
            self.stats.value = f"<span style='{FAIL_STYLE}' class='aotb-fail'>error</span>"
            self.timing.value = ""
            self.plot.value = b""
            self.plot.layout.display = "none"
        self.runs += 1
        isolated = " · isolated worker" if self.op.spec.isolate else ""
        self.status.value = (f"<small>run {self.runs} · {1e3 * (time.perf_counter() - started):.0f} ms"
                             f"{isolated}</small>")

    def _settings_or_empty(self) -> dict[str, Any]:
        try:
            return self.attr_values()
        except AotbenchError:
            return {}

    def _run(self) -> None:
        attrs = self.attr_values()
        op = self._op_for(attrs)
        shapes = self.shapes()
        same = shapes == [e.shape for e in self.examples]
        inputs = self.examples if same else exploration.random_inputs(self.examples, shapes, self._rng)
        inputs = op.device.prepare(op, inputs)  # a gpu op (and its reference) get device arrays
        with guard.collected_warnings() as found:  # shown here, not in the notebook's stderr
            output = op(*inputs)
        result: dict[str, Any] = {"attrs": attrs, "shapes": shapes, "inputs": inputs, "output": output,
                                  "warnings": [str(w) for w in found]}
        if found:
            self.warning.value = "".join(
                f"<pre style='color:#9a6700;white-space:pre-wrap'><b>ContractWarning</b>: {html.escape(str(w))}</pre>"
                for w in found)
        expected = None
        if self.reference is not None:
            ref_kwargs = exploration.attrs_for_reference(self.reference, attrs)  # inspected once, not per call
            expected = self.reference(*inputs, **ref_kwargs)
            result["expected"] = expected
            result["agreement"] = agreement = accuracy.agreement(output, expected, self.rtol, self.atol)
            self.stats.value = self._agreement_html(agreement)
        else:
            self.stats.value = "<i>no reference: pass reference= to compare</i>"
        self.last = result
        # Numbers and plot first (the browser shows each as soon as it is set), timings last: they take longest.
        self.plot.value = plots.to_png(self._figure(output, expected), dpi=PLOT_DPI)
        self.plot.layout.display = None
        result["timing"] = timing = bench(op, *inputs, budget_ms=self.budget_ms, min_samples=PANEL_MIN_SAMPLES)
        text = f"<b>op</b> {format_ns(timing.median_ns)} (IQR {format_ns(timing.iqr_ns)})"
        if self.reference is not None:
            reference = self.reference
            result["reference_timing"] = ref_timing = bench(  # the inputs as arguments: device ones time on the GPU
                lambda *xs: reference(*xs, **ref_kwargs), *inputs, budget_ms=self.budget_ms,
                min_samples=PANEL_MIN_SAMPLES)
            speed = exploration.speed_words(timing.q1_ns, timing.median_ns, timing.q3_ns, ref_timing.q1_ns,
                                            ref_timing.median_ns, ref_timing.q3_ns)
            text += (f"<br><b>reference</b> {format_ns(ref_timing.median_ns)} (IQR "
                     f"{format_ns(ref_timing.iqr_ns)}) · op is {speed}")
        self.timing.value = f"<div style='margin-left:2em'>{text}</div>"

    @staticmethod
    def _figure(output, expected):
        """Output against reference (an error heat map for 2-D), or the output alone without a reference."""
        first = accuracy.to_host(output[0] if isinstance(output, tuple) else output)
        ref = None if expected is None else (expected[0] if isinstance(expected, (tuple, list)) else expected)
        ref = None if ref is None or np.shape(ref) != np.shape(first) else accuracy.to_host(ref)
        fig = plots.fixed_figure(PLOT_WIDTH_PX, PLOT_HEIGHT_PX, PLOT_DPI)
        ax = fig.axes[0]
        if ref is not None and np.ndim(first) == 2:
            return plots.error_heatmap(first, ref, ax=ax)
        if ref is not None:
            return plots.output_vs_reference(first, ref, ax=ax)
        return plots.values(first, ax=ax)

    @staticmethod
    def _agreement_html(a: accuracy.Agreement) -> str:
        if a.problem:
            return f"<span style='{FAIL_STYLE}' class='aotb-fail'>FAIL</span> {html.escape(a.problem)}"
        badge = (f"<span style='{PASS_STYLE}' class='aotb-pass'>PASS</span>" if a.ok
                 else f"<span style='{FAIL_STYLE}' class='aotb-fail'>FAIL</span>")
        within = f"{a.total - a.mismatched} of {a.total} elements within"
        return (f"{badge} max abs error <code>{a.max_abs:.3g}</code>, max rel error <code>{a.max_rel:.3g}</code>"
                f" <small>· {within} rtol {a.rtol:g}, atol {a.atol:g}</small>")

    @staticmethod
    def _error_html(exc: BaseException) -> str:
        kind = type(exc).__name__ if isinstance(exc, AotbenchError) else f"{type(exc).__name__} (Python)"
        return (f"<pre style='color:#cf222e;white-space:pre-wrap'><b>{html.escape(kind)}</b>: "
                f"{html.escape(str(exc))}</pre>")

    # -- hot reload
    def _show_title(self, note: str = "") -> None:
        op = self.op
        built = op.artifact.path.name if op.artifact else str(op.library.path)
        self.title.value = (f"<b>{html.escape(self._name)}</b> <small>[{_target(op)}] {html.escape(built)}"
                            f"</small>{note}")

    def _reloaded(self, op) -> None:
        self._drop_derived()
        self._show_title(" <small>· reloaded</small>")
        self.refresh()

    def _reload_failed(self, err: BaseException) -> None:
        self._show_title(" <small>· the last rebuild failed; showing the previous build</small>")
        self.error.value = self._error_html(err)


def explore(op, *example_inputs: Any, reference: Callable | None = None, dynamic=None, debounce_ms: float = 100.0,
            budget_ms: float = 15.0, rtol: float | None = None, atol: float | None = None,
            seed: int | None = None) -> ExplorePanel:
    """The panel of ``op.explore``: see :class:`ExplorePanel` and the module docstring."""
    return ExplorePanel(op, tuple(example_inputs), reference, dynamic, debounce_ms, budget_ms, rtol, atol, seed)


__all__ = ["ExplorePanel", "control_for_attr", "control_for_dim", "explore", "read_attr"]


def _target(op) -> str:
    """The op's target as the panel shows it: an emulated gpu op says it runs on the CPU."""
    return f"{op.spec.target}, emulated on the CPU" if getattr(op, "emulated", False) else op.spec.target
