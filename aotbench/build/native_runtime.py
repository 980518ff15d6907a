"""Build the native host (``native/src/runtime.cc``) through the same build layer as any kernel, and load it once.

The host is compiled with the documented flags plus ``-O2`` (so with the same ``_GLIBCXX_USE_CXX11_ABI=0`` as the
kernels), into the cache the op uses, and bound by :class:`aotbench.native.runtime.Runtime`.
"""

from __future__ import annotations

from pathlib import Path

from ..native.runtime import Runtime, source_path
from .cache import default_cache_dir
from .compile import build

_HOSTS: dict[Path, Runtime] = {}  # loaded host per library path
_HOST_FOR_CACHE: dict[Path, Runtime] = {}  # per cache directory: the build check runs once per process


def get_runtime(cache_dir: Path | None = None) -> Runtime:
    """The native host, built into ``cache_dir`` on first use and loaded once per process per library."""
    root = cache_dir if cache_dir is not None else default_cache_dir()
    host = _HOST_FOR_CACHE.get(root)
    if host is None:
        artifact = build(source_path(), flags=("-O2",), cache_dir=root)
        host = _HOSTS.get(artifact.path)
        if host is None:
            host = _HOSTS[artifact.path] = Runtime(artifact.path)
        _HOST_FOR_CACHE[root] = host
    return host
