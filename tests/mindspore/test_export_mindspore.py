"""``op.export_mindspore`` and ``%%aot_kernel --export``: the folder's files, and its test run through aotbench's
MindSpore stand-in, passing as written and failing when a saved output is changed. test_mindspore.py runs the
same folders in real MindSpore."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench import ArgumentError, CustomRegOp, DataType

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "tests" / "support" / "kernels" / "ms_roundtrip.cc"
FIXED = aotbench.examples_dir() / "add_reduce.cc"
MIX_ATTRS = {"bias": 5, "negate": True, "label": "h\u00e9llo", "steps": [1, -2, 3], "weights": [0.25, -1.5],
             "grid": [[1, 2], [3]], "table": [[0.5], [], [2.25, -0.75]]}


def run_test(folder: Path, test: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aotbench", "run", test], check=False, cwd=folder,
                          capture_output=True, text=True, timeout=300, env=dict(os.environ))


def mix_op():
    """AttrMix with seven attributes registered with values and ``scale`` given with each call (label declared
    "str", scale "float", the others "all")."""
    reg = CustomRegOp("attr_mix").input(0, "x").output(0, "y")
    for name, value in MIX_ATTRS.items():  # label's declared type, scale's, and "all": kept in the export
        reg = reg.attr(name, "required", "str" if name == "label" else "all", value=value)
    reg = reg.attr("scale", "required", "float").target("CPU").get_op_info()
    return aotbench.Custom(f"{KERNELS}:AttrMix", lambda s: s, np.float32, reg_info=reg)


def test_an_export_holds_what_mindspore_needs_and_its_test_passes(tmp_path, rng):
    reg = (CustomRegOp("reduce_rows").input(0, "x1").input(0, "x2").output(0, "y")
           .dtype_format(DataType.None_None, DataType.None_None, DataType.None_None)
           .attr("axis", "required", "all", value=0).attr("keep_dim", "required", "all", value=True)
           .target("CPU").get_op_info())
    op = aotbench.Custom(f"{FIXED}:CustomKernel", None, np.float32, reg_info=reg)
    x, y = rng.standard_normal((33, 7)).astype(np.float32), rng.standard_normal((33, 7)).astype(np.float32)
    export = op.export_mindspore(tmp_path / "out", x, y)
    assert export.directory == (tmp_path / "out").resolve() and export.test == "test_reduce_rows.py"
    folder = export.directory
    assert (folder / "reduce_rows.cc").read_text() == FIXED.read_text()
    assert (folder / "custom_aot_extra.h").read_bytes() == (Path(aotbench.get_include()) / "custom_aot_extra.h")\
        .read_bytes()
    module = (folder / "reduce_rows_op.py").read_text()
    for line in (".input(1, 'x2')", ".dtype_format(DataType.F32_Default, DataType.F32_Default, DataType.F32_Default)",
                 """.attr('axis', "required", "all", value=0)""", """.attr('keep_dim', "required", "all", value=True)""",
                 '.target("CPU")', "OUT_SHAPE = None", "OUT_DTYPE = mstype.float32",
                 'ops.Custom(KERNEL, OUT_SHAPE, OUT_DTYPE, "aot", reg_info=REG_INFO)'):
        assert line in module, line
    with np.load(folder / "inputs.npz") as saved:
        np.testing.assert_array_equal(saved["arr_0"], x)
    with np.load(folder / "expected.npz") as saved:
        np.testing.assert_array_equal(saved["arr_0"], op(x, y))
    done = run_test(folder, export.test)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "CustomKernel PYNATIVE: 1 output(s) equal aotbench's bit for bit" in done.stdout
    assert "CustomKernel GRAPH: 1 output(s) equal aotbench's bit for bit" in done.stdout


def test_an_exported_test_fails_when_an_output_differs(tmp_path, rng):
    op = aotbench.Custom(f"{KERNELS}:RowStats", None, (np.float32, np.float32),
                         reg_info=CustomRegOp("row_stats").input(0, "x").output(0, "s").output(1, "m")
                         .target("CPU").get_op_info())
    export = op.export_mindspore(tmp_path, rng.standard_normal((9, 13)).astype(np.float32))
    assert "OUT_DTYPE = (mstype.float32, mstype.float32,)" in (tmp_path / "row_stats_op.py").read_text()
    assert run_test(tmp_path, export.test).returncode == 0
    with np.load(tmp_path / "expected.npz") as saved:
        sums, maxima = saved["arr_0"], saved["arr_1"]
    maxima[4] = np.nextafter(maxima[4], np.float32(np.inf))  # one value, by one ulp
    np.savez(tmp_path / "expected.npz", sums, maxima)
    done = run_test(tmp_path, export.test)
    assert done.returncode == 1
    assert "output 1: 1 of 9 values differ from aotbench's" in done.stdout


def test_every_attribute_kind_and_a_call_attribute_travel(tmp_path, rng):
    op = mix_op()
    x = rng.standard_normal((17, 5)).astype(np.float32)
    export = op.export_mindspore(tmp_path, x, 0.37)
    module = (tmp_path / "attr_mix_op.py").read_text()
    assert """.attr('label', "required", "str", value='h\u00e9llo')""" in module
    assert """.attr('table', "required", "all", value=[[0.5], [], [2.25, -0.75]])""" in module
    assert """.attr('scale', "required", "float")  # given with each call""" in module
    assert "def __init__(self, attr_scale=0.37):" in module and "return self.op(x0, self.attr_scale)" in module
    assert "OUT_SHAPE = (17, 5)" in module and "out_shape was a Python function" in module
    done = run_test(tmp_path, export.test)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_a_workspace_and_infer_shape_in_several_dtypes(tmp_path, rng, dtype):
    op = aotbench.Custom(f"{KERNELS}:Scan", None, dtype)
    data = (rng.standard_normal((6, 11)) * 100).astype(dtype)
    export = op.export_mindspore(tmp_path, data)
    assert f"OUT_DTYPE = mstype.{np.dtype(dtype).name}" in (tmp_path / "scan_op.py").read_text()
    with np.load(tmp_path / "expected.npz") as saved:
        np.testing.assert_array_equal(saved["arr_0"], np.cumsum(data.astype(np.float64), axis=1).astype(dtype))
    assert run_test(tmp_path, export.test).returncode == 0


@pytest.mark.filterwarnings("ignore::aotbench.FastMathWarning")
def test_flags_are_not_carried_and_the_outputs_come_from_the_documented_build(tmp_path, rng):
    op = aotbench.Custom(f"{FIXED}:CustomKernel", None, np.float32, attrs={"axis": 1, "keep_dim": False},
                         flags=["-O3", "-ffast-math"])
    x, y = rng.standard_normal((64, 300)).astype(np.float32), rng.standard_normal((64, 300)).astype(np.float32)
    export = op.export_mindspore(tmp_path, x, y)
    documented = aotbench.Custom(f"{FIXED}:CustomKernel", None, np.float32, attrs={"axis": 1, "keep_dim": False})
    with np.load(tmp_path / "expected.npz") as saved:
        assert saved["arr_0"].tobytes() == documented(x, y).tobytes()
    assert "-O3 -ffast-math" in (tmp_path / "README.md").read_text()
    assert export.files[0] == "customkernel.cc"


def test_headers_beside_the_kernel_are_exported_with_it(tmp_path, rng):
    src = tmp_path / "src"
    src.mkdir()
    (src / "twice.h").write_text("inline float Twice(float v) { return 2.0f * v; }\n")
    (src / "k.cc").write_text('#include "custom_aot_extra.h"\n#include "twice.h"\n'
                              'extern "C" int Double(int n, void **p, int *nd, int64_t **s, const char **d, void *st, '
                              'void *e) {\n  auto *x = static_cast<float *>(p[0]); auto *o = static_cast<float *>(p[1]);\n'
                              '  for (int64_t i = 0; i < s[0][0]; i++) o[i] = Twice(x[i]);\n  return 0;\n}\n')
    op = aotbench.Custom(f"{src / 'k.cc'}:Double", lambda s: s, np.float32)
    export = op.export_mindspore(tmp_path / "out", rng.standard_normal(10).astype(np.float32))
    assert "twice.h" in export.files
    assert (tmp_path / "out" / "twice.h").read_text() == (src / "twice.h").read_text()
    assert run_test(tmp_path / "out", export.test).returncode == 0


def test_what_cannot_be_exported_says_why(tmp_path, rng):
    op = aotbench.Custom(f"{FIXED}:CustomKernel", None, np.float32, attrs={"axis": 1, "keep_dim": False})
    with pytest.raises(ArgumentError, match="give the inputs"):
        op.export_mindspore(tmp_path)
    prebuilt = aotbench.Custom(f"{op.artifact.path}:CustomKernel", None, np.float32,
                               attrs={"axis": 1, "keep_dim": False})
    x = rng.standard_normal((4, 5)).astype(np.float32)
    with pytest.raises(ArgumentError, match="prebuilt library"):
        prebuilt.export_mindspore(tmp_path, x, x)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    half = aotbench.Custom(f"{KERNELS}:Scan", None, ml_dtypes.bfloat16)
    with pytest.raises(ArgumentError, match="bfloat16"):
        half.export_mindspore(tmp_path, x.astype(ml_dtypes.bfloat16))


def test_the_magic_exports_after_the_next_call(tmp_path, rng):
    from ipython_shell import aotbench_shell

    cell = FIXED.read_text()
    with aotbench_shell(tmp_path) as shell:
        shell.run_cell_magic("aot_kernel", "cpu --attr axis=1 --attr keep_dim=False --out-dtype np.float32 "
                             "--export exported", cell)
        op = shell.user_ns["CustomKernel"]
        assert op.last_export is None and not (tmp_path / "exported").exists()
        x, y = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
        np.testing.assert_allclose(op(x, y), (x + y).sum(1), rtol=1e-5)
        assert op.last_export is not None and op.last_export.directory == (tmp_path / "exported").resolve()
        op(x, y)  # only the next call exports
    with np.load(tmp_path / "exported" / "inputs.npz") as saved:
        np.testing.assert_array_equal(saved["arr_1"], y)
    assert run_test(tmp_path / "exported", op.last_export.test).returncode == 0


def test_generated_files_are_valid_python_for_any_names_and_values_aotbench_accepts(tmp_path, rng):
    import ast

    reg = (CustomRegOp('re"duce\'s')
           .input(0, 'x"1').input(1, "x'2").output(0, "y\n")
           .attr("nan_attr", "required", "all", value=float("nan"))
           .attr("inf_attr", "required", "all", value=[float("inf"), -float("inf")])
           .attr("quote", "required", "all", value='a "b" \'c\'\n\u00e9')
           .attr("self", "required", "all").attr("op", "required", "all").attr("super", "required", "all")
           .dtype_format(DataType.None_None, DataType.None_None, DataType.None_None).target("CPU").get_op_info())
    op = aotbench.Custom(f"{FIXED}:CustomKernel", None, np.float32, reg_info=reg, attrs={"axis": 1, "keep_dim": False})
    x, y = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    export = op.export_mindspore(tmp_path, x, y, 1, 2.5, float("nan"))
    assert export.test == "test_re_duce_s.py"
    module = (tmp_path / "re_duce_s_op.py").read_text()
    for text in (module, (tmp_path / export.test).read_text()):
        ast.parse(text)
    assert "value=float('nan')" in module and "value=[float('inf'), -float('inf')]" in module
    assert "def __init__(self, attr_self=1, attr_op=2.5, attr_super=float('nan')):" in module
    done = run_test(tmp_path, export.test)
    assert done.returncode == 0, done.stdout + done.stderr


def test_output_rules_are_written_in_the_forms_mindspore_takes_together(tmp_path, rng):
    stats = aotbench.Custom(f"{KERNELS}:RowStats", [[9], [9]], [np.float32, np.float32])
    stats.export_mindspore(tmp_path / "stats", rng.standard_normal((9, 13)).astype(np.float32))
    text = (tmp_path / "stats" / "rowstats_op.py").read_text()
    assert "OUT_SHAPE = ((9,), (9,))" in text and "OUT_DTYPE = (mstype.float32, mstype.float32,)" in text
    scan = aotbench.Custom(f"{KERNELS}:Scan", None, (np.float64,))  # aotbench: a tuple of one output
    assert isinstance(scan(rng.standard_normal((2, 3))), tuple)
    scan.export_mindspore(tmp_path / "scan", rng.standard_normal((2, 3)))
    text = (tmp_path / "scan" / "scan_op.py").read_text()
    assert "OUT_SHAPE = None" in text and "OUT_DTYPE = mstype.float64\n" in text  # MindSpore refuses (f64,) here
    for folder in ("stats", "scan"):
        assert run_test(tmp_path / folder, f"test_{folder if folder == 'scan' else 'rowstats'}.py").returncode == 0


def test_an_export_never_overwrites_what_it_did_not_write(tmp_path, rng):
    op = aotbench.Custom(f"{FIXED}:CustomKernel", None, np.float32, attrs={"axis": 1, "keep_dim": False})
    x = rng.standard_normal((4, 5)).astype(np.float32)
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("the user's own")
    with pytest.raises(ArgumentError, match=r"not empty \(README.md\) and is not an earlier aotbench export"):
        op.export_mindspore(project, x, x)
    assert (project / "README.md").read_text() == "the user's own"
    first = op.export_mindspore(tmp_path / "again", x, x)
    (tmp_path / "again" / "stale.txt").write_text("x")
    with pytest.raises(ArgumentError, match="stale.txt"):
        op.export_mindspore(tmp_path / "again", x, x)
    (tmp_path / "again" / "stale.txt").unlink()
    second = op.with_attrs(axis=0).export_mindspore(tmp_path / "again", x, x)  # replaces its own files
    assert second.files == first.files
    with np.load(tmp_path / "again" / "expected.npz") as saved:
        assert saved["arr_0"].shape == (5,)
    (tmp_path / "file").write_text("")
    with pytest.raises(ArgumentError, match="is a file"):
        op.export_mindspore(tmp_path / "file", x, x)
    with pytest.raises(ArgumentError, match="the kernel's own folder"):
        op.export_mindspore(FIXED.parent, x, x)


def test_headers_that_cannot_travel_are_named(tmp_path, rng):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "twice.h").write_text("inline float Twice(float v) { return 2.0f * v; }\n")
    src = tmp_path / "src"
    src.mkdir()
    (src / "k.cc").write_text('#include "custom_aot_extra.h"\n#include "../shared/twice.h"\n'
                              'extern "C" int Double(int n, void **p, int *nd, int64_t **s, const char **d, void *st, '
                              'void *e) {\n  auto *x = static_cast<float *>(p[0]); auto *o = static_cast<float *>(p[1]);\n'
                              '  for (int64_t i = 0; i < s[0][0]; i++) o[i] = Twice(x[i]);\n  return 0;\n}\n')
    op = aotbench.Custom(f"{src / 'k.cc'}:Double", lambda s: s, np.float32)
    x = rng.standard_normal(10).astype(np.float32)
    with pytest.raises(ArgumentError, match=r"twice.h, outside the kernel's folder"):
        op.export_mindspore(tmp_path / "out", x)
    beside = tmp_path / "beside"
    beside.mkdir()
    (beside / "twice.h").write_text((shared / "twice.h").read_text())
    (beside / "k.cc").write_text((src / "k.cc").read_text().replace("../shared/twice.h", "twice.h"))
    op = aotbench.Custom(f"{beside / 'k.cc'}:Double", lambda s: s, np.float32)
    (beside / "twice.h").write_text("inline float Twice(float v) { return 3.0f * v; }\n")  # edited after the build
    with pytest.raises(aotbench.SourceChangedError, match="changed since Double was built"):
        op.export_mindspore(tmp_path / "out", x)


def test_the_magic_exports_a_cell_with_a_local_header_and_a_failed_export_only_warns(tmp_path, rng):
    from ipython_shell import aotbench_shell

    (tmp_path / "twice.h").write_text("inline float Twice(float v) { return 2.0f * v; }\n")
    cell = ('#include "custom_aot_extra.h"\n#include "twice.h"\n'
            'extern "C" int Double(int n, void **p, int *nd, int64_t **s, const char **d, void *st, void *e) {\n'
            '  auto *x = static_cast<float *>(p[0]); auto *o = static_cast<float *>(p[1]);\n'
            '  for (int64_t i = 0; i < s[0][0]; i++) o[i] = Twice(x[i]);\n  return 0;\n}\n')
    x = rng.standard_normal(7).astype(np.float32)
    with aotbench_shell(tmp_path) as shell:
        shell.run_cell_magic("aot_kernel", "cpu --out-shape 'lambda s: s' --export out", cell)
        op = shell.user_ns["Double"]
        np.testing.assert_allclose(op(x), 2 * x, rtol=1e-6)
        assert "twice.h" in op.last_export.files
        (tmp_path / "taken").write_text("a file where the folder should go")
        op.export_after_next_call(tmp_path / "taken")
        with pytest.warns(UserWarning, match="the export to .*taken after this call failed"):
            result = op(x)
        np.testing.assert_allclose(result, 2 * x, rtol=1e-6)
        shell.run_cell_magic("aot_kernel", "cpu --out-shape 'lambda s: s' --export out2", cell)
        shell.run_cell_magic("aot_kernel", "cpu --out-shape 'lambda s: s'", cell)  # re-run without: cancelled
        shell.user_ns["Double"](x)
    assert not (tmp_path / "out2").exists()
    assert run_test(tmp_path / "out", "test_double.py").returncode == 0


def test_a_folder_stays_exportable_after_its_test_ran(tmp_path, rng):
    op = aotbench.Custom(f"{FIXED}:CustomKernel", None, np.float32, attrs={"axis": 1, "keep_dim": False})
    x = rng.standard_normal((4, 5)).astype(np.float32)
    export = op.export_mindspore(tmp_path, x, x)
    assert run_test(tmp_path, export.test).returncode == 0
    # What running it in MindSpore leaves: its build, Python's and pytest's caches, a graph-mode dump.
    for leftover in ("custom_kernel_meta/customkernel.cc.so", "__pycache__/customkernel_op.cpython-311.pyc",
                     ".pytest_cache/README.md", "rank_0/om/analyze_fail.ir"):
        (tmp_path / leftover).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / leftover).write_bytes(b"stale")
    again = op.export_mindspore(tmp_path, x, x)
    assert not (tmp_path / "custom_kernel_meta").exists() and not (tmp_path / "__pycache__").exists()
    assert (tmp_path / "rank_0" / "om" / "analyze_fail.ir").exists()  # not ours to delete, not in the way
    assert run_test(tmp_path, again.test).returncode == 0


def include_kernel(folder: Path, header: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "k.cc").write_text(f'#include "custom_aot_extra.h"\n#include "{header}"\n'
                                 'extern "C" int Double(int n, void **p, int *nd, int64_t **s, const char **d, '
                                 'void *st, void *e) {\n  auto *x = static_cast<float *>(p[0]);\n'
                                 '  auto *o = static_cast<float *>(p[1]);\n'
                                 '  for (int64_t i = 0; i < s[0][0]; i++) o[i] = Twice(x[i]);\n  return 0;\n}\n')
    return folder / "k.cc"


def test_a_header_from_an_include_folder_lands_where_mindspore_looks(tmp_path, rng):
    source = include_kernel(tmp_path / "src", "twice.h")
    (tmp_path / "src" / "include").mkdir()
    (tmp_path / "src" / "include" / "twice.h").write_text("inline float Twice(float v) { return 2.0f * v; }\n")
    op = aotbench.Custom(f"{source}:Double", lambda s: s, np.float32, flags=[f"-I{tmp_path / 'src' / 'include'}"])
    x = rng.standard_normal(6).astype(np.float32)
    export = op.export_mindspore(tmp_path / "out", x)
    assert "twice.h" in export.files and (tmp_path / "out" / "twice.h").is_file()
    assert run_test(tmp_path / "out", export.test).returncode == 0


def test_sources_and_headers_edited_since_the_build_are_refused_with_any_flags(tmp_path, rng):
    source = include_kernel(tmp_path / "src", "twice.h")
    header = tmp_path / "src" / "twice.h"
    header.write_text("inline float Twice(float v) { return 2.0f * v; }\n")
    op = aotbench.Custom(f"{source}:Double", lambda s: s, np.float32, flags=["-O2"])  # rebuilt for the export
    x = rng.standard_normal(6).astype(np.float32)
    header.write_text("inline float Twice(float v) { return 3.0f * v; }\n")
    with pytest.raises(aotbench.SourceChangedError, match="twice.h changed since Double was built"):
        op.export_mindspore(tmp_path / "out", x)
    header.write_text("inline float Twice(float v) { return 2.0f * v; }\n")
    source.write_text(source.read_text().replace("Twice(x[i])", "Twice(x[i]) + 1"))
    with pytest.raises(aotbench.SourceChangedError, match="k.cc changed since Double was built"):
        op.export_mindspore(tmp_path / "out", x)
    assert not (tmp_path / "out").exists()


def test_values_numpy_gives_are_written_as_python(tmp_path, rng):
    op = mix_op()
    x = rng.standard_normal(()).astype(np.float32)  # 0-d stays 0-d
    export = op.export_mindspore(tmp_path, x, np.array(0.5, np.float32))
    module = (tmp_path / "attr_mix_op.py").read_text()
    assert "attr_scale=0.5" in module and "OUT_SHAPE = ()" in module
    assert run_test(tmp_path, export.test).returncode == 0


def test_bfloat16_outputs_are_refused(tmp_path, rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    source = tmp_path / "bits.cc"
    source.write_text('#include <cstring>\n#include "custom_aot_extra.h"\n'
                      'extern "C" int Bits(int n, void **p, int *nd, int64_t **s, const char **d, void *st, void *e)'
                      ' {\n  std::memcpy(p[1], p[0], 2 * s[0][0]);\n  return 0;\n}\n')
    op = aotbench.Custom(f"{source}:Bits", lambda s: s, ml_dtypes.bfloat16)
    with pytest.raises(ArgumentError, match="output 0 is bfloat16"):
        op.export_mindspore(tmp_path / "out", rng.integers(0, 2**15, 8).astype(np.uint16))
