"""Issue 23 ("Trust, part two"), builds, cache and loading: a rebuilt prebuilt library, relative paths after
chdir, headers replaced behind the cache's back, a cell's edited file, an interrupted build, a full disk, no
home, a shared cells/ folder, and OpenMP without -fopenmp.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench import LoadError
from aotbench.build import cache
from aotbench.build import compile as build
from aotbench.build.cache import CacheError

SIG = ("(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream, "
       "void *extra)")
ROOT = Path(__file__).resolve().parents[2]


def scale_kernel(name: str, factor: str, prefix: str = "") -> str:
    """A float32 kernel computing ``out = factor * x`` (``factor`` is C++ text: a number or a macro)."""
    return prefix + textwrap.dedent(f"""\
        #include <cstdint>
        extern "C" int {name}{SIG} {{
          const float *x = static_cast<const float *>(params[0]);
          float *out = static_cast<float *>(params[1]);
          int64_t n = 1;
          for (int i = 0; i < ndims[0]; i++) n *= shapes[0][i];
          for (int64_t i = 0; i < n; i++) out[i] = ({factor}) * x[i];
          return 0;
        }}
        """)


def rand(rng, n: int = 13) -> np.ndarray:
    return rng.standard_normal(n).astype(np.float32)


def link(source: Path, out: Path, *extra: str) -> None:
    """Build a prebuilt library the way a user would, outside aotbench."""
    subprocess.run(["g++", "-shared", "-fPIC", "-O1", str(source), "-o", str(out), *extra], check=True)


# -- item 2: a prebuilt library rebuilt at the same path ----------------------------------------------------
def test_prebuilt_library_relinked_at_the_same_path_runs_its_new_code(tmp_path, monkeypatch, rng):
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "two.cc"
    src.write_text(scale_kernel("Two", "2.0f"))
    link(src, tmp_path / "libtwo.so")
    old = aotbench.Custom("libtwo.so:Two", lambda s: s, np.float32)
    x = rand(rng)
    np.testing.assert_array_equal(old(x), 2.0 * x)
    src.write_text(scale_kernel("Two", "3.0f"))
    link(src, tmp_path / "libtwo.so")  # g++ -o writes a new file at the same path
    new = aotbench.Custom("libtwo.so:Two", lambda s: s, np.float32)
    y = rand(rng)
    np.testing.assert_array_equal(new(y), 3.0 * y)
    np.testing.assert_array_equal(old(y), 2.0 * y)  # the op made before keeps the code it loaded
    src.write_text(scale_kernel("Two", "-0.5f"))
    link(src, tmp_path / "libtwo.so")
    np.testing.assert_array_equal(aotbench.Custom("libtwo.so:Two", lambda s: s, np.float32)(y), -0.5 * y)
    np.testing.assert_array_equal(new(x), 3.0 * x)


def test_prebuilt_library_whose_new_build_needs_its_folder_is_refused_with_why(tmp_path, monkeypatch, rng):
    """The relinked library needs a new sibling found through $ORIGIN: its private copy cannot load, so the error
    says the file changed since it was loaded and how to get the new code (restart, or a new file name)."""
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "three.cc"
    src.write_text(scale_kernel("Three", "4.0f"))
    link(src, tmp_path / "libthree.so")
    x = rand(rng)
    np.testing.assert_array_equal(aotbench.Custom("libthree.so:Three", lambda s: s, np.float32)(x), 4.0 * x)
    helper = tmp_path / "factor.cc"
    helper.write_text('extern "C" float three_factor() { return 5.0f; }\n')
    link(helper, tmp_path / "libfactor.so", "-Wl,-soname,libfactor.so")
    src.write_text(scale_kernel("Three", "three_factor()", 'extern "C" float three_factor();\n'))
    link(src, tmp_path / "libthree.so", "-L.", "-lfactor", "-Wl,-rpath,$ORIGIN")
    with pytest.raises(LoadError) as info:
        aotbench.Custom("libthree.so:Three", lambda s: s, np.float32)
    message = str(info.value)
    assert "changed since this process loaded it" in message and "libfactor.so" in message
    assert "Restart" in message and "new file name" in message


# -- item 6: relative paths mean the folder where the op was made --------------------------------------------
def test_relative_source_and_include_folder_are_resolved_when_the_op_is_made(tmp_path, monkeypatch, rng):
    for folder, factor in (("a", "2.0f"), ("b", "7.0f")):
        (tmp_path / folder / "inc").mkdir(parents=True)
        (tmp_path / folder / "kernel.cc").write_text(scale_kernel("K", "OFFSET_FACTOR", '#include "factor.h"\n'))
        (tmp_path / folder / "inc" / "factor.h").write_text(f"#define OFFSET_FACTOR {factor}\n")
    monkeypatch.chdir(tmp_path / "a")
    op = aotbench.Custom("kernel.cc:K", lambda s: s, np.float32, flags=["-Iinc"])
    x = rand(rng)
    np.testing.assert_array_equal(op(x), 2.0 * x)
    monkeypatch.chdir(tmp_path / "b")  # a folder with files of the same names
    other = op.with_flags([*op.spec.flags, "-O2"])
    np.testing.assert_array_equal(other(x), 2.0 * x)
    assert Path(other.source_path) == tmp_path / "a" / "kernel.cc"
    assert f"-I{tmp_path / 'a' / 'inc'}" in other.command


def test_compare_flags_after_chdir_compares_builds_of_the_op_s_own_source(tmp_path, monkeypatch, rng):
    for folder, factor in (("a", "2.0f"), ("b", "7.0f")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "kernel.cc").write_text(scale_kernel("K", factor))
    monkeypatch.chdir(tmp_path / "a")
    op = aotbench.Custom("kernel.cc:K", lambda s: s, np.float32)
    monkeypatch.chdir(tmp_path / "b")
    x = rand(rng, 64)
    result = aotbench.compare_flags(op, x, flag_sets={"O0": [], "O2": ["-O2"]}, budget_ms=5, vectorization=False)
    for label in ("O0", "O2"):
        built = result.fns[label]
        assert Path(built.source_path) == tmp_path / "a" / "kernel.cc", label
        np.testing.assert_array_equal(built(x), 2.0 * x)


# -- item 7: headers replaced with the same size and mtime ----------------------------------------------------
@pytest.fixture
def trusted_stat(monkeypatch):
    """Treat every file as old enough for the stat fast path (no 2 s wait for the racy window)."""
    monkeypatch.setattr(cache, "RACY_WINDOW_NS", 0)


def header_kernel(folder: Path, factor: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "factor.h").write_text(f"#define FACTOR {factor}\n")
    src = folder / "k.cc"
    src.write_text(scale_kernel("K", "FACTOR", '#include "factor.h"\n'))
    return src


@pytest.mark.slow
def test_header_replaced_by_same_size_content_with_the_old_mtime_is_rebuilt(tmp_path, trusted_stat, rng):
    src = header_kernel(tmp_path / "src", "2.5f")
    cache_dir = tmp_path / "cache"
    header = tmp_path / "src" / "factor.h"
    x = rand(rng)
    np.testing.assert_array_equal(aotbench.Custom(f"{src}:K", lambda s: s, np.float32, cache_dir=cache_dir)(x),
                                  np.float32(2.5) * x)
    assert build.build(src, cache_dir=cache_dir).cache_hit
    replacement = tmp_path / "elsewhere" / "factor.h"
    replacement.parent.mkdir()
    replacement.write_text("#define FACTOR 7.5f\n")  # the same size as the old header
    os.utime(replacement, ns=(header.stat().st_atime_ns, header.stat().st_mtime_ns))
    subprocess.run(["cp", "-p", str(replacement), str(header)], check=True)  # content in place, old mtime kept
    assert header.stat().st_size == len("#define FACTOR 2.5f\n")
    after = build.build(src, cache_dir=cache_dir)
    assert not after.cache_hit
    op = aotbench.Custom(f"{src}:K", lambda s: s, np.float32, cache_dir=cache_dir)
    np.testing.assert_array_equal(op(x), np.float32(7.5) * x)
    assert build.build(src, cache_dir=cache_dir).cache_hit  # and the new build is found by its stat again


@pytest.mark.slow
def test_header_symlink_repointed_to_a_same_size_same_mtime_file_is_rebuilt(tmp_path, trusted_stat, rng):
    folder = tmp_path / "src"
    src = header_kernel(folder, "1.5f")
    (folder / "factor.h").unlink()
    one, two = tmp_path / "one.h", tmp_path / "two.h"
    one.write_text("#define FACTOR 1.5f\n")
    two.write_text("#define FACTOR 9.5f\n")
    os.utime(two, ns=(one.stat().st_atime_ns, one.stat().st_mtime_ns))
    (folder / "factor.h").symlink_to(one)
    cache_dir = tmp_path / "cache"
    x = rand(rng)
    np.testing.assert_array_equal(aotbench.Custom(f"{src}:K", lambda s: s, np.float32, cache_dir=cache_dir)(x),
                                  np.float32(1.5) * x)
    tmp_link = folder / "factor.h.new"
    tmp_link.symlink_to(two)
    os.replace(tmp_link, folder / "factor.h")  # re-pointed: the link's own name, size and mtime say nothing
    assert not build.build(src, cache_dir=cache_dir).cache_hit
    np.testing.assert_array_equal(aotbench.Custom(f"{src}:K", lambda s: s, np.float32, cache_dir=cache_dir)(x),
                                  np.float32(9.5) * x)


@pytest.mark.slow
def test_index_entries_without_the_file_identity_are_checked_by_content(tmp_path, trusted_stat, rng):
    src = header_kernel(tmp_path / "src", "3.5f")
    cache_dir = tmp_path / "cache"
    first = build.build(src, cache_dir=cache_dir)
    index = cache_dir / "index" / f"{first.manifest['base_key']}.json"
    data = json.loads(index.read_text())
    for entry in data["entries"]:
        entry["deps"] = [d[:4] for d in entry["deps"]]  # as written before inode and ctime were recorded
    index.write_text(json.dumps(data))
    assert build.build(src, cache_dir=cache_dir).cache_hit  # unchanged content: still a hit
    header = tmp_path / "src" / "factor.h"
    st = header.stat()
    header.write_text("#define FACTOR 6.5f\n")
    os.utime(header, ns=(st.st_atime_ns, st.st_mtime_ns))
    for entry in (data := json.loads(index.read_text()))["entries"]:
        entry["deps"] = [d[:4] for d in entry["deps"]]
    index.write_text(json.dumps(data))
    assert not build.build(src, cache_dir=cache_dir).cache_hit
    x = rand(rng)
    np.testing.assert_array_equal(aotbench.Custom(f"{src}:K", lambda s: s, np.float32, cache_dir=cache_dir)(x),
                                  np.float32(6.5) * x)


# -- item 8: the cell's own text wins over its cached file ----------------------------------------------------
@pytest.mark.slow
def test_rerunning_an_unchanged_cell_compiles_the_cell_not_its_edited_file(tmp_path, rng):
    from ipython_shell import aotbench_shell

    cell = scale_kernel("Trust2CellWins", "2.0f")
    with aotbench_shell(tmp_path) as shell:
        shell.user_ns["same_shape"] = lambda s: s
        op = shell.run_cell_magic("aot_kernel", "cpu --out-shape same_shape", cell)
        x = rand(rng)
        np.testing.assert_array_equal(op(x), 2.0 * x)
        path = Path(op.source_path)
        path.write_text(path.read_text().replace("2.0f", "8.0f"))  # someone edits the cached file
        again = shell.run_cell_magic("aot_kernel", "cpu --out-shape same_shape", cell)
        y = rand(rng)
        np.testing.assert_array_equal(again(y), 2.0 * y)
        assert "8.0f" not in Path(again.source_path).read_text()
        del shell.user_ns["same_shape"]


# -- item 16: an interrupted build ends the whole compiler ----------------------------------------------------
SLOW_SOURCE = """\
#include <cstdint>
constexpr long spin(long n) { long s = 0; for (long i = 0; i < n; i++) s += i % 7; return s; }
constexpr long kSpin = spin(40000000L);
extern "C" int Slow(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                    void *extra) { return static_cast<int>(kSpin % 2); }
"""

INTERRUPT_SCRIPT = """\
import os, signal, sys, threading, time
from pathlib import Path
from aotbench.build import compile as build
cache_dir, slow, quick = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
flags = ("-fconstexpr-ops-limit=4000000000", "-fconstexpr-loop-limit=2000000000")
def compilers():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\\0", b" ").decode()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if str(cache_dir / "tmp") in cmdline and state != "Z":
            found.append((int(pid), cmdline))
    return found

def interrupt_once_cc1plus_runs():
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the interrupt must land while the compiler proper runs
        if any("cc1plus" in cmdline for _, cmdline in compilers()):
            print("SAW_CC1PLUS yes", flush=True)
            break
        time.sleep(0.02)
    time.sleep(0.3)
    os.kill(os.getpid(), signal.SIGINT)

threading.Thread(target=interrupt_once_cc1plus_runs, daemon=True).start()
started = time.monotonic()
try:
    build.build(slow, flags=flags, cache_dir=cache_dir)
    print("BUILT")
except KeyboardInterrupt:
    print("INTERRUPTED", round(time.monotonic() - started, 2))
alive = []
for pid, cmdline in compilers():
    alive.append(cmdline[:120])
    os.kill(pid, signal.SIGKILL)  # a failing run leaves no compiler behind either
print("ALIVE", alive)
print("TMP", sorted(p.name for p in (cache_dir / "tmp").iterdir()))
print("LATER", build.build(quick, cache_dir=cache_dir).cache_hit)
"""


@pytest.mark.slow
def test_interrupted_build_leaves_no_compiler_running_and_the_cache_works(tmp_path):
    slow, quick = tmp_path / "slow.cc", tmp_path / "quick.cc"
    slow.write_text(SLOW_SOURCE)
    quick.write_text(scale_kernel("Quick", "2.0f"))
    cache_dir = tmp_path / "cache"
    out = subprocess.run([sys.executable, "-c", INTERRUPT_SCRIPT, str(cache_dir), str(slow), str(quick)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert "SAW_CC1PLUS" in lines, out.stdout  # the interrupt came while cc1plus ran
    assert "INTERRUPTED" in lines, out.stdout
    assert lines["ALIVE"] == "[]", f"compiler processes still running after the interrupt: {lines['ALIVE']}"
    assert lines["TMP"] == "[]", f"temporary files left in tmp/: {lines['TMP']}"
    assert lines["LATER"] == "False"  # a later build works (a miss: nothing was published)


# -- item 17: a full disk is the cache's problem, not the kernel's ----------------------------------------------
def fake_full_disk_compiler(folder: Path) -> Path:
    """A g++ on PATH that behaves as g++ does on a full disk when it builds the kernel (and is g++ otherwise)."""
    real = shutil.which("g++")
    folder.mkdir()
    script = folder / "g++"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        for a in "$@"; do
          case "$a" in
            *full_disk.cc)
              echo "$a:9:1: fatal error: closing dependency file /x/tmp/full_disk.d: No space left on device" >&2
              echo "compilation terminated." >&2
              exit 1;;
          esac
        done
        exec {real} "$@"
        """))
    script.chmod(0o755)
    return folder


def test_full_disk_during_a_build_is_a_cache_error_naming_the_folder_and_fix(tmp_path, monkeypatch):
    bin_dir = fake_full_disk_compiler(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    src = tmp_path / "full_disk.cc"
    src.write_text(scale_kernel("Full", "2.0f"))
    cache_dir = tmp_path / "cache"
    with pytest.raises(CacheError) as info:
        build.build(src, cache_dir=cache_dir)
    message = str(info.value)
    assert "No space left on device" in message and str(cache_dir) in message
    assert "free" in message and "AOTBENCH_CACHE_DIR" in message
    assert not isinstance(info.value, aotbench.CompileError)
    assert list((cache_dir / "tmp").iterdir()) == []


def _unshare_mount_works() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                           capture_output=True, check=False)
    return probe.returncode == 0


FULL_DISK_SCRIPT = """\
import os
import sys
from pathlib import Path
from aotbench.build import compile as build
from aotbench.build.cache import CacheError
cache_dir = Path(sys.argv[1]) / "cache"
build.build(Path(sys.argv[2]), cache_dir=cache_dir)  # the cache's folders exist: now fill the disk
filler = Path(sys.argv[1]) / "filler"
fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
try:
    while True:
        os.write(fd, b"x" * 4096)
except OSError:
    pass
os.close(fd)
try:
    build.build(Path(sys.argv[3]), cache_dir=cache_dir)
    print("BUILT")
except CacheError as exc:
    print("CACHEERROR", exc)
except Exception as exc:
    print("OTHER", type(exc).__name__, exc)
"""


@pytest.mark.skipif(not _unshare_mount_works(), reason="needs unshare -m and mount (root)")
def test_a_really_full_disk_is_a_cache_error(tmp_path):
    first, second = tmp_path / "first.cc", tmp_path / "second.cc"
    first.write_text(scale_kernel("First", "2.0f"))
    second.write_text(scale_kernel("Second", "3.0f"))
    script = tmp_path / "fill.py"
    script.write_text(FULL_DISK_SCRIPT)
    out = subprocess.run(["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o size=2m tmpfs /mnt && exec "$@"', "sh",
                          sys.executable, str(script), "/mnt", str(first), str(second)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("CACHEERROR"), out.stdout + out.stderr
    assert "/mnt/cache" in out.stdout and "AOTBENCH_CACHE_DIR" in out.stdout


# -- item 18: no home ----------------------------------------------------------------------------------------
def test_no_home_and_no_password_entry_is_a_cache_error_naming_the_setting(monkeypatch):
    for name in ("HOME", "AOTBENCH_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)

    def missing(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", missing)  # what a uid absent from /etc/passwd gives
    with pytest.raises(CacheError) as info:
        cache.default_cache_dir()
    assert "AOTBENCH_CACHE_DIR" in str(info.value) and "HOME" in str(info.value)
    with pytest.raises(CacheError, match="AOTBENCH_CACHE_DIR"):
        aotbench.Custom(f"{ROOT / 'bench' / 'kernels' / 'scale.cc'}:Scale", lambda s: s, np.float32)


# -- item 19: every folder of the cache is checked -----------------------------------------------------------
@pytest.mark.parametrize("folder", ["cells", "travel", "prebuilt"])
def test_a_shared_cache_folder_is_refused(tmp_path, folder):
    root = cache.prepare(tmp_path / "cache")
    (root / folder).mkdir(exist_ok=True)  # made by prepare now; by a cell, a travelling op or a reload before
    os.chmod(root / folder, 0o777)
    with pytest.raises(CacheError, match=f"{folder} is .*world-writable"):
        cache.prepare(root)
    os.chmod(root / folder, 0o700)
    if os.geteuid() == 0:
        os.chown(root / folder, 54321, -1)
        with pytest.raises(CacheError, match=f"{folder} is owned by uid 54321"):
            cache.prepare(root)


def test_a_cell_is_not_written_into_a_cells_folder_others_can_write(tmp_path):
    from aotbench.build import cells

    root = tmp_path / "cache"
    (root / "cells").mkdir(parents=True)
    os.chmod(root, 0o700)
    os.chmod(root / "cells", 0o777)
    with pytest.raises(CacheError, match="world-writable"):
        cells.write_cell_source(scale_kernel("C", "1.0f"), "C", "cpu", root)
    assert stat.S_IMODE((root / "cells").stat().st_mode) == 0o777 and not any((root / "cells").iterdir())


# -- item 20: OpenMP without -fopenmp ------------------------------------------------------------------------
OMP_KERNEL = scale_kernel("Omp", "1.0f + 0.0f * omp_get_thread_num()", "#include <omp.h>\n")


@pytest.mark.slow
def test_openmp_symbols_missing_name_fopenmp_not_lm(tmp_path, rng):
    src = tmp_path / "omp.cc"
    src.write_text(OMP_KERNEL)
    with pytest.raises(LoadError) as info:
        aotbench.Custom(f"{src}:Omp", lambda s: s, np.float32, cache_dir=tmp_path / "cache")
    message = str(info.value)
    assert "omp_get_thread_num" in message and "-fopenmp" in message and "-lm" not in message
    op = aotbench.Custom(f"{src}:Omp", lambda s: s, np.float32, flags=["-fopenmp"], cache_dir=tmp_path / "cache")
    x = rand(rng)
    np.testing.assert_array_equal(op(x), x)
