"""The precompiled ``custom_aot_extra.h`` (``build.pch``), with the real g++: which sources use it, that g++ really
loads it and the library is the same, and that nothing bad a .gch can do (truncated, damaged in place, built by
two threads at once, refused by odd flags, shadowed by a file beside the kernel) fails a build or changes a result.

Kernels are written under ``tmp_path`` from ``kernels/build_elementwise.cc.in`` (``<cstring>``, then the header)
or inline, and compared with numpy on fresh random inputs. A flag set's PCH is made on its third cache miss.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.build import cache as cache_files
from aotbench.build import cache_admin, cells, pch
from aotbench.build.compile import build

TEMPLATE = Path(__file__).resolve().parents[1] / "support" / "kernels" / "build_elementwise.cc.in"
OURS = Path(aotbench.get_include()) / "custom_aot_extra.h"

pytestmark = [pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ on PATH"), pytest.mark.slow]


@pytest.fixture(autouse=True)
def _pch_on(monkeypatch):
    monkeypatch.delenv(pch.SWITCH, raising=False)


def kernel(path: Path, expr: str, prelude: str = "", text: str | None = None) -> Path:
    """The template kernel ``F`` (``out[i] = expr``), or ``text``, written to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text is not None else
                    TEMPLATE.read_text().replace("@PRELUDE@", prelude).replace("@EXPR@", expr))
    return path


def run(library: Path, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``F`` from a built library on a fresh random input: (input, output)."""
    x = rng.standard_normal((4, 9)).astype(np.float32)
    return x, aotbench.Custom(f"{library}:F", lambda shape: shape, np.float32)(x)


def states(root: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (root / "pch").glob("*.json")}


def warm(root: Path, folder: Path, flags: tuple[str, ...] = ()) -> pch.Pch:
    """Three misses with ``flags``: the third makes the PCH. Returns it."""
    for i in range(pch.BUILD_ON_MISS):
        build(kernel(folder / f"warm{i}.cc", f"x[i] + {i}.5f"), flags=flags, cache_dir=root)
    made = pch.describe(root.absolute(), shutil.which("g++"), flags)
    assert states(root)[made.key]["state"] == "built" and made.gch.is_file()
    return made


def loads_pch(command: tuple[str, ...], gch: Path, scratch: Path) -> bool:
    """Whether g++ loads ``gch`` for this command (``-H`` marks a PCH it uses with ``!``)."""
    argv = list(command)
    argv[argv.index("-o") + 1] = str(scratch)
    err = subprocess.run([*argv, "-H"], capture_output=True, text=True, check=True).stderr
    return f"! {gch}" in err.splitlines()


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> tuple[Path, pch.Pch]:
    """A cache whose PCH for the default flags is made, shared by the tests that only read it."""
    root = tmp_path_factory.mktemp("pch-cache")
    with pytest.MonkeyPatch.context() as env:
        env.delenv(pch.SWITCH, raising=False)
        return root, warm(root, tmp_path_factory.mktemp("pch-warm"))


def test_opening_lines_that_allow_the_pch():
    """Comments, ``#line`` and standard headers may come first; anything else, or no header at all, may not."""
    header = '#include "custom_aot_extra.h"\n'
    assert pch.leading_includes(header) == ()
    assert pch.leading_includes(f'#line 1 "<cell>"\n// c\n/* a\n b */\n#include <cstring>\n#include <vector>  '
                                f'// v\n#include <stdint.h>\n{header}int x;') == ("cstring", "vector", "stdint.h")
    assert pch.leading_includes("\ufeff#include <custom_aot_extra.h>\n") == ()
    for before in ("#define N 4\n", '#include "helper.h"\n', "#include <dlfcn.h>\n", "#ifdef X\n#endif\n",
                   "int x;\n", "// a comment that goes on \\\n", "#pragma once\n"):
        assert pch.leading_includes(before + header) is None, before
    assert pch.leading_includes("#include <vector>\nint main() {}\n") is None
    # g++ ignores a second directive on one line ("extra tokens"): the header would not be included at all
    assert pch.leading_includes(f"#include <cstring> {header}") is None
    assert pch.leading_includes(f"  #include <cstring> // c\n\n  {header}") == ("cstring",)


def test_include_folders_from_the_environment_turn_the_pch_off(cache, tmp_path, monkeypatch):
    """CPATH (and CPLUS_INCLUDE_PATH, C_INCLUDE_PATH) folders are searched too; a header added there later must
    be found as the documented command finds it, so such builds use the documented command."""
    root, _ = cache
    monkeypatch.setenv("CPATH", str(tmp_path / "cpath"))
    built = build(kernel(tmp_path / "src" / "k.cc", "x[i] * 2.5f"), cache_dir=root)
    assert "-include" not in built.command


def test_the_pch_is_loaded_and_the_library_is_the_same(cache, tmp_path, rng, monkeypatch):
    """A source that opens with <cstring> and the header pre-includes the link beside the .gch, g++ loads the
    .gch for that command, the dependency output still lists the header and the system headers it read, and the
    library is byte for byte the one the bare documented command makes."""
    root, made = cache
    src = kernel(tmp_path / "src" / "k.cc", "x[i] * 1.5f - 2.0f")
    used = build(src, cache_dir=root)
    assert not used.cache_hit and used.command[used.command.index("-include") + 1] == str(made.header)
    assert loads_pch(used.command, made.gch, tmp_path / "probe.so")
    assert str(OURS) in used.dependencies and "iostream" in {Path(d).name for d in used.dependencies}
    assert not [d for d in used.dependencies if Path(d).is_relative_to(root / "pch")]  # its key is in the command

    monkeypatch.setenv(pch.SWITCH, "0")
    bare = build(src, cache_dir=root)
    assert "-include" not in bare.command and bare.path != used.path
    assert bare.path.read_bytes() == used.path.read_bytes()
    x, y = run(used.path, rng)
    np.testing.assert_array_equal(y, x * np.float32(1.5) - np.float32(2.0))
    np.testing.assert_array_equal(run(bare.path, np.random.default_rng(0))[1],
                                  run(used.path, np.random.default_rng(0))[1])


def test_pch_off_switch_gives_the_documented_command(tmp_path, monkeypatch):
    """``AOTBENCH_PCH=0``: the documented argv, and no pch folder made, however many builds."""
    monkeypatch.setenv(pch.SWITCH, "0")
    root = tmp_path / "cache"
    for i in range(3):
        art = build(kernel(tmp_path / "src" / f"k{i}.cc", f"x[i] * {i}.0f"), cache_dir=root)
        assert "-include" not in art.command
    assert not any((root / "pch").iterdir())


def test_a_header_beside_the_kernel_is_the_one_used(cache, tmp_path, rng):
    """MindSpore's header (here: aotbench's plus a macro) beside the kernel is found first by the documented
    command, so no PCH of aotbench's header is pre-included, and the kernel sees the macro."""
    root, _ = cache
    folder = tmp_path / "ms"
    folder.mkdir()
    local = OURS.read_text().replace("#define AOTBENCH_CUSTOM_AOT_EXTRA_H_",
                                     "#define AOTBENCH_CUSTOM_AOT_EXTRA_H_\n#define LOCAL_SCALE 7.0f")
    (folder / "custom_aot_extra.h").write_text(local)
    art = build(kernel(folder / "k.cc", "x[i] * LOCAL_SCALE"), cache_dir=root)
    assert "-include" not in art.command and str(folder / "custom_aot_extra.h") in art.dependencies
    x, y = run(art.path, rng)
    np.testing.assert_array_equal(y, x * np.float32(7.0))


def test_sources_that_do_not_open_with_the_header_use_the_documented_command(cache, tmp_path, rng):
    """A macro, a header of the user's, or a non-standard system header before ours; a user file named like a
    standard header; a flag that pre-includes a file: each builds with the documented command and computes."""
    root, _ = cache
    body = TEMPLATE.read_text().replace("@PRELUDE@", "").replace("@EXPR@", "x[i] * SCALE")
    cases = {
        "macro": "#define SCALE 3.0f\n",
        "local": '#include "scale.h"\n',
        "posix": "#include <unistd.h>\n#define SCALE 3.0f\n",
    }
    for name, before in cases.items():
        folder = tmp_path / name
        kernel(folder / "scale.h", "", text="#define SCALE 3.0f\n")
        art = build(kernel(folder / "k.cc", "", text=before + body), cache_dir=root)
        assert "-include" not in art.command, name
        x, y = run(art.path, rng)
        np.testing.assert_array_equal(y, x * np.float32(3.0))

    own = tmp_path / "own"
    kernel(own / "cstring", "", text="#include_next <cstring>\n#define SCALE 3.0f\n")  # the kernel's own <cstring>
    art = build(kernel(own / "k.cc", "", text=body), cache_dir=root)
    assert "-include" not in art.command and str(own / "cstring") in art.dependencies
    x, y = run(art.path, rng)
    np.testing.assert_array_equal(y, x * np.float32(3.0))

    pre = tmp_path / "pre"
    kernel(pre / "scale.h", "", text="#define SCALE 3.0f\n")
    art = build(kernel(pre / "k.cc", "x[i] * SCALE"), flags=("-include", str(pre / "scale.h")), cache_dir=root)
    assert art.command.count("-include") == 1  # the user's only
    x, y = run(art.path, rng)
    np.testing.assert_array_equal(y, x * np.float32(3.0))


def test_a_file_beside_the_kernel_that_a_pch_header_would_find_disables_it(cache, tmp_path, rng):
    """The kernel's folder is an -I folder of the documented command: a ``cstddef`` there is what the header's
    ``#include <cstddef>`` reads, so the PCH (made without that folder) must not be used."""
    root, _ = cache
    folder = tmp_path / "shadow"
    kernel(folder / "cstddef", "", text="#include_next <cstddef>\n#define SHADOW 5.0f\n")
    art = build(kernel(folder / "k.cc", "x[i] * SHADOW"), cache_dir=root)
    assert "-include" not in art.command and str(folder / "cstddef") in art.dependencies
    x, y = run(art.path, rng)
    np.testing.assert_array_equal(y, x * np.float32(5.0))


def test_a_cell_uses_the_pch_and_its_errors_still_name_cell_lines(cache, rng):
    """A cell's source starts with ``#line 1 "<cell>"``: it uses the PCH, and a compile error in it is the
    kernel's (not blamed on the PCH), with the cell's line."""
    root, made = cache
    body = TEMPLATE.read_text().replace("@PRELUDE@", "").replace("@EXPR@", "x[i] * 0.25f")
    art = build(cells.write_cell_source(body, "pchcell", "cpu", cache_dir=root), cache_dir=root)
    assert str(made.header) in art.command
    x, y = run(art.path, rng)
    np.testing.assert_array_equal(y, x * np.float32(0.25))
    broken = body.replace("x[i] * 0.25f", "x[i] * undefined_name")
    line = next(i for i, t in enumerate(broken.splitlines(), 1) if "undefined_name" in t)
    with pytest.raises(aotbench.CompileError) as info:
        build(cells.write_cell_source(broken, "pchcell", "cpu", cache_dir=root), cache_dir=root)
    assert str(made.header) in info.value.argv
    assert [(d.file, d.line) for d in info.value.errors] == [("<cell>", line)]
    assert states(root)[made.key]["state"] == "built" and made.gch.is_file()


def test_each_flag_set_has_its_own_pch_and_odd_flags_fall_back(tmp_path, rng):
    """-O3 -march=native -D... -fopenmp get a PCH of their own that g++ loads; -Weffc++ makes the header warn,
    so its PCH is refused and the documented command (whose log shows the warning) is used."""
    root = tmp_path / "cache"
    flags = ("-O3", "-march=native", "-DSCALE=2.5f", "-fopenmp")
    made = warm(root, tmp_path / "warm", flags)
    art = build(kernel(tmp_path / "src" / "k.cc", "x[i] * SCALE"), flags=flags, cache_dir=root)
    assert str(made.header) in art.command and loads_pch(art.command, made.gch, tmp_path / "probe.so")
    x, y = run(art.path, rng)
    np.testing.assert_array_equal(y, x * np.float32(2.5))

    odd = ("-Weffc++",)
    arts = [build(kernel(tmp_path / "odd" / f"k{i}.cc", f"x[i] + {i}.0f"), flags=odd, cache_dir=root)
            for i in range(pch.BUILD_ON_MISS)]  # the last miss tries to make the PCH
    refused = pch.describe(root.absolute(), shutil.which("g++"), odd)
    assert states(root)[refused.key]["state"] == "refused" and not refused.gch.exists()
    assert all("-include" in a.command for a in arts[:-1]) and "-include" not in arts[-1].command
    assert all("Weffc++" in a.log for a in arts)
    x, y = run(arts[-1].path, rng)
    np.testing.assert_array_equal(y, x + np.float32(pch.BUILD_ON_MISS - 1))
    assert build(tmp_path / "odd" / f"k{pch.BUILD_ON_MISS - 1}.cc", flags=odd, cache_dir=root).cache_hit


def test_a_truncated_gch_is_made_again(tmp_path, rng):
    """A .gch cut short (its size no longer matches its manifest) is rebuilt before the next compile reads it."""
    root = tmp_path / "cache"
    made = warm(root, tmp_path / "warm")
    whole = made.gch.read_bytes()
    made.gch.write_bytes(whole[: len(whole) // 3])
    art = build(kernel(tmp_path / "src" / "k.cc", "x[i] - 4.0f"), cache_dir=root)
    assert str(made.header) in art.command
    recorded = states(root)[made.key]["gch"]
    assert made.gch.stat().st_size == recorded[1] > len(whole) // 3
    assert cache_files.sha256_file(made.gch) == recorded[3]
    assert loads_pch(art.command, made.gch, tmp_path / "probe.so")
    x, y = run(art.path, rng)
    np.testing.assert_array_equal(y, x - np.float32(4.0))


@pytest.mark.parametrize("where", [0.1, 0.3, 0.6])
def test_a_gch_damaged_in_place_never_fails_a_build(tmp_path, rng, where, monkeypatch):
    """Bytes of the .gch changed with its whole stat kept (as a disk's damage would: the stat check trusts it):
    the hash taken while g++ compiles catches it, the build is done again without it, and the next miss makes a
    new one."""
    root = tmp_path / "cache"
    made = warm(root, tmp_path / "warm")
    state = states(root)[made.key]
    old = time.time() - 60  # older than the racy window, so size and mtime are trusted
    data = bytearray(made.gch.read_bytes())
    start = int(len(data) * where)
    data[start:start + 4096] = bytes(b ^ 0x5A for b in data[start:start + 4096])
    made.gch.write_bytes(bytes(data))
    os.utime(made.gch, ns=(int(old * 1e9), int(old * 1e9)))
    st = made.gch.stat()
    state["gch"][2] = st.st_mtime_ns
    state["gch"][4:] = [st.st_dev, st.st_ino, st.st_ctime_ns]  # the recorded stat is the damaged file's
    monkeypatch.setattr(cache_files, "RACY_WINDOW_NS", 0)  # and its fresh ctime is trusted too
    made.manifest.write_text(json.dumps(state))

    art = build(kernel(tmp_path / "src" / "k.cc", "x[i] * -3.0f"), cache_dir=root)
    x, y = run(art.path, rng)
    np.testing.assert_array_equal(y, x * np.float32(-3.0))
    assert states(root)[made.key]["state"] == "wanted" and not made.gch.exists()
    again = build(kernel(tmp_path / "src" / "k2.cc", "x[i] * -5.0f"), cache_dir=root)
    assert states(root)[made.key]["state"] == "built" and loads_pch(again.command, made.gch, tmp_path / "p.so")
    x, y = run(again.path, rng)
    np.testing.assert_array_equal(y, x * np.float32(-5.0))


def test_threads_building_at_once_make_one_pch(tmp_path, rng, monkeypatch):
    """Four threads miss at once with the PCH wanted: one builds it (the others wait on its lock), all builds
    succeed and compute, and nothing is left in tmp/."""
    root = tmp_path / "cache"
    for i in range(pch.BUILD_ON_MISS - 1):  # the misses before the one that makes the PCH
        build(kernel(tmp_path / "warm" / f"w{i}.cc", f"x[i] + {i}.0f"), cache_dir=root)
    assert not list((root / "pch").glob("*/*.gch"))
    made = pch.describe(root.absolute(), shutil.which("g++"), ())
    builds = []
    real = pch._build
    monkeypatch.setattr(pch, "_build", lambda p: builds.append(p.key) or real(p))
    sources = [kernel(tmp_path / "src" / f"t{i}.cc", f"x[i] * {i + 2}.0f") for i in range(4)]
    results: dict[int, object] = {}
    go = threading.Barrier(len(sources))

    def worker(i: int) -> None:
        go.wait()
        try:
            results[i] = build(sources[i], cache_dir=root)
        except Exception as exc:  # noqa: BLE001 - reported below
            results[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(sources))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert builds == [made.key]
    assert states(root)[made.key]["state"] == "built"
    for i, art in results.items():
        assert not isinstance(art, Exception), art
        x, y = run(art.path, rng)
        np.testing.assert_array_equal(y, x * np.float32(i + 2))
    assert list((root / "tmp").iterdir()) == []


def test_prune_removes_precompiled_headers_and_builds_go_on(tmp_path, rng):
    """``cache prune --all`` removes the PCH with everything else; ``--max-size`` takes PCHs first. The next
    builds link the header again, remake the PCH on the third miss and compute."""
    root = tmp_path / "cache"
    made = warm(root, tmp_path / "warm")
    u = cache_admin.usage(root)
    assert u.pch_headers == 1 and u.pch_bytes >= made.gch.stat().st_size
    removed = cache_admin.prune(root, max_bytes=u.total_bytes - 1)
    assert made.gch in removed and made.manifest in removed
    assert len(cache_admin.usage(root).entries) == pch.BUILD_ON_MISS  # the libraries all stay
    warm(root, tmp_path / "again")
    removed = cache_admin.prune(root, everything=True)
    assert made.gch in removed and not made.folder.exists() and cache_admin.usage(root).pch_headers == 0
    art = build(kernel(tmp_path / "src" / "k.cc", "x[i] + 0.125f"), cache_dir=root)
    assert str(made.header) in art.command
    x, y = run(art.path, rng)
    np.testing.assert_array_equal(y, x + np.float32(0.125))


def test_a_cache_where_no_link_can_be_made_uses_the_documented_command(tmp_path, rng, monkeypatch):
    """A filesystem without symbolic links (or any other trouble readying the PCH) never fails the build: it takes
    the documented command, and a second build of it is a hit."""
    def refuse(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "symlink", refuse)
    root = tmp_path / "cache"
    src = kernel(tmp_path / "src" / "k.cc", "x[i] * 6.0f")
    art = build(src, cache_dir=root)
    assert "-include" not in art.command
    assert build(src, cache_dir=root).cache_hit
    x, y = run(art.path, rng)
    np.testing.assert_array_equal(y, x * np.float32(6.0))
