"""Callables that travel to worker processes even when plain pickle cannot carry them (a lambda reference, a
closure building inputs): they go as cloudpickle bytes, as Dask sends functions.

This is the one way a recipe's callables leave the process: :func:`portable_spec` readies an op's recipe for a
pickled op (a parcel), an isolated op's worker and compute-sanitizer's child alike; the receiver needs nothing
of it, since a :class:`CloudCallable` unpickles itself on its first call.
"""

from __future__ import annotations

import pickle
from dataclasses import replace
from typing import Any

from ..errors import TravelError
from .spec import OpSpec

RULES = ("out_shape", "out_dtype")  # the recipe's fields that may hold the user's functions


class CloudCallable:
    """A callable carried as cloudpickle bytes; unpickled on its first call in the receiving process."""

    def __init__(self, payload: bytes, name: str):
        self.payload, self.name, self._fn = payload, name, None

    def __call__(self, *args: Any, **kwargs: Any):
        return self.load()(*args, **kwargs)

    def __reduce__(self):
        return CloudCallable, (self.payload, self.name)

    def __repr__(self) -> str:
        return f"<{self.name}, carried by cloudpickle>"

    @property
    def __name__(self) -> str:  # what describes a rule (rules.describe_rule): the function's own name
        return self.name.rpartition(".")[2]

    def load(self) -> Any:
        """The callable itself, unpickled here."""
        if self._fn is None:
            self._fn = pickle.loads(self.payload)
        return self._fn


def _defined_in_main(value: Any) -> bool:
    """Whether ``value`` (a function, a bound method, a callable object) comes from the program's ``__main__``
    (a script, a notebook cell), which plain pickle carries by name only."""
    owner = getattr(value, "__self__", None)
    for thing in (value, owner, type(value), type(owner) if owner is not None else None):
        if thing is not None and getattr(thing, "__module__", None) == "__main__":
            return True
    return False


def portable(value: Any, what: str) -> Any:
    """``value`` itself when plain pickle carries it, else wrapped in :class:`CloudCallable`; a TravelError
    naming ``what`` when neither can."""
    try:
        if _defined_in_main(value):  # plain pickle would name it, and the other process's __main__ is not ours
            raise pickle.PicklingError(f"{value!r} is defined in __main__")
        pickle.dumps(value)
        return value
    except TravelError:
        raise  # an op that refuses to travel says why itself
    except Exception as plain:  # noqa: BLE001 - pickle raises PicklingError, TypeError, AttributeError ...
        try:
            import cloudpickle
        except ImportError:
            raise TravelError(f"{what} cannot travel to a worker process: plain pickle cannot carry it ({plain}). "
                                "pip install cloudpickle, or use a module-level function") from plain
        try:
            return CloudCallable(cloudpickle.dumps(value), getattr(value, "__qualname__", type(value).__name__))
        except Exception as exc:
            raise TravelError(f"{what} cannot travel to a worker process: neither pickle nor cloudpickle can "
                                f"carry it ({exc})") from exc


def portable_spec(spec: OpSpec, what: str) -> OpSpec:
    """``spec`` ready to be pickled into another process: each output rule plain pickle cannot carry (a lambda
    ``out_shape``) becomes a :class:`CloudCallable`, which works there as the rule did here. A TravelError
    naming ``what`` when the recipe still cannot travel."""
    carried = {name: portable(rule, f"{what} ({name})") for name in RULES
               if callable(rule := getattr(spec, name)) and not isinstance(rule, type)}
    changed = {name: rule for name, rule in carried.items() if rule is not getattr(spec, name)}
    if changed:
        spec = replace(spec, **changed)
    try:
        pickle.dumps(spec)
    except Exception as exc:  # noqa: BLE001 - whatever stops pickling (a local class in the recipe ...)
        raise TravelError(f"{what} cannot travel to another process: plain pickle cannot carry it ({exc}). "
                            "Give its rules and values as module-level functions and plain data") from exc
    return spec


def restored_spec(spec: OpSpec) -> OpSpec:
    """A carried recipe with its rules unpickled back into the functions they were (what the user gave)."""
    loaded = {name: rule.load() for name in RULES if isinstance(rule := getattr(spec, name), CloudCallable)}
    return replace(spec, **loaded) if loaded else spec
