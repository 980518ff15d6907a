"""Reading the crash report an isolated worker writes (aotbench.run.native_stack), on reports written by real crashes
and on the report's edge cases: a pc that backtrace() did not reach, a thread the kernel started, a recursion
deeper than the report.
"""

from __future__ import annotations

import numpy as np
import pytest

import aotbench
from aotbench.run import native_stack

HOST = "/cache/host-1234.so"
LIB = "/cache/kernel-5678.so"
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


def report(pc: tuple[int, str] | None, frames: list[tuple[int, str, str]]) -> str:
    lines = ["kernel output before", "aotbench-native-stack 11"]
    if pc:
        lines.append(f"aotbench-pc {pc[0]:#x} {pc[1]}")
    lines += [f"aotbench-frame {off:#x} {sym} {mod}" for off, sym, mod in frames]
    return "\n".join([*lines, "aotbench-native-stack-end", "after"])


def test_frames_run_from_the_pc_to_the_host_and_the_rest_is_output():
    text = report((0x1140, LIB), [(0x2000, "-", HOST), (0x3db0, "__restore_rt", LIBC), (0x1140, "K", LIB),
                                  (0x1200, "K", LIB), (0x5c67, "aotb_call_params", HOST), (0x10, "-", LIBC)])
    parsed = native_stack.parse(text, HOST)
    assert [(f.module, f.offset) for f in parsed.frames] == [(LIB, 0x1140), (LIB, 0x1200)]
    assert parsed.frames[0].exact and not parsed.frames[1].exact
    assert parsed.found and parsed.ending == "host" and parsed.output == "kernel output before\nafter"


def test_a_pc_that_backtrace_did_not_reach_is_still_shown():
    """A smashed stack: backtrace() gives up inside the handler; the faulting instruction is all there is."""
    parsed = native_stack.parse(report((0x46b7, LIB), [(0x2000, "-", HOST), (0x3db0, "__restore_rt", LIBC)]), HOST)
    assert [(f.module, f.offset, f.exact) for f in parsed.frames] == [(LIB, 0x46b7, True)]
    assert parsed.ending == "ends"
    lines = native_stack.describe(parsed.frames, ending=parsed.ending)
    assert "+0x46b7" in lines[0] and "stack ends here" in lines[-1]


def test_a_thread_stack_is_not_called_a_stack_overflow():
    frames = [(0x2000, "-", HOST), (0x3db0, "__restore_rt", LIBC), (0x1140, "Worker", LIB),
              (0x9000, "start_thread", LIBC), (0x9100, "clone3", LIBC)]
    parsed = native_stack.parse(report((0x1140, LIB), frames), HOST)
    assert parsed.ending == "ends"
    text = "\n".join(native_stack.describe(parsed.frames, ending=parsed.ending))
    assert "stack overflow" not in text and "a thread the kernel started" in text


def test_a_recursion_deeper_than_the_report_says_so():
    frames = [(0x2000, "-", HOST), (0x3db0, "__restore_rt", LIBC)] + [(0x1180, "R", LIB)] * 62
    parsed = native_stack.parse(report((0x1100, LIB), frames), HOST)
    assert parsed.ending == "deeper"
    lines = native_stack.describe(parsed.frames, ending=parsed.ending)
    assert "the same frame 61 more times" in "\n".join(lines) and "stack overflow" in lines[-1]


THREADED = r"""
#include <cstdint>
#include <thread>

namespace {
void Touch(float *p) { *p = 1.0f; }
}  // namespace

extern "C" int Threaded(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                        void *stream, void *extra) {
  float *nowhere = nullptr;
  std::thread worker(Touch, nowhere);
  worker.join();
  return 0;
}
"""


@pytest.mark.slow
def test_a_crash_in_a_thread_the_kernel_started_names_its_function(tmp_path, rng):
    source = tmp_path / "threaded.cc"
    source.write_text(THREADED)
    op = aotbench.Custom(f"{source}:Threaded", lambda s: s, np.float32, isolate=True, flags=["-g", "-pthread"])
    with pytest.raises(aotbench.KernelCrashedError) as info:
        op(rng.standard_normal(3).astype(np.float32))
    text = str(info.value)
    assert "Touch(float*) at threaded.cc:6" in text and "*p = 1.0f;" in text, text
    assert "stack overflow" not in text and "a thread the kernel started" in text, text
