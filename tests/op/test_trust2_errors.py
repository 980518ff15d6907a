"""Issue 23, "clear errors": items 9, 21, 22 and 23.

* 9: a header beside the kernel that shadows aotbench's and lets ``Attr<double>`` / ``Attr<int>`` compile (its
  generic ``Attr<T>`` returns ``T()``, as MindSpore's does) is caught from the library's symbols (AttrError at
  load, naming the types, the eight supported ones and the kernel's lines), or, at -O2, from the source text
  (AttrTypeWarning). Once with a header of our own, once with the class from the installed MindSpore wheel.
* 21: aotbench's own static assertion for ``Attr<double>`` is reported at the kernel's line (the cell's line for
  a ``%%aot_kernel`` cell), not at custom_aot_extra.h.
* 22: an error raised while a ``%%aot_kernel`` cell is processed is shown with the magic line, never as
  ``get_ipython().run_cell_magic(...)`` with the whole cell folded onto one line; a cell without
  ``--out-shape`` is told about ``--out-shape``, not ``out_shape=``.
* 23: Ctrl-C during an isolated call shows the user's line and one message (the worker was killed and reaped),
  no aotbench or multiprocessing frame; the next call starts a fresh worker.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.build.diagnostics import Diagnostic
from aotbench.errors import AttrError, CompileError, ShapeError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mindspore"))  # its fixture: real MindSpore
import test_mindspore  # noqa: E402
from ipython_shell import aotbench_shell  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OWN_HEADER = Path(aotbench.get_include()) / "custom_aot_extra.h"
SUPPORTED = ("bool", "int64_t", "float", "std::string", "std::vector<int64_t>", "std::vector<float>",
             "std::vector<std::vector<int64_t>>", "std::vector<std::vector<float>>")

# Reads scale as double and offset as int (both wrong: float and int64_t), bias as float (right).
MISTYPED = """#include "custom_aot_extra.h"
#include <cstdint>

extern "C" int Mistyped(int nparam, void **params, int *ndims, int64_t **shapes,
                        const char **dtypes, void *stream, void *extra) {
  auto *e = static_cast<AotExtra *>(extra);
  double scale = e->Attr<double>("scale");
  int offset = e->Attr<int>("offset");
  float bias = e->Attr<float>("bias");
  const float *x = static_cast<const float *>(params[0]);
  float *out = static_cast<float *>(params[1]);
  for (int64_t i = 0; i < shapes[0][0]; ++i) out[i] = x[i] * scale + offset + bias;
  return 0;
}
"""
SCALE_LINE, OFFSET_LINE = 7, 8

# The same kernel reading every attribute with its right type.
WELL_TYPED = MISTYPED.replace("Mistyped", "WellTyped").replace("double scale = e->Attr<double>", "float scale = "
                                                                                                   "e->Attr<float>") \
    .replace("int offset = e->Attr<int>", "int64_t offset = e->Attr<int64_t>")


def permissive_header() -> str:
    """aotbench's own header with its generic ``Attr<T>`` returning ``T()`` instead of refusing ``T`` (what a
    MindSpore-style header does): the same class layout, so the supported reads still work."""
    text = OWN_HEADER.read_text()
    text, n = re.subn(r"static_assert\(sizeof\(T\) == 0,.*?\);\n", "", text, flags=re.S)
    assert n == 1
    return text


def _attrs(rng) -> dict:
    return {"scale": float(rng.uniform(1.5, 3.0)), "offset": int(rng.integers(1, 9)),
            "bias": float(rng.uniform(0.1, 0.9))}


# -- item 9 --------------------------------------------------------------------------------------------------------
def test_a_shadowing_header_that_reads_attr_double_as_zero_is_refused_at_load(tmp_path, rng):
    (tmp_path / "custom_aot_extra.h").write_text(permissive_header())
    (tmp_path / "mistyped.cc").write_text(MISTYPED)
    with pytest.raises(AttrError) as info:
        aotbench.Custom(f"{tmp_path}/mistyped.cc:Mistyped", lambda s: s, np.float32, attrs=_attrs(rng))
    msg = str(info.value)
    assert "Attr<double>" in msg and "Attr<int>" in msg and "Attr<float>" not in msg, msg
    assert all(t in msg for t in SUPPORTED), msg
    assert f"mistyped.cc:{SCALE_LINE}: double scale" in msg and f"mistyped.cc:{OFFSET_LINE}: int offset" in msg, msg
    assert "reads 0" in msg and "int64_t" in msg


def test_the_same_header_with_well_typed_reads_loads_and_computes(tmp_path, rng):
    """No false alarm: the header's own specialisations (instantiated at -O0 too) are the supported types."""
    (tmp_path / "custom_aot_extra.h").write_text(permissive_header())
    (tmp_path / "welltyped.cc").write_text(WELL_TYPED)
    attrs = _attrs(rng)
    with warnings.catch_warnings():
        warnings.simplefilter("error", aotbench.errors.AttrTypeWarning)
        op = aotbench.Custom(f"{tmp_path}/welltyped.cc:WellTyped", lambda s: s, np.float32, attrs=attrs)
    x = rng.standard_normal(7).astype(np.float32)
    expected = x * np.float32(attrs["scale"]) + np.float32(attrs["offset"]) + np.float32(attrs["bias"])
    np.testing.assert_allclose(op(x), expected, rtol=1e-6, atol=1e-6)


def test_optimised_away_instantiations_are_found_in_the_source_text(tmp_path, rng):
    """At -O2 the generic Attr<T> is inlined (no symbol): a warning from the source text, with the lines; a
    commented-out read is not reported."""
    (tmp_path / "custom_aot_extra.h").write_text(permissive_header())
    text = MISTYPED.replace('  float bias', '  // double unused = e->Attr<double>("old");\n  float bias')
    (tmp_path / "mistyped.cc").write_text(text)
    with pytest.warns(aotbench.errors.AttrTypeWarning) as caught:
        aotbench.Custom(f"{tmp_path}/mistyped.cc:Mistyped", lambda s: s, np.float32, attrs=_attrs(rng),
                        flags=["-O2"])
    (warning,) = [w for w in caught if issubclass(w.category, aotbench.errors.AttrTypeWarning)]
    msg = str(warning.message)
    assert f"mistyped.cc:{SCALE_LINE}: double scale" in msg and f"mistyped.cc:{OFFSET_LINE}: int offset" in msg
    assert "unused" not in msg and all(t in msg for t in SUPPORTED)
    assert warning.filename == __file__  # pointed at the user's line


def _mindspore_header(site: Path) -> str:
    """The AotExtra class of the installed MindSpore wheel's custom_aot_extra.h, made to compile alone (its
    includes of MindSpore's internals and its implementation class dropped; read at test time, not copied)."""
    text = (site / "mindspore" / "include" / "mindspore" / "ccsrc" / "utils" / "custom_aot_extra.h").read_text()
    start, end = text.index("namespace mindspore {"), text.index("class AotExtraImpl")
    return ("#pragma once\n#include <cstdint>\n#include <string>\n#include <vector>\n"
            "#define MS_EXCEPTION_IF_CHECK_FAIL(cond, msg) ((void)0)\n"
            f"{text[start:end]}}}  // namespace mindspore\nusing mindspore::AotExtra;\n")


@pytest.mark.mindspore
@pytest.mark.slow
def test_mindspores_own_header_beside_the_kernel_is_caught(tmp_path, rng, mindspore_python):
    where = subprocess.run([str(mindspore_python), "-c", "import importlib.util, os; "
                            "print(os.path.dirname(os.path.dirname(importlib.util.find_spec('mindspore').origin)))"],
                           capture_output=True, text=True, check=True, timeout=120).stdout.strip()
    (tmp_path / "custom_aot_extra.h").write_text(_mindspore_header(Path(where)))
    (tmp_path / "mistyped.cc").write_text(MISTYPED)
    with pytest.raises(AttrError) as info:
        aotbench.Custom(f"{tmp_path}/mistyped.cc:Mistyped", lambda s: s, np.float32, attrs=_attrs(rng))
    msg = str(info.value)
    assert "Attr<double>" in msg and "Attr<int>" in msg and all(t in msg for t in SUPPORTED), msg
    assert f"mistyped.cc:{SCALE_LINE}:" in msg and f"mistyped.cc:{OFFSET_LINE}:" in msg


mindspore_python = test_mindspore.mindspore_python  # the interpreter with the wheel (installed on first use)


# -- item 21 -------------------------------------------------------------------------------------------------------
ATTR_DOUBLE = MISTYPED.replace('  int offset = e->Attr<int>("offset");\n', "  int offset = 1;\n")


def test_attr_double_with_aotbenchs_header_points_at_the_kernels_line(tmp_path):
    (tmp_path / "k.cc").write_text(ATTR_DOUBLE)
    with pytest.raises(CompileError) as info:
        aotbench.Custom(f"{tmp_path}/k.cc:Mistyped", lambda s: s, np.float32)
    err = info.value
    (first, *_) = err.errors
    assert (first.file, first.line) == (str(tmp_path / "k.cc"), SCALE_LINE), err.errors
    assert "T = double" in first.message and "custom_aot_extra.h:" in first.message
    assert f"k.cc:{SCALE_LINE}:" in str(err) and "custom_aot_extra.h:65" not in str(err).split("(instantiated")[0]
    assert any(d.severity == "note" and d.file.endswith("custom_aot_extra.h") for d in err.diagnostics)


def test_attr_double_in_a_cell_points_at_the_cells_line(tmp_path):
    with aotbench_shell(tmp_path) as ip:
        result = ip.run_cell("%%aot_kernel cpu --out-shape 'lambda s: s'\n" + ATTR_DOUBLE)
    err = result.error_in_exec
    assert isinstance(err, CompileError), err
    (first, *_) = err.errors
    assert (first.file, first.line) == ("<cell>", SCALE_LINE), err.errors
    rendered = "\n".join(err._render_traceback_())
    assert 'double scale = e->Attr<double>("scale");' in rendered and "T = double" in rendered, rendered


def test_nvcc_instantiation_context_moves_the_error_too():
    from aotbench.build.instantiation import relocate

    log = ('/x/include/custom_aot_extra.h(65): error: static assertion failed with "unsupported"\n'
           '          detected during instantiation of "T AotExtra::Attr<T>(std::string) [with T=double]" at line 9 '
           "of /tmp/k.cu\n\n1 error detected in the compilation of \"/tmp/k.cu\".\n")
    found = [(0, Diagnostic("/x/include/custom_aot_extra.h", 65, None, "error", 'static assertion failed with '
                            '"unsupported"'))]
    moved, note = relocate(log, found)
    assert (moved.file, moved.line, moved.severity) == ("/tmp/k.cu", 9, "error") and "T=double" in moved.message
    assert (note.file, note.severity) == ("/x/include/custom_aot_extra.h", "note")


# -- item 22 -------------------------------------------------------------------------------------------------------
NO_SHAPE = """#include <cstdint>
extern "C" int NoShape(int nparam, void **params, int *ndims, int64_t **shapes,
                       const char **dtypes, void *stream, void *extra) {
  return 0;
}
"""


def _rendered(ip, cell: str) -> tuple[BaseException, str]:
    """Run ``cell`` in the shell; the error and the traceback text IPython's showtraceback rendered."""
    shown = []
    original = ip._showtraceback
    ip._showtraceback = lambda etype, evalue, stb: shown.append(stb)
    try:
        result = ip.run_cell(cell)
    finally:
        ip._showtraceback = original
    assert shown, "no traceback was shown"
    return result.error_in_exec, "\n".join(shown[-1])


def test_a_cell_error_shows_the_magic_line_not_the_whole_cell(tmp_path):
    with aotbench_shell(tmp_path) as ip:
        err, text = _rendered(ip, "%%aot_kernel cpu\n" + NO_SHAPE)
    assert isinstance(err, ShapeError)
    assert "run_cell_magic" not in text and "extern" not in text.split("ShapeError:")[0], text
    assert "%%aot_kernel cpu" in text and re.search(r"Cell In\[\d+\], line 1", text), text
    assert "--out-shape" in str(err) and "out_shape=" not in str(err) and "out_shape is None" not in str(err)
    assert "NoShapeInferShape" in str(err) and text.rstrip().endswith(str(err).splitlines()[-1])


def test_an_attribute_error_of_a_cell_shows_the_magic_line_and_the_message(tmp_path):
    with aotbench_shell(tmp_path) as ip:
        err, text = _rendered(ip, "%%aot_kernel cpu --out-shape 'lambda s: s' --attr 'mixed=[1, \"a\"]'\n"
                              + NO_SHAPE)
    assert isinstance(err, AttrError)
    assert "run_cell_magic" not in text and "extern" not in text, text
    assert "%%aot_kernel cpu --out-shape 'lambda s: s' --attr 'mixed=[1, \"a\"]'" in text, text
    assert text.rstrip().endswith(str(err).splitlines()[-1])
    assert len(text.splitlines()) <= 4 + len(str(err).splitlines()), text


# -- item 23 -------------------------------------------------------------------------------------------------------
SPIN = """#include <cstdint>
extern "C" int Spin(int nparam, void **params, int *ndims, int64_t **shapes,
                    const char **dtypes, void *stream, void *extra) {
  const float *x = static_cast<const float *>(params[0]);
  float *out = static_cast<float *>(params[1]);
  volatile int64_t turns = 0;
  if (x[0] > 0) for (;;) ++turns;  // a positive first element: an endless loop
  for (int64_t i = 0; i < shapes[0][0]; ++i) out[i] = 2.0f * x[i];
  return 0;
}
"""

INTERRUPT_SCRIPT = r"""
import json, os, signal, sys, threading, time
import numpy as np
from IPython.testing.globalipapp import start_ipython

shell = start_ipython()
shell.run_line_magic("load_ext", "aotbench")
shell.user_ns["np"] = np
shell.run_cell_magic("aot_kernel", "cpu --isolate --out-shape 'lambda s: s'", open(sys.argv[1]).read())
op = shell.user_ns["Spin"]
rng = np.random.default_rng()
x = rng.uniform(0.5, 1.5, 9).astype(np.float32)  # spins
shown, pids = [], []
shell._showtraceback = lambda etype, evalue, stb: shown.append(stb)

def interrupt():
    while op.worker_pid is None:
        time.sleep(0.05)
    pids.append(op.worker_pid)
    time.sleep(1.0)  # well inside the kernel's endless loop
    os.kill(os.getpid(), signal.SIGINT)

threading.Thread(target=interrupt, daemon=True).start()
shell.user_ns["x"] = x
result = shell.run_cell("def outer(v):\n    return Spin(v)\n\nouter(x)")
err = result.error_in_exec
try:
    os.kill(pids[0], 0)
    reaped = False
except ProcessLookupError:
    reaped = True
y = -rng.uniform(0.5, 1.5, 9).astype(np.float32)  # returns
again = op(y)
print("RESULT " + json.dumps({
    "type": type(err).__name__, "keyboard": isinstance(err, KeyboardInterrupt), "message": str(err),
    "text": "\n".join(shown[-1]) if shown else "", "reaped": reaped, "worker_after": op.worker_pid,
    "first_worker": pids[0], "again_ok": bool(np.array_equal(again, 2 * y))}))
"""


@pytest.mark.slow
def test_ctrl_c_during_an_isolated_call_shows_the_users_frames_and_one_message(tmp_path):
    (tmp_path / "spin.cc").write_text(SPIN)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", INTERRUPT_SCRIPT, str(tmp_path / "spin.cc")], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=300, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr
    out = json.loads(lines[-1][len("RESULT "):])
    text = out["text"]
    assert out["keyboard"], out
    assert "multiprocessing" not in text and "aotbench/" not in text and "connection.py" not in text, text
    assert "outer(x)" in text and "return Spin(v)" in text, text  # the user's own frames stay
    assert len(text.splitlines()) <= 8, text  # was about 30 lines
    assert "interrupted" in out["message"] and "killed and reaped" in out["message"], out["message"]
    assert out["message"] in text
    assert out["reaped"] and out["again_ok"] and out["worker_after"] not in (None, out["first_worker"]), out
