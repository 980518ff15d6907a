"""aotbench's MindSpore stand-in: ``python -m aotbench run`` runs MindSpore aot scripts unmodified, and
``aotbench.mindspore`` gives the same API in-process. No MindSpore here: test_mindspore.py checks the same
scripts against the real one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import aotbench
import aotbench.mindspore as ms
from aotbench import DynamicShapeWarning, MindSporeApiError, MindSporeAttributeError
from aotbench.mindspore import Tensor, nn, ops
from aotbench.mindspore.common import dtype as mstype
from aotbench.mindspore.importer import activate

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = aotbench.examples_dir() / "tutorial"
FIXED = aotbench.examples_dir() / "add_reduce.cc"
HEADER = Path(aotbench.get_include()) / "custom_aot_extra.h"


def run_aotbench(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aotbench", *args], check=False, cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})


@pytest.fixture(autouse=True)
def pynative_cpu():
    """Each test starts in MindSpore's default context (PyNative, CPU), as a new process would."""
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    yield
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")


def tutorial_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "tutorial"
    folder.mkdir()
    for name in ("kernel.cc", "test_custom_aot.py"):
        shutil.copyfile(TUTORIAL / name, folder / name)
    return folder


def test_the_tutorial_files_run_unmodified_and_the_guard_names_the_bug(tmp_path):
    folder = tutorial_folder(tmp_path)
    done = run_aotbench("run", "test_custom_aot.py", cwd=folder)
    assert done.returncode == 0, done.stderr
    # The kernel reads workspace it never wrote: aotbench's poison shows as NaN (MindSpore prints [8. 0. 0. 0.],
    # whatever its memory held) and the guarded first call says why.
    assert done.stdout.strip() == "[nan nan nan nan]"
    assert "stand-in" in done.stderr
    assert "ContractWarning" in done.stderr and "workspace 0: the kernel wrote only its first 16 of 80 bytes" in \
        done.stderr
    assert (folder / "kernel.cc").read_bytes() == (TUTORIAL / "kernel.cc").read_bytes()


def test_the_fixed_kernel_under_the_tutorial_script_prints_the_documented_result(tmp_path):
    folder = tutorial_folder(tmp_path)
    shutil.copyfile(FIXED, folder / "kernel.cc")
    done = run_aotbench("run", "test_custom_aot.py", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[10. 10. 10. 10.]"
    assert "Warning" not in done.stderr


def test_graph_mode_warns_about_the_tutorial_init_with_minus_one_dims(tmp_path):
    folder = tutorial_folder(tmp_path)
    script = (folder / "test_custom_aot.py").read_text()
    graph = script.replace('context.set_context(device_target="CPU")',
                           'context.set_context(device_target="CPU", mode=context.GRAPH_MODE)')
    assert graph != script
    (folder / "graph_mode.py").write_text(graph)
    done = run_aotbench("run", "graph_mode.py", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert "DynamicShapeWarning" in done.stderr
    assert "18446744073709551600 bytes for workspace 0" in done.stderr and "(4, -1)" in done.stderr


def mindspore_style_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "ms_style"
    folder.mkdir()
    shutil.copyfile(ROOT / "tests" / "support" / "mindspore_scripts" / "add_reduce_ms.py", folder / "test_add_reduce.py")
    shutil.copyfile(FIXED, folder / "add_reduce.cc")
    shutil.copyfile(HEADER, folder / "custom_aot_extra.h")
    return folder


@pytest.mark.slow
def test_run_dash_m_pytest_runs_mindspore_style_tests_and_they_can_fail(tmp_path):
    folder = mindspore_style_folder(tmp_path)
    done = run_aotbench("run", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_add_reduce.py", cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout
    wrong = run_aotbench("run", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_add_reduce.py", cwd=folder,
                         env={"ADD_REDUCE_WRONG": "1"})
    assert wrong.returncode == 1 and "4 failed" in wrong.stdout


def test_script_arguments_and_exit_status_pass_through(tmp_path):
    (tmp_path / "args.py").write_text("import sys, mindspore\nprint(sys.argv[1:], mindspore.__name__)\n"
                                      "sys.exit(int(sys.argv[1]))\n")
    done = run_aotbench("run", "args.py", "3", "--flag", cwd=tmp_path)
    assert done.returncode == 3
    assert done.stdout.strip() == "['3', '--flag'] aotbench.mindspore"


@pytest.mark.parametrize("code, api", [
    ("from mindspore import Model", "mindspore.Model"),
    ("import mindspore.dataset", "mindspore.dataset"),
    ("import mindspore.ops as ops\nops.Add()", "mindspore.ops.Add"),
    ("from mindspore.ops import operations", "mindspore.ops.operations"),
    ("import mindspore\nmindspore.ops.Custom(lambda x: x, None, None, 'pyfunc')", "mindspore.ops.Custom(func_type='pyfunc')"),
    ("import mindspore\nmindspore.set_context(device_target='Ascend')", "device_target='Ascend'"),
])
def test_a_missing_api_raises_an_error_naming_it(tmp_path, code, api):
    (tmp_path / "uses.py").write_text(code + "\n")
    done = run_aotbench("run", "uses.py", cwd=tmp_path)
    assert done.returncode == 1
    assert re.search(r"MindSpore(Api|Attribute)Error", done.stderr) and f"{api} is not available" in done.stderr


def test_missing_apis_keep_import_error_fallbacks_and_hasattr_working():
    with pytest.raises(MindSporeAttributeError, match="mindspore.ops.Add is not available"):
        ms.ops.Add  # noqa: B018
    assert not hasattr(ms, "jit") and getattr(ms.ops, "Add", None) is None  # feature detection keeps working
    with pytest.raises(MindSporeApiError, match="mindspore.Model is not available"):
        from aotbench.mindspore import Model  # noqa: F401  (the sentence survives `from ... import`)
    with pytest.raises(ImportError, match="mindspore.nn.Dense is not available"):
        from aotbench.mindspore.nn import Dense  # noqa: F401
    assert not hasattr(ms, "__version__")
    assert not hasattr(Tensor([1.0]), "_private")
    with pytest.raises(AttributeError, match=r"mindspore.Tensor.sum .*is not available"):
        Tensor([1.0]).sum()
    for operation in (lambda t: t + 1, lambda t: -t, lambda t: t > 0, lambda t: t == 1, lambda t: float(t)):
        with pytest.raises(TypeError, match="arithmetic and comparison on mindspore.Tensor .*is not available"):
            operation(Tensor([1.0]))


def test_the_stand_in_never_shadows_mindspore_outside_run():
    code = ("import aotbench, aotbench.mindspore\n"
            "try:\n    import mindspore\nexcept ModuleNotFoundError:\n    print('no mindspore')\n"
            "else:\n    print(mindspore.__file__)\n")
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "aotbench" not in done.stdout  # a real MindSpore or none, never the stand-in
    assert "mindspore" not in sys.modules
    with activate():
        import mindspore
        import mindspore.common.dtype as dtype_module

        assert mindspore is ms and dtype_module is mstype
        with pytest.raises(MindSporeApiError, match="mindspore.train is not available"):
            import mindspore.train
    assert "mindspore" not in sys.modules and "mindspore.common.dtype" not in sys.modules


def test_tensor_follows_mindspore():
    assert Tensor([1.5, 2]).dtype is mstype.float32  # Python floats: float32, as MindSpore
    assert Tensor([1, 2]).dtype is ms.int64 and Tensor([True]).dtype is ms.bool_
    data = np.random.default_rng().standard_normal((3, 4))
    t = Tensor(data)
    assert t.dtype is ms.float64 and t.shape == (3, 4) and t.ndim == 2 and t.size == 12
    np.testing.assert_array_equal(t.asnumpy(), data)
    data[0, 0] = 99.0
    assert t.asnumpy()[0, 0] != 99.0  # Tensor(array) holds its own copy
    assert Tensor(data, dtype=ms.float16).dtype is ms.float16
    assert str(ms.float32) == "Float32" and repr(ms.float32) == "mindspore.float32"
    assert mstype.dtype_to_nptype(ms.int32) is np.int32
    placeholder = Tensor(shape=[4, None], dtype=ms.float32)
    assert placeholder.shape == (4, -1)
    with pytest.raises(aotbench.ArgumentError, match="placeholder"):
        placeholder.asnumpy()
    with pytest.raises(aotbench.ArgumentError, match="shape= and dtype="):
        Tensor()


def reduce_op(axis=1, keep_dim=False, out_shape=None, out_dtype=ms.float32, source=FIXED):
    reg = (ops.CustomRegOp("reduce").input(0, "x1").input(1, "x2").output(0, "y")
           .dtype_format(ops.DataType.None_None, ops.DataType.None_None, ops.DataType.None_None)
           .attr("axis", "required", "all", value=axis).attr("keep_dim", "required", "all", value=keep_dim)
           .target("CPU").get_op_info())
    return ops.Custom(f"{source}:CustomKernel", out_shape, out_dtype, "aot", reg_info=reg)


class Net(nn.Cell):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, x, y):
        return self.op(x, y)


def test_custom_takes_and_gives_tensors(rng):
    x, y = rng.random((6, 5), np.float32), rng.random((6, 5), np.float32)
    out = Net(reduce_op(axis=0, keep_dim=True))(Tensor(x), Tensor(y))
    assert isinstance(out, Tensor) and out.dtype is ms.float32
    np.testing.assert_allclose(out.asnumpy(), (x + y).sum(0, keepdims=True), rtol=1e-6)


def test_a_tuple_of_shapes_returns_a_tuple_even_for_one_output(rng):
    """MindSpore's idiom net(x, y)[0] is the first output: with a bare array it would be row 0."""
    x, y = rng.random((4, 5), np.float32), rng.random((4, 5), np.float32)
    for out_shape, out_dtype in ((((4,),), (ms.float32,)), ([[4]], [ms.float32])):
        out = Net(reduce_op(out_shape=out_shape, out_dtype=out_dtype))(Tensor(x), Tensor(y))
        assert isinstance(out, tuple) and len(out) == 1 and out[0].shape == (4,)
        np.testing.assert_allclose(out[0].asnumpy(), (x + y).sum(1), rtol=1e-6)
    ms.set_context(mode=ms.GRAPH_MODE)  # list-form rules give a list in graph mode, as in MindSpore 2.10
    assert isinstance(Net(reduce_op(out_shape=[[4]], out_dtype=[ms.float32]))(Tensor(x), Tensor(y)), list)
    assert isinstance(Net(reduce_op(out_shape=((4,),), out_dtype=(ms.float32,)))(Tensor(x), Tensor(y)), tuple)
    # The pairs MindSpore 2.10 refuses, refused here too (so a script that runs here runs there).
    for out_shape, out_dtype in ((((4,),), ms.float32), ((4,), (ms.float32,)), (None, (ms.float32,)),
                                 ([[4]], (ms.float32,)), (((4,),), [ms.float32])):
        with pytest.raises(aotbench.ArgumentError, match="MindSpore"):
            reduce_op(out_shape=out_shape, out_dtype=out_dtype)
    op = aotbench.Custom(f"{FIXED}:CustomKernel", ((4,),), np.float32, attrs={"axis": 1, "keep_dim": False})
    assert isinstance(op(x, y), tuple) and op(x, y)[0].shape == (4,)
    assert op.infer_shape((4, 5), (4, 5)) == ((4,),)
    assert isinstance(op.check(x, y).outputs, tuple)
    isolated = aotbench.Custom(f"{FIXED}:CustomKernel", ((4,),), np.float32, attrs={"axis": 1, "keep_dim": False},
                               isolate=True)
    assert isinstance(isolated(x, y), tuple)
    single = aotbench.Custom(f"{FIXED}:CustomKernel", (4,), np.float32, attrs={"axis": 1, "keep_dim": False})
    assert isinstance(single(x, y), np.ndarray) and single.infer_shape((4, 5), (4, 5)) == (4,)


def test_set_inputs_refuses_what_mindspore_refuses(rng):
    net = Net(reduce_op())
    net.set_inputs(Tensor(shape=[4, None], dtype=ms.float32), Tensor(shape=[4, None], dtype=ms.float32))
    ok = Tensor(rng.random((4, 7), np.float32))
    assert net(ok, ok).shape == (4,)
    with pytest.raises(aotbench.ShapeError, match=r"shape \[5, 7\]; set_inputs declared \[4, -1\]"):
        bad = Tensor(rng.random((5, 7), np.float32))
        net(bad, bad)
    with pytest.raises(aotbench.ArgumentError, match="Float64; set_inputs declared Float32"):
        wide = Tensor(rng.random((4, 7)))
        net(wide, wide)


def dynamic_net(op):
    net = Net(op)
    net.set_inputs(Tensor(shape=[4, None], dtype=ms.float32), Tensor(shape=[4, None], dtype=ms.float32))
    return net


def test_pynative_warns_when_a_later_shape_needs_more_workspace_than_the_first_init_gave(rng):
    net = dynamic_net(reduce_op())
    small = [rng.random((4, 5), np.float32) for _ in range(2)]
    large = [rng.random((4, 9), np.float32) for _ in range(2)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = net(*map(Tensor, small))
        again = net(*map(Tensor, small))
        bigger = net(*map(Tensor, large))
    found = [w for w in caught if issubclass(w.category, DynamicShapeWarning)]
    assert len(found) == 1
    text = str(found[0].message)
    assert "144 bytes for workspace 0 with inputs (4, 9), (4, 9)" in text and "would give it 80 bytes" in text
    assert "PyNative" in text and found[0].filename == __file__
    for out, (x, y) in ((first, small), (again, small), (bigger, large)):  # aotbench's numbers stay right
        np.testing.assert_allclose(out.asnumpy(), (x + y).sum(1), rtol=1e-6)


def test_graph_mode_warns_once_for_an_init_that_wraps_and_not_for_one_without_workspace(rng):
    ms.set_context(mode=ms.GRAPH_MODE)
    net = dynamic_net(reduce_op())
    x = [Tensor(rng.random((4, c), np.float32)) for c in (5, 5, 9)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for t in x:
            net(t, t)
    found = [str(w.message) for w in caught if issubclass(w.category, DynamicShapeWarning)]
    assert len(found) == 1 and "with -1 dims" in found[0] and "18446744073709551600 bytes" in found[0]
    fast = dynamic_net(reduce_op(source=aotbench.examples_dir() / "add_reduce_fast.cc"))
    static = Net(reduce_op())
    with warnings.catch_warnings():
        warnings.simplefilter("error", DynamicShapeWarning)
        for t in x:
            fast(t, t)  # no workspace: nothing MindSpore's single Init could get wrong
            static(t, t)  # no set_inputs: MindSpore runs Init per shape, as aotbench


def test_what_mindspore_refuses_in_a_registration_is_refused(rng):
    bare = ops.CustomRegOp("bare").input(0, "x1").input(1, "x2").output(0, "y").target("CPU").get_op_info()
    with pytest.raises(aotbench.ArgumentError, match="no dtype_format: MindSpore refuses it"):
        ops.Custom(f"{FIXED}:CustomKernel", None, ms.float32, "aot", reg_info=bare)
    with pytest.raises(aotbench.ArgumentError, match="without reg_info"):
        ops.Custom(f"{FIXED}:CustomKernel", None, ms.float32, "aot")


def test_shape_functions_get_lists_as_in_mindspore(rng):
    reg = (ops.CustomRegOp("mix").input(0, "x").output(0, "y").dtype_format(ops.DataType.F32_Default,
           ops.DataType.F32_Default).target("CPU"))
    for name, value in {"scale": 2.0, "bias": 1, "negate": False, "label": "", "steps": [], "weights": [],
                        "grid": [[]], "table": [[]]}.items():
        reg = reg.attr(name, "required", "all", value=value)
    op = ops.Custom(f"{ROOT / 'tests' / 'support' / 'kernels' / 'ms_roundtrip.cc'}:AttrMix", lambda s: s[:1] + [s[1]],  # list + list: a tuple would fail
                    ms.float32, "aot", reg_info=reg.get_op_info())
    x = rng.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(op(Tensor(x)).asnumpy(), 2 * x + 1, rtol=1e-6)


def test_a_kernel_may_use_std_cout_without_including_iostream(tmp_path, rng):
    source = tmp_path / "prints.cc"
    source.write_text('#include "custom_aot_extra.h"\n'
                      'extern "C" int Prints(int n, void **p, int *nd, int64_t **s, const char **d, void *st, '
                      'void *e) {\n  float *x = static_cast<float *>(p[0]), *o = static_cast<float *>(p[1]);\n'
                      '  for (int64_t i = 0; i < s[0][0]; i++) o[i] = 3 * x[i];\n'
                      '  std::cout << "printed " << s[0][0] << std::endl;\n  return 0;\n}\n')
    op = aotbench.Custom(f"{source}:Prints", lambda s: s, np.float32)
    x = rng.random(6, np.float32)
    np.testing.assert_allclose(op(x), 3 * x, rtol=1e-6)


@pytest.mark.parametrize("args, status, text", [
    ([], 2, "usage: python -m aotbench run SCRIPT"),
    (["--help"], 0, "usage: python -m aotbench run SCRIPT"),
    (["-m"], 2, "-m needs a module name"),
    (["-x", "y.py"], 2, "unknown option -x"),
    (["missing.py"], 2, "can't open file 'missing.py'"),
])
def test_run_usage_errors_are_clear(tmp_path, args, status, text):
    done = run_aotbench("run", *args, cwd=tmp_path)
    assert done.returncode == status and text in done.stdout + done.stderr
    assert "stand-in in this run" not in done.stderr  # nothing ran


def test_more_of_what_mindspore_refuses_is_refused(rng):
    with pytest.raises(aotbench.ArgumentError, match="out_dtype=None"):
        reduce_op(out_dtype=None)
    two = (ops.CustomRegOp("stats").input(0, "x").output(0, "s").output(1, "m")
           .dtype_format(*[ops.DataType.None_None] * 3).target("CPU").get_op_info())
    stats = f"{ROOT / 'tests' / 'support' / 'kernels' / 'ms_roundtrip.cc'}:RowStats"
    with pytest.raises(aotbench.ArgumentError, match="declares 2 outputs but out_dtype"):
        ops.Custom(stats, None, ms.float32, "aot", reg_info=two)
    pair = ops.Custom(stats, lambda s: [[s[0]], [s[0]]], ms.float32, "aot", reg_info=two)
    with pytest.raises(aotbench.ShapeError, match="MindSpore takes a tuple of shapes with a tuple of dtypes"):
        pair(Tensor(rng.standard_normal((3, 4)).astype(np.float32)))


def test_tensor_truth_and_numpy_mixing_follow_mindspore():
    assert bool(Tensor([0.0])) is False and bool(Tensor(2)) is True
    with pytest.raises(aotbench.ArgumentError, match="ambiguous"):
        bool(Tensor([1.0, 2.0]))
    for operation in (lambda t: np.ones(1) + t, lambda t: 2 ** t, lambda t: ~t, lambda t: round(t),
                      lambda t: t & t):
        with pytest.raises(TypeError, match="is not available"):
            operation(Tensor([1]))
    np.testing.assert_array_equal(np.asarray(Tensor([1, 2])), [1, 2])  # explicit conversion still works


def test_graph_mode_warns_instead_of_failing_when_infer_shape_refuses_minus_one(tmp_path, rng):
    source = tmp_path / "strict.cc"
    source.write_text('#include <stdexcept>\n#include "custom_aot_extra.h"\n'
                      'extern "C" std::vector<int64_t> CopyInferShape(int *nd, int64_t **s, AotExtra *e) {\n'
                      '  if (s[0][1] < 0) throw std::runtime_error("no unknown dims here");\n'
                      '  return {s[0][0], s[0][1]};\n}\n'
                      'extern "C" int CopyInit(int *nd, int64_t **s, const char **d, AotExtra *e) { return 0; }\n'
                      'extern "C" int Copy(int n, void **p, int *nd, int64_t **s, const char **d, void *st, void *e)'
                      ' {\n  auto *x = static_cast<float *>(p[0]); auto *o = static_cast<float *>(p[1]);\n'
                      '  for (int64_t i = 0; i < s[0][0] * s[0][1]; i++) o[i] = x[i];\n  return 0;\n}\n')
    ms.set_context(mode=ms.GRAPH_MODE)
    reg = (ops.CustomRegOp("copy").input(0, "x").output(0, "y").dtype_format(ops.DataType.F32_Default,
           ops.DataType.F32_Default).target("CPU").get_op_info())

    class Copy(nn.Cell):
        def __init__(self):
            super().__init__()
            self.op = ops.Custom(f"{source}:Copy", None, ms.float32, "aot", reg_info=reg)

        def construct(self, x):
            return self.op(x)

    net = Copy()
    net.set_inputs(Tensor(shape=[3, None], dtype=ms.float32))
    x = rng.standard_normal((3, 4)).astype(np.float32)
    with pytest.warns(DynamicShapeWarning, match=r"\(graph mode\) CopyInferShape failed .*no unknown dims here"):
        out = net(Tensor(x))
    np.testing.assert_array_equal(out.asnumpy(), x)


def test_run_in_process_leaves_argv_and_path_as_they_were(tmp_path, capsys):
    from aotbench.cli.run import run

    (tmp_path / "script.py").write_text("import sys, mindspore\nprint(sys.argv, mindspore.__name__)\n")
    argv, path = sys.argv[:], sys.path[:]
    assert run([str(tmp_path / "script.py"), "a"]) == 0
    assert f"['{tmp_path / 'script.py'}', 'a'] aotbench.mindspore" in capsys.readouterr().out
    assert sys.argv == argv and sys.path == path and "mindspore" not in sys.modules
