"""The build record: what one published library was built from and how, as the JSON file beside it says.

:class:`Manifest` is parsed and checked once (:meth:`Manifest.read`; a damaged or partial file is ``None``, so a
cache lookup treats it as a miss) and written from one place (:meth:`Manifest.write`). It also answers the one
question every later user of a build asks: which of the files it was built from changed since
(:meth:`Manifest.stale_files`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import cache, toolchain
from .hostflags import Resolution

_PROBE = "--pre-include"  # nvcc's launch-error probe, pre-included by aotbench before the user's flags


@dataclass(frozen=True)
class Dependency:
    """A file the compiler read for the build (from its dependency output), and its sha256 then."""

    path: str
    sha256: str


@dataclass(frozen=True, eq=False)
class Manifest:
    """One build's record. The first six fields are those a cache hit needs (a file without any of them, or with
    one of the wrong type, is no record); the others are informative and default when absent."""

    source: str  # the kernel source's absolute path
    argv: tuple[str, ...]  # the documented command, writing the published library
    log: str  # the compiler's output
    artifact_sha256: str  # the library's sha256 (a truncated or replaced library is not this build)
    build_time_s: float
    dependencies: tuple[Dependency, ...]  # every file included (not the source itself)
    key: str = ""
    base_key: str = ""  # the cache key before the includes were known (names the index and the lock)
    source_sha256: str = ""
    argv_run: tuple[str, ...] = ()  # what actually ran (into tmp/, with the dependency output flags)
    compiler: str = ""  # the compiler's identity (toolchain.compiler_identity)
    aotbench_version: str = ""
    header_version: int | None = None
    created: float | None = None  # seconds since the epoch
    native: Resolution | None = None  # what -march=native and the like meant on the building machine
    arch_reason: str | None = None  # a CUDA build: its architectures, in words (then the next two are recorded)
    resource_usage: tuple[dict, ...] = ()  # ptxas's per-kernel report (nvcc.resource_usage)
    notes: tuple[str, ...] = ()  # remarks about the CUDA source (nvcc.stream_notes)

    @classmethod
    def read(cls, path: Path) -> Manifest | None:
        """The record in the JSON file ``path``; None when the file is missing, unreadable, or not a whole record."""
        data = cache.read_json(Path(path))
        return None if data is None else cls.from_json(data)

    @classmethod
    def from_json(cls, data: Any) -> Manifest | None:
        """The record a decoded JSON object holds; None when a needed field is missing or any field is mistyped."""
        if not isinstance(data, dict):
            return None
        try:
            return cls(**{name: parse(data[name]) for name, parse in _REQUIRED.items()},
                       **{name: parse(data[name]) for name, parse in _OPTIONAL.items() if name in data})
        except (KeyError, TypeError, ValueError):
            return None

    def to_json(self) -> dict:
        """The record as written (lists for tuples, the CUDA fields only for a CUDA build)."""
        data = {"key": self.key, "base_key": self.base_key, "source": self.source,
                "source_sha256": self.source_sha256, "argv": list(self.argv), "argv_run": list(self.argv_run),
                "compiler": self.compiler, "aotbench_version": self.aotbench_version,
                "header_version": self.header_version, "log": self.log, "build_time_s": self.build_time_s,
                "created": self.created, "artifact_sha256": self.artifact_sha256,
                "dependencies": [{"path": d.path, "sha256": d.sha256} for d in self.dependencies]}
        if self.native is not None:
            data["native"] = self.native.manifest()
        if self.arch_reason is not None:
            data["arch_reason"] = self.arch_reason
            data["resource_usage"] = [dict(r) for r in self.resource_usage]
            data["notes"] = list(self.notes)
        return data

    def write(self, path: Path) -> None:
        """Write the record to ``path`` atomically (readers see the old file or the whole new one)."""
        cache.write_atomic(Path(path), json.dumps(self.to_json(), indent=1).encode())

    @property
    def user_flags(self) -> tuple[str, ...]:
        """The flags after the source in the command: the user's (a CUDA build's pre-included probe is not)."""
        argv = list(self.argv)
        flags = argv[argv.index(self.source) + 1:] if self.source in argv else []
        return tuple(flags[2:] if flags[:1] == [_PROBE] else flags)

    def own_headers(self, cache_root: Path | None = None) -> tuple[str, ...]:
        """The user's own included files: found beside the source or in a folder the flags' -I options name (not
        aotbench's header, not the system's, nothing under ``cache_root``, where a precompiled header lives)."""
        paths = [d.path for d in self.dependencies]
        return tuple(toolchain.own_headers(Path(self.source), self.user_flags, paths, cache_root))

    def built_bytes(self, path: str) -> bytes | None:
        """The file's bytes now, when they are exactly those this build read (``path`` is the source or one of
        the dependencies); None when it is gone, unreadable, changed, or not a file of this build."""
        recorded = self.source_sha256 if path == self.source else \
            next((d.sha256 for d in self.dependencies if d.path == path), "")
        if not recorded:
            return None
        try:
            data = Path(path).read_bytes()
        except OSError:
            return None
        return data if hashlib.sha256(data).hexdigest() == recorded else None

    def stale_files(self, headers: Iterable[str] = ()) -> tuple[str, ...]:
        """Of the source and ``headers`` (paths among the dependencies), those that changed or are gone since the
        build, source first: anything that reads them now would see other code than the library holds."""
        return tuple(p for p in dict.fromkeys((self.source, *headers)) if self.built_bytes(p) is None)

    # Read access by the JSON's names, for callers that still treat the record as the dict it was read from.
    def __getitem__(self, name: str) -> Any:
        return self.to_json()[name]

    def __contains__(self, name: object) -> bool:
        return name in self.to_json()

    def get(self, name: str, default: Any = None) -> Any:
        return self.to_json().get(name, default)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Manifest):
            return self.to_json() == other.to_json()
        if isinstance(other, Mapping):
            return self.to_json() == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # compared by content, like the dict it is written as


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(value)
    return value


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise TypeError(value)
    return tuple(map(_string, value))


def _argv(value: Any) -> tuple[str, ...]:
    argv = _strings(value)
    if not argv:
        raise ValueError("an empty command")
    return argv


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value < math.inf):
        raise TypeError(value)
    return float(value)


def _dependency(value: Any) -> Dependency:
    if not isinstance(value, dict):
        raise TypeError(value)
    return Dependency(_string(value["path"]), _string(value["sha256"]))


def _dependencies(value: Any) -> tuple[Dependency, ...]:
    if not isinstance(value, list):
        raise TypeError(value)
    return tuple(map(_dependency, value))


def _version(value: Any) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(value)
    return value


def _time(value: Any) -> float | None:
    return None if value is None else _seconds(value)


def _native(value: Any) -> Resolution:
    if not isinstance(value, dict):
        raise TypeError(value)
    return Resolution(_strings(value["flags"]), _string(value["resolved"]), _string(value["method"]))


def _reports(value: Any) -> tuple[dict, ...]:
    if not isinstance(value, list) or not all(isinstance(r, dict) for r in value):
        raise TypeError(value)
    return tuple(value)


_REQUIRED = {"source": _string, "argv": _argv, "log": _string, "artifact_sha256": _string,
             "build_time_s": _seconds, "dependencies": _dependencies}
_OPTIONAL = {"key": _string, "base_key": _string, "source_sha256": _string, "argv_run": _strings,
             "compiler": _string, "aotbench_version": _string, "header_version": _version, "created": _time,
             "native": _native, "arch_reason": _string, "resource_usage": _reports, "notes": _strings}
