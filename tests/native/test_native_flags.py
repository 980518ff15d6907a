"""Host-dependent flags (``-march=native`` and the like, ``build.hostflags``) with the real g++: the cache keys them
by what g++ resolves them to on this machine, so a cache shared between CPUs never hands one machine a library
built for another. "Another CPU" is simulated by replacing what g++ answers; everything else is real.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench._version import HEADER_VERSION, __version__
from aotbench.build import compile as build_mod
from aotbench.build import hostflags, pch, toolchain
from aotbench.build.compile import build

TEMPLATE = Path(__file__).resolve().parents[1] / "support" / "kernels" / "build_elementwise.cc.in"
REAL_GXX = shutil.which("g++")
OTHER_CPU = "-march=haswell -mavx2 -mno-avx512f -mtune=haswell"  # what g++ says on the simulated other machine

pytestmark = pytest.mark.skipif(REAL_GXX is None, reason="needs g++ on PATH")


@pytest.fixture(autouse=True)
def _fresh_resolutions(monkeypatch):
    """Each test resolves anew (the answer is memoised per process), with the precompiled header on."""
    monkeypatch.delenv(pch.SWITCH, raising=False)
    hostflags._resolve.cache_clear()
    yield
    hostflags._resolve.cache_clear()


def kernel(path: Path, expr: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(TEMPLATE.read_text().replace("@PRELUDE@", "").replace("@EXPR@", expr))
    return path


def other_cpu(monkeypatch, answer: str | None = OTHER_CPU) -> None:
    """From now on g++ "resolves" host flags to ``answer`` (None: it cannot say)."""
    monkeypatch.setattr(hostflags, "gcc_resolution", lambda compiler, native: answer)
    hostflags._resolve.cache_clear()


def old_base_key(source: Path, argv: list[str]) -> str:
    """The base key exactly as it was computed before host flags were resolved (pinned here on purpose)."""
    h = hashlib.sha256()
    for part in (f"aotbench-build {__version__} header {HEADER_VERSION}", toolchain.compiler_identity(argv[0]),
                 json.dumps([("<output>" if a == argv[argv.index("-o") + 1] else a) for a in argv])):
        h.update(part.encode() + b"\0")
    h.update(source.read_bytes())
    return h.hexdigest()[:32]


# -- what g++ says ---------------------------------------------------------------------------------------------

def test_native_flags_are_the_m_options_set_to_native():
    flags = ("-O2", "-march=native", "-mtune=native", "-mcpu=native", "-march=native", "-Dmarch=native",
             "-march=haswell", "-fnative")
    assert hostflags.native_flags(flags) == ("-march=native", "-mtune=native", "-mcpu=native")
    assert hostflags.resolve(REAL_GXX, ("-O2", "-march=haswell")) is None


def test_gcc_resolves_march_native_to_a_concrete_cpu():
    got = hostflags.resolve(REAL_GXX, ("-O2", "-march=native"))
    assert got.method == "gcc" and got.flags == ("-march=native",)
    words = got.resolved.split()
    assert words == sorted(set(words)) and "native" not in got.resolved
    [march] = [w for w in words if w.startswith("-march=")]
    assert march != "-march=native" and len(march) > len("-march=")
    tune = hostflags.resolve(REAL_GXX, ("-mtune=native",))
    assert tune.resolved != got.resolved and "native" not in tune.resolved
    assert hostflags.resolve(REAL_GXX, ("-march=native",)) is got  # memoised: g++ asked once


# -- the build's key -------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_manifest_records_the_resolution_and_the_same_machine_hits(tmp_path, rng):
    src = kernel(tmp_path / "src" / "k.cc", "x[i] * 2.0f + 1.0f")
    cache_dir = tmp_path / "cache"
    first = build(src, flags=("-O2", "-march=native"), cache_dir=cache_dir)
    native = first.manifest["native"]
    assert native["flags"] == ["-march=native"] and native["method"] == "gcc"
    assert native["resolved"] == hostflags.resolve(REAL_GXX, ("-march=native",)).resolved
    assert any(w.startswith("-march=") and w != "-march=native" for w in native["resolved"].split())
    hostflags._resolve.cache_clear()  # a new process on the same machine: g++ is asked again, same answer
    again = build(src, flags=("-O2", "-march=native"), cache_dir=cache_dir)
    assert again.cache_hit and again.path == first.path
    op = aotbench.Custom(f"{src}:F", lambda shape: shape, np.float32, flags=["-O2", "-march=native"],
                         cache_dir=cache_dir)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_allclose(op(x), x * 2.0 + 1.0, rtol=1e-6)


@pytest.mark.slow
def test_another_cpu_misses_and_rebuilds_under_its_own_key(tmp_path, monkeypatch):
    src = kernel(tmp_path / "src" / "k.cc", "x[i] - 3.0f")
    cache_dir = tmp_path / "cache"
    here = build(src, flags=("-march=native",), cache_dir=cache_dir)
    other_cpu(monkeypatch)
    there = build(src, flags=("-march=native",), cache_dir=cache_dir)
    assert not there.cache_hit and there.path != here.path and here.path.is_file()
    assert there.manifest["base_key"] != here.manifest["base_key"]
    assert there.manifest["native"]["resolved"] == OTHER_CPU
    assert build_mod.describe_change(here, there) == ["-march=native resolves differently on this machine"]
    link = here.command.index("-include") + 1
    assert there.command[link] != here.command[link]  # a precompiled header of its own
    assert build(src, flags=("-march=native",), cache_dir=cache_dir).path == there.path
    monkeypatch.undo()
    monkeypatch.delenv(pch.SWITCH, raising=False)
    hostflags._resolve.cache_clear()
    back = build(src, flags=("-march=native",), cache_dir=cache_dir)
    assert back.cache_hit and back.path == here.path


def test_flags_without_native_keep_their_key(tmp_path, monkeypatch):
    """No host flag: g++ is never asked, the manifest has no "native", and the base key is the one from before."""
    monkeypatch.setenv(pch.SWITCH, "0")  # the documented argv, so the pinned formula can rebuild it
    monkeypatch.setattr(hostflags, "gcc_resolution", lambda *a: pytest.fail("asked g++ without a host flag"))
    src = kernel(tmp_path / "src" / "k.cc", "x[i] + 4.0f")
    art = build(src, flags=("-O2", "-march=x86-64"), cache_dir=tmp_path / "cache")
    assert "native" not in art.manifest
    assert art.manifest["base_key"] == old_base_key(src, art.manifest["argv"])


def test_old_base_key_formula_matches_the_function():
    """``_base_key`` without a resolution hashes what it always did; with one, something else."""
    argv = [REAL_GXX, "-O2", "-o", "<output>", "k.cc"]
    identity = toolchain.compiler_identity(REAL_GXX)
    plain = build_mod._base_key(b"src", argv, identity)
    h = hashlib.sha256()
    for part in (f"aotbench-build {__version__} header {HEADER_VERSION}", identity, json.dumps(argv)):
        h.update(part.encode() + b"\0")
    h.update(b"src")
    assert plain == h.hexdigest()[:32]
    assert build_mod._base_key(b"src", argv, identity, "-march=znver3") != plain
    assert build_mod._base_key(b"src", argv, identity, "-march=znver3") != \
        build_mod._base_key(b"src", argv, identity, "-march=haswell")


# -- the precompiled header's key ------------------------------------------------------------------------------

def test_pch_key_follows_the_resolution(tmp_path, monkeypatch):
    root = tmp_path.absolute()
    here = pch.describe(root, REAL_GXX, ("-march=native",)).key
    plain = pch.describe(root, REAL_GXX, ("-O2",)).key
    other_cpu(monkeypatch)
    assert pch.describe(root, REAL_GXX, ("-march=native",)).key != here
    assert pch.describe(root, REAL_GXX, ("-O2",)).key == plain


# -- when g++ cannot say ---------------------------------------------------------------------------------------

def test_unresolvable_flags_fall_back_to_the_machine_not_the_literal_flag(tmp_path, monkeypatch):
    src = kernel(tmp_path / "src" / "k.cc", "x[i] * 5.0f")
    cache_dir = tmp_path / "cache"
    here = build(src, flags=("-march=native",), cache_dir=cache_dir)
    other_cpu(monkeypatch, None)
    got = hostflags.resolve(REAL_GXX, ("-march=native",))
    assert got.method in ("cpuinfo", "hostname") and "native" not in got.resolved and got.resolved
    fallback = build(src, flags=("-march=native",), cache_dir=cache_dir)
    assert not fallback.cache_hit and fallback.manifest["native"]["method"] == got.method
    assert fallback.manifest["base_key"] != here.manifest["base_key"]


def test_machine_fingerprint_differs_by_cpu_and_survives_no_cpuinfo(tmp_path, monkeypatch):
    real_open = open

    def cpuinfo(text):
        path = tmp_path / f"cpuinfo-{abs(hash(text))}"
        path.write_text(text)
        return lambda name, *a, **k: real_open(path if name == "/proc/cpuinfo" else name, *a, **k)

    monkeypatch.setattr(hostflags, "open", cpuinfo("model name : A\nflags : sse avx\n"), raising=False)
    a = hostflags.machine_fingerprint()
    monkeypatch.setattr(hostflags, "open", cpuinfo("model name : A\nflags : sse avx avx512f\n"), raising=False)
    b = hostflags.machine_fingerprint()
    assert a[0] == b[0] == "cpuinfo" and a[1] != b[1]

    def refuse(*a, **k):
        raise PermissionError("no /proc here")

    monkeypatch.setattr(hostflags, "open", refuse, raising=False)
    method, text = hostflags.machine_fingerprint()
    assert method == "hostname" and text and "native" not in text


@pytest.mark.parametrize("script", [
    "exit 1",  # g++ refuses
    "exit 0",  # says nothing
    "echo ' /usr/lib/gcc/cc1plus -E \"-march=native\" -mavx' >&2",  # leaves the flag unresolved
])
def test_gcc_resolution_is_none_when_gcc_cannot_say(tmp_path, script):
    fake = tmp_path / "g++"
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    assert hostflags.gcc_resolution(str(fake), ("-march=native",)) is None
    assert hostflags.gcc_resolution(str(tmp_path / "missing"), ("-march=native",)) is None
    assert os.path.exists(fake)
