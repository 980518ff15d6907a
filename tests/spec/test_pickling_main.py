"""A rule defined in the program's ``__main__`` (a script, a notebook cell) travels by value: plain pickle would
carry only its name, which the worker's own ``__main__`` does not have."""

import pickle

import aotbench
from aotbench.spec.pickling import CloudCallable, portable


def _shape_rule(shapes):
    return shapes[0]


class _Rules:
    def same(self, shapes):
        return shapes[0]


def test_a_main_function_travels_by_value():
    def rule(shapes):
        return shapes[0]
    rule.__module__ = "__main__"
    carried = portable(rule, "out_shape")
    assert isinstance(carried, CloudCallable)
    assert pickle.loads(pickle.dumps(carried)).load()([(3, 5)]) == (3, 5)


def test_a_main_bound_method_travels_by_value():
    _Rules.__module__ = "__main__"
    try:
        carried = portable(_Rules().same, "out_shape")
    finally:
        _Rules.__module__ = __name__
    assert isinstance(carried, CloudCallable)


def test_a_module_function_still_travels_by_name():
    assert portable(_shape_rule, "out_shape") is _shape_rule


def test_ops_pickled_by_earlier_versions_find_the_travel_module():
    import sys
    assert sys.modules["aotbench.travel"] is aotbench.op.travel
