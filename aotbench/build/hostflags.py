"""What host-dependent flags (``-march=native``, ``-mtune=native``, ``-mcpu=native``) mean on this machine.

The cache keys a build by its argv, and ``-march=native`` reads the same on every machine while the code it makes
does not: a cache shared between CPUs (NFS) would hand one machine another's instruction set. :func:`resolve` asks
g++ what those flags expand to here (``g++ <flags> -### -E -x c++ /dev/null``: the ``cc1plus`` line lists the
concrete ``-march=<cpu>``, every ``-m<feature>``/``-mno-<feature>`` and the cache-size ``--param`` values), and the
build and precompiled-header keys include that answer. Where g++ cannot say, ``/proc/cpuinfo`` (or, without it,
the host name) stands in: something that still differs between machines, never the literal flag.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shlex
import socket
import subprocess
from dataclasses import dataclass
from functools import lru_cache

from . import toolchain

_NATIVE = re.compile(r"-m[A-Za-z0-9_-]+=native")
_CPUINFO_KEYS = ("model name", "flags", "cpu family", "model", "stepping", "vendor_id",  # x86
                 "Features", "CPU implementer", "CPU architecture", "CPU variant", "CPU part")  # Arm


@dataclass(frozen=True)
class Resolution:
    """What a build's host-dependent flags stand for here: ``resolved`` is canonical (sorted), ``method`` says
    where it came from ("gcc", or "cpuinfo"/"hostname" when g++ could not say)."""

    flags: tuple[str, ...]
    resolved: str
    method: str

    def manifest(self) -> dict:
        """The manifest's ``"native"`` entry."""
        return {"flags": list(self.flags), "resolved": self.resolved, "method": self.method}


def native_flags(flags: tuple[str, ...]) -> tuple[str, ...]:
    """The flags whose meaning depends on the machine (``-m<option>=native``), in order, without repeats."""
    return tuple(dict.fromkeys(f for f in flags if _NATIVE.fullmatch(f)))


def resolve(compiler: str, flags: tuple[str, ...]) -> Resolution | None:
    """What ``flags``' host-dependent options mean for ``compiler`` on this machine; None when there are none
    (then nothing about the build's key changes). Memoised per compiler identity and flags."""
    native = native_flags(tuple(flags))
    if not native:
        return None
    return _resolve(toolchain.compiler_identity(compiler), os.path.realpath(compiler), native)


@lru_cache(maxsize=32)
def _resolve(identity: str, compiler: str, native: tuple[str, ...]) -> Resolution:
    resolved = gcc_resolution(compiler, native)
    if resolved is not None:
        return Resolution(native, resolved, "gcc")
    method, text = machine_fingerprint()
    return Resolution(native, text, method)


def gcc_resolution(compiler: str, native: tuple[str, ...]) -> str | None:
    """The sorted ``-m...`` and ``--param`` options g++'s driver passes to ``cc1plus`` for ``native``, or None
    when g++ cannot be run, prints no such line, or leaves a flag unresolved (``=native`` still in it)."""
    try:
        proc = subprocess.run([compiler, *native, "-###", "-E", "-x", "c++", os.devnull], check=False,
                              capture_output=True, text=True, errors="replace", stdin=subprocess.DEVNULL, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = _cc1plus_words(proc.stderr) if proc.returncode == 0 else None
    if words is None:
        return None
    options = set()
    for i, word in enumerate(words):
        if word == "--param" and i + 1 < len(words):
            options.add(f"--param={words[i + 1]}")
        elif word.startswith("-m") and word not in ("-m32", "-m64", "-mx32"):
            options.add(word)
    if not any(o.startswith(("-march=", "-mtune=", "-mcpu=")) for o in options) \
            or any(o.endswith("=native") for o in options):
        return None
    return " ".join(sorted(options))


def _cc1plus_words(stderr: str) -> list[str] | None:
    """The arguments of the ``cc1plus`` command in the driver's ``-###`` output (None if there is none)."""
    for line in stderr.splitlines():
        if not line.startswith(" "):
            continue
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        if words and os.path.basename(words[0]).startswith("cc1plus"):
            return words[1:]
    return None


def machine_fingerprint() -> tuple[str, str]:
    """(method, text) describing this CPU when g++ cannot: the identifying ``/proc/cpuinfo`` fields (model,
    feature flags) hashed, or else the machine type and host name (overly cautious: a miss per host)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        text = ""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in _CPUINFO_KEYS:
            fields.setdefault(key.strip(), " ".join(sorted(value.split())) if key.strip() in ("flags", "Features")
                              else value.strip())
    if fields:
        digest = hashlib.sha256(repr(sorted(fields.items())).encode()).hexdigest()[:32]
        return "cpuinfo", f"{platform.machine()} {fields.get('model name', '')} cpuinfo-sha256={digest}".strip()
    return "hostname", f"{platform.machine()} host={socket.gethostname()}"
