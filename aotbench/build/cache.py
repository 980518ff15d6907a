"""The on-disk build cache: where it lives, how its files are written, locked and found again.

Layout under the cache directory (``AOTBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/aotbench``, else
``~/.cache/aotbench``):

- ``<stem>-<key>.so`` and ``<stem>-<key>.json``: one library per distinct build and its manifest. ``key``
  hashes everything that changes the binary, so a library that has been loaded is never overwritten.
- ``index/<base>.json``: for one (source, command, compiler, header) the builds made so far, each with the
  included files it depended on and their hashes; a lookup re-checks those files (by size and mtime, then by
  content) without running the compiler.
- ``locks/<base>.lock``: taken with ``fcntl.flock`` while building, so concurrent processes build once; the OS
  releases it when a builder dies.
- ``pch/<key>/`` and ``pch/<key>.json``: the precompiled ``custom_aot_extra.h`` of one compiler and flag set
  (``custom_aot_extra.h.gch`` beside a link to aotbench's header) and its manifest; see :mod:`.pch`. Removing
  them is always safe: they are made again when needed.
- ``locks/pch-<key>.lock``: taken while a precompiled header is built or checked.
- ``travel/<digest>/``: the source and headers an op that arrived pickled carried (:mod:`aotbench.op.travel`),
  written once, content-addressed; ``cells/`` likewise holds the sources of notebook cells.
- ``tmp/``: compiler output before it is published with an atomic rename.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import pwd
import re
import shlex
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import CacheError

RACY_WINDOW_NS = 2_000_000_000
_DEP_SPLIT = re.compile(r"(?<!\\)\s+")
_DEP_UNESCAPE = re.compile(r"\\[ #\\]")


def default_cache_dir() -> Path:
    """The cache directory to use when none is given, computed at call time from the environment."""
    env = os.environ.get("AOTBENCH_CACHE_DIR")
    xdg = os.environ.get("XDG_CACHE_HOME")
    try:
        if env:
            return Path(env).expanduser()
        return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "aotbench"
    except RuntimeError as exc:  # no HOME and no password-file entry for this uid: "~" means nothing
        home = repr(os.environ["HOME"]) if "HOME" in os.environ else "unset"
        raise CacheError(
            f"cannot find a place for the aotbench cache: {exc} (HOME is {home} and uid {os.getuid()} has no "
            "entry in the password file). Set "
            "AOTBENCH_CACHE_DIR (or XDG_CACHE_HOME, or HOME) to a writable directory, or pass cache_dir=.") from exc


def prepare(root: Path) -> Path:
    """Create the cache directory (private to the user) and its subdirectories; return its absolute path.

    Raises :class:`CacheError` when the directory (or one of its subdirectories) is owned by another user or
    writable by group or others: a library from there could have been replaced by someone else, so nothing is
    built into it or loaded from it.
    """
    root = Path(root).expanduser().absolute()
    try:
        for folder in (root, *(root / sub for sub in CACHE_FOLDERS)):
            try:
                st = os.stat(folder)  # the common case, a cache that exists: one stat per folder
            except FileNotFoundError:
                folder.mkdir(mode=0o700, parents=folder == root, exist_ok=True)
                st = os.stat(folder)
            if not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(folder))
            check_private(folder, root, st)
    except CacheError:
        raise
    except OSError as exc:
        raise CacheError(
            f"cannot create the aotbench cache directory {root}: {exc.strerror or exc}. Point "
            "AOTBENCH_CACHE_DIR (or cache_dir=) at a writable directory."
        ) from exc
    if not os.access(root, os.W_OK | os.X_OK):
        raise CacheError(
            f"the aotbench cache directory {root} is not writable. Point AOTBENCH_CACHE_DIR (or cache_dir=) "
            "at a writable directory."
        )
    return root


#: Every folder of the cache that aotbench reads from or writes to; :func:`prepare` makes each and refuses one
#: that another user owns or could write.
CACHE_FOLDERS = ("index", "locks", "tmp", "pch", "cells", "travel", "prebuilt")


def disk_full_error(root: Path, detail: str) -> CacheError:
    """The :class:`CacheError` for a cache whose disk (or quota) is full: where, how much is free, the fix."""
    try:
        free = f"{shutil.disk_usage(root).free / 2**20:.1f} MiB free there now"
    except OSError:
        free = "its free space unknown"
    return CacheError(
        f"the disk holding the aotbench cache {root} is full ({detail}; {free}). Free some space (python -m "
        "aotbench cache prune --max-size ...) or point AOTBENCH_CACHE_DIR (or cache_dir=) at a folder on "
        "another disk.")


#: What a compiler or the OS says when the disk or the user's quota is full.
DISK_FULL_MESSAGES = ("No space left on device", "Disk quota exceeded")


def is_disk_full(exc: OSError) -> bool:
    """True for the OSError of a write that failed because the disk or the user's quota is full."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


@contextlib.contextmanager
def full_disk_is_cache_error(root: Path, what: str) -> Iterator[None]:
    """Run the block (a write into the cache); a full disk or quota becomes :func:`disk_full_error`, saying
    ``what`` was being written; any other OSError passes through."""
    try:
        yield
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full_error(root, f"{what}: {exc.strerror}") from exc
        raise


def check_private(directory: Path, root: Path | None = None, st: os.stat_result | None = None) -> None:
    """Raise :class:`CacheError` unless ``directory`` (whose ``os.stat`` may be given) is owned by this user and
    writable by nobody else."""
    st = st if st is not None else os.stat(directory)
    root = root or directory
    fix = (f"Run `chmod 700 {shlex.quote(str(directory))}` if it is yours, or point AOTBENCH_CACHE_DIR (or "
           "cache_dir=) at a private directory of your own.")
    uid = os.geteuid()
    if st.st_uid != uid:
        raise CacheError(
            f"refusing the aotbench cache directory {root}: {directory} is owned by {_user(st.st_uid)}, not by "
            f"you ({_user(uid)}), so another user could replace the libraries aotbench would load from it. "
            "Point AOTBENCH_CACHE_DIR (or cache_dir=) at a private directory of your own.")
    if st.st_mode & 0o022:
        who = " and ".join(w for w, bit in (("group", 0o020), ("world", 0o002)) if st.st_mode & bit)
        sticky = " (the sticky bit does not make it private)" if st.st_mode & stat.S_ISVTX else ""
        raise CacheError(
            f"refusing the aotbench cache directory {root}: {directory} is {who}-writable (mode "
            f"{stat.S_IMODE(st.st_mode):04o}){sticky}, so another user could replace the libraries aotbench "
            f"would load from it. {fix}")


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def sha256_file(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see either the old file or the whole new one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_json(path: Path) -> dict | None:
    """A JSON file's content, or None when it is missing or unreadable (a damaged entry is treated as absent)."""
    try:
        with open(path, "rb") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


_LOCK_FDS: set[int] = set()  # descriptors of lock files this process's threads hold or wait for now


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` for the duration of the block."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    _LOCK_FDS.add(fd)  # before flock: a fork may come between flock's return and the next bytecode
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        _LOCK_FDS.discard(fd)
        os.close(fd)  # closing releases the lock (once no forked child holds a copy: see below)


def _drop_inherited_locks() -> None:
    """In a forked child, close the copies of the lock files other threads of the parent held: a flock belongs to
    the open file, so a copy kept here would hold the lock after the parent released it, and the child's own
    build of that entry (or the parent's next one) would wait for ever."""
    for fd in list(_LOCK_FDS):
        with contextlib.suppress(OSError):
            os.close(fd)
    _LOCK_FDS.clear()


os.register_at_fork(after_in_child=_drop_inherited_locks)


@dataclass(frozen=True)
class DepStamp:
    """An included file as it was when a build used it: size, mtime, content hash, and the identity of the file
    the path led to (device, inode, ctime; of a symlink's target, since ``os.stat`` follows links). An entry
    written before the identity was recorded has None there and is judged by its content."""

    path: str
    size: int
    mtime_ns: int
    sha256: str
    dev: int | None = None
    ino: int | None = None
    ctime_ns: int | None = None

    def still_valid(self) -> bool:
        """True when the file is unchanged: the same file (inode, ctime) with the same size and mtime, or
        (after any replacement: ``cp -p``, ``tar``, ``rsync -t``, a re-pointed symlink) the same content."""
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        if (st.st_size == self.size and st.st_mtime_ns == self.mtime_ns and st.st_ino == self.ino
                and st.st_ctime_ns == self.ctime_ns and st.st_dev == self.dev and not _racy(st)):
            return True
        try:
            return st.st_size == self.size and sha256_file(Path(self.path)) == self.sha256
        except OSError:
            return False


def stamp(path: str) -> DepStamp:
    """Size, mtime, identity and content hash of an included file (the hash is memoised per stat identity)."""
    st = os.stat(path)
    if _racy(st):
        return DepStamp(path, st.st_size, st.st_mtime_ns, sha256_file(Path(path)), st.st_dev, st.st_ino,
                        st.st_ctime_ns)
    return _stamp(path, st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino, st.st_ctime_ns)


@lru_cache(maxsize=4096)
def _stamp(path: str, size: int, mtime_ns: int, dev: int, ino: int, ctime_ns: int) -> DepStamp:
    # System headers appear in every build; hashing them once per process keeps a cold build near the bare
    # compiler's time. Only files whose mtime and ctime are old enough to be trusted get here (see _racy); the
    # inode and ctime in the key make a replacement with the same size and mtime hash again.
    return DepStamp(path, size, mtime_ns, sha256_file(Path(path)), dev, ino, ctime_ns)


def _racy(st: os.stat_result) -> bool:
    """True for a file modified (or its inode changed) in the last two seconds: a rewrite within the
    filesystem's timestamp granularity could leave size, mtime and ctime unchanged, so such a file is always
    judged by its content."""
    return time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < RACY_WINDOW_NS


_DATA_SUFFIX = re.compile(r"\.(?!(?:h|hh|hpp|hxx|h\+\+|cuh|inc|inl|ipp|tcc|tpp|def)$)[A-Za-z0-9+_-]+$")


def listing_hash(directory: str) -> str:
    """A hash of the names in ``directory`` that an ``#include`` could find, so a new or removed header (or
    folder) changes it; "missing" if unreadable. Files with a non-header extension (data, notebooks,
    sources) are left out: saving ``results.npy`` beside a kernel does not invalidate its build."""
    try:
        names = sorted(n for n in os.listdir(directory) if not _DATA_SUFFIX.search(n) or os.path.isdir(
            os.path.join(directory, n)))
    except OSError:
        return "missing"
    return hashlib.sha256("\0".join(names).encode()).hexdigest()[:16]


def dependencies_key(deps: list[DepStamp]) -> str:
    h = hashlib.sha256()
    for d in sorted(deps, key=lambda d: d.path):
        h.update(f"{d.path}\0{d.sha256}\0".encode())
    return h.hexdigest()


def index_entries(root: Path, base: str) -> list[dict]:
    data = read_json(root / "index" / f"{base}.json")
    entries = data.get("entries") if data else None
    return entries if isinstance(entries, list) else []


def record_index_entry(root: Path, base: str, entry: dict, keep: int = 8) -> None:
    """Put ``entry`` first in the index for ``base`` (caller holds the base's lock)."""
    entries = [e for e in index_entries(root, base) if isinstance(e, dict) and e.get("key") != entry["key"]]
    data = {"entries": [entry, *entries][:keep]}
    write_atomic(root / "index" / f"{base}.json", json.dumps(data, separators=(",", ":")).encode())


def parse_depfile(text: str) -> list[str]:
    """The prerequisites of the first rule in a make-style dependency file (as written by ``-MD -MF``).

    Paths are separated by unescaped white space; ``\\ `` is a space inside a path, ``\\#`` a hash and ``$$`` a
    dollar sign. Continuation lines (a backslash before the newline) are joined first.
    """
    rule = text.replace("\\\n", " ").split("\n", 1)[0]
    _, _, prereqs = rule.partition(": ")  # the paths we pass contain no colon-space
    return [_DEP_UNESCAPE.sub(lambda m: m.group(0)[-1], p).replace("$$", "$")
            for p in _DEP_SPLIT.split(prereqs.strip()) if p]


# --- Inspecting and pruning the cache (``python -m aotbench cache info|prune``) ------------------------------
