"""``mindspore.context``: the execution mode and the device target, as ``set_context`` / ``set_device`` set them.

Only ``mode`` and ``device_target`` change what the stand-in does: the mode decides which of MindSpore's
dynamic-shape behaviours :class:`~aotbench.DynamicShapeWarning` describes, and the target picks a ``Custom``'s
registration when it is given a list of them (an op's own target is its registration's, else its source's kind:
``.cu`` is gpu). Other settings are recorded and read back by ``get_context``.
"""

from __future__ import annotations

from typing import Any

from ..errors import ArgumentTypeError, ArgumentValueError
from .missing import missing, module_getattr

GRAPH_MODE = 0
PYNATIVE_MODE = 1
TARGETS = ("CPU", "GPU")

_settings: dict[str, Any] = {"mode": PYNATIVE_MODE, "device_target": "CPU", "device_id": 0}


def _check_target(target: object) -> str:
    if not isinstance(target, str):
        raise ArgumentTypeError(f"device_target must be 'CPU' or 'GPU', got {target!r}")
    if target == "Ascend":
        raise missing("device_target='Ascend'")
    if target not in TARGETS:
        raise ArgumentValueError(f"device_target={target!r}: use 'CPU' or 'GPU'")
    return target


def set_context(**kwargs: Any) -> None:
    """MindSpore's ``set_context``: ``mode=GRAPH_MODE|PYNATIVE_MODE``, ``device_target='CPU'|'GPU'``, ..."""
    if "mode" in kwargs and kwargs["mode"] not in (GRAPH_MODE, PYNATIVE_MODE):
        raise ArgumentValueError(
            f"mode={kwargs['mode']!r}: use mindspore.GRAPH_MODE (0) or mindspore.PYNATIVE_MODE (1)")
    if "device_target" in kwargs:
        _check_target(kwargs["device_target"])
    _settings.update(kwargs)


def get_context(key: str) -> Any:
    if key not in _settings:
        raise ArgumentValueError(f"get_context({key!r}): the stand-in knows only what set_context set: "
                                 f"{', '.join(sorted(_settings))}")
    return _settings[key]


def set_device(device_target: str, device_id: int | None = None) -> None:
    """MindSpore's ``set_device``: the target (and device number) ops run on."""
    _settings["device_target"] = _check_target(device_target)
    if device_id is not None:
        _settings["device_id"] = int(device_id)


def mode() -> int:
    return _settings["mode"]


def device_target() -> str:
    return _settings["device_target"]


__getattr__ = module_getattr("mindspore.context")
