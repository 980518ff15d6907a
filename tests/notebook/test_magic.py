"""The ``%%aot_kernel`` magic through IPython's real shell (``IPython.testing.globalipapp``).

Cells are compiled by the real g++ into the session's temporary cache. The shell is one per process
(globalipapp is a singleton), so every test removes the ops it bound (``clean_namespace``) and the whole module
runs in a folder of its own: the magic adds the working directory to the include path when a cell includes a
local header, and the build cache watches that folder's listing.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import numpy as np
import pytest
from IPython.core.error import UsageError
from IPython.testing.globalipapp import get_ipython, start_ipython

import aotbench
from aotbench import CompileError, Op

KERNELS = Path(__file__).resolve().parents[1] / "support" / "kernels"
ADD_REDUCE = aotbench.examples_dir() / "add_reduce.cc"
ATTRS_CELL = (KERNELS / "magic_attrs.cc").read_text()
TWO_KERNELS_CELL = (KERNELS / "magic_two_kernels.cc").read_text()

SIG = ("(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream, "
       "void *extra)")


def affine_cell(name: str, k: str = "2.0f", prefix: str = "") -> str:
    """A cell computing ``out = SCALE * x + k * y`` (float32; SCALE is 1 unless -DSCALE=... is given)."""
    return prefix + f"""#include <cstdint>
#ifndef SCALE
#define SCALE 1
#endif
extern "C" int {name}{SIG} {{
  const float *x = static_cast<const float *>(params[0]);
  const float *y = static_cast<const float *>(params[1]);
  float *out = static_cast<float *>(params[2]);
  int64_t n = 1;
  for (int i = 0; i < ndims[0]; i++) n *= shapes[0][i];
  for (int64_t i = 0; i < n; i++) out[i] = SCALE * x[i] + {k} * y[i];
  return 0;
}}
"""


#: Shape rule for two-input cells, bound in the user namespace (so most tests do not depend on quoting).
SAME = "--out-shape first_shape"


# -- the shell ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ip(tmp_path_factory):
    """IPython's test shell with the extension loaded, working in a folder of its own."""
    shell = start_ipython() or get_ipython()  # a singleton: another module may have started it
    notebook_dir = tmp_path_factory.mktemp("notebook")
    old_cwd = os.getcwd()
    os.chdir(notebook_dir)
    shell.run_line_magic("load_ext", "aotbench")
    shell.user_ns["np"] = np
    shell.user_ns["first_shape"] = lambda *shapes: shapes[0]
    yield shell
    os.chdir(old_cwd)


@pytest.fixture(autouse=True)
def clean_namespace(request):
    """Unbind every op a test bound, so the next test's cell does not hot-reload into it."""
    yield
    if "ip" in request.fixturenames:
        shell = request.getfixturevalue("ip")
        for key in [k for k, v in shell.user_ns.items() if isinstance(v, Op)]:
            del shell.user_ns[key]


def rand(rng, *shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


# -- loading ------------------------------------------------------------------------------------------------
def test_load_ext_registers_both_magics_and_prints_nothing(ip, capfd):
    magics = ip.magics_manager.magics
    magics["cell"].pop("aot_kernel", None)
    magics["line"].pop("aot_doctor", None)
    ip.extension_manager.loaded.discard("aotbench")
    before = {kind: set(table) for kind, table in magics.items()}
    capfd.readouterr()

    result = ip.run_line_magic("load_ext", "aotbench")

    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    assert result is None
    added = {kind: set(table) - before[kind] for kind, table in magics.items()}
    assert added == {"cell": {"aot_kernel"}, "line": {"aot_doctor"}}
    assert ip.find_cell_magic("aot_kernel").__self__.__class__.__module__ == "aotbench.notebook.magic"


# -- binding ------------------------------------------------------------------------------------------------
def test_add_reduce_example_is_bound_under_its_function_name_and_matches_numpy(ip, rng):
    op = ip.run_cell_magic("aot_kernel", "cpu --attr axis=1 --attr keep_dim=False", ADD_REDUCE.read_text())
    assert isinstance(op, Op)
    assert ip.user_ns["CustomKernel"] is op
    assert op.attrs == {"axis": 1, "keep_dim": False}
    x, y = rand(rng, 4, 7), rand(rng, 4, 7)
    np.testing.assert_allclose(op(x, y), (x + y).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_name_option_binds_that_variable_and_not_the_function_name(ip, rng):
    op = ip.run_cell_magic("aot_kernel", f"cpu {SAME} --name my_affine", affine_cell("MagicBindAffine"))
    assert ip.user_ns["my_affine"] is op
    assert "MagicBindAffine" not in ip.user_ns
    assert op.name == "MagicBindAffine"
    x, y = rand(rng, 3, 5), rand(rng, 3, 5)
    np.testing.assert_allclose(op(x, y), x + 2.0 * y, rtol=1e-6)


def test_invalid_name_is_a_usage_error(ip):
    with pytest.raises(UsageError, match="1abc"):
        ip.run_cell_magic("aot_kernel", f"cpu {SAME} --name 1abc", affine_cell("MagicBadName"))
    assert "1abc" not in ip.user_ns


def test_keyword_name_is_a_usage_error(ip):
    with pytest.raises(UsageError):
        ip.run_cell_magic("aot_kernel", f"cpu {SAME} --name class", affine_cell("MagicKeywordName"))


def test_cell_magic_returns_the_op_so_the_cell_displays_it(ip, capsys):
    result = ip.run_cell(f"%%aot_kernel cpu {SAME}\n{affine_cell('MagicShown')}")
    assert result.success, result.error_in_exec
    assert result.result is ip.user_ns["MagicShown"]
    assert "aotbench.Op MagicShown" in capsys.readouterr().out


# -- re-running a cell: the same object, the new code -------------------------------------------------------
def test_rerun_swaps_the_new_build_into_the_same_object(ip, rng):
    x, y = rand(rng, 6), rand(rng, 6)
    first = ip.run_cell_magic("aot_kernel", f"cpu {SAME}", affine_cell("MagicReload", "2.0f"))
    held = ip.user_ns["MagicReload"]
    np.testing.assert_allclose(first(x, y), x + 2.0 * y, rtol=1e-6)  # fills the plan cache for this signature
    reloads = []
    first.on_reload(reloads.append)

    second = ip.run_cell_magic("aot_kernel", f"cpu {SAME}", affine_cell("MagicReload", "-3.0f"))

    assert second is first and held is first and ip.user_ns["MagicReload"] is first
    assert reloads == [first]
    np.testing.assert_allclose(held(x, y), x - 3.0 * y, rtol=1e-6)  # same shapes: the old plan must be gone
    assert "-3.0f" in held.source


def test_rerun_with_another_name_binds_a_new_object(ip, rng):
    cell = affine_cell("MagicTwoNames", "0.5f")
    a = ip.run_cell_magic("aot_kernel", f"cpu {SAME} --name first_op", cell)
    b = ip.run_cell_magic("aot_kernel", f"cpu {SAME} --name second_op", cell)
    assert a is not b
    assert ip.user_ns["first_op"] is a and ip.user_ns["second_op"] is b
    x, y = rand(rng, 9), rand(rng, 9)
    np.testing.assert_allclose(a(x, y), x + 0.5 * y, rtol=1e-6)
    np.testing.assert_allclose(b(x, y), x + 0.5 * y, rtol=1e-6)


# -- which function --------------------------------------------------------------------------------------------
def test_two_kernels_without_func_is_a_usage_error_listing_both(ip):
    with pytest.raises(UsageError) as info:
        ip.run_cell_magic("aot_kernel", "cpu", TWO_KERNELS_CELL)
    message = str(info.value)
    assert "MagicPlus" in message and "MagicTimes" in message and "--func" in message
    for not_a_candidate in ("Init", "InferShape", "MagicOld", "MagicFake"):
        assert not_a_candidate not in message
    assert "MagicPlus" not in ip.user_ns and "MagicTimes" not in ip.user_ns


@pytest.mark.parametrize("func, expected", [("MagicPlus", np.add), ("MagicTimes", np.multiply)])
def test_func_chooses_the_kernel(ip, rng, func, expected):
    op = ip.run_cell_magic("aot_kernel", f"cpu --func {func}", TWO_KERNELS_CELL)
    assert ip.user_ns[func] is op and op.name == func
    x, y = rand(rng, 2, 3, 4), rand(rng, 2, 3, 4)
    np.testing.assert_allclose(op(x, y), expected(x, y), rtol=1e-6)


def test_kernel_inside_an_extern_c_block_is_found(ip, rng):
    cell = f"""#include <cstdint>
extern "C" {{
int MagicBlockInit(int *ndims, int64_t **shapes, const char **dtypes, void *extra) {{ return 0; }}
int MagicBlock{SIG} {{
  const float *x = static_cast<const float *>(params[0]);
  const float *y = static_cast<const float *>(params[1]);
  float *out = static_cast<float *>(params[2]);
  for (int64_t i = 0; i < shapes[0][0]; i++) {{ out[i] = x[i] - y[i]; }}
  return 0;
}}
}}
"""
    op = ip.run_cell_magic("aot_kernel", f"cpu {SAME}", cell)
    assert ip.user_ns["MagicBlock"] is op
    x, y = rand(rng, 11), rand(rng, 11)
    np.testing.assert_allclose(op(x, y), x - y, rtol=1e-6)


def test_commented_out_kernels_are_not_candidates(ip, rng):
    cell = affine_cell("MagicLive", "4.0f", prefix=(
        f'// extern "C" int MagicDead{SIG} {{ return 0; }}\n'
        f'/* extern "C" int MagicDeader{SIG} {{\n  return 0;\n}} */\n'))
    op = ip.run_cell_magic("aot_kernel", f"cpu {SAME}", cell)
    assert ip.user_ns["MagicLive"] is op
    x, y = rand(rng, 5), rand(rng, 5)
    np.testing.assert_allclose(op(x, y), x + 4.0 * y, rtol=1e-6)


def test_cell_without_a_kernel_function_names_the_signature(ip):
    cell = "#include <cstdint>\nextern \"C\" int Helper(int a, int b) { return a + b; }\n"
    with pytest.raises(UsageError) as info:
        ip.run_cell_magic("aot_kernel", "cpu", cell)
    message = str(info.value)
    assert 'extern "C" int' in message and "int nparam" in message and "void *extra" in message


def test_func_naming_an_init_companion_is_refused(ip):
    with pytest.raises(UsageError, match="CustomKernelInit"):
        ip.run_cell_magic("aot_kernel", "cpu --func CustomKernelInit --out-shape (4,) --attr axis=1 "
                          "--attr keep_dim=False", ADD_REDUCE.read_text())  # never call the op: it would crash


# -- attributes ---------------------------------------------------------------------------------------------
def test_attributes_reach_the_kernel_with_their_types(ip, rng):
    line = ('cpu --attr axis=1 --attr keep_dim=False --attr paddings=[2.0,-0.5] --attr mode="fast" '
            "--out-shape (9,) --out-dtype np.float64")
    op = ip.run_cell_magic("aot_kernel", line, ATTRS_CELL)
    assert op.attrs == {"axis": 1, "keep_dim": False, "paddings": (2.0, -0.5), "mode": "fast"}
    assert type(op.attrs["axis"]) is int and type(op.attrs["keep_dim"]) is bool
    x = rand(rng, 3, 4)
    out = op(x)
    assert out.dtype == np.float64 and out.shape == (9,)
    np.testing.assert_array_equal(out[:8], [1, 0, 2, 2.0, -0.5, 4, ord("f"), ord("t")])
    np.testing.assert_allclose(out[8], x.astype(np.float64).sum(), rtol=1e-5)


def test_single_quoted_string_attribute_and_true(ip, rng):
    line = ("cpu --attr axis=-7 --attr keep_dim=True --attr paddings=[0.25,8.0] --attr mode='slow' "
            "--out-shape (9,) --out-dtype np.float64")
    out = ip.run_cell_magic("aot_kernel", line, ATTRS_CELL)(rand(rng, 5))
    np.testing.assert_array_equal(out[:8], [-7, 1, 2, 0.25, 8.0, 4, ord("s"), ord("w")])


def test_quoted_attribute_with_spaces(ip, rng):
    line = ("""cpu --attr axis=1 --attr keep_dim=False --attr "paddings=[2.0, 3.0]" --attr 'mode="fast mode"' """
            "--out-shape (9,) --out-dtype np.float64")
    out = ip.run_cell_magic("aot_kernel", line, ATTRS_CELL)(rand(rng, 5))
    np.testing.assert_array_equal(out[2:8], [2, 2.0, 3.0, 9, ord("f"), ord("e")])


@pytest.mark.parametrize("attr", ["x", "x=[1,", "=1", "1x=2", "x=undefined_name", "x=1+"])
def test_malformed_attribute_is_a_usage_error(ip, attr):
    with pytest.raises(UsageError, match="--attr"):
        ip.run_cell_magic("aot_kernel", f"cpu --attr {attr} --out-shape (9,)", ATTRS_CELL)


# -- expressions evaluated in the user namespace -----------------------------------------------------------
def test_out_shape_lambda_and_out_dtype_from_the_user_namespace(ip, rng):
    cell = f"""#include <cstdint>
extern "C" int MagicWiden{SIG} {{
  const float *x = static_cast<const float *>(params[0]);
  const float *y = static_cast<const float *>(params[1]);
  double *out = static_cast<double *>(params[2]);
  int64_t n = 1;
  for (int i = 0; i < ndims[0]; i++) n *= shapes[0][i];
  for (int64_t i = 0; i < n; i++) out[i] = static_cast<double>(x[i]) * static_cast<double>(y[i]);
  return 0;
}}
"""
    op = ip.run_cell_magic("aot_kernel", 'cpu --out-shape "lambda x, y: x" --out-dtype np.float64', cell)
    assert callable(op.spec.out_shape)
    x, y = rand(rng, 4, 3), rand(rng, 4, 3)
    out = op(x, y)
    assert out.dtype == np.float64 and out.shape == (4, 3)
    np.testing.assert_allclose(out, x.astype(np.float64) * y.astype(np.float64), rtol=1e-12)

    ip.user_ns["widen_dtype"] = np.float64
    op2 = ip.run_cell_magic("aot_kernel", "cpu --out-shape 'lambda x, y: x' --out-dtype widen_dtype", cell)
    assert op2 is op and callable(op.spec.out_shape)
    assert op(x, y).dtype == np.float64
    del ip.user_ns["widen_dtype"]


def test_out_dtype_expression_with_a_string_inside(ip):
    op = ip.run_cell_magic("aot_kernel", f"cpu {SAME} --out-dtype np.dtype('float32')",
                           affine_cell("MagicQuotedExpr"))
    assert op.spec.out_dtype == np.float32


@pytest.mark.parametrize("option", ["--out-shape no_such_rule", "--out-dtype np.no_such_dtype"])
def test_undefined_name_in_an_expression_is_a_usage_error(ip, option):
    with pytest.raises(UsageError, match="cannot evaluate"):
        ip.run_cell_magic("aot_kernel", f"cpu {option}", affine_cell("MagicUndefined"))
    assert "MagicUndefined" not in ip.user_ns


# -- flags, force, cache ----------------------------------------------------------------------------------
def test_flags_reach_the_compiler(ip, rng):
    x, y = rand(rng, 7), rand(rng, 7)
    op = ip.run_cell_magic("aot_kernel", f'cpu {SAME} --flags "-DSCALE=3"', affine_cell("MagicFlags"))
    assert "-DSCALE=3" in op.command
    np.testing.assert_allclose(op(x, y), 3.0 * x + 2.0 * y, rtol=1e-6)
    ip.run_cell_magic("aot_kernel", f"cpu {SAME} --flags=-DSCALE=5", affine_cell("MagicFlags"))
    np.testing.assert_allclose(op(x, y), 5.0 * x + 2.0 * y, rtol=1e-6)


def test_several_quoted_flags_reach_the_compiler(ip, rng):
    op = ip.run_cell_magic("aot_kernel", f'cpu {SAME} --flags "-O3 -DSCALE=3"', affine_cell("MagicTwoFlags"))
    assert "-O3" in op.command and "-DSCALE=3" in op.command
    x, y = rand(rng, 7), rand(rng, 7)
    np.testing.assert_allclose(op(x, y), 3.0 * x + 2.0 * y, rtol=1e-6)


def test_rerun_is_a_cache_hit_and_force_recompiles(ip, rng):
    cell = affine_cell("MagicForce", "1.5f")
    op = ip.run_cell_magic("aot_kernel", f"cpu {SAME}", cell)
    again = ip.run_cell_magic("aot_kernel", f"cpu {SAME}", cell)
    assert again is op and op.artifact.cache_hit
    forced = ip.run_cell_magic("aot_kernel", f"cpu {SAME} --force", cell)
    assert forced is op and not op.artifact.cache_hit
    x, y = rand(rng, 8), rand(rng, 8)
    np.testing.assert_allclose(op(x, y), x + 1.5 * y, rtol=1e-6)
    assert ip.run_cell_magic("aot_kernel", f"cpu {SAME}", cell).artifact.cache_hit


def test_unchanged_cell_stays_cached_after_the_notebook_writes_a_file(ip, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cell = affine_cell("MagicCwd", "6.0f")
    ip.run_cell_magic("aot_kernel", f"cpu {SAME}", cell)
    np.save(tmp_path / "results.npy", np.arange(3))
    assert ip.run_cell_magic("aot_kernel", f"cpu {SAME}", cell).artifact.cache_hit


# -- compile errors -----------------------------------------------------------------------------------------
BROKEN_LINES = [
    "#include <cstdint>",                                           # 1
    "",                                                             # 2
    f'extern "C" int MagicKeep{SIG} {{',                            # 3
    "  float *out = static_cast<float *>(params[1]);",              # 4
    "  const float *x = static_cast<const float *>(params[0]);",    # 5
    "  out[0] = x[0] + undefined_thing;",                           # 6  <- the error
    "  return 0;",                                                  # 7
    "}",                                                            # 8
]
BROKEN_LINE = 6
BROKEN_COLUMN = BROKEN_LINES[BROKEN_LINE - 1].index("undefined_thing") + 1


def _caret_under(lines: list[str], token: str) -> None:
    """Some rendered line shows ``token`` and the next line has its caret exactly under the token's start."""
    for i, text in enumerate(lines[:-1]):
        if token in text and lines[i + 1].strip() == "^":
            assert lines[i + 1].index("^") == text.index(token), "\n".join(lines)
            return
    raise AssertionError("no source line with a caret under " + token + ":\n" + "\n".join(lines))


def test_compile_error_points_at_the_cell_line_and_column(ip):
    cell = "\n".join(BROKEN_LINES) + "\n"
    with pytest.raises(CompileError) as info:
        ip.run_cell_magic("aot_kernel", "cpu --out-shape (1,)", cell)
    err = info.value
    assert isinstance(err, aotbench.AotbenchError)
    first = err.errors[0]
    assert (first.file, first.line, first.column) == ("<cell>", BROKEN_LINE, BROKEN_COLUMN)
    assert "undefined_thing" in first.message
    assert err.sources["<cell>"] == cell
    rendered = err._render_traceback_()
    assert any(f"<cell>:{BROKEN_LINE}:{BROKEN_COLUMN}" in line for line in rendered)
    assert any(BROKEN_LINES[BROKEN_LINE - 1] in line and str(BROKEN_LINE) in line for line in rendered)
    _caret_under(rendered, "undefined_thing")
    assert "MagicKeep" not in ip.user_ns

    from aotbench.notebook.display import compile_error_html

    page = compile_error_html(err)
    assert f"&lt;cell&gt;:{BROKEN_LINE}:{BROKEN_COLUMN}" in page and "undefined_thing" in page


def test_caret_is_under_the_error_on_a_tab_indented_line(ip):
    cell = "\n".join(BROKEN_LINES).replace("  out[0] = x[0]", "\tout[0] = x[0]") + "\n"
    with pytest.raises(CompileError) as info:
        ip.run_cell_magic("aot_kernel", "cpu --out-shape (1,)", cell)
    _caret_under(info.value._render_traceback_(), "undefined_thing")


def test_failed_cell_raises_and_the_previous_op_survives(ip, rng, capsys):
    good = "\n".join(BROKEN_LINES).replace("x[0] + undefined_thing", "x[0] * 7.0f") + "\n"
    ok = ip.run_cell(f"%%aot_kernel cpu --out-shape (1,)\n{good}")
    assert ok.success, ok.error_in_exec
    keep = ip.user_ns["MagicKeep"]
    x = rand(rng, 3)
    np.testing.assert_allclose(keep(x), [7.0 * x[0]], rtol=1e-6)
    capsys.readouterr()

    result = ip.run_cell("%%aot_kernel cpu --out-shape (1,)\n" + "\n".join(BROKEN_LINES) + "\n")

    assert not result.success
    assert isinstance(result.error_in_exec, CompileError)
    assert result.error_in_exec.errors[0].line == BROKEN_LINE
    shown = capsys.readouterr()
    text = shown.out + shown.err
    assert f"<cell>:{BROKEN_LINE}:{BROKEN_COLUMN}" in text
    assert BROKEN_LINES[BROKEN_LINE - 1] in text and "^" in text
    assert "Traceback (most recent call last)" not in text  # diagnostics, not a Python traceback
    assert ip.user_ns["MagicKeep"] is keep
    np.testing.assert_allclose(keep(x), [7.0 * x[0]], rtol=1e-6)


def test_in_a_notebook_the_error_is_shown_as_html_once(ip, monkeypatch):
    """In Jupyter (a ZMQ shell) the diagnostics are displayed as HTML and the traceback shrinks to one line."""
    from aotbench.notebook import magic

    shown = []
    monkeypatch.setattr(magic, "_in_notebook", lambda shell: True)
    monkeypatch.setattr(magic, "display", shown.append)
    with pytest.raises(CompileError) as info:
        ip.run_cell_magic("aot_kernel", "cpu --out-shape (1,)", "\n".join(BROKEN_LINES) + "\n")
    assert info.value.html_shown
    [page] = shown
    assert f"&lt;cell&gt;:{BROKEN_LINE}:{BROKEN_COLUMN}" in page.data and "undefined_thing" in page.data
    rendered = info.value._render_traceback_()
    assert len(rendered) == 1 and "shown above" in rendered[0]


def test_error_in_an_included_header_reports_the_header(ip, tmp_path):
    header = tmp_path / "magic_broken.h"
    header.write_text("#pragma once\n\ninline float MagicBroken() { return no_such_value; }\n")
    cell = affine_cell("MagicHeaderError", prefix='#include "magic_broken.h"\n')
    with pytest.raises(CompileError) as info:
        ip.run_cell_magic("aot_kernel", f'cpu {SAME} --flags "-I{tmp_path}"', cell)
    first = info.value.errors[0]
    assert Path(first.file).resolve() == header.resolve()
    assert first.line == 3 and "no_such_value" in first.message
    assert any(str(header.name) in line for line in info.value._render_traceback_())


# -- verbose ------------------------------------------------------------------------------------------------
def test_verbose_prints_the_command_and_what_changed(ip, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the notebook's folder is on the include path: the header lives there
    header = tmp_path / "magic_k.h"
    header.write_text("#define MAGIC_K 2.0f\n")
    line = f"cpu {SAME} --verbose"
    cell = affine_cell("MagicVerbose", "MAGIC_K", prefix='#include "magic_k.h"\n')

    op = ip.run_cell_magic("aot_kernel", line, cell)
    out = capsys.readouterr().out
    assert f"command: {shlex.join(op.command)}" in out.splitlines()
    assert " ".join(op.command) in out and f"-I{tmp_path}" in out

    ip.run_cell_magic("aot_kernel", line, cell)
    assert "cache hit" in capsys.readouterr().out

    edited = cell + "// edited\n"
    ip.run_cell_magic("aot_kernel", line, edited)
    out = capsys.readouterr().out
    assert "the kernel source changed" in out and "flags changed" not in out and "included file" not in out
    assert f"command: {shlex.join(op.command)}" in out.splitlines()  # the new build's command

    header.write_text("#define MAGIC_K 3.0f  // changed\n")
    ip.run_cell_magic("aot_kernel", line, edited)
    out = capsys.readouterr().out
    assert f"included file changed: {header}" in out and "the kernel source changed" not in out

    ip.run_cell_magic("aot_kernel", line + " --flags=-DSCALE=2", edited)
    out = capsys.readouterr().out
    assert "flags changed" in out and "-DSCALE=2" in out and "the kernel source changed" not in out


def test_quiet_by_default(ip, capsys):
    ip.run_cell_magic("aot_kernel", f"cpu {SAME}", affine_cell("MagicQuiet"))
    assert capsys.readouterr().out == ""


# -- help and bad lines -------------------------------------------------------------------------------------
def test_help_documents_every_option(ip, capsys):
    doc = ip.find_cell_magic("aot_kernel").__doc__
    for option in ("--attr", "--out-shape", "--out-dtype", "--flags", "--func", "--name", "--force", "--verbose",
                   "cpu", "gpu"):
        assert option in doc, option
    capsys.readouterr()
    assert ip.run_cell("%%aot_kernel?").success
    shown = capsys.readouterr().out
    assert "--out-shape" in shown and "--attr" in shown


def test_help_writes_the_usage_as_a_cell_magic(ip, capsys):
    """``%%aot_kernel?`` shows the usage with the cell magic's two percent signs (IPython's default gives one)."""
    capsys.readouterr()
    assert ip.run_cell("%%aot_kernel?").success
    shown = capsys.readouterr().out
    usage = [line.strip() for line in shown.splitlines() if "aot_kernel [" in line]
    assert usage and all(line.startswith("%%aot_kernel [--attr NAME=VALUE]") for line in usage), shown
    assert "\n%aot_kernel" not in shown and " %aot_kernel" not in shown, shown
    assert ip.find_cell_magic("aot_kernel").__doc__.lstrip(": \n").startswith("%%aot_kernel [")


@pytest.mark.parametrize("line, complaint", [("", "target"), ("tpu", "tpu"), ("cpu --bogus", "--bogus"),
                                             ("--name x", "target")])
def test_bad_magic_line_is_a_usage_error(ip, line, complaint):
    with pytest.raises(UsageError, match=complaint):
        ip.run_cell_magic("aot_kernel", line, affine_cell("MagicBadLine"))
    assert "MagicBadLine" not in ip.user_ns


# -- the summary ----------------------------------------------------------------------------------------------
def test_repr_html_names_function_attributes_and_cache_state(ip):
    line = "cpu --attr axis=1 --attr keep_dim=False"
    op = ip.run_cell_magic("aot_kernel", line + " --force", ADD_REDUCE.read_text())
    page = op._repr_html_()
    assert "CustomKernel" in page and "axis=1" in page and "keep_dim=False" in page and "cpu" in page
    assert "compiled in" in page and "cache hit" not in page
    ip.run_cell_magic("aot_kernel", line, ADD_REDUCE.read_text())
    page = op._repr_html_()
    assert "cache hit" in page and "compiled in" not in page


# -- gpu cells (need nvcc only) ------------------------------------------------------------------------------
GPU_CELL = """#include <cstdint>
__global__ void scale_kernel(const float *x, float *out, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = 3.0f * x[i];
}
extern "C" int MagicScale""" + SIG + """ {
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; d++) n *= shapes[0][d];
  scale_kernel<<<(n + 127) / 128, 128, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float *>(params[0]), static_cast<float *>(params[1]), n);
  return 0;
}
"""


@pytest.mark.nvcc
def test_gpu_cell_compiles_reports_resources_and_explains_a_missing_device(ip, rng):
    """%%aot_kernel gpu builds the cell with nvcc (a .cu file, same as Custom on a file); the op shows ptxas's
    report; where no device is usable, calling it says why."""
    from aotbench.run.gpu_availability import gpu_unavailable_reason

    op = ip.run_cell_magic("aot_kernel", f"gpu {SAME} --arch sm_90 --no-emulate", GPU_CELL)
    assert ip.user_ns["MagicScale"] is op and op.spec.target == "gpu"
    assert Path(op.command[0]).name == "nvcc" and op.command[op.command.index("-o") + 2].endswith(".cu")
    assert "arch=compute_90,code=[sm_90,compute_90]" in op.command
    (report,) = op.resources
    assert report["arch"] == "sm_90" and report["kernel"].startswith("scale_kernel")
    assert "scale_kernel" in op._repr_html_()
    file_op = aotbench.Custom(f"{op.source_path}:MagicScale", ip.user_ns["first_shape"], None, arch="sm_90",
                              emulate=False)
    assert file_op.artifact.path == op.artifact.path  # the same build as from a file
    reason = gpu_unavailable_reason()
    if reason is None:
        pytest.skip("a usable GPU is present")
    with pytest.raises(aotbench.DeviceUnavailableError, match="cannot run here"):
        op(rand(rng, 5))


# -- an open panel follows its cell --------------------------------------------------------------------------
def test_re_running_the_cell_refreshes_an_open_panel_and_a_failed_build_shows_in_it(ip, rng):
    pytest.importorskip("ipywidgets")
    op = ip.run_cell_magic("aot_kernel", f"cpu --name affine {SAME}", affine_cell("Affine"))
    x, y = rand(rng, 6), rand(rng, 6)
    panel = op.explore(x, y, reference=lambda x, y: x + 2 * y, debounce_ms=0, budget_ms=2)
    assert "aotb-pass" in panel.stats.value
    ip.run_cell_magic("aot_kernel", f"cpu --name affine {SAME}", affine_cell("Affine", k="3.0f"))
    assert ip.user_ns["affine"] is op  # rebuilt in place ...
    np.testing.assert_allclose(panel.last["output"], x + 3 * y, rtol=1e-6)  # ... and the panel re-ran it
    assert "aotb-fail" in panel.stats.value and "reloaded" in panel.title.value
    with pytest.raises(CompileError):
        ip.run_cell_magic("aot_kernel", f"cpu --name affine {SAME}", affine_cell("Affine", k="3.0f +"))
    assert "CompileError" in panel.error.value and "previous build" in panel.title.value
    np.testing.assert_allclose(op(x, y), x + 3 * y, rtol=1e-6)  # the previous build still runs


def test_gpu_cell_on_the_emulator_runs_and_names_cell_lines(ip, rng):
    """--emulate builds the cell for aotbench's CUDA emulator: it runs on numpy arrays; --emulate and
    --no-emulate together, or on a cpu cell, are usage errors."""
    op = ip.run_cell_magic("aot_kernel", f"gpu {SAME} --emulate", GPU_CELL)
    assert op.emulated and ip.user_ns["MagicScale"] is op
    x = rand(rng, 1001)
    np.testing.assert_allclose(op(x), 3.0 * x, rtol=1e-6)
    with pytest.raises(UsageError, match="contradict"):
        ip.run_cell_magic("aot_kernel", f"gpu {SAME} --emulate --no-emulate", GPU_CELL)
    with pytest.raises(UsageError, match="gpu cells"):
        ip.run_cell_magic("aot_kernel", "cpu --emulate", "int F(){return 0;}")
    broken = GPU_CELL.replace("return 0;\n}", "return 0\n}")
    with pytest.raises(CompileError) as err:
        ip.run_cell_magic("aot_kernel", f"gpu {SAME} --emulate", broken)
    line = next(i for i, s in enumerate(broken.splitlines(), 1) if s.strip() == "return 0")
    assert any(d.file == "<cell>" and d.line in (line, line + 1) for d in err.value.errors), err.value.errors
