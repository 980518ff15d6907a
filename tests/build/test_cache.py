"""The content-addressed build cache: hits never run the compiler, every input that changes the binary misses,
concurrent builders compile once, damaged entries are rebuilt, and the cache directory is chosen and created as
documented.

Compiler runs are counted with a ``g++`` wrapper put first on PATH: it appends its argv (one JSON line) to the file
named by ``$AOTB_GXX_LOG`` and then execs the real g++. A compile is an invocation with ``--shared`` naming the
test's own source (the identity probes ``--version``/``-dumpmachine`` and the native host's build are not counted).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.build import cache
from aotbench.build import compile as build_mod
from aotbench.build.compile import build

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = Path(__file__).resolve().parents[1] / "support" / "kernels" / "build_elementwise.cc.in"
REAL_GXX = shutil.which("g++")

pytestmark = pytest.mark.skipif(REAL_GXX is None, reason="needs g++ on PATH")

WRAPPER = """#!{python}
# g++ for the tests: log this invocation, optionally wait (compiles only), then run the real compiler.
import json, os, sys, time
log = os.environ.get("AOTB_GXX_LOG")
if log:
    with open(log, "a") as fh:  # one short O_APPEND write per call: lines from concurrent builders do not mix
        fh.write(json.dumps(sys.argv) + "\\n")
if "--shared" in sys.argv and os.environ.get("AOTB_GXX_DELAY"):
    time.sleep(float(os.environ["AOTB_GXX_DELAY"]))
os.execv({real!r}, [{real!r}, *sys.argv[1:]])
"""


def write_kernel(path: Path, expr: str, prelude: str = "") -> Path:
    """Write the template kernel ``F`` (``out[i] = expr``) to ``path`` and return ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(TEMPLATE.read_text().replace("@PRELUDE@", prelude).replace("@EXPR@", expr))
    return path


def make_op(source: Path | str, **kw) -> aotbench.Op:
    """``Custom`` on the template's ``F`` (from a source or a built library): output shaped like the input."""
    return aotbench.Custom(f"{source}:F", lambda shape: shape, np.float32, **kw)


def assert_computes(op, reference, rng: np.random.Generator) -> None:
    """Call ``op`` on a fresh random float32 array and compare with ``reference(x)``."""
    x = rng.standard_normal((4, 6)).astype(np.float32)
    np.testing.assert_allclose(op(x), reference(x), rtol=1e-6, atol=1e-6)


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class CountingGxx:
    """The wrapper ``g++`` on PATH and what it logged during one test."""

    def __init__(self, path: Path, log: Path):
        self.path, self.log = path, log

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def compiles(self, source: Path) -> list[list[str]]:
        """The compile invocations (``--shared``) of ``source``."""
        return [argv for argv in self.calls() if "--shared" in argv and str(source) in argv]


@pytest.fixture(scope="session")
def gxx_wrapper(tmp_path_factory) -> Path:
    """One wrapper file for the session: compiler identity is memoised per binary, and the native host built with
    this "compiler" is then compiled once per cache, not once per test."""
    path = tmp_path_factory.mktemp("gxx-wrapper") / "g++"
    path.write_text(WRAPPER.format(python=sys.executable, real=os.path.realpath(REAL_GXX)))
    path.chmod(0o755)
    return path


@pytest.fixture
def gxx(gxx_wrapper, tmp_path, monkeypatch) -> CountingGxx:
    """Put the counting wrapper first on PATH, logging into this test's tmp_path."""
    log = tmp_path / "gxx.log"
    monkeypatch.setenv("PATH", f"{gxx_wrapper.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("AOTB_GXX_LOG", str(log))
    monkeypatch.delenv("AOTB_GXX_DELAY", raising=False)
    return CountingGxx(gxx_wrapper, log)


# -- hits ----------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_hit_does_not_run_the_compiler(gxx, tmp_path, rng):
    """The first build compiles once with the g++ found on PATH; a second build() and a second Custom() are hits
    that run no compiler at all (not even an identity probe: it is memoised)."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i] * 3.0f - 1.0f")
    cache_dir = tmp_path / "cache"
    first = build(src, cache_dir=cache_dir)
    assert not first.cache_hit
    assert first.command[0] == str(gxx.path)
    compiles = gxx.compiles(src)
    assert len(compiles) == 1
    assert compiles[0] == first.manifest["argv_run"]  # the recorded argv_run is exactly what ran
    probes = [argv[1:] for argv in gxx.calls() if argv not in compiles]
    assert all(p in (["--version"], ["-dumpmachine"]) for p in probes), probes  # identity only, maybe memoised

    logged = gxx.calls()
    second = build(src, cache_dir=cache_dir)
    assert second.cache_hit and second.path == first.path and second.command == first.command
    assert gxx.calls() == logged

    op = make_op(src, cache_dir=cache_dir)  # builds the native host into this cache, then hits the kernel
    assert op.artifact.cache_hit and op.artifact.path == first.path
    assert len(gxx.compiles(src)) == 1
    logged = gxx.calls()
    again = make_op(src, cache_dir=cache_dir)
    assert again.artifact.cache_hit and gxx.calls() == logged
    assert_computes(op, lambda x: x * 3.0 - 1.0, rng)
    assert_computes(again, lambda x: x * 3.0 - 1.0, rng)


@pytest.mark.slow
def test_compiler_identity_is_part_of_the_key(tmp_path, monkeypatch, rng):
    """A different compiler binary at the same path (an upgrade) is a miss; so is another g++ on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    compiler = bin_dir / "g++"
    compiler.write_text(f"#!/bin/sh\nexec '{REAL_GXX}' \"$@\"\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i] + 2.0f")
    cache_dir = tmp_path / "cache"
    before = build(src, cache_dir=cache_dir)
    assert build(src, cache_dir=cache_dir).cache_hit
    compiler.write_text(f"#!/bin/sh\n# upgraded\nexec '{REAL_GXX}' \"$@\"\n")
    after = build(src, cache_dir=cache_dir)
    assert not after.cache_hit and after.path != before.path
    link = before.command.index("-include") + 1
    assert after.command[link] != before.command[link]  # each compiler has a precompiled header of its own
    assert after.command == tuple(str(after.path) if a == str(before.path) else after.command[link] if i == link
                                  else a for i, a in enumerate(before.command))
    assert after.manifest["compiler"] != before.manifest["compiler"]
    monkeypatch.setenv("PATH", str(Path(REAL_GXX).parent))
    real = build(src, cache_dir=cache_dir)
    assert not real.cache_hit and real.command[0] == REAL_GXX
    assert_computes(make_op(after.path), lambda x: x + 2.0, rng)


@pytest.mark.slow
def test_versions_are_part_of_the_key(tmp_path, monkeypatch):
    """A new header version or aotbench version is a miss (kernels compiled against the old header are not reused)."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i]")
    old = build(src, cache_dir=tmp_path / "cache")
    monkeypatch.setattr(build_mod, "HEADER_VERSION", build_mod.HEADER_VERSION + 1000)
    new_header = build(src, cache_dir=tmp_path / "cache")
    assert not new_header.cache_hit and new_header.path != old.path
    assert new_header.manifest["header_version"] == build_mod.HEADER_VERSION
    monkeypatch.setattr(build_mod, "__version__", "999.0")
    new_version = build(src, cache_dir=tmp_path / "cache")
    assert not new_version.cache_hit and new_version.path not in (old.path, new_header.path)


# -- misses --------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_edited_source_is_a_miss_and_the_old_library_stays(gxx, tmp_path, rng):
    """Editing the source gives a new key and a new file; the old library is still there, byte for byte, and an
    op already holding it keeps running the old code in the same process."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i] * 2.0f")
    old = make_op(src)
    old_path, old_sha = old.artifact.path, sha256(old.artifact.path)
    write_kernel(src, "x[i] * -7.0f + 0.25f")
    new = make_op(src)
    assert not new.artifact.cache_hit
    assert new.artifact.key != old.artifact.key and new.artifact.path != old_path
    assert len(gxx.compiles(src)) == 2
    assert old_path.exists() and sha256(old_path) == old_sha
    assert_computes(new, lambda x: x * -7.0 + 0.25, rng)
    assert_computes(old, lambda x: x * 2.0, rng)
    reloaded = make_op(old_path)  # the old library, loaded by path, is the old code
    assert_computes(reloaded, lambda x: x * 2.0, rng)


@pytest.mark.slow
def test_edited_header_is_a_miss_and_reverting_it_hits(gxx, tmp_path, rng):
    """A header beside the source, included with quotes, is part of the key: editing it rebuilds (new results),
    restoring its old content finds the first library again without compiling."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i] * 2.0f + shift()", prelude='#include "shift.h"')
    header = src.parent / "shift.h"
    original = "inline float shift() { return 1.5f; }\n"
    header.write_text(original)
    first = make_op(src)
    assert str(header) in first.artifact.dependencies
    assert_computes(first, lambda x: x * 2.0 + 1.5, rng)

    header.write_text("inline float shift() { return -4.25f; }\n")
    edited = make_op(src)
    assert not edited.artifact.cache_hit and edited.artifact.path != first.artifact.path
    assert_computes(edited, lambda x: x * 2.0 - 4.25, rng)
    assert len(gxx.compiles(src)) == 2

    time.sleep(0.01)  # a new mtime, same content: the lookup must fall back to the content hash
    header.write_text(original)
    reverted = make_op(src)
    assert reverted.artifact.cache_hit and reverted.artifact.path == first.artifact.path
    assert len(gxx.compiles(src)) == 2
    assert_computes(reverted, lambda x: x * 2.0 + 1.5, rng)
    assert_computes(edited, lambda x: x * 2.0 - 4.25, rng)


@pytest.mark.slow
def test_same_size_header_edit_is_a_miss(gxx, tmp_path):
    """An edit that keeps the header's size (only its mtime and content change) is still seen."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i] * K", prelude='#include "k.h"')
    header = src.parent / "k.h"
    header.write_text("#define K 1.0f\n")
    first = build(src, cache_dir=tmp_path / "cache")
    time.sleep(0.01)
    header.write_text("#define K 9.0f\n")
    second = build(src, cache_dir=tmp_path / "cache")
    assert not second.cache_hit and second.path != first.path
    assert len(gxx.compiles(src)) == 2


def test_new_header_shadowing_an_included_one_is_a_miss(tmp_path, rng):
    """``#include "cfg.h"`` first found through ``-I other``; then a ``cfg.h`` appears beside the source, which g++
    searches first for quoted includes: the next build must compile against the new header."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i] * K", prelude='#include "cfg.h"')
    other = tmp_path / "other"
    other.mkdir()
    (other / "cfg.h").write_text("#define K 1.0f\n")
    flags = (f"-I{other}",)
    first = build(src, flags=flags, cache_dir=tmp_path / "cache")
    (src.parent / "cfg.h").write_text("#define K 2.0f\n")
    second = build(src, flags=flags, cache_dir=tmp_path / "cache")
    assert not second.cache_hit and second.path != first.path
    assert_computes(make_op(second.path), lambda x: x * 2.0, rng)


@pytest.mark.slow
def test_header_edited_during_the_compile_is_a_miss_next_time(tmp_path, monkeypatch, rng):
    """A header saved while g++ is compiling (an editor autosave) must not be recorded as what was compiled."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i] * K", prelude='#include "k.h"')
    header = src.parent / "k.h"
    header.write_text("#define K 1.0f\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    editing = bin_dir / "g++"  # compiles, then edits the header before returning
    editing.write_text(f"#!/bin/sh\n'{REAL_GXX}' \"$@\"; rc=$?\n"
                       f"case \"$*\" in *--shared*) printf '#define K 9.0f\\n' > '{header}' ;; esac\nexit $rc\n")
    editing.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    first = build(src, cache_dir=tmp_path / "cache")
    assert header.read_text() == "#define K 9.0f\n"
    assert_computes(make_op(first.path), lambda x: x * 1.0, rng)  # compiled before the edit
    second = build(src, cache_dir=tmp_path / "cache")
    assert not second.cache_hit
    assert_computes(make_op(second.path), lambda x: x * 9.0, rng)


@pytest.mark.slow
def test_changed_flags_are_a_miss(gxx, tmp_path):
    """Different flags are a different library; the same flags again are a hit."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i] - 3.0f")
    cache_dir = tmp_path / "cache"
    plain = build(src, cache_dir=cache_dir)
    o3 = build(src, flags=("-O3",), cache_dir=cache_dir)
    o3_define = build(src, flags=("-O3", "-DUNUSED=1"), cache_dir=cache_dir)
    assert not o3.cache_hit and not o3_define.cache_hit
    assert len({plain.path, o3.path, o3_define.path}) == 3
    assert build(src, flags=("-O3",), cache_dir=cache_dir).path == o3.path
    assert build(src, flags=["-O3"], cache_dir=cache_dir).cache_hit
    assert len(gxx.compiles(src)) == 3


@pytest.mark.slow
def test_force_recompiles(gxx, tmp_path, rng):
    """``force=True`` runs the compiler even when the library is cached (build() and Custom())."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i] * 0.5f")
    cache_dir = tmp_path / "cache"
    first = build(src, cache_dir=cache_dir)
    forced = build(src, cache_dir=cache_dir, force=True)
    assert not forced.cache_hit and len(gxx.compiles(src)) == 2
    assert forced.manifest["artifact_sha256"] == sha256(forced.path)
    op = make_op(src, force=True)
    assert not op.artifact.cache_hit and len(gxx.compiles(src)) == 3
    assert_computes(op, lambda x: x * 0.5, rng)
    assert build(src, cache_dir=cache_dir).cache_hit and first.path.exists()


# -- concurrency ---------------------------------------------------------------------------------------------

CHILD = """
import json, sys, time
from pathlib import Path
from aotbench.build.compile import build
source, go, cache_dir = map(Path, sys.argv[1:4])
print("ready", flush=True)
while not go.exists():
    time.sleep(0.002)
artifact = build(source, cache_dir=cache_dir)
print(json.dumps({"path": str(artifact.path), "hit": artifact.cache_hit}), flush=True)
"""


@pytest.mark.slow
def test_concurrent_builders_compile_once(gxx, tmp_path, monkeypatch, rng):
    """Eight processes released together build the same new kernel: exactly one compile (the others wait on the
    lock and then hit), all succeed with the same library, and no scratch file is left behind."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i] * x[i] - 2.0f")
    cache_dir, go = tmp_path / "cache", tmp_path / "go"
    monkeypatch.setenv("AOTB_GXX_DELAY", "0.3")  # widen the window in which the others must wait
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    children = [subprocess.Popen([sys.executable, "-c", CHILD, str(src), str(go), str(cache_dir)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(8)]
    try:
        for child in children:
            assert child.stdout.readline().strip() == "ready"
        go.touch()
        results = []
        for child in children:
            out, err = child.communicate(timeout=120)
            assert child.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    assert len(gxx.compiles(src)) == 1
    assert len({r["path"] for r in results}) == 1
    assert sorted(r["hit"] for r in results) == [False] + [True] * 7
    assert list((cache_dir / "tmp").iterdir()) == []
    op = make_op(results[0]["path"])
    assert_computes(op, lambda x: x * x - 2.0, rng)


@pytest.mark.slow
def test_build_killed_half_way_leaves_no_stale_lock_and_no_artifact(gxx, tmp_path, monkeypatch, rng):
    """A builder killed (SIGKILL, with its compiler) in the middle of a compile: the OS releases its lock, nothing
    was published, and the next build compiles at once and works."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i] * 3.0f - 1.0f")
    cache_dir, go = tmp_path / "cache", tmp_path / "go"
    build(write_kernel(tmp_path / "warm" / "w.cc", "x[i]"), cache_dir=cache_dir)  # the host, built beforehand
    env = {**os.environ, "AOTB_GXX_DELAY": "30",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(src), str(go), str(cache_dir)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        go.touch()
        deadline = time.monotonic() + 60
        while not gxx.compiles(src):  # the compiler has started (and sleeps before compiling)
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.02)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate(timeout=60)
    assert not list(cache_dir.glob("k-*.so")) and not list(cache_dir.glob("k-*.json"))
    started = time.monotonic()
    artifact = build(src, cache_dir=cache_dir)  # AOTB_GXX_DELAY is not set in this process
    assert time.monotonic() - started < 20, "waited on a lock the dead builder held"
    assert not artifact.cache_hit and len(gxx.compiles(src)) == 2
    assert_computes(make_op(artifact.path), lambda x: x * 3.0 - 1.0, rng)


@pytest.mark.slow
def test_full_disk_is_a_clear_error_and_leaves_nothing_half_written(tmp_path, rng):
    """The cache on a tiny filesystem that fills up: the build fails with an aotbench error saying there is no
    space, publishes nothing, and works again once there is room."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(disk)],
                      capture_output=True, check=False).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        cache_dir = disk / "cache"
        build(write_kernel(tmp_path / "warm" / "w.cc", "x[i]"), cache_dir=cache_dir)  # host and warm-up fit
        filler = disk / "filler"
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        filler.write_bytes(b"\0" * max(free - 4096, 0))
        src = write_kernel(tmp_path / "src" / "k.cc", "x[i] + 42.0f")
        with pytest.raises(aotbench.AotbenchError) as info:
            build(src, cache_dir=cache_dir)
        assert "No space left on device" in str(info.value) + getattr(info.value, "log", "")
        assert not list(cache_dir.glob("k-*.so")) and not list(cache_dir.glob("k-*.json"))
        filler.unlink()
        artifact = build(src, cache_dir=cache_dir)
        assert_computes(make_op(artifact.path), lambda x: x + 42.0, rng)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


# -- damaged entries -----------------------------------------------------------------------------------------

def test_truncated_library_is_rebuilt(gxx, tmp_path, rng):
    """A library cut to half its size no longer matches the manifest's sha256: the next Custom() rebuilds it."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i] / 4.0f + 1.0f")
    artifact = build(src)  # built but never loaded in this process
    size = artifact.path.stat().st_size
    with open(artifact.path, "r+b") as fh:
        fh.truncate(size // 2)
    op = make_op(src)
    assert not op.artifact.cache_hit and len(gxx.compiles(src)) == 2
    assert op.artifact.path.stat().st_size == size
    assert sha256(op.artifact.path) == op.artifact.manifest["artifact_sha256"]
    assert_computes(op, lambda x: x / 4.0 + 1.0, rng)
    assert build(src).cache_hit


def test_truncated_library_is_rebuilt_by_build(gxx, tmp_path):
    """The same through build(): the damaged library is detected and replaced by a whole one."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i] + 8.0f")
    cache_dir = tmp_path / "cache"
    artifact = build(src, cache_dir=cache_dir)
    good = sha256(artifact.path)
    with open(artifact.path, "r+b") as fh:
        fh.truncate(artifact.path.stat().st_size // 2)
    again = build(src, cache_dir=cache_dir)
    assert not again.cache_hit and sha256(again.path) == good == again.manifest["artifact_sha256"]
    assert len(gxx.compiles(src)) == 2


def test_deleted_manifest_is_rebuilt(gxx, tmp_path, rng):
    """A library without its manifest is not trusted: the next build compiles again and writes a manifest."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i] * 6.0f")
    cache_dir = tmp_path / "cache"
    artifact = build(src, cache_dir=cache_dir)
    artifact.manifest_path.unlink()
    again = build(src, cache_dir=cache_dir)
    assert not again.cache_hit and len(gxx.compiles(src)) == 2
    assert again.manifest_path.exists()
    assert build(src, cache_dir=cache_dir).cache_hit
    assert_computes(make_op(again.path), lambda x: x * 6.0, rng)


@pytest.mark.parametrize("garbage", [
    pytest.param(b"\x00\xffnot json{", id="not-json"),
    pytest.param(b"", id="empty"),
    pytest.param(b"[1, 2, 3]", id="a-list"),
    pytest.param(b'{"entries": "nonsense"}', id="entries-not-a-list"),
    pytest.param(b'{"entries": [{"key": "nope", "deps": []}]}', id="unknown-key"),
    pytest.param(b'{"entries": [{"key": "x", "deps": [["/no/such/file.h", 1, 2, "ab"]]}]}', id="missing-dep"),
    pytest.param(b'{"entries": [{"key": 7, "deps": {}}]}', id="wrong-types"),
    pytest.param(b'{"entries": [1, "two", null]}', id="entries-not-objects"),
    pytest.param(b'{"entries": [{"key": "x", "deps": [[null, 1, 2, "ab"]]}]}', id="dep-path-null"),
    pytest.param(b'{"entries": [{"key": "../../escape", "deps": []}]}', id="key-outside-cache"),
])
@pytest.mark.slow
def test_garbage_index_is_rebuilt(gxx, tmp_path, garbage):
    """A damaged index file (any JSON or not JSON at all) is treated as empty: the build compiles again and
    rewrites it, without crashing."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i] - 0.5f")
    cache_dir = tmp_path / "cache"
    build(src, cache_dir=cache_dir)
    (index,) = (cache_dir / "index").glob("*.json")
    index.write_bytes(garbage)
    again = build(src, cache_dir=cache_dir)
    assert not again.cache_hit and len(gxx.compiles(src)) == 2
    assert again.manifest["artifact_sha256"] == sha256(again.path)
    assert build(src, cache_dir=cache_dir).cache_hit


# -- the cache directory -------------------------------------------------------------------------------------

def test_cache_directory_is_created_private(tmp_path):
    """A new cache directory (and its parents) is created, the cache itself with mode 0o700."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i]")
    root = tmp_path / "deep" / "er" / "cache"
    artifact = build(src, cache_dir=root)
    assert artifact.path.parent == root
    for sub in ("", "index", "locks", "tmp", "pch", *(p.relative_to(root) for p in (root / "pch").iterdir()
                                                     if p.is_dir())):
        assert stat.S_IMODE((root / sub).stat().st_mode) == 0o700, sub
    assert stat.S_IMODE(artifact.manifest_path.stat().st_mode) & 0o077 == 0


@pytest.mark.slow
def test_aotbench_cache_dir_is_read_at_call_time(tmp_path, monkeypatch, rng):
    """Without cache_dir=, build() and Custom() use $AOTBENCH_CACHE_DIR as it is when they are called."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i] * 1.5f")
    first_dir, second_dir = tmp_path / "env one", tmp_path / "env two"
    monkeypatch.setenv("AOTBENCH_CACHE_DIR", str(first_dir))
    assert build(src).path.parent == first_dir
    monkeypatch.setenv("AOTBENCH_CACHE_DIR", str(second_dir))
    op = make_op(src)
    assert op.artifact.path.parent == second_dir and not op.artifact.cache_hit
    assert_computes(op, lambda x: x * 1.5, rng)


@pytest.mark.slow
def test_cache_dir_argument_wins_over_the_environment(tmp_path, monkeypatch):
    """cache_dir= (a str or a Path) is used instead of $AOTBENCH_CACHE_DIR."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i]")
    monkeypatch.setenv("AOTBENCH_CACHE_DIR", str(tmp_path / "from-env"))
    assert build(src, cache_dir=str(tmp_path / "given")).path.parent == tmp_path / "given"
    assert not (tmp_path / "from-env").exists()


def test_default_cache_dir_fallbacks(tmp_path, monkeypatch):
    """Without $AOTBENCH_CACHE_DIR: $XDG_CACHE_HOME/aotbench, else ~/.cache/aotbench (computed at call time)."""
    monkeypatch.delenv("AOTBENCH_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.default_cache_dir() == tmp_path / "xdg" / "aotbench"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.default_cache_dir() == tmp_path / "home" / ".cache" / "aotbench"
    monkeypatch.setenv("AOTBENCH_CACHE_DIR", "~/elsewhere")
    assert cache.default_cache_dir() == tmp_path / "home" / "elsewhere"


def _unusable_cache_dirs(tmp_path: Path) -> dict[str, Path]:
    """Cache paths that cannot be created or used, also by root: under a regular file, or a regular file."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    return {"under-a-file": blocker / "cache", "is-a-file": blocker}


@pytest.mark.parametrize("which", ["under-a-file", "is-a-file"])
def test_unusable_cache_dir_raises_cache_error(tmp_path, monkeypatch, which):
    """A cache directory that cannot be created raises CacheError (an OSError) naming the directory and
    AOTBENCH_CACHE_DIR, whether it came from cache_dir= or from the environment."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i]")
    bad = _unusable_cache_dirs(tmp_path)[which]
    with pytest.raises(aotbench.CacheError) as info:
        build(src, cache_dir=bad)
    assert isinstance(info.value, OSError) and isinstance(info.value, aotbench.AotbenchError)
    assert "AOTBENCH_CACHE_DIR" in str(info.value) and str(bad) in str(info.value)
    monkeypatch.setenv("AOTBENCH_CACHE_DIR", str(bad))
    with pytest.raises(aotbench.CacheError, match="AOTBENCH_CACHE_DIR"):
        make_op(src)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_parent_raises_cache_error(tmp_path):
    """Under a read-only directory the cache cannot be created; an existing read-only cache cannot be used."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i]")
    locked = tmp_path / "locked"
    locked.mkdir()
    existing = tmp_path / "existing"
    build(src, cache_dir=existing)
    locked.chmod(0o500)
    existing.chmod(0o500)
    try:
        with pytest.raises(aotbench.CacheError, match="AOTBENCH_CACHE_DIR"):
            build(src, cache_dir=locked / "cache")
        with pytest.raises(aotbench.CacheError, match="AOTBENCH_CACHE_DIR"):
            build(src, cache_dir=existing)
    finally:
        locked.chmod(0o700)
        existing.chmod(0o700)


def test_existing_unwritable_cache_dir_raises_cache_error(tmp_path, monkeypatch):
    """An existing cache directory the user may not write is refused up front with CacheError (as root, where
    permissions do not stop writes, the access check itself is made to say no for that one directory)."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i]")
    root = tmp_path / "cache"
    root.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == root else real_access(p, mode, **kw))
    with pytest.raises(aotbench.CacheError, match="AOTBENCH_CACHE_DIR") as info:
        build(src, cache_dir=root)
    assert str(root) in str(info.value)
