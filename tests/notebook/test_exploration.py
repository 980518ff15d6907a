"""The panel's logic without widgets (dynamic dims, shapes, random inputs, references) and the agreement verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aotbench.errors import ShapeError
from aotbench.tools import accuracy
from aotbench.notebook import exploration as ex


def arrays(rng, *shapes, dtype=np.float32):
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def test_shared_names_give_one_dim_for_every_place(rng):
    x, y, z = arrays(rng, (4, 5), (4, 5), (5,))
    dims = ex.parse_dynamic([("m", "n"), ("m", "n"), ("n",)], [x, y, z], ["x", "y", "bias"])
    assert [(d.label, d.value, d.places) for d in dims] == [("m", 4, ((0, 0), (1, 0))),
                                                          ("n", 5, ((0, 1), (1, 1), (2, 0)))]
    assert ex.concrete_shapes([x, y, z], dims, {"m": 7, "n": 2}) == [(7, 2), (7, 2), (2,)]


def test_none_gives_a_dim_named_by_its_place_and_ints_stay_fixed(rng):
    x, y = arrays(rng, (4, 5), (4, 5))
    dims = ex.parse_dynamic([(4, None), (None, 5)], [x, y], ["x1", "x2"])
    assert [d.label for d in dims] == ["x1 dim 1", "x2 dim 0"]
    assert ex.concrete_shapes([x, y], dims, {"x1 dim 1": 9}) == [(4, 9), (4, 5)]
    assert dims[0].maximum >= 64 and dims[0].maximum >= 4 * dims[0].value


@pytest.mark.parametrize("dynamic, message", [
    ([("m",)], "one shape per input"),
    ([("m", "n", "k"), ("m", "n")], "one entry per dim"),
    ([(3, "n"), ("m", "n")], "fixes axis 0 at 3"),
    ([("m", "n"), ("n", "m")], "must agree"),
    ([("m", 2.5), ("m", "n")], "not None, a name or an int"),
    ([("m", " "), ("m", "n")], "cannot be empty"),
])
def test_bad_dynamic_specs_name_the_problem(rng, dynamic, message):
    x, y = arrays(rng, (4, 5), (4, 5))
    with pytest.raises(ShapeError, match=message):
        ex.parse_dynamic(dynamic, [x, y])


def test_random_inputs_keep_dtypes_and_are_fresh(rng):
    examples = [np.zeros((2, 3), np.float64), np.zeros(4, np.int32), np.zeros(5, bool)]
    a, b, c = ex.random_inputs(examples, [(6, 3), (8,), (50,)], rng)
    assert (a.shape, a.dtype, b.shape, b.dtype, c.shape, c.dtype) == ((6, 3), np.float64, (8,), np.int32, (50,), bool)
    assert np.std(a) > 0 and len(np.unique(b)) > 1 and 0 < c.sum() < 50
    a2, *_ = ex.random_inputs(examples, [(6, 3), (8,), (50,)], rng)
    assert not np.array_equal(a, a2)


def test_references_get_the_attributes_they_name():
    attrs = {"axis": 0, "keep_dim": True, "scale": 2.0}
    assert ex.attrs_for_reference(lambda x, axis: 0, attrs) == {"axis": 0}
    assert ex.attrs_for_reference(lambda x, **kw: 0, attrs) == attrs
    assert ex.attrs_for_reference(lambda x: 0, attrs) == {}
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(ex.call_reference(lambda x, axis, keep_dim: x.sum(axis=axis, keepdims=keep_dim),
                                                    (x,), attrs), [[3.0, 5.0, 7.0]])


def test_agreement_reports_max_errors_and_counts(rng):
    ref = rng.standard_normal(100).astype(np.float32)
    out = ref.copy()
    out[7] += 0.25
    a = accuracy.agreement(out, ref)
    assert not a.ok and a.mismatched == 1 and a.total == 100
    assert a.max_abs == pytest.approx(0.25, rel=1e-3)
    assert a.max_rel == pytest.approx(0.25 / abs(ref[7]), rel=1e-3)
    assert accuracy.agreement(ref + 1e-7, ref).ok  # within float32's tolerance


def test_nan_where_a_number_is_due_is_an_infinite_error(rng):
    ref = rng.standard_normal(10)
    out = ref.copy()
    out[3] = np.nan
    a = accuracy.agreement(out, ref)
    assert math.isinf(a.max_abs) and a.mismatched == 1
    both = ref.copy()
    both[3] = np.nan
    assert accuracy.agreement(both.copy(), both).ok  # NaN where NaN is expected agrees


def test_shape_and_count_mismatches_are_problems_not_crashes(rng):
    a = accuracy.agreement(np.zeros(3), np.zeros(4))
    assert not a.ok and "has shape (3,)" in a.problem
    b = accuracy.agreement((np.zeros(3), np.zeros(3)), np.zeros(3))
    assert not b.ok and "2 output(s) where the reference has 1" in b.problem


def test_integer_results_must_match_exactly():
    assert accuracy.tolerance(np.int32) == (0.0, 0.0)
    assert not accuracy.agreement(np.array([1, 2, 4]), np.array([1, 2, 3])).ok


def _quartiles(rng, median_ns, spread):
    """(q1, median, q3) around a median, the middle half ``spread`` of it wide."""
    half = median_ns * spread / 2
    return median_ns - float(rng.uniform(0.2, 1.0)) * half, median_ns, median_ns + float(rng.uniform(0.2, 1.0)) * half


def test_speed_words_say_slower_or_faster_than_the_reference(rng):
    ref = _quartiles(rng, float(rng.uniform(1e3, 1e6)), 0.05)
    factor = float(rng.uniform(1.5, 9.0))
    slow = _quartiles(rng, ref[1] * factor, 0.05)
    assert ex.speed_words(*slow, *ref) == f"{factor:.3g}x slower than the reference"
    fast = _quartiles(rng, ref[1] / factor, 0.05)
    assert ex.speed_words(*fast, *ref) == f"{factor:.3g}x faster than the reference"
    huge = _quartiles(rng, ref[1] * 250.4, 0.05)
    assert ex.speed_words(*huge, *ref) == "250x slower than the reference"


def test_speed_words_within_noise_when_the_middle_halves_overlap(rng):
    ref = _quartiles(rng, float(rng.uniform(1e3, 1e6)), 0.4)
    close = _quartiles(rng, ref[1] * float(rng.uniform(0.97, 1.03)), 0.4)
    assert ex.speed_words(*close, *ref) == "as fast as the reference (within noise)"
    apart = (ref[2] * 1.01, ref[2] * 1.05, ref[2] * 1.1)  # just above the reference's third quartile
    assert ex.speed_words(*apart, *ref).endswith("x slower than the reference")
