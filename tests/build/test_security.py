"""Security: the cache is private and libraries are never loaded from a directory other users can write;
kernel and attribute names are validated before anything is built; paths with spaces and quotes work; no
module runs a shell."""

from __future__ import annotations

import ast
import os
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.build import cache
from aotbench.build.compile import build
from aotbench.errors import ArgumentError, AttrError

PACKAGE = Path(aotbench.__file__).resolve().parent
TEMPLATE = Path(__file__).resolve().parents[1] / "support" / "kernels" / "build_elementwise.cc.in"
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ on PATH")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")


def kernel(path: Path, expr: str = "x[i] * 2.0f", prelude: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(TEMPLATE.read_text().replace("@PRELUDE@", prelude).replace("@EXPR@", expr))
    return path


def test_default_cache_dir_is_created_private(tmp_path):
    old = os.umask(0)  # the mode is asked for explicitly, not left to the umask
    try:
        root = cache.prepare(tmp_path / "deep" / "cache")
    finally:
        os.umask(old)
    for sub in ("", "index", "locks", "tmp", "pch"):
        assert stat.S_IMODE(os.stat(root / sub).st_mode) == 0o700, sub


@pytest.mark.parametrize("mode, words", [(0o777, "world-writable"), (0o1777, "sticky bit"),
                                         (0o770, "group-writable"), (0o702, "world-writable")])
def test_writable_by_others_is_refused(tmp_path, mode, words):
    root = tmp_path / "cache"
    root.mkdir()
    os.chmod(root, mode)
    with pytest.raises(cache.CacheError) as info:
        cache.prepare(root)
    msg = str(info.value)
    assert words in msg and f"chmod 700 {root}" in msg and "AOTBENCH_CACHE_DIR" in msg
    assert f"{mode & 0o7777:04o}" in msg
    assert not (root / "index").exists()  # nothing was written into it
    os.chmod(root, 0o700)
    assert cache.prepare(root) == root  # the fix the message names works


def test_a_writable_subdirectory_is_refused(tmp_path):
    root = cache.prepare(tmp_path / "cache")
    os.chmod(root / "tmp", 0o777)
    with pytest.raises(cache.CacheError, match=r"cache/tmp is group and world-writable \(mode 0777\)"):
        cache.prepare(root)


@needs_root
def test_another_users_directory_is_refused(tmp_path):
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    os.chown(root, 12345, -1)
    with pytest.raises(cache.CacheError, match=r"owned by uid 12345.*not by you") as info:
        cache.prepare(root)
    assert "AOTBENCH_CACHE_DIR" in str(info.value)


@needs_gxx
@pytest.mark.slow
def test_a_built_library_is_not_loaded_once_the_cache_is_opened_up(tmp_path, rng):
    src = kernel(tmp_path / "src" / "k.cc")
    root = tmp_path / "cache"
    op = aotbench.Custom(f"{src}:F", lambda s: s, np.float32, cache_dir=root)
    x = rng.standard_normal(7).astype(np.float32)
    np.testing.assert_allclose(op(x), 2 * x, rtol=1e-6)
    os.chmod(root, 0o777)
    with pytest.raises(cache.CacheError, match="world-writable"):
        build(src, cache_dir=root)  # even a cache hit is refused
    with pytest.raises(cache.CacheError, match="world-writable"):
        aotbench.Custom(f"{src}:F", lambda s: s, np.float32, cache_dir=root)
    os.chmod(root, 0o700)
    assert build(src, cache_dir=root).cache_hit


@needs_root
@needs_gxx
def test_a_cache_taken_over_by_another_user_is_refused(tmp_path):
    src = kernel(tmp_path / "src" / "k.cc")
    root = tmp_path / "cache"
    build(src, cache_dir=root)
    os.chown(root, 12345, -1)
    with pytest.raises(cache.CacheError, match="owned by uid 12345"):
        build(src, cache_dir=root)


@pytest.mark.parametrize("name", ["a b", "1x", "x;rm -rf /", "", "F()", "../F", "F\n", "$(id)"])
def test_bad_kernel_names_are_refused_before_building(tmp_path, name):
    src = kernel(tmp_path / "k.cc")
    root = tmp_path / "cache"
    with pytest.raises(ArgumentError, match="not a valid kernel function name"):
        aotbench.Custom(f"{src}:{name}", lambda s: s, np.float32, cache_dir=root)
    assert not root.exists()  # nothing compiled, nothing cached


@pytest.mark.parametrize("name", ["a b", "1x", "x;rm -rf /", "", "a-b", "x\0y", "ax\n"])
def test_bad_attribute_names_are_refused(tmp_path, name):
    src = kernel(tmp_path / "k.cc")
    with pytest.raises(AttrError, match="attribute name"):
        aotbench.Custom(f"{src}:F", lambda s: s, np.float32, attrs={name: 1}, cache_dir=tmp_path / "c")
    with pytest.raises(AttrError, match="attribute name"):
        aotbench.CustomRegOp("op").attr(name, "required", "all", value=1)
    assert not (tmp_path / "c").exists()


@needs_gxx
@pytest.mark.slow
def test_paths_with_spaces_and_quotes_work(tmp_path, rng):
    folder = tmp_path / """we'ird "dir" name"""
    folder.mkdir()
    (folder / "my header.h").write_text("#define SCALE 3.0f\n")
    src = kernel(folder / "k'e\"r n.cc", "x[i] * SCALE", '#include "my header.h"')
    root = tmp_path / """ca'che "dir" """
    op = aotbench.Custom(f"{src}:F", lambda s: s, np.float32, cache_dir=root)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(op(x), 3 * x, rtol=1e-6)
    assert op.artifact.dependencies and any(d.endswith("my header.h") for d in op.artifact.dependencies)
    assert build(src, cache_dir=root).cache_hit  # the dependency paths were parsed back correctly
    (folder / "my header.h").write_text("#define SCALE 5.0f\n")
    rebuilt = aotbench.Custom(f"{src}:F", lambda s: s, np.float32, cache_dir=root)
    assert not rebuilt.artifact.cache_hit
    np.testing.assert_allclose(rebuilt(x), 5 * x, rtol=1e-6)


SHELL_CALLS = {("os", "system"), ("os", "popen"), ("os", "execlp"), ("subprocess", "getoutput"),
               ("subprocess", "getstatusoutput")}


def shell_uses(text: str, filename: str = "<text>") -> list[str]:
    """Calls that hand a string to a shell: ``shell=True`` anywhere, os.system/os.popen and friends."""
    found = []
    for node in ast.walk(ast.parse(text, filename)):
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                found.append(f"{filename}:{node.lineno}: shell=")
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (f.value.id, f.attr) in SHELL_CALLS:
            found.append(f"{filename}:{node.lineno}: {f.value.id}.{f.attr}")
        if isinstance(f, ast.Name) and f.id in ("system", "popen"):
            found.append(f"{filename}:{node.lineno}: {f.id}")
    return found


def test_the_shell_detector_detects():
    assert len(shell_uses("import os, subprocess\nos.system('ls')\nsubprocess.run('ls', shell=True)\n"
                          "os.popen('x')\nfrom os import system\nsystem('y')\n")) == 4
    assert shell_uses("import subprocess\nsubprocess.run(['ls'], shell=False)\n") == []


def test_no_module_runs_a_shell():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 15
    found = [hit for path in modules for hit in shell_uses(path.read_text(), str(path.relative_to(PACKAGE)))]
    assert found == []
    for path in modules:  # the plain text too, so an aliased or dynamic use shows up
        text = path.read_text()
        assert "shell=True" not in text and "os.system" not in text and "os.popen" not in text, path
