"""The explore panel, headless: real ops built by g++, real ipywidgets objects, values set from code.

With ``debounce_ms=0`` every change runs synchronously, so each assertion sees the finished update; the
debounced path is tested with real timers.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest

ipywidgets = pytest.importorskip("ipywidgets")

import aotbench
from aotbench.native.attrs import typed
from aotbench.errors import ArgumentError, CompileError, ShapeError
from aotbench.notebook import exploration, widgets
from aotbench.notebook.debounce import Debouncer

from ipython_shell import aotbench_shell  # tests/support is on pytest's pythonpath

KERNELS = Path(__file__).resolve().parents[1] / "support" / "kernels"
SCALE = KERNELS / "explore_scale.cc"


def add_reduce(axis=1, keep_dim=False):
    return aotbench.Custom(str(aotbench.examples_dir() / "add_reduce.cc") + ":CustomKernel", None, np.float32,
                           attrs={"axis": axis, "keep_dim": keep_dim})


def reference(x, y, axis, keep_dim):
    return (x + y).sum(axis=axis, keepdims=keep_dim)


@pytest.fixture
def xy(rng):
    return (rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32))


@pytest.fixture
def panel(xy):
    return add_reduce().explore(*xy, reference=reference, dynamic=[("m", "n"), ("m", "n")], debounce_ms=0,
                                budget_ms=2)


def text(widget) -> str:
    return widget.value


def test_one_control_per_attribute_and_per_named_dim(panel):
    assert set(panel.controls) == {"axis", "keep_dim"}
    assert isinstance(panel.controls["axis"], ipywidgets.IntSlider)
    assert panel.controls["axis"].description == "axis"
    assert (panel.controls["axis"].min, panel.controls["axis"].max) == (-2, 1)  # an axis of a rank-2 input
    assert isinstance(panel.controls["keep_dim"], ipywidgets.Checkbox)
    assert list(panel.dims) == ["m", "n"]  # shared by both inputs: two controls, not four
    assert [panel.dims[k].value for k in "mn"] == [4, 5]
    assert "aotb-dim-m" in panel.dims["m"]._dom_classes
    assert "aotb-explore" in panel._dom_classes


def test_first_run_shows_shape_pass_timing_and_plot(panel, xy):
    assert "(4,)" in text(panel.shape)
    assert "aotb-pass" in text(panel.stats) and "max abs error" in text(panel.stats)
    np.testing.assert_allclose(panel.last["output"], reference(*xy, 1, False), rtol=1e-5, atol=1e-5)
    assert panel.last["inputs"] is panel.examples  # unchanged shapes run on the examples
    assert "reference" in text(panel.timing) and panel.last["timing"].count >= 1
    assert panel.plot.value[:8] == b"\x89PNG\r\n\x1a\n"
    assert "run 1" in text(panel.status)


def test_attribute_change_reruns_with_new_shape_numbers_and_plot(panel, xy):
    before_plot, before_out = panel.plot.value, panel.last["output"]
    panel.controls["axis"].value = 0
    assert "(5,)" in text(panel.shape)
    np.testing.assert_allclose(panel.last["output"], reference(*xy, 0, False), rtol=1e-5, atol=1e-5)
    assert panel.last["output"].shape != before_out.shape
    assert panel.plot.value != before_plot
    assert "aotb-pass" in text(panel.stats) and "run 2" in text(panel.status)
    panel.controls["keep_dim"].value = True
    assert "(1, 5)" in text(panel.shape)
    assert panel.last["output"].shape == (1, 5) and "aotb-pass" in text(panel.stats)


def test_dim_change_draws_fresh_inputs_of_the_new_shape(panel):
    panel.dims["m"].value = 7
    assert "(7,)" in text(panel.shape)
    x, y = panel.last["inputs"]
    assert x.shape == y.shape == (7, 5) and x.dtype == np.float32
    assert not np.array_equal(x, y) and np.std(x) > 0  # fresh random values, not zeros
    np.testing.assert_allclose(panel.last["output"], reference(x, y, 1, False), rtol=1e-5, atol=1e-5)
    panel.dims["n"].value = 9
    assert panel.last["inputs"][0].shape == (7, 9) and "aotb-pass" in text(panel.stats)


def test_a_kernel_error_lands_in_the_panel_and_the_controls_keep_working(panel):
    panel.controls["axis"].value = -1  # the example kernel supports only axis 0 and 1: it returns 2
    assert "KernelError" in text(panel.error) and "aotb-fail" in text(panel.stats)
    panel.controls["axis"].value = 1
    assert text(panel.error) == "" and "aotb-pass" in text(panel.stats)


def test_after_an_error_nothing_of_the_previous_run_is_shown(panel):
    """The panel after an error shows the error alone: no plot, numbers or timings from the run before it (they
    were another setting's), and the next good run brings them back."""
    assert panel.plot.value and "max abs error" in text(panel.stats) and text(panel.timing)
    panel.controls["axis"].value = -1
    assert "KernelError" in text(panel.error)
    assert panel.plot.value == b"" and panel.plot.layout.display == "none"
    assert "max abs error" not in text(panel.stats) and "aotb-pass" not in text(panel.stats)
    assert text(panel.timing) == "" and "output" not in panel.last
    panel.controls["axis"].value = 0
    assert panel.plot.value[:8] == b"\x89PNG\r\n\x1a\n" and panel.plot.layout.display is None
    assert "aotb-pass" in text(panel.stats) and text(panel.timing) and text(panel.error) == ""


def test_contract_warnings_of_a_new_shape_are_shown_in_the_panel(rng, recwarn):
    """What the guarded first call of a new shape found (the tutorial kernel reads a workspace it never filled,
    so poison reaches its output) is shown in the panel's own warning line, not on the notebook's stderr; a
    correct kernel's panel shows none."""
    tutorial = aotbench.Custom(str(aotbench.examples_dir() / "tutorial" / "kernel.cc") + ":CustomKernel", None,
                               np.float32, attrs={"axis": 1, "keep_dim": False})
    x = rng.standard_normal((4, 5)).astype(np.float32)
    panel = tutorial.explore(x, x, reference=reference, debounce_ms=0, budget_ms=2)
    assert "ContractWarning" in text(panel.warning) and "read the rest" in text(panel.warning)
    assert "workspace 0" in panel.last["warnings"][0] and "aotb-fail" in text(panel.stats)
    assert not [w for w in recwarn if issubclass(w.category, aotbench.ContractWarning)]
    good = add_reduce().explore(x, x, reference=reference, debounce_ms=0, budget_ms=2)
    assert text(good.warning) == "" and good.last["warnings"] == []


def test_a_wrong_reference_fails_the_badge_with_the_error_size(xy):
    def off_by_a_bit(x, y):
        return (x + y).sum(axis=1) + 0.5

    panel = add_reduce().explore(*xy, reference=off_by_a_bit, debounce_ms=0, budget_ms=2)
    assert "aotb-fail" in text(panel.stats) and "0 of 4 elements within" in text(panel.stats)
    assert panel.last["agreement"].max_abs == pytest.approx(0.5, rel=1e-4)


def test_a_bad_list_literal_is_shown_and_fixing_it_recovers(rng):
    op = aotbench.Custom(f"{SCALE}:Scale", lambda s: s, np.float32,
                         attrs={"scale": 2.0, "crash_above": -1, "pads": [1, 2]})
    x = rng.standard_normal(6).astype(np.float32)
    panel = op.explore(x, reference=lambda x, scale: x * np.float32(scale), debounce_ms=0, budget_ms=2)
    assert isinstance(panel.controls["scale"], ipywidgets.FloatSlider)
    assert isinstance(panel.controls["pads"], ipywidgets.Text) and panel.controls["pads"].value == "[1, 2]"
    panel.controls["pads"].value = "[1, 2"
    assert "not a Python list literal" in text(panel.error)
    panel.controls["pads"].value = "[3]"
    assert text(panel.error) == ""
    panel.controls["scale"].value = 3.5
    np.testing.assert_allclose(panel.last["output"], x * np.float32(3.5), rtol=1e-6)
    assert "aotb-pass" in text(panel.stats)


def test_debounced_changes_run_only_the_latest_setting(xy):
    panel = add_reduce().explore(*xy, reference=reference, dynamic=[("m", "n"), ("m", "n")], debounce_ms=80,
                                 budget_ms=2)
    runs = panel.runs
    for m in (5, 6, 7, 8, 9):  # a drag: five changes faster than the debounce delay
        panel.dims["m"].value = m
    assert "(9,)" in text(panel.shape)  # the shape follows at once, before the run
    deadline = time.monotonic() + 10
    while panel.runs == runs and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    assert panel.runs == runs + 1
    assert panel.last["inputs"][0].shape == (9, 5)


def test_hot_reload_refreshes_the_open_panel(tmp_path, rng):
    src = tmp_path / "hot.cc"
    src.write_text(SCALE.read_text())
    attrs = {"scale": 2.0, "crash_above": -1}
    op = aotbench.Custom(f"{src}:Scale", lambda s: s, np.float32, attrs=attrs)
    x = rng.standard_normal(8).astype(np.float32)
    panel = op.explore(x, reference=lambda x, scale, crash_above: x * np.float32(scale), debounce_ms=0, budget_ms=2)
    assert "aotb-pass" in text(panel.stats)
    src.write_text(SCALE.read_text().replace("x[i] * scale", "x[i] * scale + 1.0f"))
    op.reload_from(aotbench.Custom(f"{src}:Scale", lambda s: s, np.float32, attrs=attrs))
    assert "reloaded" in text(panel.title)
    np.testing.assert_allclose(panel.last["output"], x * 2 + 1, rtol=1e-6)
    assert "aotb-fail" in text(panel.stats)  # the new build disagrees with the reference, and the panel says so
    src.write_text("this is not C++")
    with pytest.raises(CompileError) as info:
        aotbench.Custom(f"{src}:Scale", lambda s: s, np.float32, attrs=attrs)
    op.reload_failed(info.value)
    assert "CompileError" in text(panel.error) and "previous build" in text(panel.title)


def test_an_isolated_op_crashing_on_a_shape_leaves_the_panel_working(rng):
    op = aotbench.Custom(f"{SCALE}:Scale", lambda s: s, np.float32, attrs={"scale": 1.5, "crash_above": 10},
                         isolate=True, timeout_s=60)
    x = rng.standard_normal(6).astype(np.float32)
    panel = op.explore(x, reference=lambda x: x * np.float32(1.5), dynamic=[("n",)], debounce_ms=0, budget_ms=2)
    assert "aotb-pass" in text(panel.stats) and "isolated" in text(panel.status)
    panel.dims["n"].value = 11
    assert "KernelCrashedError" in text(panel.error) and "SIGSEGV" in text(panel.error)
    panel.dims["n"].value = 9
    assert text(panel.error) == "" and "aotb-pass" in text(panel.stats)
    assert panel.last["output"].shape == (9,)
    op.close()


def test_the_panel_displays_as_the_live_view_with_a_snapshot_in_place_of_its_repr(panel):
    """What a stored notebook keeps: where no widget renders, its text and HTML say what the panel showed."""
    from IPython.core.formatters import DisplayFormatter

    data, _ = DisplayFormatter().format(panel)
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == panel.model_id
    plain, page = data["text/plain"], data["text/html"]
    assert not plain.startswith("ExplorePanel(")
    assert plain.startswith("op.explore panel of CustomKernel [cpu]: controls for axis, keep_dim, m, n;")
    assert "Run the cell for the live panel" in plain and plain.endswith(f"when shown: {panel.summary()}")
    assert "axis <code>1</code>" in page and "m <code>4</code>" in page and "aotb-pass" in page
    assert "<img src='data:image/png;base64," in page
    panel.set(axis=-1)  # the snapshot is of the panel now: the error, no plot
    data, _ = DisplayFormatter().format(panel)
    assert "KernelError" in data["text/plain"] and "KernelError" in data["text/html"]
    assert "<img" not in data["text/html"]


def test_the_timing_line_says_faster_or_slower_than_the_reference(xy):
    """"op is 0.29x" could be read either way: the panel says which, with the ratio of the medians it shows."""
    def slow_reference(x, y, axis, keep_dim):
        time.sleep(0.002)  # far slower than the kernel on 4x5, whatever the machine is doing
        return reference(x, y, axis, keep_dim)

    panel = add_reduce().explore(*xy, reference=slow_reference, debounce_ms=0, budget_ms=5)
    op_t, ref_t = panel.last["timing"], panel.last["reference_timing"]
    words = exploration.speed_words(op_t.q1_ns, op_t.median_ns, op_t.q3_ns, ref_t.q1_ns, ref_t.median_ns,
                                    ref_t.q3_ns)
    ratio = ref_t.median_ns / op_t.median_ns
    assert words == (f"{ratio:.3g}x" if ratio < 100 else f"{ratio:.0f}x") + " faster than the reference"
    assert f"op is {words}" in text(panel.timing)
    assert not re.search(r"op is [\d.]+x<", text(panel.timing) + "<")


def test_the_title_names_the_op_as_the_notebook_binds_it(tmp_path, xy):
    """In IPython, an op bound as ``add_reduce`` whose kernel function is CustomKernel is titled by both; outside
    IPython's namespace (or bound under its own name) by ``op.name`` alone, as its repr and errors name it."""
    with aotbench_shell(tmp_path) as shell:
        shell.user_ns.update(add_reduce=add_reduce(), x=xy[0], y=xy[1], reference=reference)
        assert shell.run_cell("panel = add_reduce.explore(x, y, reference=reference, debounce_ms=0, "
                              "budget_ms=2)").success
        panel = shell.user_ns.pop("panel")
        assert "<b>add_reduce (CustomKernel)</b>" in text(panel.title)
        assert panel._snapshot_text().startswith("op.explore panel of add_reduce (CustomKernel) [cpu]:")
        shell.user_ns["CustomKernel"] = shell.user_ns["add_reduce"]
        assert exploration.panel_name(shell.user_ns["add_reduce"]) == "CustomKernel"
        del shell.user_ns["CustomKernel"]
    unbound = add_reduce().explore(*xy, reference=reference, debounce_ms=0, budget_ms=2)
    assert "<b>CustomKernel</b>" in text(unbound.title)


def test_bad_arguments_are_clear_errors(xy):
    op = add_reduce()
    with pytest.raises(ArgumentError, match="example inputs"):
        op.explore()
    with pytest.raises(ShapeError, match="one shape per input"):
        op.explore(*xy, dynamic=[("m", "n")])
    with pytest.raises(ShapeError, match="must agree"):
        op.explore(xy[0], xy[1][:3], dynamic=[("m", "n"), ("m", "n")])
    with pytest.raises(ShapeError, match="fixes axis 0 at 3"):
        op.explore(*xy, dynamic=[(3, None), ("m", None)])
    with pytest.raises(ArgumentError, match="debounce_ms"):
        op.explore(*xy, debounce_ms=-1)


def test_unnamed_dynamic_dims_get_controls_named_by_place(xy):
    panel = add_reduce().explore(*xy, reference=reference, dynamic=[(4, None), (4, None)], debounce_ms=0,
                                 budget_ms=2)
    assert list(panel.dims) == ["input 0 dim 1", "input 1 dim 1"]
    panel.dims["input 0 dim 1"].value = 3  # the kernel requires equal shapes: the mismatch is its error code 3
    assert "KernelError" in text(panel.error)


def test_controls_from_specs_are_pure_functions():
    assert isinstance(widgets.control_for_attr(typed("flag", True), 2), ipywidgets.Checkbox)
    slider = widgets.control_for_attr(typed("count", 40), 2)
    assert slider.min <= 0 and slider.max >= 80 and slider.value == 40
    text_box = widgets.control_for_attr(typed("mode", "fast"), 2)
    assert isinstance(text_box, ipywidgets.Text) and text_box.value == "fast"
    assert widgets.read_attr(typed("v", [1.5, 2.5]), ipywidgets.Text(value="[0.5]")) == [0.5]


def test_set_changes_several_controls_and_runs_once(panel):
    runs = panel.runs
    panel.set(axis=0, keep_dim=True, m=6)
    assert panel.runs == runs + 1
    assert panel.last["output"].shape == (1, 5) and panel.last["inputs"][0].shape == (6, 5)
    summary = panel.summary()
    assert "axis=0" in summary and "m=6" in summary and "output shape (1, 5)" in summary and "PASS" in summary
    with pytest.raises(ArgumentError, match="no control named bogus"):
        panel.set(bogus=1)


def test_set_goes_past_a_slider_end_and_errors_keep_the_settings(panel):
    panel.set(m=300)
    assert panel.dims["m"].value == 300 and panel.last["inputs"][0].shape == (300, 5)
    panel.set(axis=-1)
    assert panel.summary().startswith("axis=-1, keep_dim=False, m=300, n=5: KernelError")


@pytest.mark.slow
def test_an_isolated_panel_keeps_few_workers_alive_while_attributes_change(rng):
    op = aotbench.Custom(f"{SCALE}:Scale", lambda s: s, np.float32, attrs={"scale": 1.0, "crash_above": -1},
                         isolate=True, timeout_s=60)
    x = rng.standard_normal(5).astype(np.float32)
    panel = op.explore(x, reference=lambda x, scale: x * np.float32(scale), debounce_ms=0, budget_ms=1)
    derived = []
    for k in range(1, widgets.MAX_DERIVED + 5):  # scale 1.0 is the op itself, which the panel never closes
        panel.set(scale=1.0 + k / 4)
        assert "aotb-pass" in text(panel.stats), panel.summary()
        derived.append(panel._op_for(panel.attr_values()))
    alive = [d for d in derived if d.worker_pid is not None]
    assert len(alive) <= widgets.MAX_DERIVED
    assert derived[0].worker_pid is None  # the oldest setting's worker was stopped
    panel.close()
    assert all(d.worker_pid is None for d in derived if d is not op)
    op.close()


def test_debouncer_runs_once_after_a_burst_and_cancel_drops_it():
    calls = []
    debouncer = Debouncer(lambda: calls.append(time.monotonic()), delay_ms=60)
    start = time.monotonic()
    for _ in range(10):
        debouncer.trigger()
        time.sleep(0.01)
    deadline = time.monotonic() + 5
    while not calls and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.15)
    assert len(calls) == 1 and calls[0] - start >= 0.06 + 0.09  # the last trigger restarted the wait
    debouncer.trigger()
    debouncer.cancel()
    time.sleep(0.15)
    assert len(calls) == 1 and not debouncer.pending
    immediate = Debouncer(lambda: calls.append(0.0), delay_ms=0)
    immediate.trigger()
    assert len(calls) == 2  # synchronous: already ran
