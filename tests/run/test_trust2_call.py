"""Issue 23 ("Trust, part two"), the op's call path: a plan belongs to its library (1), writes into inputs and
read-only inputs (4), unwritten outputs on later calls (5), the wrong input dtype named (10), masked arrays
refused (11), an OpenMP op in a forked child (13)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench import ArgumentError, ContractWarning

HEAD = """#include <cstdint>
#include "custom_aot_extra.h"
static int64_t count(int k, int *ndims, int64_t **shapes) {
  int64_t n = 1;
  for (int d = 0; d < ndims[k]; ++d) n *= shapes[k][d];
  return n;
}
#define KERNEL(NAME) extern "C" int NAME(int nparam, void **params, int *ndims, int64_t **shapes, \\
                                        const char **dtypes, void *stream, void *extra)
"""


def build(folder: Path, stem: str, body: str, name: str, out_shape=lambda s: s, out_dtype=None, **options):
    """An op of ``body`` (kernels written with the KERNEL macro) saved as ``folder/stem.cc``."""
    src = folder / f"{stem}.cc"
    src.write_text(HEAD + textwrap.dedent(body))
    return aotbench.Custom(f"{src}:{name}", out_shape, out_dtype, **options)


def add_k(folder: Path, k: int):
    return build(folder, f"add{k}", f"""
        KERNEL(AddK) {{
          const float *x = static_cast<const float *>(params[0]);
          float *out = static_cast<float *>(params[1]);
          for (int64_t i = 0, n = count(0, ndims, shapes); i < n; ++i) out[i] = x[i] + {k}.0f;
          return 0;
        }}""", "AddK", out_dtype=np.float32)


# -- 1: a plan belongs to the library it was made for ----------------------------------------------------------
def test_after_a_reload_returns_no_call_runs_the_old_library_even_with_first_calls_racing_it(tmp_path):
    for _ in range(6):  # the race lost 10 of 10 rounds before
        op, rebuilt = add_k(tmp_path, 0), add_k(tmp_path, 1)
        shapes: list[int] = []
        stop = threading.Event()

        failures: list[BaseException] = []

        def first_calls(gen=np.random.default_rng()):
            n = 1
            try:
                while not stop.is_set():
                    n += 1
                    op(gen.standard_normal(n).astype(np.float32))  # a new shape: a slow, guarded first call
                    shapes.append(n)
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                failures.append(exc)

        def wait_for(count: int) -> None:
            deadline = time.monotonic() + 120
            while len(shapes) < count and worker.is_alive() and time.monotonic() < deadline:
                time.sleep(0.001)
            assert not failures, failures
            assert len(shapes) >= count, "the calling thread stopped making first calls"

        worker = threading.Thread(target=first_calls)
        worker.start()
        try:
            wait_for(5)
            op.reload_from(rebuilt)  # the cell re-run: x + 0 edited to x + 1
            wait_for(len(shapes) + 5)
        finally:
            stop.set()
            worker.join()
        assert not failures, failures
        rng = np.random.default_rng()
        for n in shapes:
            x = rng.standard_normal(n).astype(np.float32)
            assert np.array_equal(op(x), x + 1), f"shape ({n},) still runs the old kernel"
            assert np.array_equal(op(x), x + 1)  # the fast path too


# -- 11: masked arrays -------------------------------------------------------------------------------------------
def test_masked_arrays_are_refused_on_every_call_even_after_a_plain_array_made_the_plan(tmp_path, rng):
    op = add_k(tmp_path, 1)
    x = rng.standard_normal(4).astype(np.float32)
    masked = np.ma.masked_array(x, mask=[False, True, False, True])
    with pytest.raises(ArgumentError) as info:  # before any plan exists
        op(masked)
    text = str(info.value)
    assert "masked array" in text and "input 0" in text
    assert "x.filled(" in text and "np.ma.getdata(x)" in text
    assert np.array_equal(op(x), x + 1)  # a plain array of the same shape: the fast path's plan now exists
    assert np.array_equal(op(x), x + 1)
    for _ in range(3):
        with pytest.raises(ArgumentError, match="masked array"):
            op(masked)
    assert np.array_equal(op(masked.filled(0)), np.where(masked.mask, 0, x) + 1)  # the documented fix works
    assert np.array_equal(op(np.ma.getdata(masked)), x + 1)


# -- 4: writes into inputs, read-only inputs ----------------------------------------------------------------------
WRITE_INPUT = """
    KERNEL(Poke) {  // out = 2x, and every third input element is overwritten
      float *x = static_cast<float *>(params[0]);
      float *out = static_cast<float *>(params[1]);
      for (int64_t i = 0, n = count(0, ndims, shapes); i < n; ++i) {
        out[i] = 2.0f * x[i];
        if (i % 3 == 0) x[i] = -999.0f;
      }
      return 0;
    }
    KERNEL(Bump) {  // in place: x += 1, out = x, except out's last element (left unwritten: a second run)
      float *x = static_cast<float *>(params[0]);
      float *out = static_cast<float *>(params[1]);
      int64_t n = count(0, ndims, shapes);
      for (int64_t i = 0; i < n; ++i) x[i] += 1.0f;
      for (int64_t i = 0; i + 1 < n; ++i) out[i] = x[i];
      return 0;
    }
"""


def poke(folder: Path, name: str = "Poke"):
    return build(folder, "write_input", WRITE_INPUT, name, out_dtype=np.float32)


def poked(x: np.ndarray) -> np.ndarray:
    expected = x.copy()
    expected[::3] = -999.0
    return expected


def test_the_guarded_first_call_reports_writes_into_an_input_and_check_mode_too(tmp_path, rng):
    op = poke(tmp_path)
    x = rng.standard_normal(20).astype(np.float32)
    original = x.copy()
    with pytest.warns(ContractWarning) as caught:
        out = op(x)
    text = str(caught[0].message)
    assert "input 0: 7 elements of 20 were written by the kernel (first at (0,), (3,), (6,)" in text
    assert "must not write into its inputs" in text
    assert np.array_equal(out, 2 * original)
    assert np.array_equal(x, poked(original))  # what one unguarded call would have done to it
    report = op.check(rng.standard_normal(20).astype(np.float32))
    assert not report.ok and any(p.startswith("input 0: 7 elements of 20") for p in report.problems)


def test_an_input_too_large_to_copy_is_checked_by_checksums(tmp_path, rng, monkeypatch):
    from aotbench.run import inputs

    monkeypatch.setattr(inputs, "SNAPSHOT_BYTES", 0)  # as for inputs of more than 64 MiB in all
    op = poke(tmp_path)
    x = rng.standard_normal(30).astype(np.float32)
    with pytest.warns(ContractWarning, match=r"input 0: the kernel wrote into 1 of its 1 blocks of 4 MiB"):
        op(x)


def test_the_confirming_run_sees_the_inputs_the_first_run_saw(tmp_path, rng):
    op = poke(tmp_path, "Bump")
    x = rng.standard_normal(15).astype(np.float32)
    original = x.copy()
    with pytest.warns(ContractWarning) as caught:
        out = op(x)
    text = str(caught[0].message)
    assert "output 0: 1 of 15 elements were never written" in text  # so the kernel ran twice
    assert "input 0: 15 elements of 15 were written" in text
    assert "changed with the poison" not in text and "NaN or Inf" not in text  # run 2 saw the same inputs
    assert np.array_equal(x, original + 1)  # once, as an unguarded call: not twice
    assert np.array_equal(out[:-1], original[:-1] + 1)


def test_a_writable_memmap_input_written_is_reported(tmp_path, rng):
    op = poke(tmp_path)
    x = rng.standard_normal(12).astype(np.float32)
    path = tmp_path / "data.bin"
    x.tofile(path)
    mm = np.memmap(path, np.float32, mode="r+", shape=(12,))
    with pytest.warns(ContractWarning, match="input 0: 4 elements of 12 were written"):
        out = op(mm)
    assert np.array_equal(out, 2 * x)
    del mm
    assert np.array_equal(np.fromfile(path, np.float32), poked(x))  # r+: the caller asked for a writable file


def test_an_immutable_bytes_input_is_never_written_through(tmp_path, rng):
    op = poke(tmp_path)
    x = rng.standard_normal(9).astype(np.float32)
    data = x.tobytes()
    frozen = np.frombuffer(data, np.float32)
    with pytest.warns(ContractWarning) as caught:
        first = op(frozen)
    assert "input 0: 3 elements of 9 were written" in str(caught[0].message)
    assert "read-only, so the kernel wrote into a copy and the caller's array is unchanged" in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        later = [op(frozen) for _ in range(3)]  # the fast path: the buffer request refuses it, a copy is passed
    assert data == x.tobytes() and np.array_equal(frozen, x)  # the bytes object is unchanged
    for out in [first, *later]:
        assert np.array_equal(out, 2 * x)


def test_a_read_only_memmap_input_does_not_crash_any_call(tmp_path):
    path = tmp_path / "data.bin"
    x = np.random.default_rng().standard_normal(4096).astype(np.float32)  # whole pages, mapped read-only
    x.tofile(path)
    script = textwrap.dedent(f"""
        import sys, warnings
        import numpy as np
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_trust2_call import poke
        from pathlib import Path
        warnings.simplefilter("ignore")
        op = poke(Path({str(tmp_path)!r}))
        mm = np.memmap({str(path)!r}, np.float32, mode="r", shape=(4096,))
        expected = 2 * np.fromfile({str(path)!r}, np.float32)
        outs = [op(mm) for _ in range(3)] + [op.check(mm).outputs]
        assert all(np.array_equal(o, expected) for o in outs)
        print("calls ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr  # a write through the read-only mapping was SIGSEGV (-11)
    assert "calls ok" in done.stdout
    assert np.array_equal(np.fromfile(path, np.float32), x)  # the file is unchanged


# -- 5: unwritten outputs on later calls -------------------------------------------------------------------------
SOFTMAX = """
    #include <cmath>
    KERNEL(Softmax) {  // softmax over the last axis; the BROKEN store loop stops one short of each row
      const float *x = static_cast<const float *>(params[0]);
      float *out = static_cast<float *>(params[1]);
      int64_t m = shapes[0][ndims[0] - 1], rows = count(0, ndims, shapes) / m;
      for (int64_t r = 0; r < rows; ++r) {
        float top = x[r * m], sum = 0.0f;
        for (int64_t j = 1; j < m; ++j) top = std::fmax(top, x[r * m + j]);
        for (int64_t j = 0; j < m; ++j) sum += std::exp(x[r * m + j] - top);
        for (int64_t j = 0; j < m - BROKEN; ++j) out[r * m + j] = std::exp(x[r * m + j] - top) / sum;
      }
      return 0;
    }
"""


def softmax(folder: Path, broken: int, **options):
    return build(folder, f"softmax{broken}", f"#define BROKEN {broken}\n" + SOFTMAX, "Softmax", out_dtype=np.float32,
                 **options)


def test_later_calls_of_a_signature_with_unwritten_outputs_show_nan_there_never_old_memory(tmp_path, rng):
    op = softmax(tmp_path, 1)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    e = np.exp(x - x.max(1, keepdims=True))
    expected = e / e.sum(1, keepdims=True)
    with pytest.warns(ContractWarning, match="3 of 15 elements were never written"):
        first = op(x)
    assert np.isnan(first[:, -1]).all()
    for _ in range(2):  # the second and third calls: no warning, and still NaN where nothing was written
        stale = np.full((3, 5), 0.25, np.float32)  # memory numpy hands out again for the next output
        del stale
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = op(x)
        assert np.isnan(out[:, -1]).all(), out
        assert np.allclose(out[:, :-1], expected[:, :-1])


def test_an_isolated_op_fills_unwritten_outputs_too(tmp_path, rng):
    op = softmax(tmp_path, 1, isolate=True)
    x, other = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ContractWarning)
        op(x), op(other)  # two guarded first calls; the second wrote where the first's row ends were
    out = op(x)  # in the worker's shared memory, after the (5, 3) call's values
    assert np.isnan(out[:, -1]).all(), out
    assert np.isfinite(out[:, :-1]).all()


def test_a_correct_kernels_outputs_are_not_filled(tmp_path, rng):
    op = softmax(tmp_path, 0)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    e = np.exp(x - x.max(1, keepdims=True))
    for _ in range(3):
        assert np.allclose(op(x), e / e.sum(1, keepdims=True))
    (plan,) = op._plans.values()
    assert plan.fill is None  # np.empty, on the fast path


def test_integer_outputs_left_unwritten_are_filled_with_the_documented_value(tmp_path, rng):
    op = build(tmp_path, "half_int", """
        KERNEL(Half) {  // writes the first half of an int32 output
          int32_t *out = static_cast<int32_t *>(params[1]);
          for (int64_t i = 0, n = count(1, ndims, shapes); i < n / 2; ++i) out[i] = static_cast<int32_t>(i);
          return 0;
        }""", "Half", out_dtype=np.int32)
    x = rng.standard_normal(8).astype(np.float32)
    with pytest.warns(ContractWarning, match="4 of 8 elements were never written"):
        op(x)
    for _ in range(2):
        out = op(x)
        assert out.tolist() == [0, 1, 2, 3] + [np.iinfo(np.int32).min] * 4


# -- 10: the wrong input dtype named -----------------------------------------------------------------------------
def test_float64_inputs_into_a_float32_kernel_are_named(tmp_path, rng):
    op = add_k(tmp_path, 1)
    add = build(tmp_path, "add_same", """
        KERNEL(AddSame) {  // out = x (float32 arithmetic), its output dtype the input's
          const float *x = static_cast<const float *>(params[0]);
          float *out = static_cast<float *>(params[1]);
          for (int64_t i = 0, n = count(0, ndims, shapes); i < n; ++i) out[i] = x[i] + 1.0f;
          return 0;
        }""", "AddSame")
    x = rng.standard_normal(15)  # float64
    with pytest.warns(ContractWarning) as caught:
        add(x)
    text = str(caught[0].message)
    assert "7 of 15 elements were never written" in text
    assert ("the kernel wrote half the bytes of the float64 output: does it expect float32? (the inputs are "
            "float64)") in text
    # the other way round: float32 in and out, a float64 kernel writes twice the bytes (into the guard)
    wide = build(tmp_path, "add_double", """
        KERNEL(AddDouble) {
          const double *x = static_cast<const double *>(params[0]);
          double *out = static_cast<double *>(params[1]);
          for (int64_t i = 0, n = count(0, ndims, shapes); i < n; ++i) out[i] = x[i] + 1.0;
          return 0;
        }""", "AddDouble")
    with pytest.raises(aotbench.ContractViolation) as info:
        wide(rng.standard_normal(12).astype(np.float32))
    assert "twice the bytes of the float32 output: does it expect float64? (the inputs are float32)" in str(info.value)
    assert np.array_equal(op(x.astype(np.float32)), x.astype(np.float32) + 1)  # a float32 call is fine


# -- 13: an OpenMP op in a forked child --------------------------------------------------------------------------
def test_an_openmp_op_called_in_a_child_forked_after_it_ran_raises_instead_of_hanging(tmp_path):
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        import numpy as np
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from pathlib import Path
        from test_trust2_call import add_k, build
        import aotbench
        omp = build(Path({str(tmp_path)!r}), "omp", '''
            KERNEL(Twice) {{
              const float *x = static_cast<const float *>(params[0]);
              float *out = static_cast<float *>(params[1]);
              int64_t n = count(0, ndims, shapes);
              #pragma omp parallel for num_threads(4)
              for (int64_t i = 0; i < n; ++i) out[i] = 2.0f * x[i];
              return 0;
            }}''', "Twice", out_dtype=np.float32, flags=["-fopenmp"])
        plain = add_k(Path({str(tmp_path)!r}), 1)
        x = np.random.default_rng().standard_normal(1000).astype(np.float32)
        assert np.array_equal(omp(x), 2 * x) and np.array_equal(omp(x), 2 * x)  # guarded, then the fast path
        assert np.array_equal(plain(x), x + 1)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                assert np.array_equal(plain(x), x + 1)  # an op without OpenMP keeps working
                for call in (lambda: omp(x), lambda: omp(x[:10]), lambda: omp.check(x)):
                    try:
                        call()
                        code = 4
                    except aotbench.AotbenchError as exc:
                        text = str(exc)
                        assert type(exc).__name__ == "ForkedOpenMPError", text
                        assert "libgomp" in text and "os.fork()" in text and "'spawn'" in text, text
                        assert "isolate=True" in text, text
            except BaseException as exc:
                print("child failed:", repr(exc), flush=True)
                code = 3
            os._exit(code)
        deadline = time.monotonic() + 30
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                print("the child hung")
                sys.exit(5)
            time.sleep(0.05)
        assert np.array_equal(omp(x), 2 * x)  # the parent is unaffected
        print("child exit", os.waitstatus_to_exitcode(status))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "child exit 0" in done.stdout, done.stdout + done.stderr
