"""Ops that travel: what an op pickles as, so that it can be rebuilt in another process or on another machine.

An op built from source pickles as a :class:`Parcel`: its recipe (the :class:`~aotbench.spec.spec.OpSpec`) and the
bytes of its source and of the user's own headers it included (not the system's, not aotbench's), each checked
against the hashes its build recorded. Unpickling gives a :class:`TravellingOp` and does nothing else: no
compiler, no write. Its first use builds the op in the receiving process, into that process's cache: from the
original paths when they still hold the very same files (on the same machine: a cache hit), else from the files
the parcel carries, written into ``<cache>/travel/<digest>/``. Callables in the recipe that plain pickle cannot
carry (a lambda ``out_shape``) travel as cloudpickle bytes (:func:`~aotbench.spec.pickling.portable_spec`); without
cloudpickle the error names them. A file changed since the build refuses to travel (``SourceChangedError``).
A prebuilt library travels as its path (there is no source to carry), and loads on first use too.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..build import cache, toolchain
from ..build.manifest import Manifest
from ..spec.spec import OpSpec
from ..errors import SourceChangedError, TravelError
from ..spec.pickling import portable_spec, restored_spec

_RECIPE = "this op's recipe (its out_shape or out_dtype rule)"
_REBUILD = "Build the op again (re-run the cell) first."


@dataclass(frozen=True)
class Parcel:
    """An op's recipe and the files its build read that the receiver may not have."""

    spec: OpSpec  # rules plain pickle cannot carry are cloudpickled (portable_spec); bytes from an earlier aotbench
    source: str  # the source's path where the op was made
    source_bytes: bytes
    headers: tuple[tuple[str, bytes], ...]  # (path where the op was made, bytes)
    include_dirs: tuple[str, ...] = ()  # where the build searched for them: the source's folder, the -I folders


def reduce_op(op: Any) -> tuple:
    """``Op.__reduce__``: a parcel for an op built from source, the recipe alone (its library's path) for a
    prebuilt library; either unpickles into a :class:`TravellingOp`."""
    if op.artifact is None or op.source_path is None:
        return TravellingOp, (Parcel(portable_spec(op.spec, _RECIPE), "", b"", ()),)
    return TravellingOp, (pack(op),)


def pack(op: Any) -> Parcel:
    """The parcel an op built from source pickles as (raises TravelError when its files cannot be vouched for).

    The headers carried are those the build found in the source's folder or in a folder its include flags name
    (the user's own); anything else (system headers, a header named by an absolute path) must exist where the op
    is built again. Relative paths in the recipe are made absolute here, where they mean something."""
    artifact, source = op.artifact, Path(op.source_path).absolute()
    record = artifact.manifest  # held since the build; a pruned cache's op still refuses, as it always did
    if record is None or not record.source_sha256 or not artifact.manifest_path.is_file():
        raise TravelError(f"{op.name} cannot travel: its build record ({artifact.manifest_path}) is gone (the "
                            "cache was pruned), so its files cannot be vouched for. Build the op again, then "
                            "pickle it.")
    flags = _absolute_includes(tuple(op.spec.flags))
    if any(f.startswith(("-include", "--include", "-imacros", "--imacros")) for f in flags):
        raise TravelError(f"{op.name} cannot travel: its flags pre-include a file (-include/-imacros), which "
                            "would not be carried. #include it from the source instead.")
    dirs = tuple(d for d in toolchain.user_include_dirs(source, flags) if d != str(toolchain.include_dir()))
    source_bytes = _source_bytes(op, record, source)
    headers = []
    for path in record.own_headers(artifact.path.parent):  # the headers Artifact.changed_files checks
        data = record.built_bytes(path)  # read once: what is checked is what is carried
        if data is None:
            raise SourceChangedError(f"{op.name} cannot travel: its header {path} changed since the op was built "
                                     f"(or cannot be read now). {_REBUILD}", name=op.name, path=path)
        headers.append((path, data))
    name = op.spec.func.rpartition(":")[2]
    spec = replace(op.spec, func=f"{source}:{name}", flags=flags)
    return Parcel(portable_spec(spec, _RECIPE), str(source), source_bytes, tuple(headers), dirs)


def _source_bytes(op: Any, record: Manifest, source: Path) -> bytes:
    """The exact bytes the op was built from: the file if it is unchanged, else the text the op keeps (the file
    may be gone: a cell's, or one deleted since)."""
    data = record.built_bytes(record.source)
    if data is not None:
        return data
    kept = op.artifact.source.encode("utf-8")
    if hashlib.sha256(kept).hexdigest() == record.source_sha256:
        return kept
    raise SourceChangedError(f"{op.name} cannot travel: its source {source} changed since the op was built (or is "
                             f"gone, and was not UTF-8). {_REBUILD}", name=op.name, path=str(source))


class TravellingOp:
    """An op that arrived pickled: it builds on first use (a call, or any attribute of an op) in this process,
    then behaves as that op. ``materialize()`` builds it now and returns the op."""

    def __init__(self, parcel: Parcel):
        self._parcel = parcel
        self._op = None
        self._lock = threading.Lock()

    def materialize(self):
        with self._lock:
            if self._op is None:
                self._op = _build(self._parcel)
            return self._op

    def __call__(self, *args: Any):
        return (self._op or self.materialize())(*args)

    def __getattr__(self, name: str):
        # Probes (IPython's _repr_*_, inspect's _partialmethod, numpy's and Dask's dunders) must not build it.
        if name.startswith("_") and (self.__dict__.get("_op") is None or name.startswith("__")):
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r} before its first use")
        return getattr(self.materialize(), name)

    def __reduce__(self):
        return TravellingOp, (self._parcel,)

    def __repr__(self) -> str:
        spec = self._spec()
        state = "built" if self._op is not None else "not built yet: its first use builds it here"
        return f"<aotbench.TravellingOp {spec.func.rpartition(':')[2]} [{spec.target}], {state}>"

    def _spec(self) -> OpSpec:
        return _recipe(self._parcel)


def _build(parcel: Parcel):
    """The op, built in this process: from the original files when they are still the same, else unpacked."""
    from .custom import _from_spec  # the constructor, the layer above this one's imports

    spec = restored_spec(_recipe(parcel))
    if not parcel.source or _still_there(parcel):  # a prebuilt library, or the very same files: as it was made
        return _from_spec(spec)
    root = cache.prepare(cache.default_cache_dir())
    folder, mapping = _unpack(parcel, root)
    name = spec.func.rpartition(":")[2]
    source = folder / "src" / Path(parcel.source).name
    return _from_spec(replace(spec, func=f"{source}:{name}", flags=_remap(spec.flags, mapping), cache_dir=None))


def _recipe(parcel: Parcel) -> OpSpec:
    """The parcel's recipe; a parcel pickled by an earlier aotbench may hold it as cloudpickle bytes."""
    return pickle.loads(parcel.spec) if isinstance(parcel.spec, bytes) else parcel.spec


def _still_there(parcel: Parcel) -> bool:
    for path, data in ((parcel.source, parcel.source_bytes), *parcel.headers):
        try:
            if Path(path).read_bytes() != data:
                return False
        except OSError:
            return False
    return True


def _unpack(parcel: Parcel, root: Path) -> tuple[Path, dict[str, str]]:
    """Write the source and headers into ``<cache>/travel/<digest>/`` (content-addressed, never rewritten): the
    source's folder becomes ``src/``, each other folder a header came from ``inc<N>/``. Returns the folder and the
    mapping from original folders to new ones (for the include flags)."""
    h = hashlib.sha256(parcel.source.encode() + b"\0" + parcel.source_bytes)
    for path, data in parcel.headers:
        h.update(path.encode() + b"\0" + hashlib.sha256(data).digest())
    folder = root / "travel" / h.hexdigest()[:24]
    src_dir = os.path.dirname(parcel.source)
    mapping = {src_dir: str(folder / "src")}
    files = [(folder / "src" / Path(parcel.source).name, parcel.source_bytes)]
    for path, data in parcel.headers:
        home = toolchain.include_home(path, [src_dir, *parcel.include_dirs]) or os.path.dirname(path)
        if home not in mapping:
            mapping[home] = str(folder / f"inc{len(mapping)}")
        files.append((Path(mapping[home]) / os.path.relpath(path, home), data))
    for target, data in files:
        if not target.exists():
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            cache.write_atomic(target, data)
    return folder, mapping


def _absolute_includes(flags: tuple[str, ...]) -> tuple[str, ...]:
    """The flags with every include folder made absolute (relative to this process's working directory)."""
    return _rewrite_includes(flags, os.path.abspath)


def _remap(flags: tuple[str, ...], mapping: dict[str, str]) -> tuple[str, ...]:
    """The flags with every include folder that was unpacked elsewhere pointing at its new place."""
    return _rewrite_includes(flags, lambda folder: mapping.get(folder.rstrip("/"), folder))


def _rewrite_includes(flags: tuple[str, ...], moved) -> tuple[str, ...]:
    """``flags`` with ``moved(folder)`` in place of each include folder (-I, -iquote, -isystem, -idirafter, joined
    to its option or as the next argument)."""
    out, pending = [], False
    for flag in flags:
        if pending:
            out.append(moved(flag))
            pending = False
            continue
        option = next((o for o in toolchain.INCLUDE_OPTIONS if flag.startswith(o)), None)
        if option is not None and flag == option:
            pending = True
            out.append(flag)
        elif option is not None and not (option == "-I" and flag.startswith("-I-")):
            out.append(option + moved(flag[len(option):]))
        else:
            out.append(flag)
    return tuple(out)
