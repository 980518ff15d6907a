"""Looking after the build cache: what it holds (``usage``) and making it smaller (``prune``).

Used by ``python -m aotbench cache info|prune``. Pruning removes whole published entries (library and manifest)
under the lock of their base, the one builds publish under, so it never races a build; it never deletes lock
files, recent unpaired files, or the native host libraries loaded in this process. Precompiled headers
(``pch/``) go first when the cache is over size: any build makes its own again, a library may have lost its source.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .cache import index_entries, locked, write_atomic
from .manifest import Manifest

STALE_S = 3600.0  # a tmp/ file (or an unpaired library or manifest) older than this belongs to no live build
_ENTRY_KEY = re.compile(r"^[A-Za-z0-9_+-][A-Za-z0-9_.+-]*$")
_BASE = re.compile(r"^[0-9a-f]{8,64}$")
_PCH_KEY = re.compile(r"^[0-9a-f]{16,64}$")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class CacheEntry:
    """One published library and its manifest."""

    key: str
    source: str
    size_bytes: int  # the .so plus the .json
    created: float  # seconds since the epoch (the manifest's, else the library's mtime)
    last_used: float  # the library's atime or mtime, whichever is later
    library: Path
    manifest: Path
    base_key: str | None


@dataclass(frozen=True)
class CacheUsage:
    """What a cache directory holds; ``entries`` are most recently used first."""

    root: Path
    entries: tuple[CacheEntry, ...]
    library_bytes: int  # the entries' libraries and manifests
    total_bytes: int  # every file under the root
    total_files: int
    cell_sources: int  # files under cells/
    cell_bytes: int
    tmp_files: int  # files under tmp/
    tmp_bytes: int
    index_files: int
    unpaired: tuple[Path, ...]  # a .so without its .json or the reverse (a build publishing, or debris)
    pch_headers: int = 0  # precompiled headers under pch/ (one per compiler and flag set)
    pch_bytes: int = 0


def parse_size(text: str) -> int:
    """Bytes for ``1048576``, ``500M``, ``2G``, ``1.5GiB`` (binary units); ValueError otherwise."""
    m = _SIZE.fullmatch(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a size: use bytes or a number with K, M, G or T (such as 500M or 2G)")
    return int(float(m[1]) * _UNITS[m[2].upper()])


def usage(root: Path) -> CacheUsage:
    """Measure the cache at ``root`` (which may not exist yet: then it is empty). Reads only metadata and
    manifests, never a library (reading one would count as using it)."""
    root = Path(root).expanduser().absolute()
    sizes = _file_sizes(root)
    names = {p.name for p in sizes if p.parent == root}
    entries, unpaired = [], []
    for name in sorted(names):
        stem, dot, ext = name.rpartition(".")
        if not dot or ext not in ("so", "json") or not _ENTRY_KEY.fullmatch(stem):
            continue
        if f"{stem}.{'json' if ext == 'so' else 'so'}" not in names:
            unpaired.append(root / name)
        elif ext == "so":
            entries.append(_entry(root, stem, sizes))
    entries.sort(key=lambda e: (e.last_used, e.created), reverse=True)

    def under(sub: str) -> list[int]:
        return [size for p, size in sizes.items() if p.is_relative_to(root / sub)]

    cells, tmp = under("cells"), under("tmp")
    return CacheUsage(
        root=root, entries=tuple(entries), library_bytes=sum(e.size_bytes for e in entries),
        total_bytes=sum(sizes.values()), total_files=len(sizes), cell_sources=len(cells), cell_bytes=sum(cells),
        tmp_files=len(tmp), tmp_bytes=sum(tmp), index_files=len(under("index")), unpaired=tuple(unpaired),
        pch_headers=len(_pch_keys(root)), pch_bytes=sum(under("pch")))


def prune(root: Path, max_bytes: int | None = None, everything: bool = False, dry_run: bool = False,
          keep: Iterable[Path] | None = None) -> list[Path]:
    """Remove what the cache at ``root`` can do without; return the removed files (with ``dry_run``: the files
    that would be removed, removing nothing).

    Always: tmp/ files and unpaired libraries or manifests older than an hour, and index entries of libraries
    that are gone. With ``max_bytes``: the precompiled headers, least recently used first, then the least
    recently used libraries (library and manifest together), until the total is at most ``max_bytes``. With
    ``everything``: every library, manifest, index, precompiled header and cell source.
    Libraries in ``keep`` (default: the native hosts loaded in this process) are never removed, nor is a file a
    build is publishing: libraries are removed under their base's lock, the one builds publish under.
    """
    root = Path(root).expanduser().absolute()
    if not (root / "index").is_dir():
        return []
    keep = frozenset(map(os.path.realpath, _loaded_hosts() if keep is None else keep))
    now = time.time()
    removed: list[Path] = []

    def remove(path: Path) -> None:
        try:
            if not dry_run:
                os.unlink(path)
            removed.append(path)
        except FileNotFoundError:
            pass

    before = usage(root)
    sizes = _file_sizes(root)
    for path, mtime in _debris(root, before):
        if now - mtime > STALE_S:
            remove(path)
    victims: list[CacheEntry] = []
    total = before.total_bytes - sum(sizes.get(p, 0) for p in removed)
    for key in _pch_keys(root):  # least recently used first
        if everything or (max_bytes is not None and total > max_bytes):
            total -= _remove_pch(root, key, sizes, dry_run, remove)
    if everything:
        victims = [e for e in before.entries if os.path.realpath(e.library) not in keep]
    elif max_bytes is not None:
        for entry in reversed(before.entries):  # least recently used first
            if total <= max_bytes:
                break
            if os.path.realpath(entry.library) not in keep:
                victims.append(entry)
                total -= entry.size_bytes
    by_base: dict[str | None, list[CacheEntry]] = {}
    for entry in victims:
        by_base.setdefault(entry.base_key, []).append(entry)
    gone = {e.key for e in victims}
    bases = set(by_base) | {p.stem for p in (root / "index").glob("*.json") if _BASE.fullmatch(p.stem)}
    for base in sorted(bases, key=str):
        lock = (locked(root / "locks" / f"{base}.lock") if base is not None and not dry_run
                else contextlib.nullcontext())
        with lock:
            for entry in by_base.get(base, ()):
                remove(entry.manifest)  # first: a lookup that finds no manifest is a clean miss
                remove(entry.library)
            if base is not None:
                _prune_index(root, base, gone, dry_run, remove)
    if everything:  # the sources of cells, those ops that travelled here carried, and the copies of rebuilt prebuilt
        # libraries: rewritten on their next use
        for kept in (root / "cells", root / "travel", root / "prebuilt"):
            for path in sorted((p for p in sizes if p.is_relative_to(kept)), key=str):
                remove(path)
            if not dry_run and kept.is_dir():
                for folder, _, _ in sorted(os.walk(kept), reverse=True):
                    if folder != str(kept):
                        with contextlib.suppress(OSError):
                            os.rmdir(folder)
    return removed


def _prune_index(root: Path, base: str, gone: set[str], dry_run: bool, remove) -> None:
    """Drop the index entries of ``base`` whose library is gone (caller holds the base's lock)."""
    path = root / "index" / f"{base}.json"
    if not path.exists():
        return
    entries = index_entries(root, base)
    live = [e for e in entries if isinstance(e, dict) and isinstance(e.get("key"), str)
            and _ENTRY_KEY.fullmatch(e["key"]) and e["key"] not in gone and (root / f"{e['key']}.json").exists()]
    if not live:
        remove(path)
    elif len(live) != len(entries) and not dry_run:
        write_atomic(path, json.dumps({"entries": live}, separators=(",", ":")).encode())


def _pch_keys(root: Path) -> list[str]:
    """The precompiled headers' keys (a manifest or a folder under pch/), least recently used first."""
    folder = root / "pch"
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    keys = {n.removesuffix(".json") for n in names if _PCH_KEY.fullmatch(n.removesuffix(".json"))}

    def used(key: str) -> float:
        times = [0.0]
        for path in (folder / key / "custom_aot_extra.h.gch", folder / f"{key}.json"):
            with contextlib.suppress(OSError):
                st = os.stat(path)
                times.append(max(st.st_atime, st.st_mtime))
        return max(times)

    return sorted(keys, key=lambda k: (used(k), k))


def _remove_pch(root: Path, key: str, sizes: dict[Path, int], dry_run: bool, remove) -> int:
    """Remove one precompiled header (manifest first, then its folder) under its lock; return the bytes freed."""
    manifest, folder = root / "pch" / f"{key}.json", root / "pch" / key
    lock = locked(root / "locks" / f"pch-{key}.lock") if not dry_run else contextlib.nullcontext()
    with lock:
        paths = [manifest, *(sorted(folder.iterdir()) if folder.is_dir() else [])]
        for path in paths:
            remove(path)
        if not dry_run:
            with contextlib.suppress(OSError):
                folder.rmdir()
    return sum(sizes.get(p, 0) for p in paths)


def _entry(root: Path, key: str, sizes: dict[Path, int]) -> CacheEntry:
    lib, manifest = root / f"{key}.so", root / f"{key}.json"
    record = Manifest.read(manifest)  # None for a damaged one: listed (and pruned) by what the files say
    try:
        st = os.stat(lib)
        used, mtime = max(st.st_atime, st.st_mtime), st.st_mtime
    except OSError:
        used = mtime = 0.0
    created = None if record is None else record.created
    base = "" if record is None else record.base_key
    return CacheEntry(
        key=key, source="" if record is None else record.source,
        size_bytes=sizes.get(lib, 0) + sizes.get(manifest, 0), created=mtime if created is None else created,
        last_used=used, library=lib, manifest=manifest, base_key=base if _BASE.fullmatch(base) else None)


def _debris(root: Path, found: CacheUsage) -> Iterator[tuple[Path, float]]:
    """Files no finished build owns, with their mtimes: tmp/ files, unpaired entries, write_atomic leftovers."""
    candidates = list(found.unpaired)
    if (root / "tmp").is_dir():
        candidates += [p for p in (root / "tmp").iterdir()]
    for folder in (root, root / "index", root / "pch"):
        candidates += folder.glob(".*.tmp")
    for path in candidates:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
            yield path, st.st_mtime


def _file_sizes(root: Path) -> dict[Path, int]:
    """Size of every regular file under ``root`` (symbolic links are not followed)."""
    sizes = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                sizes[path] = st.st_size
    return sizes


def _loaded_hosts() -> list[Path]:
    """The native host libraries this process has loaded (never removed from under it). Looked up without
    importing the host module, which sits above this one."""
    host = sys.modules.get("aotbench.host")
    return list(getattr(host, "_HOSTS", {}))
