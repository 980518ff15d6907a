"""Callables that travel to worker processes even when plain pickle cannot carry them (a lambda reference, a
closure building inputs): they go as cloudpickle bytes, as Dask sends functions."""

from __future__ import annotations

import pickle
from typing import Any

from ..errors import AotbenchError


class CloudCallable:
    """A callable carried as cloudpickle bytes; unpickled on its first call in the receiving process."""

    def __init__(self, payload: bytes, name: str):
        self.payload, self.name, self._fn = payload, name, None

    def __call__(self, *args: Any, **kwargs: Any):
        if self._fn is None:
            self._fn = pickle.loads(self.payload)
        return self._fn(*args, **kwargs)

    def __reduce__(self):
        return CloudCallable, (self.payload, self.name)

    def __repr__(self) -> str:
        return f"<{self.name}, carried by cloudpickle>"


def portable(value: Any, what: str) -> Any:
    """``value`` itself when plain pickle carries it, else wrapped in :class:`CloudCallable`; an AotbenchError
    naming ``what`` when neither can."""
    try:
        pickle.dumps(value)
        return value
    except AotbenchError:
        raise  # an op that refuses to travel says why itself
    except Exception as plain:  # noqa: BLE001 - pickle raises PicklingError, TypeError, AttributeError ...
        try:
            import cloudpickle
        except ImportError:
            raise AotbenchError(f"{what} cannot travel to a worker process: plain pickle cannot carry it ({plain}). "
                                "pip install cloudpickle, or use a module-level function") from plain
        try:
            return CloudCallable(cloudpickle.dumps(value), getattr(value, "__qualname__", type(value).__name__))
        except Exception as exc:
            raise AotbenchError(f"{what} cannot travel to a worker process: neither pickle nor cloudpickle can "
                                f"carry it ({exc})") from exc
