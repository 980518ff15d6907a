"""Damaged libraries and manifests never crash the process and never reach a raw Python exception.

A library cut short used to kill the process with SIGBUS inside ``dlopen`` (the loader maps segments that the
file no longer holds), so each load of a damaged file runs in a child process here: a crash is then a failed
assertion naming the signal, not a dead test session. A prebuilt library that fails the ELF check is a
``LoadError``; a cached one is rebuilt. A manifest that is valid JSON but lacks or mistypes a field is a miss.
A compile that exits with status 0 but writes no library (``-fsyntax-only``) says so.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.native import elf
from aotbench.build.compile import build

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
KERNEL = ROOT / "bench" / "kernels" / "scale.cc"  # out = 2 * x, float32, any shape

LOAD = textwrap.dedent("""
    import sys, numpy as np, aotbench
    try:
        op = aotbench.Custom(sys.argv[1] + ":Scale", lambda s: s, np.float32)
    except aotbench.LoadError as exc:
        print("LoadError:", exc.reason)
        sys.exit(0)
    x = np.random.default_rng().standard_normal(37).astype(np.float32)
    print("ran:", bool(np.allclose(op(x), 2 * x)), "cache_hit:", op.artifact and op.artifact.cache_hit)
""")


def load_in_child(target: str, cache: Path) -> str:
    """Run ``Custom(target:Scale)`` and one call in a fresh interpreter; its stdout (fails on a crash)."""
    env = dict(os.environ, AOTBENCH_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", LOAD, target], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    if proc.returncode < 0:
        pytest.fail(f"the process died of {signal.Signals(-proc.returncode).name}: {proc.stderr[-1500:]}")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def whole_library(tmp_path_factory) -> bytes:
    """The bytes of scale.cc built with the documented flags."""
    artifact = build(KERNEL, cache_dir=tmp_path_factory.mktemp("cache"))
    return artifact.path.read_bytes()


def cut_points(image: bytes, rng: np.random.Generator) -> list[int]:
    """Lengths to cut a library to: inside the ELF header, inside the program headers, half, and random points
    before the end of the last loadable segment."""
    end = max(off + size for kind, off, size in _segments(image) if kind == 1)
    return [0, 40, 100, len(image) // 2, *sorted(int(n) for n in rng.integers(200, end, 3)), end - 1]


def _segments(image: bytes) -> list[tuple[int, int, int]]:
    import struct

    phoff, = struct.unpack_from("<Q", image, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", image, 0x36)
    out = []
    for i in range(phnum):
        kind, _flags, off, _v, _p, size = struct.unpack_from("<IIQQQQ", image, phoff + i * phentsize)
        out.append((kind, off, size))
    return out


def test_the_whole_library_passes_the_structural_check(whole_library):
    """The check accepts what the compiler wrote (it is not simply refusing everything)."""
    assert elf.structural_problem(whole_library) is None


def test_every_cut_is_named_by_the_structural_check(whole_library, rng):
    """Each truncation that leaves a loadable segment short is found, with the file's length in the reason."""
    for n in cut_points(whole_library, rng):
        problem = elf.structural_problem(whole_library[:n])
        assert problem is not None, n
        assert str(n) in problem, (n, problem)


def test_truncated_prebuilt_library_is_a_load_error(whole_library, tmp_path, rng):
    """A prebuilt .so cut short gives LoadError in the loading process, which carries on."""
    for n in cut_points(whole_library, rng)[2:]:
        lib = tmp_path / f"cut{n}.so"
        lib.write_bytes(whole_library[:n])
        out = load_in_child(str(lib), tmp_path / "cache")
        assert out.startswith("LoadError:") and "truncated" in out, (n, out)


def test_truncated_prebuilt_library_is_a_load_error_in_process(whole_library, tmp_path):
    """The same in this process (after the child-process test proved it does not crash): the error names the
    path and says the file is cut short."""
    lib = tmp_path / "half.so"
    lib.write_bytes(whole_library[: len(whole_library) // 2])
    with pytest.raises(aotbench.LoadError) as info:
        aotbench.Custom(f"{lib}:Scale", lambda s: s, np.float32)
    assert str(lib) in str(info.value) and "past the end" in str(info.value)


def test_cached_library_damaged_behind_its_hash_is_rebuilt(tmp_path, rng):
    """A cached library truncated and its manifest's hash updated to match (what a crash between writing and
    hashing could leave) passes the hash check; the ELF check catches it and Custom rebuilds it."""
    cache = tmp_path / "cache"
    source = tmp_path / "scale.cc"
    source.write_text(KERNEL.read_text())
    artifact = build(source, cache_dir=cache)
    size = artifact.path.stat().st_size
    cut = int(rng.integers(size // 4, 3 * size // 4))
    with open(artifact.path, "r+b") as fh:
        fh.truncate(cut)
    manifest = json.loads(artifact.manifest_path.read_text())
    import hashlib
    manifest["artifact_sha256"] = hashlib.sha256(artifact.path.read_bytes()).hexdigest()
    artifact.manifest_path.write_text(json.dumps(manifest))
    assert build(source, cache_dir=cache).cache_hit  # the hash alone no longer notices
    out = load_in_child(str(source), cache)
    assert "ran: True cache_hit: False" in out, out
    assert artifact.path.stat().st_size == size  # the rebuild replaced the damaged file
    assert elf.structural_problem(artifact.path.read_bytes()) is None


MANIFEST_DAMAGE = {
    "argv-missing": lambda m: m.pop("argv"),
    "argv-a-string": lambda m: m.update(argv="g++ -O2"),
    "argv-numbers": lambda m: m.update(argv=[1, 2, 3]),
    "argv-empty": lambda m: m.update(argv=[]),
    "dependencies-missing": lambda m: m.pop("dependencies"),
    "dependencies-strings": lambda m: m.update(dependencies=["a.h", "b.h"]),
    "dependency-path-a-number": lambda m: m.update(dependencies=[{"path": 7, "sha256": "00"}]),
    "dependencies-an-object": lambda m: m.update(dependencies={"path": "a.h"}),
    "build-time-missing": lambda m: m.pop("build_time_s"),
    "build-time-a-string": lambda m: m.update(build_time_s="fast"),
    "build-time-null": lambda m: m.update(build_time_s=None),
    "build-time-a-bool": lambda m: m.update(build_time_s=True),
    "build-time-a-list": lambda m: m.update(build_time_s=[1.0]),
    "log-a-number": lambda m: m.update(log=3),
    "hash-missing": lambda m: m.pop("artifact_sha256"),
}


@pytest.mark.parametrize("damage", sorted(MANIFEST_DAMAGE))
def test_manifest_with_missing_or_mistyped_fields_is_a_miss(tmp_path, rng, damage):
    """Valid JSON with a field missing or of the wrong type: a miss (recompiled), never KeyError/TypeError; the
    rebuild writes a whole manifest, and the next build hits."""
    cache = tmp_path / "cache"
    source = tmp_path / "scale.cc"
    source.write_text(KERNEL.read_text())
    artifact = build(source, cache_dir=cache)
    manifest = json.loads(artifact.manifest_path.read_text())
    MANIFEST_DAMAGE[damage](manifest)
    artifact.manifest_path.write_text(json.dumps(manifest))
    op = aotbench.Custom(f"{source}:Scale", lambda s: s, np.float32, cache_dir=cache)
    assert not op.artifact.cache_hit
    x = rng.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_allclose(op(x), 2 * x)
    again = build(source, cache_dir=cache)
    assert again.cache_hit and isinstance(again.build_time_s, float) and again.command == op.artifact.command


def test_damaged_manifest_does_not_break_describe_change(tmp_path):
    """Comparing a build with one whose manifest was damaged afterwards reports what it can, without raising."""
    from aotbench.build.compile import describe_change

    cache = tmp_path / "cache"
    source = tmp_path / "scale.cc"
    source.write_text(KERNEL.read_text())
    old = build(source, cache_dir=cache)
    source.write_text(KERNEL.read_text() + "\n// edited\n")
    new = build(source, cache_dir=cache)
    manifest = json.loads(old.manifest_path.read_text())
    manifest["dependencies"] = [{"path": 3}, "x.h"]
    old.manifest_path.write_text(json.dumps(manifest))
    assert "the kernel source changed" in describe_change(old, new)


@pytest.mark.parametrize("flag", ["-fsyntax-only", "-E", "-c"])
def test_compile_that_writes_no_library_says_so(tmp_path, flag):
    """A flag that stops the compiler before linking is a NoLibraryError naming the flag, not FileNotFoundError,
    and the cache is left without a half entry."""
    cache = tmp_path / "cache"
    with pytest.raises(aotbench.NoLibraryError) as info:
        aotbench.Custom(f"{KERNEL}:Scale", lambda s: s, np.float32, cache_dir=cache, flags=[flag])
    assert flag in str(info.value) and "wrote no library" in str(info.value) and "Remove it" in str(info.value)
    assert not isinstance(info.value, FileNotFoundError)
    assert not list(cache.glob("scale-*.json")) and not list(cache.glob("scale-*.so"))


UNDEFINED = """
#include <cstdint>
extern "C" float aotb_test_not_defined_anywhere(float);
extern "C" int F(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                 void *extra) {
  static_cast<float *>(params[1])[0] = aotb_test_not_defined_anywhere(static_cast<float *>(params[0])[0]);
  return 0;
}
"""


def test_a_loader_message_that_is_not_utf8_is_still_a_load_error(tmp_path):
    """A library with an undefined symbol, in a folder whose name is not UTF-8: the loader's message names that
    path, ctypes cannot decode it, and the user still gets LoadError with the reason and the hint."""
    import shutil

    source = tmp_path / "undefined.cc"
    source.write_text(UNDEFINED)
    folder = tmp_path / os.fsdecode(b"odd\xff")
    folder.mkdir()
    lib = folder / "libundefined.so"
    subprocess.run([shutil.which("g++"), "-std=c++17", "--shared", "-fPIC", "-o", str(lib), str(source)], check=True)
    with pytest.raises(aotbench.LoadError) as info:
        aotbench.Custom(f"{lib}:F", (1,), np.float32)
    assert "undefined symbol" in info.value.reason and "aotb_test_not_defined_anywhere" in info.value.reason
    assert "add the library that provides it" in str(info.value)
