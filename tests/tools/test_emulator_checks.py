"""``op.compute_sanitizer`` on an emulated op: the emulator's memcheck (ASan), racecheck (TSan) and synccheck, each
finding the bug it exists for — naming the line, the thread and the block — and nothing in the fixed kernel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.tools.emulator_sanitizer import interpret, parse_asan, parse_tsan

pytestmark = pytest.mark.slow  # each check builds a sanitized library and runs a child process

PRELUDE = '#include <cstdint>\n#include "custom_aot_extra.h"\n'
LINES = PRELUDE.count("\n")

KERNELS = """\
__global__ void reverse(const float *in, float *out, int n, bool sync) {
  __shared__ float s[256];
  const int t = threadIdx.x;
  s[t] = in[t];
  if (sync) __syncthreads();
  out[t] = s[n - 1 - t];
}

__global__ void twice(const float *in, float *out, int n, int extra) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n + extra) out[i] = in[i] * 2.0f;
}

__global__ void shared_past_end(const float *in, float *out, int n) {
  extern __shared__ float buffer[];
  const int t = threadIdx.x;
  buffer[t + (t == 5 ? blockDim.x : 0)] = in[t];
  __syncthreads();
  out[t] = buffer[t == 5 ? 0 : t];
}

__global__ void early_exit(const float *in, float *out, int n) {
  __shared__ float s[64];
  const int t = threadIdx.x;
  if (t >= n) return;
  s[t] = in[t];
  __syncthreads();
  out[t] = s[(t + 1) % n];
}

extern "C" int Reverse(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                       void *extra) {
  const bool sync = static_cast<AotExtra *>(extra)->Attr<bool>("sync");
  reverse<<<1, 256>>>(static_cast<const float *>(params[0]), static_cast<float *>(params[1]), 256, sync);
  return 0;
}

extern "C" int Twice(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                     void *extra) {
  const int n = static_cast<int>(shapes[0][0]);
  const int past = static_cast<int>(static_cast<AotExtra *>(extra)->Attr<int64_t>("past"));
  twice<<<(n + past + 63) / 64, 64>>>(static_cast<const float *>(params[0]), static_cast<float *>(params[1]), n,
                                      past);
  return 0;
}

extern "C" int SharedPastEnd(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                             void *stream, void *extra) {
  shared_past_end<<<2, 32, 32 * sizeof(float)>>>(static_cast<const float *>(params[0]),
                                                  static_cast<float *>(params[1]), 32);
  return 0;
}

extern "C" int EarlyExit(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                         void *stream, void *extra) {
  early_exit<<<1, 64>>>(static_cast<const float *>(params[0]), static_cast<float *>(params[1]),
                        static_cast<int>(shapes[0][0]));
  return 0;
}
"""


def line_of(text: str) -> int:
    """The .cu line of the first kernel line containing ``text``."""
    return LINES + next(i for i, s in enumerate(KERNELS.splitlines(), 1) if text in s)


@pytest.fixture(scope="module")
def cu(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("checks") / "buggy.cu"
    path.write_text(PRELUDE + KERNELS)
    return path


def op(cu: Path, func: str, **attrs) -> aotbench.Op:
    return aotbench.Custom(f"{cu}:{func}", lambda x: x, np.float32, attrs=attrs, emulate=True, guard=False)


def test_racecheck_names_both_lines_of_the_missing_barrier_and_passes_the_fixed_kernel(cu, rng):
    x = rng.standard_normal(256).astype(np.float32)
    report = op(cu, "Reverse", sync=False).compute_sanitizer(x, tool="racecheck")
    assert not report.ok and report.findings, report
    finding = report.findings[0]
    lines = {finding.line} | {int(d.rsplit(":", 1)[1].split()[0]) for d in finding.details if "buggy.cu:" in d}
    assert {line_of("s[t] = in[t];"), line_of("out[t] = s[n - 1 - t];")} <= lines, report
    assert finding.block == "0,0,0" and finding.thread, report
    assert "data race" in finding.what
    fixed = op(cu, "Reverse", sync=True)
    assert fixed.compute_sanitizer(x, tool="racecheck").ok
    np.testing.assert_array_equal(fixed(x), x[::-1])


def test_memcheck_names_the_thread_and_block_of_an_out_of_bounds_read(cu, rng):
    x = rng.standard_normal(100).astype(np.float32)
    report = op(cu, "Twice", past=3).compute_sanitizer(x, tool="memcheck")
    (finding,) = report.findings
    assert "heap-buffer-overflow" in finding.what and finding.line == line_of("out[i] = in[i] * 2.0f")
    # threads 100..102 read past the end: the first to run is one of them, in block 1 of 64-thread blocks
    tx = int(finding.thread.split(",")[0])
    assert finding.block == "1,0,0" and 36 <= tx <= 38, report
    assert finding.kernel == "twice"
    assert op(cu, "Twice", past=0).compute_sanitizer(x, tool="memcheck").ok


def test_memcheck_finds_a_write_past_the_dynamic_shared_memory(cu, rng):
    x = rng.standard_normal(32).astype(np.float32)
    report = op(cu, "SharedPastEnd").compute_sanitizer(x, tool="memcheck")
    (finding,) = report.findings
    assert finding.line == line_of("buffer[t + (t == 5") and finding.thread == "5,0,0", report


def test_synccheck_reports_threads_that_leave_before_a_barrier(cu, rng):
    x = rng.standard_normal(40).astype(np.float32)  # threads 40..63 of 64 return before the __syncthreads
    bad = op(cu, "EarlyExit")
    want = np.roll(x, -1)
    np.testing.assert_array_equal(bad(x), want)  # a plain call runs as a GPU would (exited threads arrived)
    report = bad.compute_sanitizer(x, tool="synccheck")
    (finding,) = report.findings
    assert finding.line == line_of("out[t] = s[(t + 1) % n];") - 1 and "exited before reaching it" in finding.what
    assert "(40,0,0)" in finding.what and finding.block == "0,0,0", report
    assert bad.compute_sanitizer(rng.standard_normal(64).astype(np.float32), tool="synccheck").ok


def test_initcheck_and_unknown_tools_are_refused(cu, rng):
    with pytest.raises(aotbench.ArgumentValueError, match="initcheck needs a GPU"):
        op(cu, "Twice", past=0).compute_sanitizer(np.ones(4, np.float32), tool="initcheck")


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_a_child_that_dies_without_a_report_is_never_no_errors(tool):
    report = interpret(tool, "Segmentation fault", "Segmentation fault", -11)
    assert not report.ok and "did not complete" in report.child_error


def test_reports_are_read_into_findings():
    asan = ("==1==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x1\nREAD of size 4 at 0x1 thread T0\n"
            "    #0 0x7f in twice(float const*, float*, int, int) /x/buggy.cu:12\n"
            "aotbench-emulator: the access was made by thread (36,0,0) of block (1,0,0) of kernel twice (launched "
            "at /x/buggy.cu:40)\n")
    (f,) = parse_asan(asan)
    assert (f.kernel, f.line, f.thread, f.block) == ("twice", 12, "36,0,0", "1,0,0")
    tsan = ("WARNING: ThreadSanitizer: data race (pid=1)\n  Write of size 4 at 0x1 by thread T3:\n"
            "    #0 reverse(float const*) /x/buggy.cu:6 (lib.so+0x1)\n\n"
            "  Previous read of size 4 at 0x1 by thread T9:\n    #0 reverse(float const*) /x/buggy.cu:8 (lib.so+0x1)\n\n"
            "  Thread T3 'thread (7,0,0) of block (0,2,0)' (tid=0, running) created by main thread at:\n"
            "  Thread T9 'thread (250,0,0) of block (0,2,0)' (tid=0, running) created by main thread at:\n")
    (f,) = parse_tsan(tsan)
    assert (f.line, f.thread, f.block) == (6, "7,0,0", "0,2,0")
    assert any("buggy.cu:8" in d and "thread (250,0,0)" in d for d in f.details)
