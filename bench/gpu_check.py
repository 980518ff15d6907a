"""The one device check, for a lent machine with an NVIDIA GPU where only cupy, nvcc, g++ and pytest are installed
(aotbench runs from this checkout):

    PYTHONUNBUFFERED=1 python3 bench/gpu_check.py --out DIR [--quick] [--total-s 450]

It runs in phases, each in a child process with its own time limit, so no phase can take the others' results
with it (a hang, a sticky CUDA error, a crash):

1. environment: the GPU (nvidia-smi, and CUDA as cupy sees it), driver, nvcc, cupy, and the architectures
   aotbench chooses, with the reason;
2. tests: the gpu-path tests under pytest, each with a time limit (``gpu_check_pytest``), every outcome written
   as it happens; a test skipped for "no usable GPU" counts as a failure on a machine that has a GPU;
3. emulator: every CUDA example and corpus kernel built for aotbench's CUDA emulator and for this GPU, run on
   the same fresh random inputs and compared, bit for bit where the arithmetic is exact, within a bound each case
   states where ``--use_fast_math`` changes it (``gpu_check_emulator``: one row per case, and a summary);
4. probes: the host overhead of ``op(x)`` on a tiny array against cupy's own kernel, a no-GPU build (compute_80
   PTX only) running here, a graph capture of a launch on the legacy stream, memcheck's finding and its line;
5. benchmarks: saxpy and the fused Add+ReduceSum (both axes) as a share of a device-to-device copy measured in
   the same run (target >= 80 %), aotbench's event timing against ``cupyx.profiler.benchmark`` compared like
   with like (target within 5 %), graph replay and launch overhead.

Each phase may take its ``LIMITS`` seconds or what is left of the total, whichever is less. The emulator phase's
80 s came out of the benchmarks' share (150 s before, 70 s now), so the limits add up to what they did (550 s,
against a default total of 450). It builds into the cache the probes and benchmarks use (``child_env``), so
their nvcc builds of saxpy.cu and add_reduce.cu are found there.

Every row is appended to ``DIR/rows.jsonl`` the moment it exists; ``DIR/gpu_check.json`` is rewritten after each
phase and at the end, whatever happened; each phase's output is streamed to ``DIR/<phase>.log``. The exit
status is 0 when everything ran and every target was met, 1 when something failed or missed, 2 when there is no
usable GPU (within seconds, with the reason).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
TESTS = ["tests/run/test_gpu.py", "tests/run/test_gpu_path.py", "tests/tools/test_gpu_sanitize.py",
         "tests/build/test_nvcc.py", "tests/run/test_cuda_examples_emulated.py", "tests/run/test_emulator_corpus.py"]
#: Seconds each phase may take at most (less when the total would be exceeded), in the order they run.
LIMITS = {"environment": 60, "tests": 240, "emulator": 80, "probes": 100, "benchmarks": 70}
TEST_LIMIT_S = 120  # one test
NO_GPU_SKIP = "no usable GPU"


@dataclass
class Phase:
    """How one phase went: ``status`` is "ok", "failed (...)", "timed out after N s" or "skipped (...)"."""

    status: str
    seconds: float = 0.0
    limit_s: float = 0.0
    log: str = ""
    detail: dict = field(default_factory=dict)


def child_env(out: Path) -> dict:
    """The environment of every child: this checkout and bench/ FIRST on PYTHONPATH (carried packages already
    there stay after them), a cache of its own, unbuffered output."""
    path = [str(ROOT), str(BENCH)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(path), PYTHONUNBUFFERED="1", COLUMNS="160",
                AOTBENCH_CACHE_DIR=os.environ.get("AOTBENCH_CACHE_DIR", str(out / "cache")))


def run_phase(name: str, argv: list[str], limit_s: float, out: Path, env: dict | None = None,
              cwd: Path = ROOT) -> Phase:
    """Run ``argv`` as phase ``name``: output streamed to ``out/<name>.log``, killed with its whole process group
    past ``limit_s``. What the child appended to ``rows.jsonl`` before that stays there."""
    log = out / f"{name}.log"
    started = time.monotonic()
    with open(log, "ab") as sink:
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=env or child_env(out), stdout=sink, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            return Phase(f"failed (could not start: {exc})", 0.0, limit_s, str(log))
        try:
            code = proc.wait(timeout=max(limit_s, 1.0))
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return Phase(f"timed out after {limit_s:.0f} s", time.monotonic() - started, limit_s, str(log))
        finally:
            _kill_group(proc)  # children a finished phase left behind (a test's subprocess)
    seconds = time.monotonic() - started
    if code == 0:
        return Phase("ok", seconds, limit_s, str(log))
    how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
    return Phase(f"failed ({how})", seconds, limit_s, str(log))


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSON-lines file; a line cut short by a kill is dropped."""
    records = []
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def tail(path: str | Path, lines: int = 25) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# -- environment (no CUDA in this process: nvidia-smi and nvcc as programs, cupy in a child) -------------------

def _program(argv: list[str], timeout: float = 20.0) -> str:
    """A program's output, or what went wrong, never an exception."""
    if shutil.which(argv[0]) is None and not Path(argv[0]).is_file():
        return f"({argv[0]} not found)"
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, errors="replace")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({argv[0]} failed: {exc})"
    return (proc.stdout.strip() or proc.stderr.strip() or f"(exit {proc.returncode}, no output)")


def host_facts() -> dict:
    """What this machine says about its GPUs without CUDA: nvidia-smi, the device files, nvcc."""
    smi = _program(["nvidia-smi", "--query-gpu=index,name,driver_version,compute_cap,memory.total",
                    "--format=csv,noheader"])
    facts = {"python": sys.version.split()[0], "nvidia_smi": smi,
             "device_files": sorted(p.name for p in Path("/dev").glob("nvidia[0-9]*")),
             "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    sys.path.insert(0, str(ROOT))
    try:
        from aotbench.build import nvcc

        compiler = nvcc.find_nvcc()
        facts["nvcc"] = compiler
        facts["nvcc_version"] = _program([compiler, "--version"], 60).splitlines()[-1]
    except Exception as exc:  # noqa: BLE001 - reported, not raised: the check goes on to say what else it sees
        facts["nvcc"] = f"(not found: {exc})"
    facts["gpu_machine"] = bool(facts["device_files"]) or ("," in smi and not smi.startswith("("))
    return facts


# -- tests ----------------------------------------------------------------------------------------------------

def run_tests(out: Path, limit_s: float, gpu_machine: bool, tests: list[str] | None = None,
              test_limit_s: float = TEST_LIMIT_S, cwd: Path = ROOT) -> Phase:
    """pytest on ``tests`` with a limit per test; when one stops the run (it hung past its limit, or crashed the
    process), the tests not yet run are run again without it, while time is left. Outcomes come from
    ``tests.outcomes.jsonl``, written as they happen."""
    tests = tests or TESTS
    outcomes = out / "tests.outcomes.jsonl"
    deadline = time.monotonic() + limit_s
    stopped: list[str] = []
    selection = list(tests)
    runs = 0
    status = "ok"
    while True:
        runs += 1
        argv = [sys.executable, "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider", "-p", "gpu_check_pytest",
                "--test-limit", str(test_limit_s), "--outcomes", str(outcomes), *selection]
        phase = run_phase("tests", argv, deadline - time.monotonic(), out, cwd=cwd)
        records = read_jsonl(outcomes)
        done = {r["nodeid"] for r in records if "outcome" in r}
        started = [r["nodeid"] for r in records if r.get("started")]
        if phase.status.startswith("timed out"):
            status = phase.status
            break
        stuck = [n for n in started if n not in done and n not in stopped]
        if not stuck:
            break
        stopped.append(stuck[-1])
        status = "failed (a test stopped the run)"
        collected = _collect(out, tests, deadline, cwd)
        selection = [n for n in collected if n not in done and n not in stopped]
        if not selection or time.monotonic() > deadline - 5:
            break
    summary = summarize_tests(read_jsonl(outcomes), stopped, gpu_machine, status, runs, limit_s)
    summary.log = str(out / "tests.log")
    return summary


def _collect(out: Path, tests: list[str], deadline: float, cwd: Path) -> list[str]:
    """The test ids in ``tests`` (empty when even collecting fails or runs out of time)."""
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                               *tests], cwd=cwd, env=child_env(out), capture_output=True, text=True, check=False,
                              timeout=max(deadline - time.monotonic(), 5))
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in proc.stdout.splitlines() if "::" in line]


def summarize_tests(records: list[dict], stopped: list[str], gpu_machine: bool, status: str, runs: int,
                    limit_s: float) -> Phase:
    """The tests phase from its outcome records: counts, failures, skips with reasons, and on a GPU machine every
    "no usable GPU" skip as a failure (the gpu tests must have run)."""
    last = {}
    for r in records:
        if "outcome" in r:
            last[r["nodeid"]] = r  # a setup error and a call outcome: the later one stands
    by = {k: [n for n, r in last.items() if r["outcome"] == k] for k in ("passed", "failed", "skipped", "error")}
    skips = {n: last[n]["reason"] for n in by["skipped"]}
    no_gpu = [n for n, why in skips.items() if why.startswith(NO_GPU_SKIP)] if gpu_machine else []
    failing = by["failed"] + by["error"] + stopped + no_gpu
    if failing and status == "ok":
        status = "failed"
    detail = {"passed": len(by["passed"]), "failed": by["failed"], "errors": by["error"], "stopped_the_run": stopped,
              "skipped": skips, "no_gpu_skips_on_a_gpu_machine": no_gpu, "pytest_runs": runs}
    return Phase(status, sum(r.get("seconds", 0) for r in last.values()), limit_s, "", detail)


# -- the report -----------------------------------------------------------------------------------------------

def targets_missed(rows: list[dict]) -> list[str]:
    missed = []
    for r in rows:
        if r.get("error"):
            missed.append(f"{r.get('case', r.get('phase'))}: {r['error']}")
        elif r.get("ok") is False:
            missed.append(f"{r['case']}: {r.get('result', '')} (target: {r.get('target', '')})")
    return missed


def table(rows: list[dict]) -> str:
    """Benchmark rows as a table, each column saying what it includes; probe rows as lines."""
    bench = [r for r in rows if r.get("phase") == "benchmarks" and "median_us" in r]
    lines = []
    if bench:
        head = (f"{'case':30} {'events':>9} {'IQR':>7} {'GB/s':>6} {'%copy':>6} {'cupyx':>9} {'cupyx-L':>9} "
                f"{'vs':>7} {'graph':>9} {'launch':>7} {'rel err':>8}")
        lines += [head, "-" * len(head)]
        for r in bench:
            def us(key: str, r: dict = r) -> str:
                return f"{r[key]:7.1f}us" if r.get(key) is not None else ""

            versus = f"{100 * r['vs_cupyx']:+6.2f}%" if r.get("vs_cupyx") is not None else ""
            err = f"{r['rel_error']:8.1e}" if r.get("rel_error") is not None else ""
            lines.append(f"{r['case']:30} {us('median_us'):>9} {us('iqr_us'):>7} {r['gbps']:6.0f} "
                         f"{100 * r['of_copy']:5.1f}% {us('cupyx_us'):>9} {us('cupyx_less_launch_us'):>9} "
                         f"{versus:>7} {us('graph_us'):>9} {us('launch_us'):>7} {err:>8}")
            lines += [f"    note: {n}" for n in r.get("notes", [])]
        lines.append("events: CUDA events around one launch, L2 flushed (read) before it, the host's launch hidden "
                     "behind the flush; cupyx: cupyx.profiler.benchmark's GPU time (events around the host call: "
                     "it includes the host's launch, L2 warm); cupyx-L: cupyx less cupyx's own host time of the "
                     "call (what 'vs' compares with events); graph: CUDA-graph replay; launch: host time per "
                     "launch, measured apart.")
    for r in rows:
        if r.get("phase") in ("probes", "emulator") or (r.get("phase") == "benchmarks" and "median_us" not in r):
            mark = "ok " if r.get("ok") else ("-- " if r.get("ok") is None and not r.get("error") else "NO ")
            lines.append(f"{mark}{r.get('case', '?')}: {r.get('result', r.get('error', ''))}")
    return "\n".join(lines)


def write_report(out: Path, report: dict) -> None:
    report["rows"] = read_jsonl(out / "rows.jsonl")
    report["missed"] = targets_missed(report["rows"])
    tmp = out / "gpu_check.json.tmp"
    tmp.write_text(json.dumps(report, indent=1, default=str))
    tmp.replace(out / "gpu_check.json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-check-out")),
                        help="where rows.jsonl, gpu_check.json and the logs go (default: $OUT or ./gpu-check-out)")
    parser.add_argument("--quick", action="store_true", help="smaller arrays and budgets")
    parser.add_argument("--total-s", type=float, default=450.0, help="seconds for all phases together")
    parser.add_argument("--skip", action="append", default=[], choices=sorted(LIMITS), help="leave a phase out")
    parser.add_argument("--phase", help=argparse.SUPPRESS)  # run one device phase in this process (a child)
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.phase:
        import gpu_check_device

        return gpu_check_device.run(args.phase, out, args.quick)
    started = time.monotonic()
    deadline = started + args.total_s
    report: dict = {"argv": sys.argv, "quick": args.quick, "total_s": args.total_s, "phases": {}}
    (out / "rows.jsonl").unlink(missing_ok=True)
    (out / "tests.outcomes.jsonl").unlink(missing_ok=True)
    code = 1
    try:
        code = _phases(args, out, report, deadline)
    finally:
        report["seconds"] = round(time.monotonic() - started, 1)
        report["exit"] = code
        write_report(out, report)
        print(table(report["rows"]))
        for name, phase in report["phases"].items():
            print(f"phase {name}: {phase['status']} ({phase['seconds']:.0f} s of {phase['limit_s']:.0f})")
        if report.get("no_usable_gpu"):
            print(f"targets: none measured (no usable GPU: {report['no_usable_gpu']})")
        else:
            print("targets: " + ("all met" if not report["missed"] else "MISSED: " + "; ".join(report["missed"])))
        print(f"total {report['seconds']:.0f} s; exit {code}; report {out / 'gpu_check.json'}")
    return code


def _phases(args, out: Path, report: dict, deadline: float) -> int:
    facts = host_facts()
    report["environment"] = facts
    env_phase = run_phase("environment", _phase_argv("environment", out, args.quick),
                          min(LIMITS["environment"], deadline - time.monotonic()), out)
    report["phases"]["environment"] = asdict(env_phase)
    seen = next((r for r in read_jsonl(out / "rows.jsonl") if r.get("case") == "environment"), {})
    report["environment"].update(seen.get("facts", {}))
    print("\n".join(f"{k}: {v}" for k, v in report["environment"].items()))
    reason = seen.get("facts", {}).get("unusable", None) if seen else f"the environment phase {env_phase.status}"
    if reason:
        where = ("this machine has a GPU, but " if facts["gpu_machine"] else "")
        print(f"no usable GPU here: {where}{reason}\n{tail(env_phase.log, 10)}")
        report["no_usable_gpu"] = reason
        return 2
    write_report(out, report)
    failed = env_phase.status != "ok"
    for name in ("tests", "emulator", "probes", "benchmarks"):
        left = deadline - time.monotonic()
        if name in args.skip or left < 10:
            report["phases"][name] = asdict(Phase(f"skipped ({'asked' if name in args.skip else 'no time left'})"))
            failed |= name not in args.skip
            continue
        limit = min(LIMITS[name], left)
        if name == "tests":
            phase = run_tests(out, limit, facts["gpu_machine"])
            print(f"tests: {phase.status}: {json.dumps(phase.detail)[:3000]}")
        elif name == "emulator":
            phase = run_phase(name, [sys.executable, str(BENCH / "gpu_check_emulator.py"), "--out", str(out)]
                              + (["--quick"] if args.quick else []), limit, out)
        else:
            phase = run_phase(name, _phase_argv(name, out, args.quick), limit, out)
        if phase.status != "ok":
            print(f"phase {name} {phase.status}; its log ends:\n{tail(out / f'{name}.log')}")
        failed |= phase.status != "ok"
        report["phases"][name] = asdict(phase)
        write_report(out, report)
    return 1 if failed or report["missed"] else 0  # write_report has read the rows after the last phase run


def _phase_argv(name: str, out: Path, quick: bool) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--phase", name, "--out", str(out)] + \
        (["--quick"] if quick else [])


if __name__ == "__main__":
    sys.exit(main())
