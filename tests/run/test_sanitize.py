"""Sanitizer builds (ASan, UBSan) run isolated with their runtime preloaded; a report becomes a SanitizerError
that points at the kernel's source line (the cell's own line for a %%aot_kernel cell)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.run import sanitize

KERNEL = Path(__file__).resolve().parents[1] / "support" / "kernels" / "san_faults.cc"
OVERFLOW_LINE = next(i for i, line in enumerate(KERNEL.read_text().splitlines(), 1) if "heap-buffer-overflow" in line)
UB_LINE = next(i for i, line in enumerate(KERNEL.read_text().splitlines(), 1) if "signed integer overflow" in line)


def _op(kind: str):
    reg = aotbench.CustomRegOp("faulty").input(0, "x").output(0, "y").attr("mode", "required", "int").get_op_info()
    return aotbench.Custom(f"{KERNEL}:Faulty", lambda s: s, np.float32, reg_info=reg, sanitize=kind, timeout_s=60)


@pytest.fixture(scope="module")
def asan_op():
    return _op("address")


def test_sanitized_build_is_a_separate_isolated_entry(asan_op):
    """The worker runs a second build with -fsanitize=address; this process keeps the plain one."""
    assert isinstance(asan_op, aotbench.Op) and asan_op.spec.isolate and asan_op.spec.sanitize == "address"
    sanitized = asan_op.sanitized_artifact
    assert sanitized.path != asan_op.artifact.path
    assert "-fsanitize=address" in sanitized.command and "-fsanitize=address" not in asan_op.command
    assert os.path.exists(sanitize.runtime_path("address"))


def test_a_clean_call_under_asan_is_correct(asan_op, rng):
    for shape in [(5,), (3, 4), (1,)]:
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_array_equal(asan_op(x, 0), x + 1.0)


def test_heap_overflow_is_reported_at_its_source_line(asan_op, rng):
    """ASan's report becomes a SanitizerError naming the error kind and the kernel's file and line, with the line."""
    x = rng.standard_normal(7).astype(np.float32)
    pid = os.getpid()
    with pytest.raises(aotbench.SanitizerError) as info:
        asan_op(x, 1)
    err = info.value
    assert isinstance(err, aotbench.KernelCrashedError) and err.kind == "address"
    assert err.what == "heap-buffer-overflow"
    assert err.location == (str(KERNEL), OVERFLOW_LINE)
    assert "scratch[i] = x[i % n]" in err.line_text and "heap-buffer-overflow" in str(err)
    assert "ERROR: AddressSanitizer" in err.report
    assert os.getpid() == pid
    np.testing.assert_array_equal(asan_op(x, 0), x + 1.0)  # a fresh worker serves the next call


def test_undefined_behaviour_is_reported_by_ubsan(rng):
    op = _op("undefined")
    x = rng.standard_normal(4).astype(np.float32)
    np.testing.assert_array_equal(op(x, 0), x + 1.0)
    with pytest.raises(aotbench.SanitizerError) as info:
        op(x, 2)
    err = info.value
    assert err.kind == "undefined" and "signed integer overflow" in err.what
    assert err.location == (str(KERNEL), UB_LINE)


def test_cell_kernel_report_points_at_the_cell_line(rng):
    """Through %%aot_kernel --sanitize the location is <cell>:LINE, the cell's own line, with its text."""
    from IPython.testing.globalipapp import get_ipython, start_ipython

    ip = start_ipython() or get_ipython()
    ip.run_line_magic("load_ext", "aotbench")
    cell = ("#include <cstdint>\n"
            'extern "C" int SanCell(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, '
            "void *stream, void *extra) {\n"
            "  const float *x = static_cast<const float *>(params[0]);\n"
            "  float *out = static_cast<float *>(params[1]);\n"
            "  float *tmp = new float[2];\n"
            "  tmp[2] = x[0];\n"
            "  out[0] = tmp[0];\n"
            "  delete[] tmp;\n"
            "  return 0;\n"
            "}\n")
    try:
        op = ip.run_cell_magic("aot_kernel", 'cpu --sanitize address --out-shape "lambda x: (1,)"', cell)
        with pytest.raises(aotbench.SanitizerError) as info:
            op(rng.standard_normal(3).astype(np.float32))
        assert info.value.location == ("<cell>", 6)
        assert info.value.line_text.strip() == "tmp[2] = x[0];"
        assert "<cell>:6" in str(info.value)
    finally:
        ip.user_ns.pop("SanCell", None)


def test_unknown_sanitizer_is_refused():
    with pytest.raises(aotbench.ArgumentError, match="'address'"):
        aotbench.Custom(f"{KERNEL}:Faulty", lambda s: s, np.float32, sanitize="thread")
