"""Kernel source living in a notebook cell (``aotbench.build.cells``), and ``build.describe_change`` between real builds.

No IPython here: these are the core functions the ``%%aot_kernel`` magic delegates to.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import aotbench
from aotbench.build import cells
from aotbench.build import compile as build

KERNELS = Path(__file__).resolve().parents[1] / "support" / "kernels"
SIG = ("(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream, "
       "void *extra)")
INIT = "(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra)"
INFER = "(int *ndims, int64_t **shapes, AotExtra *extra)"


def kernel(name: str, body: str = "return 0;") -> str:
    return f'extern "C" int {name}{SIG} {{ {body} }}\n'


# -- kernel_functions -----------------------------------------------------------------------------------------
CASES = {
    "one kernel": (kernel("K"), ["K"]),
    "none": ('extern "C" int Add(int a, int b) { return a + b; }\nint main() { return 0; }\n', []),
    "empty": ("", []),
    "several, in source order": (kernel("Zeta") + kernel("Alpha") + kernel("Mid"), ["Zeta", "Alpha", "Mid"]),
    "companions are not candidates": (
        f'extern "C" int KInit{INIT} {{ return 0; }}\n'
        f'extern "C" std::vector<int64_t> KInferShape{INFER} {{ return {{1}}; }}\n'
        f'extern "C" std::vector<std::vector<int64_t>> K2InferShape{INFER} {{ return {{{{1}}}}; }}\n' + kernel("K"),
        ["K"]),
    "line comment": ("// " + kernel("Old") + kernel("New"), ["New"]),
    "block comment over lines": ("/*\n" + kernel("Old") + kernel("Older") + "*/\n" + kernel("New"), ["New"]),
    "comment between tokens": (f'extern "C" /* the kernel */ int K{SIG} /* body: */ {{ return 0; }}', ["K"]),
    "string mentioning a kernel": (
        f'const char *doc = "extern \\"C\\" int Fake{SIG} {{";\n' + kernel("Real"), ["Real"]),
    "string with a comment opener": ('const char *c = "// not a comment";\n' + kernel("K"), ["K"]),
    "extern C block": (
        (f'extern "C" {{\nint KInit{INIT} {{ return 0; }}\nint K{SIG} {{\n  if (nparam) {{ return 1; }}\n'
        "  return 0;\n}\n}\n"), ["K"]),
    "extern C block and a plain kernel": (
        kernel("First") + f'extern "C" {{\nint Second{SIG} {{ return 0; }}\n}}\n' + kernel("Third"),
        ["First", "Second", "Third"]),
    "extern C++ block": (f'extern "C++" {{ int NotC{SIG} {{ return 0; }} }}\n' + kernel("K"), ["K"]),
    "no extern C": (f"int Mangled{SIG} {{ return 0; }}\n" + kernel("K"), ["K"]),
    "declaration then definition": (f'extern "C" int K{SIG};\n' + kernel("K"), ["K"]),
    "signature over several lines": (
        ('extern "C"\nint\nK(int nparam,\n  void **params,\n  int *ndims,\n  int64_t **shapes,\n'
        "  const char **dtypes,\n  void *stream,\n  void *extra)\n{\n  return 0;\n}\n"), ["K"]),
    "unnamed parameters": (('extern "C" int K(int, void **, int *, int64_t **, const char **, void *, void *) '
                           "{ return 0; }"), ["K"]),
    "six parameters": ('extern "C" int K(int a, int b, int c, int d, int e, int f) { return 0; }', []),
    "void parameters": ('extern "C" int K(void) { return 0; }', []),
}


@pytest.mark.parametrize("source, expected", list(CASES.values()), ids=list(CASES))
def test_kernel_functions(source, expected):
    assert cells.kernel_functions(source) == expected


def test_kernel_functions_of_the_shipped_examples_and_fixtures():
    for path in sorted(aotbench.examples_dir().glob("*.cc")):
        assert cells.kernel_functions(path.read_text()) == ["CustomKernel"], path.name
    assert cells.kernel_functions((KERNELS / "magic_two_kernels.cc").read_text()) == ["MagicPlus", "MagicTimes"]
    assert cells.kernel_functions((KERNELS / "magic_attrs.cc").read_text()) == ["MagicAttrs"]


def test_string_with_a_block_comment_opener_hides_nothing():
    source = 'const char *glob = "*.cc/*";\n' + kernel("K") + "/* the end */\n"
    assert cells.kernel_functions(source) == ["K"]


def test_character_literal_quote_hides_nothing():
    source = "static const char kQuote = '\"'; " + kernel("K").rstrip() + ' const char *s = "x";\n'
    assert cells.kernel_functions(source) == ["K"]


# -- write_cell_source -----------------------------------------------------------------------------------------
CELL = '#include <cstdint>\n' + kernel("K", "return nparam;")


def test_cell_is_written_with_a_line_directive_first(tmp_path):
    path = cells.write_cell_source(CELL, "K", "cpu", cache_dir=tmp_path)
    assert path.name == "K.cc"
    assert path.parent.parent == tmp_path / "cells"
    text = path.read_text()
    first, rest = text.split("\n", 1)
    assert first == '#line 1 "<cell>"' and cells.CELL_LABEL == "<cell>"
    assert rest == CELL


def test_a_missing_final_newline_is_added(tmp_path):
    path = cells.write_cell_source(CELL.rstrip("\n"), "K", "cpu", cache_dir=tmp_path)
    assert path.read_text() == f'#line 1 "<cell>"\n{CELL}'
    assert cells.write_cell_source(CELL, "K", "cpu", cache_dir=tmp_path) == path  # the same text, the same file


def test_path_is_content_addressed(tmp_path):
    a = cells.write_cell_source(CELL, "K", "cpu", cache_dir=tmp_path)
    assert cells.write_cell_source(CELL, "K", "cpu", cache_dir=tmp_path) == a
    edited = cells.write_cell_source(CELL + "// edited\n", "K", "cpu", cache_dir=tmp_path)
    renamed = cells.write_cell_source(CELL, "K2", "cpu", cache_dir=tmp_path)
    assert len({a.parent, edited.parent, renamed.parent}) == 3
    assert a.read_text().endswith(CELL) and edited.read_text().endswith("// edited\n")
    assert a.parent.name.startswith("K-") and renamed.parent.name.startswith("K2-")
    digest = a.parent.name.split("-", 1)[1]
    assert digest in hashlib.sha256(f'.cc\0#line 1 "<cell>"\n{CELL}'.encode()).hexdigest()


def test_existing_cell_file_is_never_rewritten(tmp_path):
    path = cells.write_cell_source(CELL, "K", "cpu", cache_dir=tmp_path)
    before = path.stat()
    again = cells.write_cell_source(CELL, "K", "cpu", cache_dir=tmp_path)
    after = again.stat()
    assert again == path
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)


def test_gpu_cells_are_cu_files_apart_from_cpu_ones(tmp_path):
    cpu = cells.write_cell_source(CELL, "K", "cpu", cache_dir=tmp_path)
    gpu = cells.write_cell_source(CELL, "K", "gpu", cache_dir=tmp_path)
    assert gpu.name == "K.cu" and cpu.name == "K.cc"
    assert gpu.parent != cpu.parent
    assert gpu.read_text() == cpu.read_text()


def test_default_folder_is_the_cache_dir(session_cache):
    path = cells.write_cell_source(CELL, "KDefault", "cpu")
    assert path.is_relative_to(session_cache / "cells")


@pytest.mark.parametrize("name", ["", "1abc", "a-b", "a b", "../K", "K/../../x", "K.cc", "K;rm"])
def test_invalid_names_are_refused(tmp_path, name):
    with pytest.raises(ValueError, match="identifier"):
        cells.write_cell_source(CELL, name, "cpu", cache_dir=tmp_path)
    assert not (tmp_path / "cells").exists() or not any((tmp_path / "cells").iterdir())


def test_name_with_a_trailing_newline_is_refused(tmp_path):
    with pytest.raises(ValueError):
        cells.write_cell_source(CELL, "K\n", "cpu", cache_dir=tmp_path)


# -- describe_change between real builds ---------------------------------------------------------------------
SOURCE = """#include <cstdint>
#include "magic_dep.h"
extern "C" int Dep(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                   void *extra) {
  return DEP_VALUE;
}
"""


def test_describe_change_names_what_differs(tmp_path):
    cache_dir = tmp_path / "cache"
    src, header, other = tmp_path / "dep.cc", tmp_path / "magic_dep.h", tmp_path / "magic_other.h"
    header.write_text("#define DEP_VALUE 0\n")
    other.write_text("#define OTHER 1\n")
    src.write_text(SOURCE)

    first = build.build(src, cache_dir=cache_dir)
    hit = build.build(src, cache_dir=cache_dir)
    assert not first.cache_hit and hit.cache_hit
    assert build.describe_change(first, hit) == []
    assert build.describe_change(first, first) == []

    src.write_text(SOURCE + "// edited\n")
    edited = build.build(src, cache_dir=cache_dir)
    assert not edited.cache_hit
    assert build.describe_change(hit, edited) == ["the kernel source changed"]

    header.write_text("#define DEP_VALUE 0  // edited\n")
    rebuilt = build.build(src, cache_dir=cache_dir)
    assert not rebuilt.cache_hit
    assert build.describe_change(edited, rebuilt) == [f"included file changed: {header}"]

    flagged = build.build(src, flags=("-DEXTRA=1",), cache_dir=cache_dir)
    [change] = build.describe_change(rebuilt, flagged)
    assert change.startswith("flags changed") and change.index("[]") < change.index("-DEXTRA=1")
    [change] = build.describe_change(flagged, rebuilt)
    assert change.startswith("flags changed") and change.index("-DEXTRA=1") < change.index("[]")

    src.write_text(SOURCE.replace('#include "magic_dep.h"', '#include "magic_dep.h"\n#include "magic_other.h"'))
    more = build.build(src, cache_dir=cache_dir)
    assert build.describe_change(rebuilt, more) == ["the kernel source changed", f"now includes {other}"]
    assert build.describe_change(more, rebuilt) == ["the kernel source changed", f"no longer includes {other}"]
