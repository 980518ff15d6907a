"""Which file to ``dlopen`` for a prebuilt library, so that a library rebuilt at the same path runs its new code.

``dlopen`` of a path this process has already loaded hands back the library loaded then, whatever the file
holds now: after ``g++ ... -o libtwo.so`` relinks it, ``Custom("libtwo.so:Two")`` would run the old code. So
each prebuilt path loaded in this process is remembered with the identity of its file (device, inode, size,
mtime, ctime) and its content hash. When a later load finds the file changed, its new content is copied into
the cache, content-addressed (``<cache>/prebuilt/<sha256>/libtwo.so``), and that copy is loaded instead: the
old ops keep the old code, the new op gets the new code.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from . import cache


@dataclass(frozen=True)
class _Seen:
    """A prebuilt file as it was when this process first loaded it from its own path."""

    identity: tuple[int, int, int, int, int]  # dev, ino, size, mtime_ns, ctime_ns
    sha256: str


_SEEN: dict[str, _Seen] = {}
_LOCK = threading.Lock()


def _identity(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def path_to_load(path: Path, cache_dir: Path | None) -> tuple[Path, bool]:
    """The file to ``dlopen`` for the prebuilt library at ``path`` (absolute), and whether it is a private copy.

    The first load in this process is of ``path`` itself. A later one gets ``path`` again while its file holds
    what was loaded then (same identity, or the same content), else a content-addressed copy of what it holds
    now. Raises :class:`~aotbench.build.cache.CacheError` when the copy cannot be written.
    """
    key = os.path.realpath(path)
    try:
        st = os.stat(key)
    except OSError:
        return path, False  # no file there: the loader says so (LoadError naming the path)
    if not stat.S_ISREG(st.st_mode):
        return path, False  # a directory or device: likewise
    with _LOCK:
        seen = _SEEN.get(key)
        # The real path is what is loaded: dlopen matches a name it loaded before, so a symlink re-pointed to
        # another file would otherwise hand back the library the link named then.
        if seen is None:
            _SEEN[key] = _Seen(_identity(st), cache.sha256_file(Path(key)))
            return Path(key), False
        if seen.identity == _identity(st) and not cache._racy(st):
            return Path(key), False
        digest = cache.sha256_file(Path(key))
        if digest == seen.sha256:
            _SEEN[key] = _Seen(_identity(st), digest)  # touched or copied back: what is loaded is what it holds
            return Path(key), False
    root = cache.prepare(cache_dir if cache_dir is not None else cache.default_cache_dir())
    copy = root / "prebuilt" / digest / Path(key).name
    try:
        if not (copy.is_file() and cache.sha256_file(copy) == digest):
            copy.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = copy.with_name(f".{copy.name}.{os.getpid()}-{threading.get_ident()}.tmp")
            shutil.copyfile(key, tmp)
            if cache.sha256_file(tmp) != digest:  # the file changed again while it was copied: take a fresh look
                os.unlink(tmp)
                return path_to_load(path, cache_dir)
            os.chmod(tmp, 0o700)
            os.replace(tmp, copy)
    except OSError as exc:
        if cache.is_disk_full(exc):
            raise cache.disk_full_error(root, f"copying the rebuilt {Path(key).name}: {exc.strerror}") from exc
        raise cache.CacheError(f"cannot copy the rebuilt library {key} into the cache {root}: "
                               f"{exc.strerror or exc}. Point AOTBENCH_CACHE_DIR (or cache_dir=) at a writable "
                               "directory.") from exc
    return copy, True


CHANGED_HINT = ("{path} changed since this process loaded it, and a process cannot load two libraries from one "
                "path; aotbench loaded a copy of the new file ({copy}), and that copy does not load from there "
                "(it needs files beside the original, such as $ORIGIN libraries). Restart the Python process to "
                "load the new library, or build it to a new file name.")
