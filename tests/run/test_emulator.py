"""The CUDA emulator as a user meets it: ``emulate=`` on Custom, what an emulated op is and says, the build
(translated launches, line numbers, its own cache entry, refusals), the errors a GPU would give, the order threads
run in, the CPU threads blocks are spread over, and two emulated libraries in one process. The learner's corpus of
kernels is in test_emulator_corpus.py; the emulator's memcheck, racecheck and synccheck in
tests/tools/test_emulator_checks.py."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.run import emulation
from aotbench.run.gpu_availability import gpu_unavailable_reason

SAME = lambda x: x  # noqa: E731 - the output rule of every one-input kernel here

PRELUDE = """\
#include <cstdint>
#include "custom_aot_extra.h"
"""


def source(tmp_path: Path, text: str, name: str = "k.cu") -> Path:
    path = tmp_path / name
    path.write_text(PRELUDE + text)
    return path


def emulated(path: Path, func: str, out_shape=SAME, out_dtype=np.float32, **kw) -> aotbench.Op:
    return aotbench.Custom(f"{path}:{func}", out_shape, out_dtype, emulate=True, **kw)


SCALE = """\
__global__ void scale(const float *x, float *y, float a, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = a * x[i];
}

extern "C" int Scale(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                     void *extra) {
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; d++) n *= shapes[0][d];
  const float a = static_cast<AotExtra *>(extra)->Attr<float>("a");
  if (n == 0) return 0;
  scale<<<static_cast<unsigned>((n + 127) / 128), 128, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float *>(params[0]), static_cast<float *>(params[1]), a, n);
  return 0;
}
"""


def test_emulate_true_runs_a_cu_source_on_numpy_arrays_and_says_so(tmp_path, rng):
    op = emulated(source(tmp_path, SCALE), "Scale", attrs={"a": 1.75})
    assert op.emulated and op.device is emulation.EMULATED
    assert "[gpu, emulated on the CPU]" in repr(op)
    for n in (1, 127, 128, 1000, 4099):
        x = rng.standard_normal(n).astype(np.float32)
        out = op(x)
        assert isinstance(out, np.ndarray)
        np.testing.assert_array_equal(out, np.float32(1.75) * x)
    # what ran: g++ with the emulator's header, on the translated source, never nvcc
    assert Path(op.command[0]).name.startswith(("g++", "c++"))
    assert "-include" in op.command and "aotbench_cuda_emu.h" in op.command
    assert any(a.endswith(".emu.cc") for a in op.command) and not any("nvcc" in a for a in op.command)


def test_an_emulated_build_has_its_own_cache_entry(tmp_path):
    path = source(tmp_path, SCALE)
    first = emulated(path, "Scale", attrs={"a": 2.0})
    again = emulated(path, "Scale", attrs={"a": 2.0})
    assert again.artifact.cache_hit and again.artifact.path == first.artifact.path
    try:  # an nvcc build of the same source is another library
        gpu = aotbench.Custom(f"{path}:Scale", SAME, np.float32, attrs={"a": 2.0}, emulate=False)
    except aotbench.ToolchainNotFoundError:
        return
    assert not gpu.emulated and gpu.artifact.path != first.artifact.path


def test_emulate_none_uses_the_emulator_where_no_gpu_is_usable_and_warns_once(tmp_path, rng):
    if gpu_unavailable_reason() is None:
        pytest.skip("a usable GPU is here: emulate=None runs on it")
    path = source(tmp_path, SCALE)
    with pytest.warns(aotbench.EmulationWarning, match="emulator") as caught:
        op = aotbench.Custom(f"{path}:Scale", SAME, np.float32, attrs={"a": 3.0})
    assert len([w for w in caught if issubclass(w.category, aotbench.EmulationWarning)]) == 1
    assert op.emulated
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # calls say nothing more
        x = rng.standard_normal(33).astype(np.float32)
        np.testing.assert_array_equal(op(x), np.float32(3.0) * x)
        emulated(path, "Scale", attrs={"a": 3.0})  # emulate=True asks for it: no warning


def test_emulate_false_keeps_the_gpu_build_and_its_refusal(tmp_path, rng):
    if gpu_unavailable_reason() is None:
        pytest.skip("a usable GPU is here")
    try:
        op = aotbench.Custom(f"{source(tmp_path, SCALE)}:Scale", SAME, np.float32, attrs={"a": 1.0}, emulate=False)
    except aotbench.ToolchainNotFoundError:
        pytest.skip("no nvcc")
    assert not op.emulated and Path(op.command[0]).name == "nvcc"
    with pytest.raises(aotbench.DeviceUnavailableError, match="cannot run here"):
        op(rng.standard_normal(4).astype(np.float32))


def test_emulate_is_checked_before_anything_is_built(tmp_path):
    path = source(tmp_path, SCALE)
    with pytest.raises(aotbench.ArgumentTypeError, match="emulate must be True, False or None"):
        aotbench.Custom(f"{path}:Scale", SAME, np.float32, emulate="yes")
    cpu = tmp_path / "k.cc"
    cpu.write_text("")
    with pytest.raises(aotbench.ArgumentValueError, match="for gpu ops"):
        aotbench.Custom(f"{cpu}:K", SAME, np.float32, emulate=True)
    with pytest.raises(aotbench.ArgumentValueError, match="emulate=True"):
        aotbench.Custom(f"{path}:Scale", SAME, np.float32, isolate=True)


def test_an_emulated_op_can_be_isolated(tmp_path, rng):
    op = emulated(source(tmp_path, SCALE), "Scale", attrs={"a": -0.5}, isolate=True)
    assert op.emulated and op.device is emulation.EMULATED
    x = rng.standard_normal(1001).astype(np.float32)
    np.testing.assert_array_equal(op(x), np.float32(-0.5) * x)
    assert op.worker_pid is not None


def test_timings_and_tables_say_emulated(tmp_path, rng):
    op = emulated(source(tmp_path, SCALE), "Scale", attrs={"a": 2.0})
    x = rng.standard_normal(5000).astype(np.float32)
    timing = op.bench(x, budget_ms=20)
    assert timing.device == "emulated" and "emulated on the CPU" in str(timing)
    table = str(aotbench.compare({"numpy": lambda x: 2 * x, "kernel": op}, x, budget_ms=20))
    assert "kernel (emulated on the CPU)" in table and "numpy (emulated" not in table


# -- the build: translation, lines, refusals --------------------------------------------------------------------
def test_a_compile_error_names_the_users_line(tmp_path):
    text = SCALE.replace("if (i < n) y[i] = a * x[i];", "if (i < n) y[i] = a * x[i]  // missing semicolon")
    path = source(tmp_path, text)
    with pytest.raises(aotbench.CompileError) as err:
        emulated(path, "Scale", attrs={"a": 1.0})
    line = PRELUDE.count("\n") + text.splitlines().index(next(s for s in text.splitlines() if "missing" in s)) + 1
    assert any(d.file.endswith("k.cu") and d.line in (line, line + 1) for d in err.value.errors), err.value.errors


def test_inline_ptx_is_refused_at_its_line(tmp_path):
    text = SCALE.replace("if (i < n) y[i] = a * x[i];", 'if (i < n) y[i] = a * x[i];\n  asm volatile("membar.gl;");')
    with pytest.raises(aotbench.CompileError, match="inline PTX") as err:
        emulated(source(tmp_path, text), "Scale", attrs={"a": 1.0})
    (diag,) = err.value.errors
    assert diag.line == PRELUDE.count("\n") + 4


def test_tensor_cores_are_a_compile_error_that_names_them(tmp_path):
    with pytest.raises(aotbench.CompileError, match="wmma"):
        emulated(source(tmp_path, "#include <mma.h>\n" + SCALE), "Scale", attrs={"a": 1.0})


# -- errors a GPU would give ------------------------------------------------------------------------------------
LAUNCHES = """\
__global__ void fill(float *y, int64_t n) {
  extern __shared__ float scratch[];
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  scratch[threadIdx.x] = 1.0f;
  if (i < n) y[i] = scratch[threadIdx.x] + threadIdx.x;
}

extern "C" int Fill(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                    void *extra) {
  auto *ex = static_cast<AotExtra *>(extra);
  const int threads = static_cast<int>(ex->Attr<int64_t>("threads"));
  const int smem = static_cast<int>(ex->Attr<int64_t>("smem"));
  if (ex->Attr<bool>("opt_in"))
    cudaFuncSetAttribute(fill, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  fill<<<1, threads, smem, static_cast<cudaStream_t>(stream)>>>(static_cast<float *>(params[1]), shapes[0][0]);
  if (ex->Attr<bool>("check")) {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return 100 + static_cast<int>(e);
  }
  return 0;
}
"""


def launches(tmp_path, **attrs):
    base = {"threads": 64, "smem": 64 * 4, "opt_in": False, "check": False}
    return emulated(source(tmp_path, LAUNCHES), "Fill", attrs={**base, **attrs})


def test_a_launch_a_gpu_refuses_gives_the_gpus_error(tmp_path, rng):
    x = rng.standard_normal(64).astype(np.float32)
    np.testing.assert_array_equal(launches(tmp_path)(x), 1.0 + np.arange(64, dtype=np.float32))
    with pytest.raises(aotbench.EmulatorError, match="cudaErrorInvalidConfiguration") as err:
        launches(tmp_path, threads=2048, smem=2048 * 4)(x)
    assert "2048 threads" in str(err.value) and "at most 1024" in str(err.value) and "k.cu" in str(err.value)
    assert isinstance(err.value, aotbench.KernelError) and err.value.error == "cudaErrorInvalidConfiguration"
    # a host function that asks gets the same code a GPU gives (9) and returns its own error
    with pytest.raises(aotbench.KernelError, match="returned 109"):
        launches(tmp_path, threads=2048, smem=2048 * 4, check=True)(x)


def test_dynamic_shared_memory_over_48_kib_needs_the_opt_in(tmp_path, rng):
    x = rng.standard_normal(64).astype(np.float32)
    with pytest.raises(aotbench.EmulatorError, match="cudaErrorInvalidValue") as err:
        launches(tmp_path, smem=64 * 1024)(x)
    assert "cudaFuncSetAttribute" in str(err.value)
    np.testing.assert_array_equal(launches(tmp_path, smem=64 * 1024, opt_in=True)(x),
                                  1.0 + np.arange(64, dtype=np.float32))
    with pytest.raises(aotbench.EmulatorError, match="cudaErrorInvalidValue"):
        launches(tmp_path, smem=300 * 1024, opt_in=True)(x)  # past what any GPU of its kind offers


DIVERGENT = """\
__global__ void halves(float *y) {
  const unsigned t = threadIdx.x;
  if (t < 64) {
    y[t] = 1.0f;
    __syncthreads();
  } else {
    y[t] = 2.0f;
    __syncthreads();
  }
}

extern "C" int Halves(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                      void *extra) {
  halves<<<3, 128>>>(static_cast<float *>(params[1]));
  return 0;
}
"""


def test_a_barrier_not_reached_by_every_thread_names_both_lines_and_the_block(tmp_path, rng):
    op = emulated(source(tmp_path, DIVERGENT), "Halves")
    x = rng.standard_normal(128).astype(np.float32)
    with pytest.raises(aotbench.EmulatorError, match="cudaErrorLaunchFailure") as err:
        op(x)
    message = str(err.value)
    first, second = PRELUDE.count("\n") + 5, PRELUDE.count("\n") + 8
    assert f"k.cu:{first}" in message and f"k.cu:{second}" in message, message
    assert re.search(r"block \(\d,0,0\)", message) and "halves" in message
    # nothing sticky: the op's next call of a healthy kernel in the same library runs
    assert emulated(source(tmp_path, SCALE, "ok.cu"), "Scale", attrs={"a": 1.0})(x).shape == x.shape


# -- the order threads run in, and the CPU threads ------------------------------------------------------------------
ORDER = """\
__global__ void order(int *first_lane_rank, int *counter) {
  const unsigned t = threadIdx.x;
  if (t % 32 == 0) first_lane_rank[t / 32] = atomicAdd(counter, 1);
}

extern "C" int Order(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                     void *extra) {
  int *rank = static_cast<int *>(params[1]);
  int *counter = rank + 32;
  *counter = 0;
  order<<<1, 1024>>>(rank, counter);
  return 0;
}
"""


def test_warps_start_in_a_seeded_order(tmp_path):
    op = emulated(source(tmp_path, ORDER), "Order", out_shape=lambda x: (33,), out_dtype=np.int32)
    x = np.zeros(1, np.int32)
    orders = {}
    for seed in (0, 1, 2, 3):
        emulation.configure(op.library, seed=seed)
        orders[seed] = tuple(op(x)[:32])
        assert sorted(orders[seed]) == list(range(32))  # every warp ran once
        emulation.configure(op.library, seed=seed)
        assert tuple(op(x)[:32]) == orders[seed]  # the same seed, the same order
    assert orders[0] == tuple(range(32))  # seed 0: index order
    assert len({orders[s] for s in (1, 2, 3)}) > 1 and all(orders[s] != orders[0] for s in (1, 2, 3))


REDUCE = """\
__global__ void block_sums(const float *x, float *out, int64_t n) {
  __shared__ float s[256];
  const unsigned t = threadIdx.x;
  const int64_t i = blockIdx.x * 256 + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (unsigned k = 128; k > 0; k >>= 1) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

extern "C" int BlockSums(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                         void *stream, void *extra) {
  const int64_t n = shapes[0][0];
  block_sums<<<static_cast<unsigned>((n + 255) / 256), 256>>>(static_cast<const float *>(params[0]),
                                                             static_cast<float *>(params[1]), n);
  return 0;
}
"""


def test_blocks_on_one_or_several_cpu_threads_give_the_same_sums(tmp_path, rng):
    op = emulated(source(tmp_path, REDUCE), "BlockSums", out_shape=lambda x: (-(-x[0] // 256),))
    x = rng.integers(-1000, 1000, 256 * 37 + 11).astype(np.float32)  # integers: every order sums exactly
    want = np.add.reduceat(x, np.arange(0, x.size, 256)).astype(np.float32)
    for threads in (1, 2, 3):
        emulation.configure(op.library, threads=threads)
        np.testing.assert_array_equal(op(x), want)


def test_two_emulated_libraries_keep_their_own_shared_memory(tmp_path, rng):
    """A template kernel's __shared__ array is a static local: GCC would bind it to one copy across libraries
    (STB_GNU_UNIQUE); the emulator's builds keep one per library."""
    template = """\
template <int K>
__global__ void mul(const float *x, float *y, int64_t n) {
  __shared__ float s[128];
  const unsigned t = threadIdx.x;
  const int64_t i = blockIdx.x * 128 + t;
  s[t] = i < n ? x[i] * K : 0.0f;
  __syncthreads();
  if (i < n) y[i] = s[(t + 1) % 128] * 0.0f + s[t];
}

extern "C" int Mul(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                   void *extra) {
  const int64_t n = shapes[0][0];
  mul<FACTOR><<<static_cast<unsigned>((n + 127) / 128), 128>>>(static_cast<const float *>(params[0]),
                                                            static_cast<float *>(params[1]), n);
  return 0;
}
"""
    two = emulated(source(tmp_path, "#define FACTOR 2\n" + template, "two.cu"), "Mul")
    three = emulated(source(tmp_path, "#define FACTOR 3\n" + template, "three.cu"), "Mul")
    x = rng.integers(-50, 50, 1000).astype(np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(two(x), 2 * x)
        np.testing.assert_array_equal(three(x), 3 * x)


GRID = """\
__global__ void shape(int *out) {
  const unsigned i = (blockIdx.x * blockDim.x + threadIdx.x) + gridDim.x * blockDim.x * threadIdx.y;
  out[i] = static_cast<int>(gridDim.x * 1000 + blockDim.x * 10 + blockDim.y);
}

extern "C" int Shape(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                     void *extra) {
  const unsigned per = static_cast<unsigned>(static_cast<AotExtra *>(extra)->Attr<int64_t>("per"));
  const unsigned n = static_cast<unsigned>(shapes[0][0]);
  shape<<<n / per / 2, dim3(per, 2)>>>(static_cast<int *>(params[1]));
  return 0;
}
"""


@pytest.mark.parametrize("per", [4, 8])
def test_every_launch_sees_its_own_grid_and_block(tmp_path, per):
    """A launch's builtins are never an earlier launch's (its state may reuse the address of the last one's)."""
    op = emulated(source(tmp_path, GRID), "Shape", out_dtype=np.int32, attrs={"per": per})
    for n in (per * 2, per * 6, per * 2 * 7, per * 4):
        got = op(np.zeros(n, np.int32))
        assert (got == (n // per // 2) * 1000 + per * 10 + 2).all(), (n, got)


def test_check_and_sweep_work_on_an_emulated_op_as_on_a_cpu_op(tmp_path, rng):
    op = emulated(source(tmp_path, SCALE), "Scale", attrs={"a": 2.5})
    x = rng.standard_normal(300).astype(np.float32)
    report = op.check(x, reference=lambda x: np.float32(2.5) * x)
    assert report.ok, report
    sweep = aotbench.sweep(op, [1 << 10, 1 << 12], reference=lambda x: np.float32(2.5) * x, budget_ms=10)
    assert "emulated on the CPU" in sweep.label and "host memory" in sweep.roofline_source
    assert all(p.timing.device == "emulated" for p in sweep.points)


THROWS = """\
#include <stdexcept>
__global__ void thrower(const float *x, float *y, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n && x[i] < 0) throw std::runtime_error("negative input");
  if (i < n) y[i] = x[i];
}

__global__ void chatty(int rounds) {
  for (int k = 0; k < rounds; k++) printf("thread %d of block %d says %d\\n", threadIdx.x, blockIdx.x, k);
}

extern "C" int Throws(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                      void *extra) {
  const int64_t n = shapes[0][0];
  thrower<<<static_cast<unsigned>((n + 63) / 64), 64>>>(static_cast<const float *>(params[0]),
                                                        static_cast<float *>(params[1]), n);
  return 0;
}

extern "C" int Chatty(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                      void *extra) {
  chatty<<<4, 64>>>(static_cast<int>(shapes[0][0]));
  return 0;
}
"""


def test_an_exception_in_device_code_stops_the_kernel_not_the_process(tmp_path, rng):
    op = emulated(source(tmp_path, THROWS), "Throws")
    x = np.abs(rng.standard_normal(500).astype(np.float32)) + 0.5
    np.testing.assert_array_equal(op(x), x)
    x[123] = -1.0
    with pytest.raises(aotbench.EmulatorError, match="negative input") as err:
        op(x)
    assert "cannot throw" in str(err.value) and "(59,0,0)" in str(err.value)  # element 123: block 1, thread 59


def test_device_printf_is_capped_like_a_gpus_buffer(tmp_path, capfd):
    op = emulated(source(tmp_path, THROWS), "Chatty", out_dtype=np.int32, guard=False)
    op(np.zeros(2, np.int32))
    out = capfd.readouterr().out
    assert out.count("says") == 4 * 64 * 2 and "thread 0 of block 0 says 0" in out
    op(np.zeros(3000, np.int32))  # 768000 lines, ~28 MB: kept to 1 MiB
    out = capfd.readouterr().out
    assert 1 << 20 <= len(out) < (1 << 20) + 4096 and "stopped after 1 MiB" in out


def test_two_python_threads_get_their_own_reports(tmp_path, rng):
    """An error of one thread's call is never reported to another thread's call of the same op."""
    import threading

    op = emulated(source(tmp_path, THROWS), "Throws")
    good = np.abs(rng.standard_normal(4000).astype(np.float32)) + 0.5
    bad = good.copy()
    bad[7] = -1.0
    results: dict[str, list] = {"good": [], "bad": []}

    def run(name: str, x: np.ndarray) -> None:
        for _ in range(15):
            try:
                results[name].append(bool(np.array_equal(op(x), x)))
            except aotbench.EmulatorError:
                results[name].append("error")

    threads = [threading.Thread(target=run, args=("good", good)), threading.Thread(target=run, args=("bad", bad))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["good"] == [True] * 15 and results["bad"] == ["error"] * 15, results


def test_a_kernel_whose_locals_overflow_a_fiber_stack_is_a_compile_error(tmp_path):
    big = SCALE.replace("if (i < n) y[i] = a * x[i];",
                        "volatile float local[200000];\n  local[i % 200000] = a;\n  if (i < n) y[i] = local[0] * x[i];")
    with pytest.raises(aotbench.CompileError, match="frame size"):
        emulated(source(tmp_path, big), "Scale", attrs={"a": 1.0})
