"""``python -m aotbench cache info|prune`` and the functions behind them (``cache_admin.usage``, ``cache_admin.prune``), on
real builds into a temporary cache: the numbers are the real file sizes, pruning goes least recently used
first, a pruned kernel is rebuilt and works, and nothing a build could still be using is removed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.build import cache_admin
from aotbench.build.compile import build

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = Path(__file__).resolve().parents[1] / "support" / "kernels" / "build_elementwise.cc.in"

pytestmark = [pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ on PATH"), pytest.mark.slow]


def kernel(directory: Path, name: str, expr: str) -> Path:
    """Write the template kernel ``F`` (``out[i] = expr``) as ``directory/name.cc``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.cc"
    path.write_text(TEMPLATE.read_text().replace("@PRELUDE@", "").replace("@EXPR@", expr))
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "aotbench", "cache", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120, check=False)


def files_under(root: Path) -> dict[Path, int]:
    """Every regular file (a precompiled header's link to aotbench's header is not one)."""
    return {p: p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


def set_used(artifact, when: float) -> None:
    os.utime(artifact.path, (when, when))


def call(library: Path, x: np.ndarray) -> np.ndarray:
    """Run ``F`` from a built library (through the session's native host)."""
    return aotbench.Custom(f"{library}:F", lambda shape: shape, np.float32)(x)


@pytest.fixture
def three(tmp_path):
    """Three kernels built into a fresh cache, used oldest (a) to newest (c); the third build with their flag set
    made a precompiled header."""
    root = tmp_path / "cache"
    src = tmp_path / "src"
    exprs = {"a": "x[i] + 1.0f", "b": "x[i] * 2.0f", "c": "x[i] - 3.0f"}
    arts = {n: build(kernel(src, n, e), cache_dir=root) for n, e in exprs.items()}
    now = time.time()
    for i, n in enumerate("abc"):
        set_used(arts[n], now - 3000 + 1000 * i)
    return root, src, arts


def test_info_numbers_are_the_real_file_sizes(three):
    root, _, arts = three
    u = cache_admin.usage(root)
    real = files_under(root)
    assert u.total_bytes == sum(real.values()) and u.total_files == len(real)
    assert len(u.entries) == 3
    for e in u.entries:
        assert e.size_bytes == real[root / f"{e.key}.so"] + real[root / f"{e.key}.json"]
    assert u.library_bytes == sum(real[p] for p in real if p.parent == root and p.suffix in (".so", ".json"))
    assert u.index_files == 3 and u.tmp_files == 0 and u.cell_sources == 0
    assert u.pch_headers == 1 and u.pch_bytes == sum(real[p] for p in real if p.is_relative_to(root / "pch"))
    assert [e.key for e in u.entries] == [arts[n].key for n in "cba"]  # most recently used first
    root_src = three[1]
    assert {e.source for e in u.entries} == {str(root_src / f"{n}.cc") for n in "abc"}

    out = run_cli("info", "--cache-dir", str(root), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["total_bytes"] == sum(real.values()) and data["libraries"] == 3
    assert data["library_bytes"] == u.library_bytes
    table = run_cli("info", "--cache-dir", str(root))
    assert table.returncode == 0, table.stderr
    assert "3 (" in table.stdout and all(arts[n].key in table.stdout for n in "abc")


def test_prune_max_size_removes_least_recently_used_first(three, rng):
    root, src, arts = three
    before = cache_admin.usage(root)
    sizes = {e.key: e.size_bytes for e in before.entries}
    cap = before.total_bytes - before.pch_bytes - sizes[arts["a"].key]  # the precompiled header and one library
    out = run_cli("prune", "--cache-dir", str(root), "--max-size", str(cap))
    assert out.returncode == 0, out.stderr
    assert before.pch_headers == 1 and cache_admin.usage(root).pch_headers == 0  # made again when needed
    assert not arts["a"].path.exists() and not arts["a"].manifest_path.exists()
    assert arts["b"].path.exists() and arts["c"].path.exists()
    assert str(arts["a"].path) in out.stdout
    after = cache_admin.usage(root)
    assert after.total_bytes <= cap
    assert sum(files_under(root).values()) == after.total_bytes
    assert [e.key for e in after.entries] == [arts["c"].key, arts["b"].key]
    assert after.index_files == 2  # a's index (its only entry) went with it

    # the pruned kernel compiles again and works; a kept one is still a hit
    x = rng.standard_normal((3, 5)).astype(np.float32)
    again = build(src / "a.cc", cache_dir=root)
    assert not again.cache_hit and again.path.exists()
    np.testing.assert_allclose(call(again.path, x), x + 1.0, rtol=1e-6)
    kept = build(src / "c.cc", cache_dir=root)
    assert kept.cache_hit and kept.path == arts["c"].path
    np.testing.assert_allclose(call(kept.path, x), x - 3.0, rtol=1e-6)


def test_prune_order_follows_use_not_build_order(three):
    root, _, arts = three
    set_used(arts["a"], time.time())  # a is now the most recent, b the least
    before = cache_admin.usage(root)
    cap = before.total_bytes - before.pch_bytes - 1  # the precompiled header goes first, then b
    removed = cache_admin.prune(root, max_bytes=cap)
    assert arts["b"].path in removed and arts["b"].manifest_path in removed
    assert arts["a"].path.exists() and arts["c"].path.exists()


def test_prune_all_empties_the_cache(three):
    root, src, _arts = three
    cells = root / "cells" / "k-0123456789abcdef"
    cells.mkdir(parents=True)
    (cells / "k.cc").write_text("int x;\n")
    out = run_cli("prune", "--cache-dir", str(root), "--all")
    assert out.returncode == 0, out.stderr
    left = files_under(root)
    assert all(p.parent == root / "locks" for p in left), left  # only the (empty) lock files stay
    assert sum(left.values()) == 0
    u = cache_admin.usage(root)
    assert u.entries == () and u.index_files == 0 and u.cell_sources == 0
    assert not build(src / "b.cc", cache_dir=root).cache_hit


def test_dry_run_removes_nothing_but_reports(three):
    root, _, arts = three
    before = files_under(root)
    out = run_cli("prune", "--cache-dir", str(root), "--all", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert files_under(root) == before
    for n in "abc":
        assert f"would remove {arts[n].path}" in out.stdout
    listed = cache_admin.prune(root, max_bytes=0, dry_run=True)
    assert set(listed) >= {arts[n].path for n in "abc"} and files_under(root) == before


def test_stale_tmp_files_go_fresh_ones_stay(three):
    root, _, arts = three
    stale, fresh = root / "tmp" / "k-old-1-abcd.so", root / "tmp" / "k-new-2-abcd.so"
    half = root / f"{arts['a'].key[:-3]}zzz.so"  # a library whose manifest is not written yet: being published
    for p in (stale, fresh, half):
        p.write_bytes(b"\0" * 100)
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    removed = cache_admin.prune(root)
    assert removed == [stale]
    assert not stale.exists() and fresh.exists() and half.exists()
    assert all(arts[n].path.exists() for n in "abc")  # no size cap: no library removed
    assert cache_admin.usage(root).unpaired == (half,)


def test_prune_drops_dangling_index_entries_and_keeps_loaded_host(three):
    root, _, arts = three
    index = root / "index" / f"{arts['b'].manifest['base_key']}.json"
    data = json.loads(index.read_text())
    data["entries"].append({"key": "gone-00000000000000000000", "deps": [], "dirs": []})
    index.write_text(json.dumps(data))
    cache_admin.prune(root, keep=[arts["c"].path], everything=False)
    assert [e["key"] for e in json.loads(index.read_text())["entries"]] == [arts["b"].key]
    cache_admin.prune(root, everything=True, keep=[arts["c"].path])
    assert arts["c"].path.exists() and not arts["b"].path.exists()
    assert build(arts["c"].manifest["source"], cache_dir=root).cache_hit  # its index entry was kept


def test_parse_size():
    assert cache_admin.parse_size("1048576") == 1 << 20
    assert cache_admin.parse_size("500M") == 500 << 20
    assert cache_admin.parse_size("2G") == 2 << 30
    assert cache_admin.parse_size("1.5KiB") == 1536
    for bad in ("", "-1", "2Q", "M"):
        with pytest.raises(ValueError):
            cache_admin.parse_size(bad)
    out = run_cli("prune", "--max-size", "lots", "--cache-dir", "/nonexistent")
    assert out.returncode == 2 and "not a size" in out.stderr


def test_prune_waits_for_a_build_holding_the_base_lock(three):
    """A library is removed only under its base's lock, the one a build publishes under."""
    import fcntl
    import threading

    root, _, arts = three
    lock = root / "locks" / f"{arts['a'].manifest['base_key']}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        result: list = []
        worker = threading.Thread(target=lambda: result.append(cache_admin.prune(root, everything=True)))
        worker.start()
        worker.join(0.5)
        assert worker.is_alive()  # blocked on a's lock
        assert arts["a"].path.exists() and arts["a"].manifest_path.exists()
    finally:
        os.close(fd)
    worker.join(30)
    assert not worker.is_alive() and arts["a"].path in result[0]
    assert not arts["a"].path.exists()
