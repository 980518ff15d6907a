"""The build layer: the documented g++ command, the manifest, compile errors, a missing compiler, dependency files.

Every kernel is written under ``tmp_path`` from ``kernels/build_elementwise.cc.in`` (or inline), compiled with the
real g++, called, and compared with numpy on fresh random inputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench._version import HEADER_VERSION
from aotbench.build import compile as build_mod
from aotbench.build.compile import build, parse_depfile, parse_diagnostics
from aotbench.build.diagnostics import Diagnostic

TEMPLATE = Path(__file__).resolve().parents[1] / "support" / "kernels" / "build_elementwise.cc.in"
BASE_FLAGS = ["-std=c++17", "--shared", "-fPIC", "-D_GLIBCXX_USE_CXX11_ABI=0"]

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ on PATH")


def write_kernel(path: Path, expr: str, prelude: str = "") -> Path:
    """Write the template kernel ``F`` (``out[i] = expr``) to ``path`` and return ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(TEMPLATE.read_text().replace("@PRELUDE@", prelude).replace("@EXPR@", expr))
    return path


def make_op(source: Path, **kw) -> aotbench.Op:
    """``Custom`` on the template's ``F``: one float32 output shaped like the input."""
    return aotbench.Custom(f"{source}:F", lambda shape: shape, np.float32, **kw)


def assert_computes(op, reference, rng: np.random.Generator) -> None:
    """Call ``op`` on a fresh random float32 array and compare with ``reference(x)``."""
    x = rng.standard_normal((3, 7)).astype(np.float32)
    np.testing.assert_allclose(op(x), reference(x), rtol=1e-6, atol=1e-6)


def sha256(path: Path | str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def fake_gxx(directory: Path, script: str) -> Path:
    """A ``g++`` shell script in ``directory`` (put that directory first on PATH to use it)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "g++"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


# -- the command ---------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_command_is_the_documented_argv_with_user_flags_appended(tmp_path, rng, monkeypatch):
    """``artifact.command`` and ``op.command`` are exactly ABI.md section 6's list, then the user's flags; a source
    that opens with the header also pre-includes the precompiled header's link (after the include folders), and
    with ``AOTBENCH_PCH=0`` the command is the documented list and nothing else."""
    src = write_kernel(tmp_path / "src" / "affine.cc", "x[i] * 3.0f + 0.5f")
    cache = tmp_path / "cache"
    with monkeypatch.context() as env:
        env.setenv("AOTBENCH_PCH", "0")
        bare = build(src, flags=("-O3",), cache_dir=cache)
    assert bare.command == (shutil.which("g++"), *BASE_FLAGS, f"-I{aotbench.get_include()}", f"-I{src.parent}",
                            "-o", str(bare.path), str(src), "-O3")
    artifact = build(src, flags=("-O3",), cache_dir=cache)
    link = Path(artifact.command[artifact.command.index("-include") + 1])
    assert link.parent.parent == cache / "pch" and link.name == "custom_aot_extra.h"
    assert link.resolve() == (Path(aotbench.get_include()) / "custom_aot_extra.h").resolve()
    expected = [shutil.which("g++"), *BASE_FLAGS, f"-I{aotbench.get_include()}", f"-I{src.parent}",
                "-include", str(link), "-o", str(artifact.path), str(src), "-O3"]
    assert artifact.command == tuple(expected)
    assert expected[0].endswith("g++") and Path(expected[0]).is_absolute()
    assert (Path(aotbench.get_include()) / "custom_aot_extra.h").is_file()
    assert artifact.path.parent == cache and artifact.path.is_file()
    assert re.fullmatch(r"affine-[0-9a-f]{8,}\.so", artifact.path.name)

    op = make_op(src, flags="-O3", cache_dir=cache)  # a string of flags is split like a shell would
    assert op.command == expected
    assert op.artifact.cache_hit
    assert_computes(op, lambda x: x * 3.0 + 0.5, rng)


@pytest.mark.slow
def test_flags_reach_the_compiler_in_order(tmp_path, rng):
    """User flags are appended after the source, in the order given, and really change the binary."""
    src = write_kernel(tmp_path / "src" / "scaled.cc", "x[i] * SCALE",
                       prelude="#ifndef SCALE\n#define SCALE 2.0f\n#endif")
    cache = tmp_path / "cache"
    default = make_op(src, cache_dir=cache)
    scaled = make_op(src, flags=["-O2", "-DSCALE=-5.5f"], cache_dir=cache)
    assert default.command[-1] == str(src)
    assert scaled.command[-3:] == [str(src), "-O2", "-DSCALE=-5.5f"]
    assert scaled.artifact.path != default.artifact.path
    assert_computes(default, lambda x: x * 2.0, rng)
    assert_computes(scaled, lambda x: x * -5.5, rng)


def test_manifest_records_how_the_library_was_built(tmp_path):
    """The JSON manifest beside the library holds argv, argv_run (with -MD -MF), the compiler identity, the log,
    every included file with its sha256, the library's sha256 and the versions."""
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i] * local_scale()", prelude='#include "local_scale.h"')
    header = src.parent / "local_scale.h"
    header.write_text("inline float local_scale() { return 1.25f; }\n")
    artifact = build(src, flags=("-O1",), cache_dir=tmp_path / "cache")
    manifest_path = artifact.path.with_suffix(".json")
    assert artifact.manifest_path == manifest_path
    manifest = json.loads(manifest_path.read_text())

    argv = manifest["argv"]
    assert argv == list(artifact.command)
    run = manifest["argv_run"]
    out_index = argv.index("-o") + 1
    assert run[:out_index] == argv[:out_index]
    assert run[out_index] != argv[out_index] and run[out_index].endswith(".so")  # compiled into a scratch name
    assert run[out_index + 1:-4] == argv[out_index + 1:] == [str(src), "-O1"]
    assert run[-4:-1] == ["-fpch-deps", "-MD", "-MF"] and run[-1].endswith(".d")  # with the PCH's files listed

    def probe(flag):
        return subprocess.run([argv[0], flag], check=True, capture_output=True, text=True).stdout.splitlines()[0]
    assert probe("--version").split(" ", 1)[1] in manifest["compiler"]  # "g++ (Debian 12.2.0-14) 12.2.0"
    assert probe("-dumpmachine") in manifest["compiler"]
    assert manifest["log"] == artifact.log
    assert manifest["aotbench_version"] == aotbench.__version__
    assert manifest["header_version"] == HEADER_VERSION
    assert manifest["artifact_sha256"] == sha256(artifact.path)

    deps = {d["path"]: d["sha256"] for d in manifest["dependencies"]}
    included = Path(aotbench.get_include()) / "custom_aot_extra.h"
    assert deps[str(header)] == sha256(header)
    assert deps[str(included)] == sha256(included)
    assert str(src) not in deps  # the source itself is hashed into the key, not listed as a dependency
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in deps.values())
    assert set(artifact.dependencies) == set(deps)
    assert artifact.manifest == manifest


@pytest.mark.slow
def test_same_file_name_in_two_folders_gives_two_libraries(tmp_path, rng):
    """Two different ``kernel.cc`` in different folders build two libraries, and each op runs its own code
    (MindSpore's cache keyed on the base name, so the second op silently ran the first one's kernel)."""
    first = write_kernel(tmp_path / "src" / "a" / "kernel.cc", "x[i] * 2.0f")
    second = write_kernel(tmp_path / "src" / "b" / "kernel.cc", "x[i] + 5.0f")
    op1, op2 = make_op(first), make_op(second)
    assert op1.artifact.path != op2.artifact.path
    assert op1.artifact.path.name.startswith("kernel-") and op2.artifact.path.name.startswith("kernel-")
    assert_computes(op2, lambda x: x + 5.0, rng)
    assert_computes(op1, lambda x: x * 2.0, rng)
    assert_computes(op2, lambda x: x + 5.0, rng)


@pytest.mark.slow
def test_directory_with_spaces_and_quotes_builds_and_runs(tmp_path, rng):
    """A kernel (and a header beside it) in a folder whose name has spaces, quotes, ``$`` and ``#`` builds with an
    argv list (no shell), the dependency file is parsed back to the exact header path, and the op runs."""
    folder = tmp_path / "my kernels \"v2\" it's $HOME #1"
    src = write_kernel(folder / "my kernel.cc", "x[i] - offset()", prelude='#include "offset here.h"')
    header = folder / "offset here.h"
    header.write_text("inline float offset() { return 0.75f; }\n")
    op = make_op(src, cache_dir=tmp_path / "cache")
    assert str(header) in op.artifact.dependencies
    assert op.command[op.command.index("-o") + 2] == str(src)
    assert f"-I{folder}" in op.command
    assert re.fullmatch(r"my_kernel-[0-9a-f]+\.so", op.artifact.path.name)
    assert_computes(op, lambda x: x - 0.75, rng)


# -- compile errors ------------------------------------------------------------------------------------------

def test_compile_error_carries_log_and_diagnostics(tmp_path):
    """A kernel that does not compile raises CompileError with the return code, the complete log and the error
    parsed to the file, line and column where it was written; nothing is published, and fixing it builds."""
    src = write_kernel(tmp_path / "src" / "broken.cc", "x[i] + undeclared_offset")
    lines = src.read_text().splitlines()
    line_no = next(i for i, text in enumerate(lines, 1) if "undeclared_offset" in text)
    column = lines[line_no - 1].index("undeclared_offset") + 1
    cache = tmp_path / "cache"
    with pytest.raises(aotbench.CompileError) as info:
        build(src, cache_dir=cache)
    err = info.value
    assert isinstance(err, aotbench.AotbenchError)
    assert err.returncode != 0
    assert err.argv[0].endswith("g++") and str(src) in err.argv
    assert f"{src}:{line_no}:{column}: error:" in err.log
    assert "In function" in err.log  # the whole compiler output, not just the error lines
    errors = [d for d in err.diagnostics if d.severity == "error"]
    assert errors, err.log
    first = errors[0]
    assert (first.file, first.line, first.column) == (str(src), line_no, column)
    assert "undeclared_offset" in first.message
    assert f"{src.name}:{line_no}:{column}" in str(err)
    assert not list(cache.glob("*.so")) and not list((cache / "tmp").iterdir())

    write_kernel(src, "x[i] + 1.0f")
    assert not build(src, cache_dir=cache).cache_hit


def test_custom_raises_compile_error(tmp_path):
    """``Custom`` on a broken kernel raises (so "Run All" stops) instead of returning something unusable."""
    src = write_kernel(tmp_path / "src" / "broken.cc", "x[i] +* ;")
    with pytest.raises(aotbench.CompileError) as info:
        make_op(src)
    assert info.value.errors and info.value.errors[0].file == str(src)


def test_warnings_build_and_are_kept_in_the_log(tmp_path, rng):
    """A kernel with only warnings builds; the warning is in ``op.log``, also when the library comes from cache."""
    src = write_kernel(tmp_path / "src" / "warn.cc", "x[i] * 4.0f",
                       prelude="inline int warn_me() { int unused_local_variable = 7; return 0; }")
    op = make_op(src, flags=["-Wall"])
    assert "unused_local_variable" in op.log and "warning" in op.log
    assert any(d.severity == "warning" for d in parse_diagnostics(op.log))
    assert_computes(op, lambda x: x * 4.0, rng)
    again = make_op(src, flags=["-Wall"])
    assert again.artifact.cache_hit and again.log == op.log


def test_fake_compiler_error_is_parsed(tmp_path, monkeypatch):
    """The g++ found on PATH at call time is the one that runs; its stderr is captured and parsed."""
    fake = fake_gxx(tmp_path / "bin", 'echo "fake.cc:3:7: error: boom" >&2\nexit 1\n')
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i]")
    with pytest.raises(aotbench.CompileError) as info:
        build(src, cache_dir=tmp_path / "cache")
    err = info.value
    assert err.returncode == 1
    assert err.argv[0] == str(fake)
    assert "fake.cc:3:7: error: boom" in err.log
    assert err.diagnostics == [Diagnostic("fake.cc", 3, 7, "error", "boom")]
    assert "fake.cc:3:7: error: boom" in str(err)


def test_parse_diagnostics_severities_and_missing_column():
    """GCC lines with and without a column, every severity, in order; other lines are ignored."""
    log = ("/k dir/a.cc: In function 'int F()':\n"
           "/k dir/a.cc:12:5: warning: unused variable 'y' [-Wunused-variable]\n"
           "/k dir/a.cc:14: error: no column here\n"
           "/k dir/b.h:2:1: note: declared here\n"
           "a.cc:1:10: fatal error: missing.h: No such file or directory\n"
           "compilation terminated.\n")
    assert parse_diagnostics(log) == [
        Diagnostic("/k dir/a.cc", 12, 5, "warning", "unused variable 'y' [-Wunused-variable]"),
        Diagnostic("/k dir/a.cc", 14, None, "error", "no column here"),
        Diagnostic("/k dir/b.h", 2, 1, "note", "declared here"),
        Diagnostic("a.cc", 1, 10, "fatal error", "missing.h: No such file or directory"),
    ]


# -- a missing compiler --------------------------------------------------------------------------------------

def test_missing_gxx_raises_toolchain_not_found(tmp_path, monkeypatch):
    """With no g++ on PATH, build() and Custom() raise ToolchainNotFoundError (a FileNotFoundError) saying how to
    install it."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    src = write_kernel(tmp_path / "src" / "k.cc", "x[i]")
    with pytest.raises(aotbench.ToolchainNotFoundError) as info:
        build(src, cache_dir=tmp_path / "cache")
    err = info.value
    assert isinstance(err, FileNotFoundError) and isinstance(err, aotbench.AotbenchError)
    assert err.tool == "g++"
    assert "g++" in str(err) and "install" in str(err).lower()
    with pytest.raises(FileNotFoundError, match="install"):
        make_op(src, cache_dir=tmp_path / "cache")


# -- dependency files ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    pytest.param("out.so: a.cc b.h\n", ["a.cc", "b.h"], id="plain"),
    pytest.param("out.so: a.cc \\\n  /usr/include/b.h \\\n  c.h\n", ["a.cc", "/usr/include/b.h", "c.h"],
                 id="continuation-lines"),
    pytest.param("out.so: \\\n a.cc\n", ["a.cc"], id="continuation-right-after-target"),
    pytest.param("out.so: /my\\ dir/a\\ b.cc /x/c.h\n", ["/my dir/a b.cc", "/x/c.h"], id="escaped-spaces"),
    pytest.param("out.so: /d/a$$b.h /d/$$$$.h\n", ["/d/a$b.h", "/d/$$.h"], id="dollar"),
    pytest.param("out.so: /d/\\#1/a.h\n", ["/d/#1/a.h"], id="escaped-hash"),
    pytest.param("/cache\\ dir/out.so: a.cc\n", ["a.cc"], id="target-with-space"),
    pytest.param("out.so: a.cc b.h\nb.h:\n", ["a.cc", "b.h"], id="phony-rules-ignored"),
    pytest.param("out.so: a.cc\tb.h\n", ["a.cc", "b.h"], id="tab-separated"),
])
def test_parse_depfile(text, expected):
    """Make-style dependency text: continuation lines, escaped spaces and ``#``, ``$$``, first rule only."""
    assert parse_depfile(text) == expected


def test_parse_depfile_reads_what_gxx_writes(tmp_path):
    """Round trip through the real g++ -MD output for a header path with spaces, quotes, ``$`` and ``#``."""
    folder = tmp_path / "a b \"c\" it's $x #y"
    folder.mkdir()
    (folder / "h h.h").write_text("inline int h() { return 1; }\n")
    src = folder / "s.cc"
    src.write_text('#include "h h.h"\nint g() { return h(); }\n')
    dep = tmp_path / "out.d"
    compiler = shutil.which("g++")
    subprocess.run([compiler, "-c", str(src), "-o", str(tmp_path / "s.o"), "-MD", "-MF", str(dep)], check=True)
    deps = parse_depfile(dep.read_text())
    assert deps[0] == str(src)
    assert str(folder / "h h.h") in deps
    assert all(Path(p).exists() for p in deps)


def test_stem_of_unusual_file_names_is_safe(tmp_path):
    """The library's file name keeps only a safe version of the source's stem."""
    src = write_kernel(tmp_path / "src" / "wéird name;rm -rf.cc", "x[i]")
    artifact = build(src, cache_dir=tmp_path / "cache")
    assert re.fullmatch(r"[A-Za-z0-9_.+-]+-[0-9a-f]+\.so", artifact.path.name)
    assert artifact.path.parent == tmp_path / "cache"


def test_only_kernel_sources_are_built(tmp_path):
    """build() refuses a source that is neither C++ nor CUDA instead of handing it to a compiler."""
    src = tmp_path / "k.c"
    src.write_text("int f(void) { return 0; }\n")
    with pytest.raises(aotbench.ArgumentError, match=r"\.cc or \.cpp \(g\+\+\) or \.cu \(nvcc\)"):
        build_mod.build(src, cache_dir=tmp_path / "cache")
