"""Check mode (``op.check``, ``op.check_next_call``, ``%%aot_kernel --check``) against real kernels built by g++.

``tests/support/kernels/check_faults.cc`` holds two multi-purpose kernels whose misbehaviour is chosen by the string
attribute ``mode`` (see its header); each fault kind is one ``with_attrs(mode=...)`` on one compiled library.
The aot tutorial's kernel as published (``tutorial/kernel.cc``) and its corrected version (``add_reduce.cc``)
come from ``aotbench.examples_dir()``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench import ContractViolation, KernelError
from aotbench.errors import ArgumentError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from ipython_shell import aotbench_shell

KERNELS = Path(__file__).resolve().parents[1] / "support" / "kernels"
FAULTS = KERNELS / "check_faults.cc"
TUTORIAL = aotbench.examples_dir() / "tutorial" / "kernel.cc"
CORRECTED = aotbench.examples_dir() / "add_reduce.cc"

GRAPH_MODE = "would misbehave in MindSpore's graph mode"
WRAPPED = 18446744073709551600  # 4 * (size_t)-1 * sizeof(float), ABI.md section 5


def rand(rng, *shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def one_problem(report, needle: str) -> str:
    """The single problem sentence containing ``needle`` (fails if there is none, or several)."""
    found = [p for p in report.problems if needle in p]
    assert len(found) == 1, (needle, report.problems)
    return found[0]


def buffer(report, name: str):
    found = [b for b in report.buffers if b.name == name]
    assert len(found) == 1, (name, report.buffers)
    return found[0]


# -- fixtures: a few libraries, built once -------------------------------------------------------------------
@pytest.fixture(scope="module")
def fault():
    """The Fault kernel (float32 output), mode "ok"; ``fault.with_attrs(mode=...)`` picks the misbehaviour."""
    return aotbench.Custom(f"{FAULTS}:Fault", None, np.float32, attrs={"mode": "ok", "extra": 0, "delta": 0.0})


@pytest.fixture(scope="module")
def fault_int():
    return aotbench.Custom(f"{FAULTS}:Fault", None, np.int32, attrs={"mode": "ok", "extra": 0, "delta": 0.0})


@pytest.fixture(scope="module")
def fault_bool():
    return aotbench.Custom(f"{FAULTS}:Fault", None, np.bool_, attrs={"mode": "ok", "extra": 0, "delta": 0.0})


@pytest.fixture(scope="module")
def two():
    return aotbench.Custom(f"{FAULTS}:Two", lambda a, b: (a, a), (np.float32, np.float32), attrs={"mode": "ok"})


@pytest.fixture(scope="module")
def tutorial():
    return aotbench.Custom(f"{TUTORIAL}:CustomKernel", None, np.float32, attrs={"axis": 1, "keep_dim": False})


@pytest.fixture(scope="module")
def corrected():
    return aotbench.Custom(f"{CORRECTED}:CustomKernel", None, np.float32, attrs={"axis": 1, "keep_dim": False})


# -- the tutorial's kernel, as published, and the corrected one ------------------------------------------------
@pytest.mark.parametrize("data", ["ones", "random"])
def test_tutorial_kernel_reports_poison_leak_partial_workspace_and_mismatch(tutorial, rng, data):
    if data == "ones":
        x = y = np.ones((4, 5), np.float32)  # the tutorial's own inputs
    else:
        x, y = rand(rng, 4, 5), rand(rng, 4, 5)
    report = tutorial.check(x, y, reference=(x + y).sum(axis=1))

    assert report.ok is False
    leak = one_problem(report, "NaN or Inf")
    assert leak.startswith("output 0:") and "poison" in leak
    # bug 1 (ABI.md section 7): the Add loop counts the OUTPUT's 4 elements, so only 16 of the 80 bytes of tmp
    partial = one_problem(report, "wrote only its first")
    assert partial.startswith("workspace 0:") and "16 of 80 bytes" in partial
    assert buffer(report, "workspace 0").extent == 16
    assert buffer(report, "workspace 0").size == 80
    assert buffer(report, "output 0").nonfinite == 4
    mismatch = one_problem(report, "differ from the reference")
    assert mismatch.startswith("output 0: 4 of 4 values")
    assert report.mismatches[0]["mismatched"] == 4
    # keep_dim=False writes exactly its 4 outputs: no guard was touched
    assert buffer(report, "output 0").written_past_end == 0
    assert buffer(report, "output 0").written_before == 0


def test_tutorial_kernel_with_keep_dim_writes_64_bytes_past_its_16_byte_output(tutorial, rng):
    x, y = rand(rng, 4, 5), rand(rng, 4, 5)
    report = tutorial.with_attrs(keep_dim=True).check(x, y, reference=(x + y).sum(axis=1, keepdims=True))

    assert not report.ok
    # bug 2 (ABI.md section 7): the reduction takes its size from input 2's shape, 20 floats into a 4-float output
    past = one_problem(report, "past the end")
    assert past.startswith("output 0:")
    assert "64 bytes past the end of its 16-byte buffer" in past
    assert buffer(report, "output 0").written_past_end == 64
    assert buffer(report, "output 0").size == 16
    # and bug 1 is still there, so both bugs are named in one report
    assert "workspace 0:" in one_problem(report, "wrote only its first")


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("keep_dim", [False, True])
def test_corrected_kernel_passes_cleanly_for_every_axis_and_keep_dim(corrected, rng, axis, keep_dim):
    op = corrected.with_attrs(axis=axis, keep_dim=keep_dim)
    for shape in [(4, 5), tuple(int(d) for d in rng.integers(1, 9, size=2))]:
        x, y = rand(rng, *shape), rand(rng, *shape)
        report = op.check(x, y, reference=(x + y).sum(axis=axis, keepdims=keep_dim))
        assert report.ok is True, str(report)
        assert report.problems == []
        assert report.warnings == []
        assert all(b.unwritten == b.written_past_end == b.written_before == b.nonfinite == 0
                   for b in report.buffers)
        assert buffer(report, "workspace 0").extent == x.nbytes  # every workspace byte written, none beyond
        assert report.mismatches[0]["mismatched"] == 0


def test_report_outputs_equal_a_normal_call(corrected, fault, two, rng):
    x, y = rand(rng, 6, 3), rand(rng, 6, 3)
    report = corrected.check(x, y)
    assert report.ok
    np.testing.assert_array_equal(report.outputs, corrected(x, y))
    np.testing.assert_allclose(report.outputs, (x + y).sum(axis=1), rtol=1e-5, atol=1e-5)

    report = fault.check(x)
    assert report.ok
    np.testing.assert_array_equal(report.outputs, fault(x))

    report = two.check(x, y)
    assert report.ok and isinstance(report.outputs, tuple) and len(report.outputs) == 2
    for got, want in zip(report.outputs, two(x, y)):
        np.testing.assert_array_equal(got, want)


# -- each fault kind -----------------------------------------------------------------------------------------
def test_writing_past_the_end_reports_how_many_bytes(fault, rng):
    extra = int(rng.integers(1, 9))
    x = rand(rng, 3, 7)
    report = fault.with_attrs(mode="past_end", extra=extra).check(x, reference=2 * x)
    assert not report.ok
    msg = one_problem(report, "past the end")
    assert msg.startswith("output 0:")
    assert f"wrote {4 * extra} bytes past the end of its {x.nbytes}-byte buffer" in msg
    assert "maybe further" not in msg
    assert buffer(report, "output 0").written_past_end == 4 * extra
    assert len(report.problems) == 1  # the values themselves are right


def test_writing_before_the_start_reports_it(fault, rng):
    x = rand(rng, 5, 4)
    report = fault.with_attrs(mode="before_start").check(x, reference=2 * x)
    assert not report.ok
    msg = one_problem(report, "before the start")
    assert msg.startswith("output 0:") and "4 bytes" in msg
    assert buffer(report, "output 0").written_before == 4
    assert buffer(report, "output 0").written_past_end == 0


@pytest.mark.parametrize("shape", [(4, 5), (3, 11)])
def test_unwritten_output_elements_are_counted_with_first_indices(fault, rng, shape):
    x = rand(rng, *shape)
    report = fault.with_attrs(mode="unwritten").check(x)
    flat = np.flatnonzero(np.arange(x.size) % 3 == 1)
    expected_first = [tuple(int(v) for v in np.unravel_index(k, shape)) for k in flat[:5]]
    b = buffer(report, "output 0")
    assert b.unwritten == flat.size
    assert b.first_unwritten == expected_first
    msg = one_problem(report, "never written")
    assert msg.startswith(f"output 0: {flat.size} of {x.size} elements")
    assert str(expected_first[0]) in msg
    assert b.nonfinite == 0  # the poison of unwritten elements is not counted as a leak


@pytest.mark.parametrize("mode, factor", [("ws_floats", 4), ("ws_doubles", 8)])
def test_workspace_sized_as_element_count_names_the_factor_and_bytes(fault, rng, mode, factor):
    x = rand(rng, 4, 5)
    report = fault.with_attrs(mode=mode).check(x, reference=2 * x)
    assert not report.ok
    msg = one_problem(report, "workspace 0")
    assert f"Init asked for {x.size} bytes" in msg
    assert f"{factor}x" in msg and "bytes" in msg and "element count" in msg
    ws = buffer(report, "workspace 0")
    assert ws.size == x.size
    assert ws.extent == factor * x.size
    assert ws.written_past_end == (factor - 1) * x.size
    np.testing.assert_allclose(report.outputs, 2 * x, rtol=1e-6)  # padding kept the answer right


def test_small_workspace_overrun_is_reported(fault, rng):
    x = rand(rng, 4, 5)
    report = fault.with_attrs(mode="ws_overrun").check(x)
    assert not report.ok
    msg = one_problem(report, "workspace 0")
    assert "Init asked for 80 bytes" in msg and "up to byte 84" in msg
    ws = buffer(report, "workspace 0")
    assert (ws.extent, ws.written_past_end) == (84, 4)


def test_small_workspace_overrun_has_no_factor_hint(fault, rng):
    x = rand(rng, 4, 5)
    msg = one_problem(fault.with_attrs(mode="ws_overrun").check(x), "workspace 0")
    assert "element count" not in msg
    assert "2x that" not in msg


def test_reading_unwritten_workspace_leaks_poison_as_nan(fault, rng):
    x = rand(rng, 4, 6)
    report = fault.with_attrs(mode="ws_poison").check(x)
    assert not report.ok
    out = buffer(report, "output 0")
    assert out.unwritten == 0
    assert out.nonfinite == x.size - x.size // 2
    assert np.isnan(report.outputs.reshape(-1)[x.size // 2:]).all()
    assert np.array_equal(report.outputs.reshape(-1)[:x.size // 2], 2 * x.reshape(-1)[:x.size // 2])
    assert "output 0:" in one_problem(report, "NaN or Inf")
    msg = one_problem(report, "wrote only its first")
    assert msg.startswith("workspace 0:") and f"first {x.nbytes // 2} of {x.nbytes} bytes" in msg


@pytest.mark.parametrize("which", ["int", "bool"])
def test_unwritten_integer_and_bool_outputs_are_detected(fault_int, fault_bool, rng, which):
    op = fault_int if which == "int" else fault_bool
    x = rand(rng, 4, 5)
    good = op.check(x)
    assert good.ok, str(good)
    assert good.outputs.dtype == (np.int32 if which == "int" else np.bool_)
    expected = (10.0 * x).astype(np.int32) if which == "int" else x > 0
    np.testing.assert_array_equal(good.outputs, expected)

    bad = op.with_attrs(mode="unwritten").check(x)
    assert not bad.ok
    b = buffer(bad, "output 0")
    assert b.unwritten == 7 and b.first_unwritten[:2] == [(0, 1), (0, 4)]
    assert "output 0: 7 of 20 elements were never written" in one_problem(bad, "never written")


def test_mismatch_reports_count_max_abs_error_and_first_indices(fault, rng):
    x = rand(rng, 6, 5)
    report = fault.with_attrs(mode="mismatch", delta=1.5).check(x, reference=2 * x)
    assert not report.ok
    entry = report.mismatches[0]
    flat = np.flatnonzero(np.arange(x.size) % 4 == 0)
    assert entry["output"] == 0
    assert entry["mismatched"] == flat.size
    assert entry["max_abs_error"] == pytest.approx(1.5, abs=1e-5)
    assert entry["first"] == [tuple(int(v) for v in np.unravel_index(k, x.shape)) for k in flat[:5]]
    msg = one_problem(report, "differ from the reference")
    assert msg.startswith(f"output 0: {flat.size} of {x.size} values") and "max abs error 1.5" in msg
    assert buffer(report, "output 0").unwritten == 0


def test_reference_can_be_a_function_of_the_inputs(fault, rng):
    x = rand(rng, 3, 4)
    assert fault.check(x, reference=lambda a: 2 * a).ok
    bad = fault.with_attrs(mode="mismatch", delta=0.5).check(x, reference=lambda a: 2 * a)
    assert bad.mismatches[0]["mismatched"] == 3


def test_mismatch_of_unwritten_values_does_not_claim_zero_error(fault, rng):
    x = rand(rng, 4, 5)
    report = fault.with_attrs(mode="unwritten").check(x, reference=2 * x)
    entry = report.mismatches[0]
    assert entry["mismatched"] == 7
    assert entry["max_abs_error"] != 0.0  # NaN counts as non-zero here
    assert "max abs error 0," not in one_problem(report, "differ from the reference")


def test_shape_mismatch_with_the_reference_is_a_problem(fault, rng):
    x = rand(rng, 4, 5)
    report = fault.check(x, reference=(2 * x).reshape(-1))
    assert not report.ok
    msg = one_problem(report, "shape")
    assert msg.startswith("output 0:") and "(4, 5)" in msg and "(20,)" in msg
    assert report.mismatches == []


def test_reference_with_the_wrong_number_of_outputs_is_a_problem(two, rng):
    x, y = rand(rng, 3, 3), rand(rng, 3, 3)
    report = two.check(x, y, reference=(x + y,))
    assert not report.ok
    assert "1 outputs" in one_problem(report, "reference gives")


def test_list_reference_for_a_single_output_op(fault, rng):
    x = rand(rng, 5)
    report = fault.check(x, reference=[float(v) for v in 2 * x])
    assert report.ok, str(report)


def test_rtol_and_atol_are_honoured(fault, rng):
    x = rand(rng, 4, 5) + np.float32(3.0)  # values near 6, away from zero
    op = fault.with_attrs(mode="mismatch", delta=1e-3)
    loose = op.check(x, reference=2 * x, rtol=1e-2, atol=1e-2)
    assert loose.ok, str(loose)
    assert loose.mismatches[0]["mismatched"] == 0
    tight = op.check(x, reference=2 * x, rtol=1e-6, atol=1e-6)
    assert not tight.ok
    assert tight.mismatches[0]["mismatched"] == 5
    default = op.check(x, reference=2 * x)  # float32 default tolerance 1e-5
    assert default.mismatches[0]["mismatched"] == 5
    # atol alone is enough when rtol is zero
    assert op.check(x, reference=2 * x, rtol=0.0, atol=2e-3).ok
    assert not op.check(x, reference=2 * x, rtol=0.0, atol=1e-4).ok


def test_multi_output_op_checks_each_output_by_name(two, rng):
    x, y = rand(rng, 4, 5), rand(rng, 4, 5)
    good = two.check(x, y, reference=(x + y, x * y))
    assert good.ok, str(good)
    assert [b.name for b in good.buffers] == ["output 0", "output 1"]
    assert [m["output"] for m in good.mismatches] == [0, 1]

    bad = two.with_attrs(mode="skip1").check(x, y, reference=(x + y, x * y))
    assert not bad.ok
    assert buffer(bad, "output 0").unwritten == 0
    assert buffer(bad, "output 1").unwritten == 1
    assert buffer(bad, "output 1").first_unwritten == [(0, 0)]
    assert one_problem(bad, "never written").startswith("output 1: 1 of 20")
    assert not any(p.startswith("output 0") for p in bad.problems)
    assert [m["mismatched"] for m in bad.mismatches] == [0, 1]

    wrong0 = two.check(x, y, reference=(x - y, x * y))
    assert [p.split(":")[0] for p in wrong0.problems] == ["output 0"]


# -- dynamic=: Init as MindSpore's graph mode calls it -------------------------------------------------------
def test_tutorial_init_with_minus_one_dims_warns(tutorial, rng):
    x, y = rand(rng, 4, 5), rand(rng, 4, 5)
    report = tutorial.check(x, y, dynamic=[(4, None), (4, None)])
    assert len(report.warnings) == 1
    w = report.warnings[0]
    assert GRAPH_MODE in w and str(WRAPPED) in w and "workspace 0" in w
    assert float(w.split(" asks for ")[1].split()[0]) == pytest.approx(1.8e19, rel=0.03)
    assert tutorial.check(x, y).warnings == []  # no dynamic=, no graph-mode pass


def test_corrected_kernel_also_computes_its_workspace_from_minus_one_dims(corrected, rng):
    # add_reduce.cc fixes the two section-7 bugs but its Init still multiplies the dims as size_t: with -1 dims it
    # asks for the same wrapped-around size, so the graph-mode pass warns about it too.
    x, y = rand(rng, 4, 5), rand(rng, 4, 5)
    report = corrected.check(x, y, reference=(x + y).sum(axis=1), dynamic=[(4, None), (4, "n")])
    assert report.problems == [] and report.ok  # the warning is not a problem
    assert len(report.warnings) == 1
    assert GRAPH_MODE in report.warnings[0] and str(WRAPPED) in report.warnings[0]


def test_init_that_guards_against_minus_one_gives_no_warning(fault, rng):
    x = rand(rng, 4, 5)
    guarded = fault.with_attrs(mode="ws_overrun")  # a workspace for concrete shapes, none for -1 dims
    assert guarded.check(x, dynamic=[(4, None)]).warnings == []
    assert guarded.check(x, dynamic=[(None, None)]).warnings == []
    unguarded = fault.with_attrs(mode="ws_unguarded")  # the same Init without the guard
    report = unguarded.check(x, dynamic=[(4, None)])
    assert report.ok
    assert len(report.warnings) == 1 and GRAPH_MODE in report.warnings[0] and str(WRAPPED) in report.warnings[0]


def test_dynamic_needs_one_shape_per_input(tutorial, rng):
    x, y = rand(rng, 4, 5), rand(rng, 4, 5)
    with pytest.raises(ArgumentError, match="2 inputs"):
        tutorial.check(x, y, dynamic=[(4, None)])


# -- errors and display -------------------------------------------------------------------------------------
def test_kernel_error_in_check_mode_raises_kernel_error(fault, rng):
    x = rand(rng, 3, 3)
    op = fault.with_attrs(mode="status")
    with pytest.raises(KernelError, match="returned 7"):
        op.check(x)
    op.check_next_call = True
    with pytest.raises(KernelError, match="returned 7"):
        op(x)


def test_report_str_repr_and_html_mention_the_problems(fault, rng):
    x = rand(rng, 4, 5)
    bad = fault.with_attrs(mode="unwritten").check(x)
    text = str(bad)
    assert text.startswith("check found 1 problem(s)")
    assert "7 of 20 elements were never written" in text
    assert repr(bad) == text
    page = bad._repr_html_()
    assert "7 of 20 elements were never written" in page and "<li>" in page and "1 problem(s)" in page

    good = fault.check(x)
    assert str(good) == "check passed" and "check passed" in good._repr_html_()

    warned = fault.with_attrs(mode="ws_unguarded").check(x, dynamic=[(4, None)])
    assert GRAPH_MODE in str(warned) and "warning" in warned._repr_html_()


def test_check_next_call_on_an_op_already_called_checks_the_next_call_only(fault, rng):
    x = rand(rng, 4, 5)
    # an element-count workspace: harmless in a normal call (aotbench pads workspaces), caught when checked.
    # (Never call an out-of-bounds mode unchecked: it would corrupt this process's heap.)
    op = fault.with_attrs(mode="ws_floats")
    np.testing.assert_array_equal(op(x), 2 * x)  # a normal call caches the plan and raises nothing
    assert op.check_next_call is False
    op.check_next_call = True
    with pytest.raises(ContractViolation) as info:
        op(x)
    assert "4x" in str(info.value) and "workspace 0" in str(info.value)
    assert info.value.report.problems and not info.value.report.ok
    assert op.check_next_call is False
    np.testing.assert_array_equal(op(x), 2 * x)  # unchecked again

    good = fault.with_attrs(mode="ok")
    good.check_next_call = True
    np.testing.assert_array_equal(good(x), 2 * x)  # a correct kernel's checked call returns its outputs
    assert good.check_next_call is False


# -- %%aot_kernel --check through IPython's real shell -------------------------------------------------------
@pytest.fixture(scope="module")
def ip(tmp_path_factory):
    with aotbench_shell(tmp_path_factory.mktemp("check-notebook")) as shell:
        yield shell


def test_magic_check_raises_contract_violation_on_the_first_call_only(ip, rng):
    # ws_floats overruns its (padded) workspace 4x: caught by the check, harmless in the unchecked calls
    line = ("cpu --check --func Fault --name check_bad --attr mode='ws_floats' --attr extra=0 --attr delta=0.0 "
            "--out-dtype np.float32")
    op = ip.run_cell_magic("aot_kernel", line, FAULTS.read_text())
    assert ip.user_ns["check_bad"] is op
    assert op.check_next_call is True
    x = rand(rng, 4, 5)
    with pytest.raises(aotbench.ContractViolation) as info:
        op(x)
    assert info.value.report.problems
    assert "Init asked for 20 bytes" in str(info.value) and "4x" in str(info.value)
    assert op.check_next_call is False
    np.testing.assert_array_equal(op(x), 2 * x)  # the second call runs normally

    # the same through the shell's own cell execution: the error reaches the user
    ip.user_ns["x_check"] = x
    op.check_next_call = True
    result = ip.run_cell("check_bad(x_check)")
    assert isinstance(result.error_in_exec, aotbench.ContractViolation)


def test_magic_check_on_a_correct_kernel_returns_the_right_numbers(ip, rng):
    op = ip.run_cell_magic("aot_kernel", "cpu --check --attr axis=1 --attr keep_dim=False --name check_good",
                           CORRECTED.read_text())
    assert op.check_next_call is True
    x, y = rand(rng, 4, 5), rand(rng, 4, 5)
    np.testing.assert_allclose(op(x, y), (x + y).sum(axis=1), rtol=1e-5, atol=1e-5)
    assert op.check_next_call is False
    np.testing.assert_allclose(op(x, y), (x + y).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_magic_check_catches_the_tutorial_kernel(ip, rng):
    op = ip.run_cell_magic("aot_kernel", "cpu --check --attr axis=1 --attr keep_dim=True --name check_tut",
                           TUTORIAL.read_text())
    x, y = rand(rng, 4, 5), rand(rng, 4, 5)
    with pytest.raises(ContractViolation) as info:
        op(x, y)
    text = str(info.value)
    assert "64 bytes past the end" in text and "workspace 0" in text
    assert info.value.report.buffers[0].written_past_end == 64


def test_magic_without_check_does_not_check(ip, rng):
    op = ip.run_cell_magic("aot_kernel", "cpu --func Fault --name check_off --attr mode='ws_floats' --attr extra=0 "
                           "--attr delta=0.0 --out-dtype np.float32", FAULTS.read_text())
    assert op.check_next_call is False
    x = rand(rng, 4, 5)
    np.testing.assert_array_equal(op(x), 2 * x)
