"""The gpu target's build side, with the real nvcc and no GPU: the documented command adapted to the toolkit,
the architecture choice and its reason, ptxas's resource report, host-side Init/InferShape, and the clean
error a call gives where no device is usable."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.build import nvcc
from aotbench.build.compile import build
from aotbench.run.gpu_availability import gpu_unavailable_reason
from aotbench.notebook.display import op_text

pytestmark = pytest.mark.nvcc
KERNEL = Path(__file__).resolve().parents[1] / "support" / "kernels" / "nvcc_axpy.cu"


@pytest.fixture(scope="module")
def axpy():
    return aotbench.Custom(f"{KERNEL}:Axpy", None, np.float32, attrs={"a": 2.5, "transpose": False}, emulate=False)


def test_command_is_the_documented_cuda_command_with_adapted_archs(axpy):
    """--shared -Xcompiler -fPIC -O3, the -gencode pairs where the documented one stood, the documented tail."""
    argv = axpy.command
    assert Path(argv[0]).name == "nvcc"
    assert argv[1:5] == ["--shared", "-Xcompiler", "-fPIC", "-O3"]
    tail = argv[argv.index("--use_fast_math"):]
    assert tail[:3] == ["--use_fast_math", "--expt-relaxed-constexpr", "-D_GLIBCXX_USE_CXX11_ABI=0"]
    assert tail[3:5] == [f"-I{aotbench.get_include()}", f"-I{KERNEL.parent}"]
    assert tail[5] == "-o" and tail[6] == str(axpy.artifact.path) and tail[7] == str(KERNEL)
    # then aotbench's launch-error probe, pre-included; the library exports it
    assert tail[8:] == ["--pre-include", str(Path(aotbench.get_include()) / nvcc.PROBE_HEADER)]
    assert axpy.library.cuda_probe != 0
    gencode = argv[5:argv.index("--use_fast_math")]
    assert gencode[0::2] == ["-gencode"] * (len(gencode) // 2)
    supported = nvcc.supported_archs(argv[0])
    for pair in gencode[1::2]:
        assert int(pair.split(",")[0].removeprefix("arch=compute_")) in supported


def test_arch_choice_without_a_gpu_drops_rejected_archs_and_keeps_ptx(axpy):
    """No device: every documented arch the toolkit accepts, the newest with PTX; rejected ones are named."""
    if nvcc.detect_device_arch()[0] is not None:
        pytest.skip("a GPU is present: the choice adds its architecture instead")
    supported = nvcc.supported_archs(axpy.command[0])
    kept = [a for a in nvcc.DOCUMENTED_ARCHS if a in supported]
    reason = axpy.artifact.manifest["arch_reason"]
    assert "no GPU detected" in reason
    for a in nvcc.DOCUMENTED_ARCHS:
        assert (f"dropped compute_{a}" in reason) == (a not in supported)
    assert f"arch=compute_{kept[-1]},code=[sm_{kept[-1]},compute_{kept[-1]}]" in axpy.command
    # The library really holds that machine code and PTX (cuobjdump lists both), when the tool is here.
    cuobjdump = shutil.which("cuobjdump") or str(Path(axpy.command[0]).with_name("cuobjdump"))
    if Path(cuobjdump).exists():
        listing = subprocess.run([cuobjdump, "--list-elf", "--list-ptx", str(axpy.artifact.path)],
                                 capture_output=True, text=True, check=False).stdout
        assert f"sm_{kept[-1]}" in listing


@pytest.mark.slow
def test_explicit_arch_override_is_used_and_recorded():
    """arch="sm_90" builds exactly that (machine code + PTX) and says so in the manifest; a bad arch is refused."""
    op = aotbench.Custom(f"{KERNEL}:Axpy", None, np.float32, attrs={"a": 1.0, "transpose": False}, emulate=False, arch="sm_90")
    gencode = op.command[5:op.command.index("--use_fast_math")]
    assert gencode == ["-gencode", "arch=compute_90,code=[sm_90,compute_90]"]
    assert "arch='sm_90' given" in op.artifact.manifest["arch_reason"]
    assert any(r["arch"] == "sm_90" for r in op.resources)
    with pytest.raises(aotbench.ArgumentError, match="this nvcc supports"):
        aotbench.Custom(f"{KERNEL}:Axpy", None, np.float32, attrs={"a": 1.0, "transpose": False}, emulate=False, arch="sm_10")
    with pytest.raises(aotbench.ArgumentError, match="sm_90"):
        aotbench.Custom(f"{KERNEL}:Axpy", None, np.float32, attrs={"a": 1.0, "transpose": False}, emulate=False, arch="hopper")


def test_resource_report_names_the_kernel_and_its_shared_memory(axpy):
    """ptxas's report is parsed per kernel: demangled name, registers, the 1 KiB shared tile, no spills."""
    (report,) = axpy.resources
    assert report["kernel"].startswith("axpy_kernel(")
    assert report["registers"] > 0 and report["shared_bytes"] == 256 * 4
    assert report["spill_stores"] == report["spill_loads"] == 0
    assert "axpy_kernel(" in op_text(axpy) and "1024 B shared" in op_text(axpy)


def test_resource_usage_parser_on_a_spilling_report():
    """The parser reads stack, spills and shared memory from ptxas's wording."""
    log = ("ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90'\n"
           "ptxas info    : Function properties for _Z3fooPf\n"
           "    48 bytes stack frame, 40 bytes spill stores, 36 bytes spill loads\n"
           "ptxas info    : Used 255 registers, used 1 barriers, 4096 bytes smem, 360 bytes cmem[0]\n")
    (r,) = nvcc.resource_usage(log)
    assert (r["arch"], r["registers"], r["shared_bytes"]) == ("sm_90", 255, 4096)
    assert (r["stack_bytes"], r["spill_stores"], r["spill_loads"]) == (48, 40, 36)
    assert r["kernel"] in ("foo(float*)", "_Z3fooPf")


def test_init_and_infer_shape_run_on_the_host(axpy, rng):
    """A .cu library loads without a GPU; its InferShape and Init run on the host like the cpu target's."""
    rows, cols = (int(v) for v in rng.integers(1, 50, 2))
    assert axpy.infer_shape((rows, cols), (rows, cols)) == (rows, cols)
    assert axpy.with_attrs(transpose=True).infer_shape((rows, cols), (rows, cols)) == (cols, rows)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    info = axpy.plan_info(x, x)
    assert info["outputs"] == [((rows, cols), np.dtype(np.float32))]
    assert info["workspaces"][0]["requested"] == rows * cols * 4


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a usable GPU is present")
def test_calling_without_a_device_is_a_clear_error(axpy, rng):
    """No usable device: DeviceUnavailableError (a RuntimeError) saying which piece is missing and what to do."""
    x = rng.standard_normal(8).astype(np.float32)
    with pytest.raises(aotbench.DeviceUnavailableError) as info:
        axpy(x, x)
    assert isinstance(info.value, RuntimeError)
    message = str(info.value)
    assert gpu_unavailable_reason() in message and "Axpy" in message and "NVIDIA GPU" in message


def test_cuda_source_needs_the_gpu_target():
    with pytest.raises(aotbench.ArgumentError, match="target='gpu'"):
        aotbench.Custom(f"{KERNEL}:Axpy", None, np.float32, target="cpu")


def test_missing_nvcc_is_a_toolchain_error(monkeypatch, tmp_path):
    """With no nvcc anywhere it looks, building a .cu raises ToolchainNotFoundError with the pip hint. (This
    machine has a CUDA toolkit in /usr/local/cuda, so "nowhere" is simulated by narrowing the search list.)"""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(nvcc, "candidates", lambda: [("PATH", tmp_path / "nvcc")])
    with pytest.raises(aotbench.ToolchainNotFoundError, match="nvidia-cuda-nvcc"):
        build(KERNEL)


@pytest.mark.slow
def test_the_probe_is_not_a_user_flag():
    """A rebuild with another flag names only that flag as the change, not the pre-included probe."""
    from aotbench.build.compile import describe_change

    a = aotbench.Custom(f"{KERNEL}:Axpy", None, np.float32, attrs={"a": 1.0, "transpose": False}, emulate=False)
    b = aotbench.Custom(f"{KERNEL}:Axpy", None, np.float32, attrs={"a": 1.0, "transpose": False}, emulate=False,
                        flags=["-lineinfo"])
    assert describe_change(a.artifact, b.artifact) == ["flags changed: [] -> ['-lineinfo']"]


@pytest.mark.parametrize("example, name, kernels", [
    ("saxpy.cu", "Saxpy", {"saxpy4", "saxpy_tail"}),
    ("add_reduce.cu", "AddReduce", {"row_sums<true>", "row_sums<false>", "column_partials", "add_partials"}),
])
@pytest.mark.slow
def test_cuda_examples_build_without_warnings_or_spills(example, name, kernels):
    from aotbench.run.gpu import kernel_names

    attrs = {"a": 2.0} if name == "Saxpy" else {"axis": 0, "keep_dim": False}
    op = aotbench.Custom(str(aotbench.examples_dir() / example) + f":{name}",
                         (lambda s0, s1: s0) if name == "Saxpy" else None, np.float32, attrs=attrs, emulate=False)
    assert "warning" not in op.log.lower()
    assert set(kernel_names(op)) == kernels
    assert all(r["spill_stores"] == 0 and r["registers"] <= 64 for r in op.resources)


@pytest.mark.slow
def test_fused_example_asks_for_its_workspace_in_bytes_and_none_for_unknown_dims(rng):
    """AddReduce's Init for axis=0: one partial row of floats per chunk of rows, where the rows are cut into as
    many chunks (at most 32, at most one per row) as give the first pass about 2048 blocks of 256 columns; so a
    16384^2 input has 32 partial rows, few for the second pass to add. Nothing for axis=1 or -1 dims."""
    op = aotbench.Custom(str(aotbench.examples_dir() / "add_reduce.cu") + ":AddReduce", None, np.float32,
                         attrs={"axis": 0, "keep_dim": True}, emulate=False)

    def partial_rows(rows: int, cols: int) -> int:
        chunks = max(min(-(-2048 // -(-cols // 256)), 32, rows), 1)
        per = -(-rows // chunks)
        return -(-rows // per)

    def requested(rows: int, cols: int) -> int:
        big = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (rows, cols), (0, 0))
        return op.plan_info(big, big)["workspaces"][0]["requested"]

    assert requested(16384, 16384) == 32 * 16384 * 4 and requested(8192, 8192) == 32 * 8192 * 4
    assert requested(5, 100_000) == 5 * 100_000 * 4  # wide: one chunk per row
    rows, cols = int(rng.integers(1, 500)), int(rng.integers(1, 500))
    x = np.zeros((rows, cols), np.float32)
    assert op.plan_info(x, x)["workspaces"][0]["requested"] == partial_rows(rows, cols) * cols * 4
    assert op.infer_shape((rows, cols), (rows, cols)) == (1, cols)
    assert op.with_attrs(axis=1).plan_info(x, x)["workspaces"][0]["requested"] == 0
    assert op.with_attrs(axis=1, keep_dim=False).infer_shape((rows, None), (rows, None)) == (rows,)


def test_short_kernel_names():
    assert nvcc.short_kernel_name("void (anonymous namespace)::row_sums<true>(float const*, long)") == "row_sums<true>"
    assert nvcc.short_kernel_name("axpy_kernel(float, float const*)") == "axpy_kernel"


@pytest.mark.slow
def test_nvcc_compile_errors_are_parsed_with_their_lines(tmp_path):
    """nvcc's front end writes ``file(line): error: ...``: each becomes a diagnostic with its line."""
    source = tmp_path / "broken kernel.cu"
    source.write_text('#include <cstdint>\nextern "C" int F(void *extra) {\n'
                      '  const float a = static_cast<AotExtra *>(extra)->Attr<float>("a");\n  return 0;\n}\n')
    with pytest.raises(aotbench.CompileError) as info:
        aotbench.Custom(f"{source}:F", (1,), np.float32, emulate=False)
    errors = info.value.errors
    assert errors and all(d.line == 3 and Path(d.file).name == "broken kernel.cu" for d in errors)
    assert 'identifier "AotExtra" is undefined' in errors[0].message
    assert f"{source}:3: error: identifier" in str(info.value)


@pytest.mark.slow
def test_a_launch_without_the_stream_is_noted(tmp_path):
    """<<<grid, block>>> runs on the default stream, not the one the kernel is given: the build says so, with the
    line; launches that pass the stream (or sit in comments) are not noted."""
    source = tmp_path / "streams.cu"
    source.write_text(
        '#include <cstdint>\n__global__ void k(float *p) { p[threadIdx.x] = 1.0f; }\n'
        'extern "C" int F(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,\n'
        '                 void *stream, void *extra) {\n'
        '  float *p = static_cast<float *>(params[0]);\n'
        '  k<<<(ndims[0] + 1, 1), 32>>>(p);  // no stream\n'
        '  k<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>(p);\n'
        '  // k<<<1, 32>>>(p);  a comment\n'
        '  return 0;\n}\n')
    op = aotbench.Custom(f"{source}:F", (32,), np.float32, emulate=False)
    (note,) = op.artifact.manifest["notes"]
    assert note.startswith("line 6: this launch has no stream argument")
    assert "line 6: this launch" in op_text(op)
    assert nvcc.stream_notes("k<<<g, b, 0, s>>>(x); k<<<dim3(1, 2), 32, 0, s>>>();") == []


def _arch_choice_with_fake_driver(tmp_path, **env) -> dict:
    """choose_archs in a child process whose libcuda.so.1 is tests/support/kernels/fake_libcuda.c (no nvidia-smi on
    PATH): what a GPU machine with the driver but without nvidia-smi, as in many containers, gets."""
    import json
    import os
    import sys

    lib = tmp_path / "libcuda.so.1"
    if not lib.exists():
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(KERNEL.with_name("fake_libcuda.c"))],
                       check=True)
    code = ("import json; from aotbench.build import nvcc; c = nvcc.choose_archs(nvcc.find_nvcc()); "
            "print(json.dumps({'gencode': c.gencode, 'reason': c.reason}))")
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_CUDA", "CUDA_VISIBLE"))}
    nvcc_dir = str(Path(nvcc.find_nvcc()).parent)
    child_env.update(LD_LIBRARY_PATH=str(tmp_path), PATH=f"{nvcc_dir}:/usr/bin:/bin", **env)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env, check=True)
    return json.loads(out.stdout)


@pytest.mark.slow
def test_the_architecture_is_the_cuda_drivers_device_0_even_without_nvidia_smi(tmp_path):
    """The arch comes from the driver (device 0 as CUDA orders them, CUDA_VISIBLE_DEVICES applied), so a GPU
    machine without nvidia-smi still gets its own machine code, not only PTX its driver might refuse."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the fake driver")
    choice = _arch_choice_with_fake_driver(tmp_path, FAKE_CUDA_CC="86", CUDA_VISIBLE_DEVICES="1")
    assert "arch=compute_86,code=[sm_86,compute_86]" in choice["gencode"]
    assert "CUDA device 0 (CUDA_VISIBLE_DEVICES=1) has compute capability 8.6" in choice["reason"]
    none = _arch_choice_with_fake_driver(tmp_path, FAKE_CUDA_DEVICES="0")
    assert "the CUDA driver reports no device" in none["reason"] and "nvidia-smi not found" in none["reason"]
    assert not any("sm_86" in flag for flag in none["gencode"])


def test_an_imported_cupy_names_the_device_calls_will_use(monkeypatch):
    """With cupy imported, its current device decides (``with cupy.cuda.Device(1):`` builds for GPU 1)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
    import host_cupy

    host_cupy.reset()
    monkeypatch.setitem(sys.modules, "cupy", host_cupy)
    host_cupy.compute_capability[0] = "120"
    with host_cupy.cuda.Device(1):
        arch, reason = nvcc.detect_device_arch()
    assert arch == 120 and reason == "cupy's current device, GPU 1, has compute capability 12.0"
    host_cupy.reset()
