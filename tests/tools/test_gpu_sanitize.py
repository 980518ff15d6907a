"""compute-sanitizer around one gpu call: its report parsed into findings, the tool found or clearly missing,
and the child that makes the call (run here for real: without a device it reports why, on its marked line)."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.build import nvcc
from aotbench.run.gpu_availability import gpu_unavailable_reason
from aotbench.tools import compute_sanitizer as gpu_sanitize
from aotbench.tools.compute_sanitizer import find_compute_sanitizer, parse_report

FAULTS = f"{Path(__file__).resolve().parents[1] / 'support' / 'kernels' / 'gpu_faults.cu'}:GpuFaults"

MEMCHECK = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at add_one(const float *, float *, long, long)+0x1b0 in /work/tests/support/kernels/gpu_faults.cu:12
=========     by thread (231,0,0) in block (3,0,0)
=========     Address 0x7f1c3e000fa0 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f1c3e000000 of size 4000 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========     Host Frame: [0x2f3a1b] in libcuda.so.1
=========
========= Invalid __global__ read of size 8
=========     at 0x00000090 in /src/old style.cu:7:(anonymous namespace)::gather(double const *, long)
=========     by thread (0,1,0) in block (0,0,2)
=========
========= ERROR SUMMARY: 2 errors
"""

RACECHECK = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at racy_shift(const float *, float *, long)+0x90 in /w/gpu_faults.cu:19
=========     and Read access at racy_shift(const float *, float *, long)+0xc0 in /w/gpu_faults.cu:21 [248 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""


def test_memcheck_report_is_parsed_into_findings():
    findings, api_errors, summary = parse_report("program output\n" + MEMCHECK)
    assert api_errors == []
    assert summary == "ERROR SUMMARY: 2 errors"
    first, second = findings
    assert (first.what, first.kernel, first.line) == ("Invalid __global__ write of size 4 bytes", "add_one", 12)
    assert first.file == "/work/tests/support/kernels/gpu_faults.cu" and (first.thread, first.block) == ("231,0,0", "3,0,0")
    assert first.details[0] == "Address 0x7f1c3e000fa0 is out of bounds"
    assert not any("Host Frame" in d for d in first.details)
    assert "add_one at gpu_faults.cu:12 (thread (231,0,0) of block (3,0,0))" in str(first)
    assert (second.kernel, second.line, second.block) == ("gather", 7, "0,0,2")  # the older "at 0x.. in f:l:k"


def test_racecheck_report_names_both_accesses():
    (race,), _, summary = parse_report(RACECHECK)
    assert race.what.startswith("Race reported between Write access")
    assert (race.kernel, race.line) == ("racy_shift", 19) and "Read access" in race.details[0]
    assert summary.startswith("RACECHECK SUMMARY: 1 hazard")


MEMCHECK_WITH_API_ERRORS = MEMCHECK.replace("========= ERROR SUMMARY: 2 errors\n", """\
========= Program hit cudaErrorIllegalAddress (error 700) due to "an illegal memory access was encountered" on \
CUDA API call to cudaDeviceSynchronize.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: [0x4a1b2c] in libcuda.so.1
=========         Host Frame: [0x1f00] in /tmp/cache/abc/libGpuFaults.so
=========
========= Program hit cudaErrorLaunchFailure (error 719) on CUDA API call to cudaFree.
=========
========= Target application returned an error
========= ERROR SUMMARY: 4 errors
""")


def test_api_errors_are_kept_apart_from_memory_findings():
    """"Program hit cudaError... on CUDA API call to ..." is not a memory access: it is listed apart, and the
    findings (and their count) are the two memory errors only."""
    findings, api_errors, summary = parse_report(MEMCHECK_WITH_API_ERRORS)
    assert [f.kernel for f in findings] == ["add_one", "gather"] and summary == "ERROR SUMMARY: 4 errors"
    assert [(e.error, e.call) for e in api_errors] == [("cudaErrorIllegalAddress", "cudaDeviceSynchronize"),
                                                       ("cudaErrorLaunchFailure", "cudaFree")]
    assert api_errors[0].description == "an illegal memory access was encountered"
    assert not any("Program hit" in f.what or "Host Frame" in " ".join(f.details) for f in findings)
    report = gpu_sanitize.interpret("GpuFaults", "memcheck", MEMCHECK_WITH_API_ERRORS, "", 1)
    text = str(report)
    assert "2 finding(s); 2 CUDA API error(s), listed apart" in text
    assert "API: cudaErrorIllegalAddress" in text and "from cudaDeviceSynchronize" in text
    alone = gpu_sanitize.interpret("GpuFaults", "memcheck", "\n".join(
        line for line in MEMCHECK_WITH_API_ERRORS.splitlines() if "Target" in line or "Program hit" in line
        or "SUMMARY" in line), "aotbench-call-error: CudaError: cudaErrorLaunchFailure\n", 1)
    assert alone.findings == [] and len(alone.api_errors) == 2 and not alone.ok  # the call's own error counts


def test_a_clean_run_has_no_findings():
    findings, _, summary = parse_report("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n")
    assert findings == [] and summary == "ERROR SUMMARY: 0 errors"
    report = gpu_sanitize.SanitizerReport("memcheck", findings, summary, "")
    assert report.ok and "no errors" in str(report) and "no errors" in report._repr_html_()


def test_a_missing_compute_sanitizer_names_where_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(nvcc, "find_nvcc", lambda: str(tmp_path / "bin" / "nvcc"))
    monkeypatch.setattr(gpu_sanitize, "CUDA_ROOT", tmp_path / "cuda")
    with pytest.raises(aotbench.ToolchainNotFoundError, match="compute-sanitizer"):
        find_compute_sanitizer()
    tool = tmp_path / "cuda" / "compute-sanitizer" / "compute-sanitizer"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert find_compute_sanitizer() == str(tool)


@pytest.mark.nvcc
@pytest.mark.slow
def test_arguments_are_checked_before_anything_runs(rng):
    op = aotbench.Custom(FAULTS, lambda s: s, np.float32, attrs={"mode": 0}, emulate=False)
    x = rng.standard_normal(16, dtype=np.float32)
    with pytest.raises(aotbench.ArgumentError, match="memcheck, racecheck"):
        op.compute_sanitizer(x, tool="addresscheck")
    cpu = aotbench.Custom(f"{Path(__file__).resolve().parents[1] / 'support' / 'kernels' / 'check_faults.cc'}:Fault", None,
                          np.float32, attrs={"mode": "ok", "extra": 0, "delta": 0.0})
    with pytest.raises(aotbench.ArgumentError, match="sanitize='address'"):
        cpu.compute_sanitizer(x)
    if gpu_unavailable_reason() is not None:
        with pytest.raises(aotbench.DeviceUnavailableError, match="cannot run here"):
            op.compute_sanitizer(x)


@pytest.mark.nvcc
@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a usable GPU is present")
@pytest.mark.slow
def test_the_child_rebuilds_the_op_and_reports_what_the_call_raised(tmp_path, rng):
    """The child process the sanitizer runs: it rebuilds the op from the recipe (with -lineinfo) and, with no
    device here, reports the DeviceUnavailableError on its marked line with exit status 3."""
    op = aotbench.Custom(FAULTS, lambda s: s, np.float32, attrs={"mode": 0})
    payload = tmp_path / "call.pkl"
    x = rng.standard_normal(8, dtype=np.float32)
    spec = gpu_sanitize._travelling_spec(op)  # the lambda shape rule travels by cloudpickle
    assert spec.out_shape((8,)) == (8,) and spec.flags == ("-lineinfo",)
    payload.write_bytes(pickle.dumps({"spec": spec, "args": [x]}))
    proc = subprocess.run([sys.executable, "-m", "aotbench.cli.gpu_call", str(payload)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 3
    error = gpu_sanitize._child_error(proc.stderr)
    assert error.startswith("DeviceUnavailableError: GpuFaults is a gpu op and cannot run here")


def test_a_run_is_interpreted_as_findings_a_call_error_or_a_refusal():
    """What the parent makes of the tool's output: findings plus what the call raised in the child; a tool that
    could not run at all is DeviceUnavailableError, not a finding."""
    marked = "aotbench-call-error: CudaError: GpuFaults: CUDA error cudaErrorLaunchFailure (unspecified)\n"
    report = gpu_sanitize.interpret("GpuFaults", "memcheck", MEMCHECK, marked, 3)
    assert not report.ok and len(report.findings) == 2 and report.child_error.startswith("CudaError")
    assert "the call raised: CudaError" in str(report)
    clean = gpu_sanitize.interpret("GpuFaults", "memcheck", "========= ERROR SUMMARY: 0 errors\n", "", 0)
    assert clean.ok
    refusal = "========= COMPUTE-SANITIZER\n========= Error: Device not supported\n"
    with pytest.raises(aotbench.DeviceUnavailableError, match="could not run GpuFaults"):
        gpu_sanitize.interpret("GpuFaults", "memcheck", refusal, "", 1)
    with pytest.raises(aotbench.DeviceUnavailableError, match="exit status 139"):
        gpu_sanitize.interpret("GpuFaults", "racecheck", "Segmentation fault\n", "", 139)
