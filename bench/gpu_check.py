"""The one device check: run it on a machine with an NVIDIA GPU, where nothing beyond the image is installed
(cupy, nvcc, g++, pytest are there; aotbench runs from this checkout):

    PYTHONUNBUFFERED=1 python3 bench/gpu_check.py [--out DIR] [--quick]

1. the environment: GPU, driver, nvcc, cupy, and the architecture aotbench chooses (with its reason);
2. the gpu-path tests: ``pytest tests/test_gpu.py tests/test_gpu_path.py tests/test_gpu_sanitize.py
   tests/test_nvcc.py`` (the ``gpu`` ones run here and nowhere else);
3. memory-bound examples against a device-to-device copy measured in the same run: saxpy (12 bytes per
   element) and the fused Add+ReduceSum (8 bytes per element, both axes), timed by aotbench's CUDA-event
   timing with the L2 flushed; target >= 80 % of the copy's bandwidth;
4. aotbench's event timing against ``cupyx.profiler.benchmark`` on the same launches; target within 5 %;
5. CUDA-graph replay and the host launch overhead, for the record.

It prints one table and, with ``--out``, writes it as JSON plus the pytest log. The exit status is non-zero when
a test fails or a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np

import aotbench
from aotbench.build import nvcc
from aotbench.device.gpu.timing import copy_bandwidth_gbps

TESTS = ["tests/test_gpu.py", "tests/test_gpu_path.py", "tests/test_gpu_sanitize.py", "tests/test_nvcc.py"]
COPY_TARGET = 0.80
AGREEMENT_TARGET = 0.05


def environment() -> dict:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,compute_cap,memory.total",
                          "--format=csv,noheader"], capture_output=True, text=True, check=False).stdout.strip()
    import cupy

    compiler = nvcc.find_nvcc()
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False).stdout
    choice = nvcc.choose_archs(compiler)
    return {"gpu": smi, "cupy": cupy.__version__, "nvcc": compiler, "nvcc_version": version.strip().splitlines()[-1],
            "gencode": " ".join(choice.gencode), "arch_reason": choice.reason, "python": sys.version.split()[0]}


def run_tests(out: Path | None) -> int:
    env = dict(os.environ, PYTHONPATH=str(ROOT), AOTBENCH_CACHE_DIR=str(Path("/tmp") / "aotbench-gpu-check"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *TESTS],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    log = proc.stdout + proc.stderr
    print(log[-6000:])
    if out is not None:
        (out / "pytest.log").write_text(log)
    return proc.returncode


def cupyx_median_ns(launch, repeat: int) -> float:
    from cupyx.profiler import benchmark

    result = benchmark(launch, n_repeat=repeat, n_warmup=max(repeat // 10, 3))
    return float(np.median(result.gpu_times)) * 1e9


def measure(label: str, op, args: tuple, bytes_moved: int, copy_gbps: float, reference, budget_ms: float) -> dict:
    import cupy

    out = op(*args)
    want = reference(*args)
    error = float(cupy.abs(out - want).max() / max(float(cupy.abs(want).max()), 1e-30))
    timing = aotbench.bench(op, *args, budget_ms=budget_ms)
    graph = aotbench.bench(op, *args, budget_ms=budget_ms, graph=True)
    theirs = cupyx_median_ns(op.launcher(*args), repeat=max(int(budget_ms * 1e6 / timing.median_ns), 20))
    gbps = bytes_moved / timing.median_ns
    return {"case": label, "bytes": bytes_moved, "median_us": timing.median_ns / 1e3, "iqr_us": timing.iqr_ns / 1e3,
            "gbps": gbps, "of_copy": gbps / copy_gbps, "cupyx_us": theirs / 1e3,
            "vs_cupyx": timing.median_ns / theirs - 1, "graph_us": graph.median_ns / 1e3,
            "launch_us": timing.launch_overhead_ns / 1e3, "rel_error": error, "notes": list(timing.notes)}


def benchmarks(quick: bool) -> tuple[float, list[dict]]:
    import cupy

    rng = np.random.default_rng()
    budget = 150.0 if quick else 400.0
    n = 1 << (26 if quick else 28)  # 256 MiB or 1 GiB per float32 array
    side = 1 << (13 if quick else 14)  # 8192^2 (256 MiB) or 16384^2 (1 GiB) per input
    copy_gbps, copy = copy_bandwidth_gbps(4 * n, budget_ms=budget)
    examples = aotbench.examples_dir()
    saxpy = aotbench.Custom(f"{examples / 'saxpy.cu'}:Saxpy", lambda s0, s1: s0, np.float32, attrs={"a": 2.0})
    x = cupy.asarray(rng.standard_normal(n, dtype=np.float32))
    y = cupy.asarray(rng.standard_normal(n, dtype=np.float32))
    rows = [{"case": f"device copy {4 * n >> 20} MiB", "bytes": 8 * n, "median_us": copy.median_ns / 1e3,
             "iqr_us": copy.iqr_ns / 1e3, "gbps": copy_gbps, "of_copy": 1.0}]
    rows.append(measure(f"saxpy n=2^{n.bit_length() - 1}", saxpy, (x, y), 12 * n, copy_gbps,
                        lambda a, b: 2.0 * a + b, budget))
    del x, y
    a = cupy.asarray(rng.standard_normal((side, side), dtype=np.float32))
    b = cupy.asarray(rng.standard_normal((side, side), dtype=np.float32))
    for axis in (1, 0):
        fused = aotbench.Custom(f"{examples / 'add_reduce.cu'}:AddReduce", None, np.float32,
                                attrs={"axis": axis, "keep_dim": False})
        rows.append(measure(f"fused add+sum {side}^2 axis={axis}", fused, (a, b), 8 * side * side + 4 * side,
                            copy_gbps, lambda p, q, axis=axis: (p + q).sum(axis=axis), budget))
    return copy_gbps, rows


def table(rows: list[dict]) -> str:
    head = (f"{'case':34} {'median':>10} {'IQR':>8} {'GB/s':>8} {'% copy':>7} {'cupyx':>10} {'vs cupyx':>9} "
            f"{'graph':>10} {'launch':>8} {'rel err':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        cupyx = f"{r['cupyx_us']:8.1f}us" if "cupyx_us" in r else ""
        versus = f"{100 * r['vs_cupyx']:+8.2f}%" if "vs_cupyx" in r else ""
        graph = f"{r['graph_us']:8.1f}us" if "graph_us" in r else ""
        launch = f"{r['launch_us']:6.1f}us" if "launch_us" in r else ""
        err = f"{r['rel_error']:8.1e}" if "rel_error" in r else ""
        lines.append(f"{r['case']:34} {r['median_us']:8.1f}us {r['iqr_us']:6.1f}us {r['gbps']:8.0f} "
                     f"{100 * r['of_copy']:6.1f}% {cupyx:>10} {versus:>9} {graph:>10} {launch:>8} {err:>8}")
        lines += [f"    note: {n}" for n in r.get("notes", [])]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write gpu_check.json and pytest.log here")
    parser.add_argument("--quick", action="store_true", help="smaller arrays and budgets")
    parser.add_argument("--no-tests", action="store_true", help="only the benchmarks")
    args = parser.parse_args()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    reason = aotbench.device.gpu.availability.gpu_unavailable_reason()
    if reason is not None:
        print(f"no usable GPU here: {reason}")
        return 2
    started = time.perf_counter()
    env = environment()
    print("\n".join(f"{k}: {v}" for k, v in env.items()))
    tests_rc = 0 if args.no_tests else run_tests(args.out)
    copy_gbps, rows = benchmarks(args.quick)
    print(table(rows))
    missed = [f"{r['case']}: {100 * r['of_copy']:.1f}% of copy bandwidth" for r in rows[1:]
              if r["of_copy"] < COPY_TARGET]
    missed += [f"{r['case']}: event timing {100 * r['vs_cupyx']:+.2f}% from cupyx" for r in rows[1:]
               if abs(r["vs_cupyx"]) > AGREEMENT_TARGET]
    print(f"tests: {'passed' if tests_rc == 0 else f'FAILED (pytest exit {tests_rc})'}")
    print("targets: " + ("all met" if not missed else "MISSED: " + "; ".join(missed)))
    print(f"total {time.perf_counter() - started:.0f} s")
    if args.out:
        (args.out / "gpu_check.json").write_text(json.dumps(
            {"environment": env, "copy_gbps": copy_gbps, "rows": rows, "tests_rc": tests_rc, "missed": missed},
            indent=1))
    return 1 if tests_rc or missed else 0


if __name__ == "__main__":
    sys.exit(main())
