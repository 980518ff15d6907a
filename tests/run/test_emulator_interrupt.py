"""Ctrl-C on an emulated kernel in an endless loop: the call is abandoned like any in-process kernel's
(``KernelInterrupted``), the emulator's helper threads are told to stop, and the op's next call runs normally
on a fresh pool of them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = str(Path(__file__).resolve().parents[2])

SPIN = r"""
#include <cstdint>
#include "custom_aot_extra.h"
// Thread 0 of every block spins for ever when x[0] < 0; otherwise y = 2x + 1.
__global__ void spin(const float *x, float *y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  volatile bool forever = x[0] < 0 && threadIdx.x == 0;
  while (forever) {}
  if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}
extern "C" int Spin(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                    void *extra) {
  const int n = static_cast<int>(shapes[0][0]);
  spin<<<(n + 7) / 8, 8>>>(static_cast<const float *>(params[0]), static_cast<float *>(params[1]), n);
  return 0;
}
"""

SCRIPT = r"""
import os, signal, sys, threading, time
import numpy as np
import aotbench

op = aotbench.Custom(sys.argv[1] + ":Spin", lambda s: s, np.float32, emulate=True)
rng = np.random.default_rng()
ok = rng.random(64).astype(np.float32)
print("FIRST", np.array_equal(op(ok), 2 * ok + 1), flush=True)
for attempt in range(2):
    x = np.full(64, -1.0, np.float32)
    threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    started = time.monotonic()
    try:
        op(x)
        print("RETURNED", flush=True)
    except KeyboardInterrupt as exc:
        print("INTERRUPTED", type(exc).__name__, f"{time.monotonic() - started:.1f}", flush=True)
    y = rng.random(1000).astype(np.float32)
    print("AGAIN", np.array_equal(op(y), 2 * y + 1), flush=True)
"""


def test_ctrl_c_abandons_an_endless_emulated_kernel_and_the_op_runs_again(tmp_path):
    source = tmp_path / "spin.cu"
    source.write_text(SPIN)
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": ROOT, "AOTBENCH_CACHE_DIR": str(tmp_path / "cache")}
    try:
        proc = subprocess.run([sys.executable, str(script), str(source)], capture_output=True, text=True,
                              timeout=180, env=env)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the interrupted emulated kernel never gave control back: {exc.stdout!r} {exc.stderr!r}")
    out = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FIRST True" in out, proc.stdout + proc.stderr
    interrupted = [line for line in out if line.startswith("INTERRUPTED")]
    assert len(interrupted) == 2 and all("KernelInterrupted" in line for line in interrupted), proc.stdout
    assert out.count("AGAIN True") == 2, proc.stdout + proc.stderr
