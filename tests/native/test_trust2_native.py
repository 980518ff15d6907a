"""Issue 23, items 3 and 14: the native host around the kernel.

3. A kernel that changes the floating-point environment (rounding mode, exception traps, FTZ/DAZ) or blocks
   signals leaves Python's as it was: the host restores it after every call and says once, naming the change.
14. ``abort()`` in an in-process kernel prints one line naming the op and ``isolate=True`` before the process dies.

The calls that would kill or corrupt the test process on the old code run in subprocesses.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import aotbench

ROOT = str(Path(__file__).resolve().parents[2])  # this checkout's aotbench, also in the child processes

HEADER = r"""
#include <cfenv>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <pthread.h>
#include <xmmintrin.h>
#define KERNEL(NAME) extern "C" int NAME(int nparam, void **params, int *ndims, int64_t **shapes, \
                                         const char **dtypes, void *stream, void *extra)
static void twice_plus_one(void **params, int64_t **shapes) {
  const float *x = static_cast<const float *>(params[0]);
  float *y = static_cast<float *>(params[1]);
  for (int64_t i = 0; i < shapes[0][0]; ++i) y[i] = 2.0f * x[i] + 1.0f;
}
"""

KERNELS = {
    "Upward": "fesetround(FE_UPWARD);",
    "Traps": "feenableexcept(FE_DIVBYZERO | FE_INVALID);",
    "FlushDenormals": "_mm_setcsr(_mm_getcsr() | 0x8040);",  # FTZ | DAZ
    "BlockSigint": "sigset_t s; sigemptyset(&s); sigaddset(&s, SIGINT); pthread_sigmask(SIG_BLOCK, &s, nullptr);",
    "Aborts": "if (static_cast<const float *>(params[0])[0] < 0) abort();",
}


def _source(tmp_path: Path, name: str) -> str:
    path = tmp_path / f"{name.lower()}.cc"
    path.write_text(HEADER + f"KERNEL({name}) {{\n  twice_plus_one(params, shapes);\n  {KERNELS[name]}\n"
                    "  return 0;\n}\n")
    return f"{path}:{name}"


@pytest.fixture
def default_fenv():
    """Whatever happens, the test process gets glibc's default floating-point environment back."""
    yield
    libm = ctypes.CDLL("libm.so.6")
    libm.fesetenv(ctypes.c_void_p(-1))  # FE_DFL_ENV


def _run(tmp_path: Path, session_cache: Path, code: str, *args: str) -> subprocess.CompletedProcess:
    script = tmp_path / "child.py"
    script.write_text(code)
    env = {**os.environ, "AOTBENCH_CACHE_DIR": str(session_cache), "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_a_kernel_setting_the_rounding_mode_leaves_python_rounding_to_nearest(tmp_path, rng, default_fenv):
    op = aotbench.Custom(_source(tmp_path, "Upward"), lambda s: s, lambda d: d, guard=False)
    x = rng.standard_normal(37).astype(np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = op(x)
        assert np.float32(1e8) + np.float32(1) == np.float32(1e8)  # 100000008 under upward rounding
        assert np.float64(0.1) + np.float64(0.2) == 0.30000000000000004  # 0.3 rounding down, ...7 up
        again = op(x)  # said once per op
    np.testing.assert_array_equal(y, 2 * x + 1)
    np.testing.assert_array_equal(again, y)
    messages = [str(w.message) for w in caught if type(w.message).__name__ == "FloatingPointEnvWarning"]
    assert len(messages) == 1, [str(w.message) for w in caught]
    assert "rounding mode at upward" in messages[0] and "round-to-nearest" in messages[0], messages[0]
    assert "Upward" in messages[0]


def test_a_guarded_first_call_restores_and_names_flush_to_zero(tmp_path, rng, default_fenv):
    op = aotbench.Custom(_source(tmp_path, "FlushDenormals"), lambda s: s, lambda d: d)  # the guarded call
    x = rng.standard_normal(19).astype(np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        np.testing.assert_array_equal(op(x), 2 * x + 1)
        assert np.float32(1e-39) * np.float32(1) != 0  # a denormal survives: FTZ/DAZ are off again
        np.testing.assert_array_equal(op(x[:7]), 2 * x[:7] + 1)  # a second signature: not said again
        np.testing.assert_array_equal(op(x), 2 * x + 1)  # the fast path
        assert np.float32(1e-39) * np.float32(1) != 0
    messages = [str(w.message) for w in caught if type(w.message).__name__ == "FloatingPointEnvWarning"]
    assert len(messages) == 1, [str(w.message) for w in caught]
    assert "flush-to-zero on" in messages[0] and "denormals-are-zero on" in messages[0], messages[0]


TRAPS_CHILD = r"""
import sys, warnings
import numpy as np
import aotbench
op = aotbench.Custom(sys.argv[1], lambda s: s, lambda d: d)
x = np.random.default_rng().standard_normal(11).astype(np.float32)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    assert np.array_equal(op(x), 2 * x + 1)
    assert np.array_equal(op(x), 2 * x + 1)
    r = np.float64(1) / np.float64(0)   # SIGFPE here if the trap stayed enabled
    z = np.float64(0) / np.float64(0)
print("RESULT", r, z, flush=True)
for w in caught:
    print("WARNING", type(w.message).__name__, str(w.message).replace("\n", " "), flush=True)
"""


def test_a_kernel_enabling_traps_does_not_kill_the_next_division(tmp_path, session_cache):
    proc = _run(tmp_path, session_cache, TRAPS_CHILD, _source(tmp_path, "Traps"))
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    assert "RESULT inf nan" in proc.stdout
    lines = proc.stdout.splitlines()
    assert any(line.startswith("WARNING RuntimeWarning") and "divide by zero" in line for line in lines), lines
    fp = [line for line in lines if line.startswith("WARNING FloatingPointEnvWarning")]
    assert len(fp) == 1, lines
    assert "traps enabled for" in fp[0] and "division by zero" in fp[0] and "invalid operation" in fp[0], fp[0]


SIGINT_CHILD = r"""
import os, signal, sys, time, warnings
import numpy as np
import aotbench
op = aotbench.Custom(sys.argv[1], lambda s: s, lambda d: d)
x = np.random.default_rng().standard_normal(13).astype(np.float32)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    assert np.array_equal(op(x), 2 * x + 1)
    assert np.array_equal(op(x), 2 * x + 1)
for w in caught:
    print("WARNING", type(w.message).__name__, str(w.message).replace("\n", " "), flush=True)
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(3)
    print("IGNORED", flush=True)
except KeyboardInterrupt:
    print("KEYBOARDINTERRUPT", flush=True)
"""


def test_a_kernel_blocking_sigint_leaves_ctrl_c_working(tmp_path, session_cache):
    proc = _run(tmp_path, session_cache, SIGINT_CHILD, _source(tmp_path, "BlockSigint"))
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    assert "KEYBOARDINTERRUPT" in proc.stdout, proc.stdout + proc.stderr
    warned = [line for line in proc.stdout.splitlines() if line.startswith("WARNING SignalStateWarning")]
    assert len(warned) == 1 and "SIGINT blocked" in warned[0], proc.stdout


ABORT_CHILD = r"""
import sys
import numpy as np
import aotbench
op = aotbench.Custom(sys.argv[1], lambda s: s, lambda d: d)
x = np.random.default_rng().random(9).astype(np.float32) + 1
assert np.array_equal(op(x), 2 * x + 1)
x[0] = -1
op(x)
print("SURVIVED")
"""


def test_abort_in_a_kernel_names_the_op_and_isolate_before_the_process_dies(tmp_path, session_cache):
    proc = _run(tmp_path, session_cache, ABORT_CHILD, _source(tmp_path, "Aborts"))
    assert proc.returncode == -signal.SIGABRT, (proc.returncode, proc.stderr)
    assert "SURVIVED" not in proc.stdout
    lines = [line for line in proc.stderr.splitlines() if "abort()" in line]
    assert len(lines) == 1, proc.stderr
    assert "Aborts" in lines[0] and "isolate=True" in lines[0], lines[0]


def test_signal_functions_are_found_in_a_librarys_undefined_symbols(tmp_path):
    from aotbench.native import elf

    blocking = aotbench.Custom(_source(tmp_path, "BlockSigint"), lambda s: s, lambda d: d)
    plain = aotbench.Custom(_source(tmp_path, "Upward"), lambda s: s, lambda d: d)
    assert "pthread_sigmask" in elf.signal_symbols(elf.dynamic_symbols(blocking.library.path.read_bytes()))
    assert blocking.library.signals and not plain.library.signals  # only the first pays for the syscalls


INIT_SOURCE = HEADER + r"""
extern "C" int DownInit(int *ndims, int64_t **shapes, const char **dtypes, void *extra) {
  fesetround(FE_DOWNWARD);
  return 0;
}
KERNEL(Down) {
  twice_plus_one(params, shapes);
  return 0;
}
"""


def test_init_changing_the_rounding_mode_is_restored_and_named(tmp_path, rng, default_fenv):
    path = tmp_path / "down.cc"
    path.write_text(INIT_SOURCE)
    op = aotbench.Custom(f"{path}:Down", lambda s: s, lambda d: d)
    x = rng.standard_normal(23).astype(np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        np.testing.assert_array_equal(op(x), 2 * x + 1)
        assert np.float64(0.1) + np.float64(0.2) == 0.30000000000000004  # downward rounding gives 0.3
        assert -np.float32(1e8) - np.float32(1) == -np.float32(1e8)
    messages = [str(w.message) for w in caught if type(w.message).__name__ == "FloatingPointEnvWarning"]
    assert len(messages) == 1 and messages[0].startswith("DownInit left the rounding mode at downward"), messages
