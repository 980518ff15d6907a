"""Issue 23, what review and an adversarial tester found after the first pass: interrupts of Init and
InferShape, a program's own SIGINT handler, several native hosts in one process, the stop button in a forked
child, Init's signal changes, a re-pointed prebuilt symlink, warnings once per library, relative ``-include``
files, and OpenMP reached through a library of the kernel's own.

Each scenario that can hang or kill its process runs in a subprocess with a timeout and a faulthandler exit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.errors import FloatingPointEnvWarning

pytestmark = pytest.mark.slow

ROOT = str(Path(__file__).resolve().parents[2])

KERNEL = r"""
#include <cstdint>
#include <csignal>
#include <pthread.h>
#include <ctime>
#include <vector>
#include "custom_aot_extra.h"
// y = 3x + 1. Init loops for ever when the first dim is 7, InferShape when it is 9, the main function when
// x[0] < 0; it spins for x[0] microseconds when x[0] > 1000. Init blocks SIGINT when the first dim is 11.
// `where` says which loop runs (1: Init, 2: InferShape, 3: main, 4: sleeping).
extern "C" volatile int where = 0;
extern "C" int Tri(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                   void *extra) {
  const float *x = static_cast<const float *>(params[0]);
  float *y = static_cast<float *>(params[1]);
  volatile int forever = x[0] < 0;
  if (forever) where = 3;
  while (forever) {}
  if (x[0] > 1000) {  // busy, not asleep: a signal does not cut it short
    where = 4;
    timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
      clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1e6 + (now.tv_nsec - start.tv_nsec) / 1e3 < x[0]);
  }
  for (int64_t i = 0; i < shapes[0][0]; ++i) y[i] = 3.0f * x[i] + 1.0f;
  return 0;
}
extern "C" int TriInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  volatile int forever = shapes[0][0] == 7;
  if (forever) where = 1;
  while (forever) {}
  if (shapes[0][0] == 11) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGINT);
    pthread_sigmask(SIG_BLOCK, &s, nullptr);
  }
  return 0;
}
extern "C" std::vector<int64_t> TriInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  volatile int forever = shapes[0][0] == 9;
  if (forever) where = 2;
  while (forever) {}
  return {shapes[0][0]};
}
"""

PRELUDE = r"""
import ctypes, faulthandler, os, signal, sys, threading, time, warnings
import numpy as np
import aotbench
from aotbench.errors import KernelInterrupted
faulthandler.dump_traceback_later(40, exit=True)  # a hang ends the process (the test then fails)
rng = np.random.default_rng()

def interrupt_when(lib, value, after=0.2):
    state = ctypes.c_int.in_dll(lib.handle, "where")
    state.value = 0
    def run():
        while state.value != value:
            time.sleep(0.001)
        time.sleep(after)
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=run, daemon=True).start()

def reap(pid, limit=20.0):
    # the child's exit status, killing it after `limit` seconds (a hang: faulthandler's timer does not survive a fork)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    return os.waitpid(pid, 0)[1]

def data(n, first=None):
    x = (rng.random(n) + 1).astype(np.float32)
    if first is not None:
        x[0] = first
    return x
"""


def run_script(tmp_path: Path, body: str, *args: str, timeout: float = 90) -> str:
    """Run PRELUDE + ``body`` in a fresh interpreter; its stdout (the test fails on a non-zero exit)."""
    script = tmp_path / "scenario.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": ROOT, "AOTBENCH_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=timeout,
                          env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture
def tri(tmp_path) -> Path:
    path = tmp_path / "tri.cc"
    path.write_text(KERNEL)
    return path


def test_an_init_or_infer_shape_that_loops_is_abandoned_like_the_main_function(tmp_path, tri):
    out = run_script(tmp_path, """
        init_op = aotbench.Custom(sys.argv[1] + ":Tri", lambda s: s, np.float32)  # Init runs, InferShape not
        infer_op = aotbench.Custom(sys.argv[1] + ":Tri", None, np.float32)       # InferShape runs too
        for label, op, n, where in (("init", init_op, 7, 1), ("infer", infer_op, 9, 2)):
            interrupt_when(op.library, where)
            try:
                op(data(n))
                print(label, "RETURNED")
            except KernelInterrupted as exc:
                print(label, "ABANDONED", "isolate=True" in str(exc))
            x = data(5)
            print(label, "AGAIN", np.array_equal(op(x), 3 * x + 1))
        """, str(tri))
    for label in ("init", "infer"):
        assert f"{label} ABANDONED True" in out, out
        assert f"{label} AGAIN True" in out, out


def test_a_programs_own_sigint_handler_keeps_its_call(tmp_path, tri):
    """A handler that chooses to finish the work ("stop after this batch") never sees its call abandoned."""
    out = run_script(tmp_path, """
        asked = []
        signal.signal(signal.SIGINT, lambda *a: asked.append(1))
        op = aotbench.Custom(sys.argv[1] + ":Tri", lambda s: s, np.float32)
        x = data(6, first=1_200_000.0)  # 1.2 s of sleep: the interrupt comes 0.1 s in
        interrupt_when(op.library, 4, after=0.1)
        y = op(x)
        print("RESULT", np.allclose(y, 3 * x + 1), len(asked))
        """, str(tri))
    assert "RESULT True 1" in out, out


def test_ops_of_several_cache_folders_share_one_interrupt_handler(tmp_path, tri):
    """Each cache folder has a native host of its own; their handlers once chained to each other and the first
    Ctrl-C recursed until the stack overflowed (SIGSEGV)."""
    out = run_script(tmp_path, """
        base = sys.argv[2]
        ops = [aotbench.Custom(sys.argv[1] + ":Tri", lambda s: s, np.float32, cache_dir=f"{base}/c{k}")
               for k in range(3)]
        for op in ops[::-1] + ops:  # first calls alternate between the hosts (each reinstalls its handlers)
            x = data(int(rng.integers(20, 40)))
            assert np.array_equal(op(x), 3 * x + 1)
        for k in (0, 2):
            interrupt_when(ops[k].library, 3)
            try:
                ops[k](data(5, first=-1.0))
            except KernelInterrupted:
                print("ABANDONED", k)
        """, str(tri), str(tmp_path))
    assert "ABANDONED 0" in out and "ABANDONED 2" in out, out


def test_the_stop_button_works_in_a_forked_child_on_a_signature_the_parent_planned(tmp_path, tri):
    out = run_script(tmp_path, """
        op = aotbench.Custom(sys.argv[1] + ":Tri", lambda s: s, np.float32)
        x = data(5)
        assert np.array_equal(op(x), 3 * x + 1)  # planned: the child's call takes the fast path
        faulthandler.cancel_dump_traceback_later()  # its thread does not survive the fork
        pid = os.fork()
        if pid == 0:
            interrupt_when(op.library, 3)
            try:
                op(data(5, first=-1.0))
                print("CHILD RETURNED", flush=True)
            except KernelInterrupted:
                print("CHILD ABANDONED", flush=True)
            os._exit(0)
        print("STATUS", reap(pid))
        """, str(tri))
    assert "CHILD ABANDONED" in out and "STATUS 0" in out, out


def test_an_init_that_blocks_sigint_is_undone_and_named(tmp_path, tri):
    out = run_script(tmp_path, """
        op = aotbench.Custom(sys.argv[1] + ":Tri", lambda s: s, np.float32)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            x = data(11)
            y = op(x)
        print("RESULT", np.array_equal(y, 3 * x + 1))
        print("BLOCKED", signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))
        print("WARNED", [type(w.message).__name__ for w in caught if "SIGINT" in str(w.message)])
        """, str(tri))
    assert "RESULT True" in out and "BLOCKED False" in out, out
    assert "SignalStateWarning" in out, out


def _library(folder: Path, name: str, value: float) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / f"{name}.cc"
    src.write_text(textwrap.dedent(f"""\
        #include <cstdint>
        extern "C" int Val(int n, void **p, int *nd, int64_t **sh, const char **dt, void *s, void *e) {{
          float *y = static_cast<float *>(p[1]);
          for (int64_t i = 0; i < sh[0][0]; ++i) y[i] = {value}f;
          return 0;
        }}"""))
    out = folder / f"lib{name}.so"
    subprocess.run(["g++", "-std=c++17", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return out


def test_a_prebuilt_symlink_re_pointed_loads_the_library_it_points_to_now(tmp_path, rng):
    values = rng.integers(2, 90, size=2).astype(float)
    first = _library(tmp_path / "libs", "first", values[0])
    second = _library(tmp_path / "libs", "second", values[1])
    link = tmp_path / "libval.so"
    link.symlink_to(first)
    x = rng.standard_normal(3).astype(np.float32)
    before = aotbench.Custom(f"{link}:Val", lambda s: s, np.float32)
    assert np.all(before(x) == values[0])
    link.unlink()
    link.symlink_to(second)
    after = aotbench.Custom(f"{link}:Val", lambda s: s, np.float32)
    assert np.all(after(x) == values[1])
    assert np.all(before(x) == values[0])  # the op made before keeps what it loaded


ROUNDING_KERNEL = r"""
#include <cfenv>
#include <cstdint>
extern "C" int CustomKernel(int n, void **p, int *nd, int64_t **sh, const char **dt, void *s, void *e) {
  std::fesetround(FE_UPWARD);
  const float *x = static_cast<const float *>(p[0]);
  float *y = static_cast<float *>(p[1]);
  for (int64_t i = 0; i < sh[0][0]; ++i) y[i] = x[i] + K;
  return 0;
}
"""


def test_two_libraries_with_the_same_kernel_name_are_each_warned_about(tmp_path, rng):
    """The tutorial's name, CustomKernel, is common: the warning is once per library, not once per name."""
    ops = []
    for k in range(2):
        folder = tmp_path / f"lib{k}"
        folder.mkdir()
        (folder / "k.cc").write_text(ROUNDING_KERNEL.replace("+ K", f"+ {k + 1}.0f"))
        ops.append(aotbench.Custom(f"{folder / 'k.cc'}:CustomKernel", lambda s: s, np.float32))
    x = rng.standard_normal(4).astype(np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for op in ops + ops:
            op(x)
    said = [w for w in caught if issubclass(w.category, FloatingPointEnvWarning)]
    assert len(said) == 2, [str(w.message) for w in said]
    assert np.float32(1e8) + np.float32(1) == np.float32(1e8)  # rounding to nearest afterwards


def test_a_relative_include_file_means_the_folder_the_op_was_made_in(tmp_path, rng, monkeypatch):
    made_in, elsewhere = tmp_path / "made", tmp_path / "elsewhere"
    for folder, value in ((made_in, 5), (elsewhere, 9)):
        (folder / "inc").mkdir(parents=True)
        (folder / "inc" / "v.h").write_text(f"#define VALUE {value}.0f\n")
    (made_in / "k.cc").write_text(textwrap.dedent("""\
        #include <cstdint>
        extern "C" int Inc(int n, void **p, int *nd, int64_t **sh, const char **dt, void *s, void *e) {
          const float *x = static_cast<const float *>(p[0]);
          float *y = static_cast<float *>(p[1]);
          for (int64_t i = 0; i < sh[0][0]; ++i) y[i] = x[i] + VALUE;
          return 0;
        }"""))
    monkeypatch.chdir(made_in)
    op = aotbench.Custom("k.cc:Inc", lambda s: s, np.float32, flags=["-include", "inc/v.h"])
    x = rng.standard_normal(4).astype(np.float32)
    assert np.array_equal(op(x), x + 5)
    monkeypatch.chdir(elsewhere)
    assert np.array_equal(op.with_flags(["-include", str(made_in / "inc" / "v.h"), "-O1"])(x), x + 5)
    assert any(f == str(made_in / "inc" / "v.h") for f in op.spec.flags), op.spec.flags
    assert np.array_equal(op.with_flags(list(op.spec.flags) + ["-O2"])(x), x + 5)  # not elsewhere's 9


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_openmp_through_a_library_of_the_kernels_own_is_refused_after_fork(tmp_path):
    helper = tmp_path / "helper.cc"
    helper.write_text(textwrap.dedent("""\
        #include <cstdint>
        extern "C" void helper_scale(const float *x, float *y, int64_t n) {
          #pragma omp parallel for
          for (int64_t i = 0; i < n; ++i) y[i] = 2.0f * x[i];
        }"""))
    subprocess.run(["g++", "-shared", "-fPIC", "-fopenmp", "-o", str(tmp_path / "libhelper.so"), str(helper)],
                   check=True)
    (tmp_path / "uses.cc").write_text(textwrap.dedent("""\
        #include <cstdint>
        extern "C" void helper_scale(const float *x, float *y, int64_t n);
        extern "C" int Uses(int n, void **p, int *nd, int64_t **sh, const char **dt, void *s, void *e) {
          helper_scale(static_cast<const float *>(p[0]), static_cast<float *>(p[1]), sh[0][0]);
          return 0;
        }"""))
    out = run_script(tmp_path, """
        folder = sys.argv[1]
        op = aotbench.Custom(f"{folder}/uses.cc:Uses", lambda s: s, np.float32,
                             flags=[f"-L{folder}", "-lhelper", f"-Wl,-rpath,{folder}"])
        x = data(64)
        print("PARENT", np.array_equal(op(x), 2 * x))
        faulthandler.cancel_dump_traceback_later()  # its thread does not survive the fork
        pid = os.fork()
        if pid == 0:
            try:
                op(x)
                print("CHILD RAN", flush=True)
            except aotbench.ForkedOpenMPError:
                print("CHILD REFUSED", flush=True)
            os._exit(0)
        print("STATUS", reap(pid))
        """, str(tmp_path))
    assert "PARENT True" in out and "CHILD REFUSED" in out and "STATUS 0" in out, out


def test_a_faulthandler_chained_on_sigint_is_left_alone_and_nothing_loops(tmp_path, tri):
    """faulthandler.register(SIGINT, chain=True) chains to the handler it replaced; the host once replaced it in
    turn and chained back, and one Ctrl-C looped until the process died (SIGSEGV)."""
    out = run_script(tmp_path, """
        import faulthandler as fh
        op = aotbench.Custom(sys.argv[1] + ":Tri", lambda s: s, np.float32)
        x = data(5)
        assert np.array_equal(op(x), 3 * x + 1)
        fh.register(signal.SIGINT, chain=True, file=open(os.devnull, "w"))
        y = data(6)
        assert np.array_equal(op(y), 3 * y + 1)  # a first call: the host installs its handlers again
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            time.sleep(5)
            print("SLEPT")
        except KeyboardInterrupt:
            print("INTERRUPTED")
        """, str(tri))
    assert "INTERRUPTED" in out, out


def test_an_abandoned_call_keeps_what_it_used_not_its_callers_locals(tmp_path, tri):
    out = run_script(tmp_path, """
        import gc, weakref
        op = aotbench.Custom(sys.argv[1] + ":Tri", lambda s: s, np.float32)
        op(data(5))
        class Unrelated:
            pass
        def step():
            mine = Unrelated()
            ref = weakref.ref(mine)
            interrupt_when(op.library, 3)
            try:
                op(data(5, first=-1.0))
            except KernelInterrupted:
                pass
            return ref
        ref = step()
        gc.collect()
        print("CALLER LOCAL ALIVE", ref() is not None)
        x = data(5)
        print("AGAIN", np.array_equal(op(x), 3 * x + 1))
        """, str(tri))
    assert "CALLER LOCAL ALIVE False" in out and "AGAIN True" in out, out


def test_infer_shape_alone_is_abandoned_too(tmp_path, tri):
    out = run_script(tmp_path, """
        op = aotbench.Custom(sys.argv[1] + ":Tri", None, np.float32)
        interrupt_when(op.library, 2)
        try:
            op.infer_shape((9,))
        except KernelInterrupted:
            print("ABANDONED")
        print("SHAPE", op.infer_shape((4,)))
        """, str(tri))
    assert "ABANDONED" in out and "SHAPE (4,)" in out, out
