"""The CUDA toolchain: finding nvcc, choosing the architectures, the documented command, ptxas's report.

The documented CUDA command (ABI.md section 6) is
``nvcc --shared -Xcompiler -fPIC -O3 -gencode arch=compute_80,code=sm_80 --use_fast_math
--expt-relaxed-constexpr -D_GLIBCXX_USE_CXX11_ABI=0 -I<dirs> -o <out> <src>`` (CUDA 11+; CUDA 10 used the 70
pair, and MindSpore passes both). It is adapted, and every adaptation is stated in the returned reason:
architectures the toolkit rejects are dropped (CUDA 13 has no compute_70), the detected device's architecture is
added as machine code plus PTX, and without a device the documented CUDA-11 target gets PTX too, so the library
still runs on newer GPUs.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import ToolchainNotFoundError
from .toolchain import include_dir

NVCC_HINT = ("install the CUDA toolkit, or `pip install nvidia-cuda-nvcc nvidia-cuda-runtime nvidia-cuda-crt "
             "nvidia-cuda-cccl` (its nvcc is found in site-packages), or set CUDA_HOME")
#: Where pip's CUDA wheels put nvcc, relative to a site-packages directory (CUDA 13 layout, then CUDA 12's).
PIP_NVCC = (Path("nvidia", "cu13", "bin", "nvcc"), Path("nvidia", "cuda_nvcc", "bin", "nvcc"))
#: The documented architecture pairs, oldest first (MindSpore passes both).
DOCUMENTED_ARCHS = (70, 80)
#: The reported resource usage is free to ask for and does not change the binary.
RESOURCE_FLAG = "--resource-usage"
#: Pre-included into every gpu build: exports ``aotb_cuda_last_error``, the kernel library's own
#: ``cudaGetLastError`` (its CUDA runtime is linked statically, so launch errors are visible only from inside).
PROBE_HEADER = "aotb_cuda_probe.h"
PROBE_SYMBOL = "aotb_cuda_last_error"


def candidates() -> list[tuple[str, Path]]:
    """Where nvcc may be, in the order it is looked for: PATH, CUDA_HOME, CUDA_PATH, pip, /usr/local/cuda."""
    found: list[tuple[str, Path]] = []
    on_path = shutil.which("nvcc")
    if on_path:
        found.append(("PATH", Path(on_path)))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            found.append((var, Path(os.environ[var]) / "bin" / "nvcc"))
    for entry in sys.path:
        if entry and os.path.isdir(entry):
            found.extend(("pip (site-packages)", Path(entry) / rel) for rel in PIP_NVCC)
    found.append(("/usr/local/cuda", Path("/usr/local/cuda/bin/nvcc")))
    return found


def find_nvcc() -> str:
    """The first runnable nvcc of :func:`candidates` (looked up at call time)."""
    for _, path in candidates():
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    raise ToolchainNotFoundError("nvcc", NVCC_HINT)


@lru_cache(maxsize=16)
def supported_archs(nvcc: str) -> tuple[int, ...]:
    """The virtual architectures this nvcc accepts (``--list-gpu-arch``), e.g. (75, 80, ..., 120)."""
    try:
        out = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(sorted({int(m) for m in re.findall(r"compute_(\d+)", out.stdout)}))


#: The driver API's attribute numbers for the compute capability (CUdevice_attribute, stable since CUDA 2).
_CU_CC_MAJOR, _CU_CC_MINOR = 75, 76


def detect_device_arch() -> tuple[int | None, str]:
    """The compute capability (90 for an H200) of the device gpu calls will run on, and how it was found; or
    None and why none was found.

    In order: cupy's current device when cupy is already imported (it honours ``with cupy.cuda.Device(n)``);
    else device 0 as the CUDA driver orders devices (``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER``
    applied, as cupy sees them) through ``libcuda``; else ``nvidia-smi`` (PCI order, no CUDA context), which
    may name another GPU than CUDA's first where GPUs differ. A driver without ``nvidia-smi`` (many containers)
    is still found.
    """
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            device = cupy.cuda.Device()
            cc = int(device.compute_capability)
            return cc, f"cupy's current device, GPU {device.id}, has compute capability {cc // 10}.{cc % 10}"
        except Exception:  # noqa: BLE001, S110 - no device, no driver ...: ask the driver and nvidia-smi
            pass
    return _driver_or_smi_arch()


@lru_cache(maxsize=1)
def _driver_or_smi_arch() -> tuple[int | None, str]:
    """Device 0 of the CUDA driver, else of nvidia-smi; once per process (devices do not change)."""
    arch, why = _driver_arch()
    if arch is not None:
        return arch, why
    smi_arch, smi_why = _smi_arch()
    return (smi_arch, smi_why) if smi_arch is not None else (None, f"no GPU detected ({why}; {smi_why})")


def _driver_arch() -> tuple[int | None, str]:
    """CUDA device 0's compute capability through the driver API (``cuInit``, ``cuDeviceGetAttribute``)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None, "libcuda.so.1 not found"
    code, count, device, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0), \
        ctypes.c_int(0)
    try:
        if (code := cuda.cuInit(0)) != 0:
            return None, f"the CUDA driver did not start (cuInit error {code})"
        if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
            return None, "the CUDA driver reports no device"
        if cuda.cuDeviceGet(ctypes.byref(device), 0) != 0 or \
                cuda.cuDeviceGetAttribute(ctypes.byref(major), _CU_CC_MAJOR, device) != 0 or \
                cuda.cuDeviceGetAttribute(ctypes.byref(minor), _CU_CC_MINOR, device) != 0:
            return None, "the CUDA driver did not report device 0's compute capability"
    except AttributeError as exc:  # a library of that name without the driver API
        return None, f"libcuda.so.1 is not a CUDA driver ({exc})"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    seen = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
    return major.value * 10 + minor.value, (f"CUDA device 0{seen} has compute capability "
                                            f"{major.value}.{minor.value}")


def _smi_arch() -> tuple[int | None, str]:
    """GPU 0's compute capability as ``nvidia-smi`` lists it (PCI bus order)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None, "nvidia-smi not found"
    try:
        out = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"nvidia-smi failed: {exc}"
    match = re.match(r"\s*(\d+)\.(\d+)", out.stdout)
    if out.returncode != 0 or not match:
        return None, f"nvidia-smi: {(out.stdout + out.stderr).strip()[:120] or 'no output'}"
    return int(match[1]) * 10 + int(match[2]), (f"nvidia-smi's GPU 0 has compute capability {match[1]}.{match[2]}"
                                                " (the CUDA driver could not be asked)")


def parse_arch(arch: str | int) -> int:
    """``"sm_90"``, ``"compute_90"``, ``"9.0"``, ``"90"`` or ``90`` -> 90."""
    text = str(arch).strip().lower()
    match = re.fullmatch(r"(?:sm_|compute_)?(\d+)(?:\.(\d))?[a-z]?", text)
    if not match:
        raise ValueError(f"arch={arch!r}: write it as sm_90, 90 or 9.0")
    return int(match[1]) * 10 + int(match[2]) if match[2] is not None else int(match[1])


@dataclass(frozen=True)
class ArchChoice:
    """The ``-gencode`` flags to use and, in words, why."""

    gencode: tuple[str, ...]
    reason: str


def choose_archs(nvcc: str, arch: str | int | None = None) -> ArchChoice:
    """The documented ``-gencode`` pairs adapted to this toolkit and device (or to an explicit ``arch``)."""
    supported = supported_archs(nvcc)
    if arch is not None:
        n = parse_arch(arch)
        if supported and n not in supported:
            raise ValueError(f"arch={arch!r}: this nvcc supports compute_{', compute_'.join(map(str, supported))}")
        return ArchChoice(_pair(n, ptx=True), f"arch={arch!r} given: sm_{n} machine code plus compute_{n} PTX")
    kept = [a for a in DOCUMENTED_ARCHS if not supported or a in supported]
    dropped = [a for a in DOCUMENTED_ARCHS if a not in kept]
    device, found = detect_device_arch()
    notes = [f"dropped compute_{a} (this nvcc rejects it)" for a in dropped]
    flags: list[str] = []
    if device is not None:
        for a in kept:
            if a != device:
                flags += _pair(a, ptx=False)
        flags += _pair(device, ptx=True)
        notes.append(f"{found}: added sm_{device} machine code plus compute_{device} PTX")
    else:
        newest = kept[-1] if kept else (supported[0] if supported else 80)
        for a in kept:
            flags += _pair(a, ptx=a == newest)
        notes.append(f"{found}: documented targets, with compute_{newest} PTX so newer GPUs can run it")
    return ArchChoice(tuple(flags), "; ".join(notes))


def _pair(arch: int, *, ptx: bool) -> tuple[str, ...]:
    code = f"[sm_{arch},compute_{arch}]" if ptx else f"sm_{arch}"
    return ("-gencode", f"arch=compute_{arch},code={code}")


def cuda_command(compiler: str, source: Path, output: Path, flags: tuple[str, ...], gencode: tuple[str, ...]) -> list[str]:
    """The documented CUDA command with ``gencode`` where the documented pair stood, then the launch-error probe
    (:data:`PROBE_HEADER`, pre-included) and ``flags``."""
    return [
        compiler, "--shared", "-Xcompiler", "-fPIC", "-O3", *gencode, "--use_fast_math",
        "--expt-relaxed-constexpr", "-D_GLIBCXX_USE_CXX11_ABI=0",
        f"-I{include_dir()}", f"-I{source.parent}", "-o", str(output), str(source),
        "--pre-include", str(include_dir() / PROBE_HEADER), *flags,
    ]


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def resource_usage(log: str) -> list[dict]:
    """ptxas's per-kernel report (``--resource-usage``): one dict per kernel and architecture."""
    kernels: list[dict] = []
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            kernels.append({"kernel": m[1], "arch": m[2], "registers": None, "shared_bytes": 0,
                            "stack_bytes": 0, "spill_stores": 0, "spill_loads": 0})
        elif kernels and (m := _FRAME.search(line)):
            kernels[-1].update(stack_bytes=int(m[1]), spill_stores=int(m[2]), spill_loads=int(m[3]))
        elif kernels and (m := _USED.search(line)):
            kernels[-1]["registers"] = int(m[1])
            if s := _SMEM.search(line):
                kernels[-1]["shared_bytes"] = int(s[1])
    for entry, name in zip(kernels, demangle([k["kernel"] for k in kernels])):
        entry["kernel"] = name
    return kernels


_LINE_COMMENT = re.compile(r"//[^\n]*")


def stream_notes(source: str) -> list[str]:
    """A note for each ``<<<...>>>`` launch without a stream argument: it runs on the default stream, not on the
    ``stream`` the kernel is given (aotbench's current cupy stream, MindSpore's own), so it is not ordered with
    the framework's work and cannot be captured into a CUDA graph."""
    text = _LINE_COMMENT.sub("", source)
    notes = []
    for match in re.finditer(r"<<<", text):
        end = text.find(">>>", match.end())
        if end < 0:
            break
        depth, commas = 0, 0
        for ch in text[match.end():end]:
            depth += ch in "([{"
            depth -= ch in ")]}"
            commas += ch == "," and depth == 0
        if commas < 3:
            line = text.count("\n", 0, match.start()) + 1
            notes.append(f"line {line}: this launch has no stream argument, so it runs on the default stream, not "
                         "the stream the kernel is given; launch with <<<grid, block, shared_bytes, "
                         "static_cast<cudaStream_t>(stream)>>>")
    return notes


def short_kernel_name(name: str) -> str:
    """A kernel as a person names it: ``void (anonymous namespace)::row_sums<true>(float const*, ...)`` ->
    ``row_sums<true>``."""
    name = name.replace("(anonymous namespace)::", "").removeprefix("void ").strip()
    return name.split("(", 1)[0] or name


def demangle(names: list[str]) -> list[str]:
    """C++ names as written (``addk(float const*, ...)``) via ``c++filt`` when it exists; else unchanged."""
    tool = shutil.which("c++filt")
    if not names or tool is None:
        return names
    try:
        out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return names
    lines = out.stdout.splitlines()
    return lines if out.returncode == 0 and len(lines) == len(names) else names
