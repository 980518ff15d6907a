"""aotbench.tools.hotloop: the hottest loop found in real kernels' disassembly from samples placed on its
instructions, llvm-mca's prediction for the loops g++ makes (-O0, -O3 -march=native, AVX2 and FMA, AVX-512,
gathers), and the iterations counted with an execute breakpoint, end to end."""

from __future__ import annotations

import html
import os
import re
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.errors import ArgumentTypeError, ArgumentValueError
from aotbench.native import perf_events
from aotbench.tools import hotloop
from aotbench.tools.codeview import host_asm
from aotbench.tools.codeview.listing import Block, Function

KERNELS = Path(__file__).resolve().parents[1] / "support" / "kernels"

SOURCE = r"""// Loops for tests/tools/test_hotloop.py; every kernel reads float32 inputs of any shape.
#include <cstdint>

static int64_t elements(int *ndims, int64_t **shapes, int k) {
  int64_t n = 1;
  for (int d = 0; d < ndims[k]; d++) n *= shapes[k][d];
  return n;
}

// out = 1.5 * x + y
extern "C" int Saxpy(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                     void *extra) {
  const int64_t n = elements(ndims, shapes, 0);
  const float *x = static_cast<const float *>(params[0]), *y = static_cast<const float *>(params[1]);
  float *out = static_cast<float *>(params[2]);
  for (int64_t i = 0; i < n; i++) out[i] = 1.5f * x[i] + y[i];  // SAXPY_LOOP
  return 0;
}

// out[0] = sum x * y, in order (no -ffast-math: every add waits for the one before)
extern "C" int Dot(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                   void *extra) {
  const int64_t n = elements(ndims, shapes, 0);
  const float *x = static_cast<const float *>(params[0]), *y = static_cast<const float *>(params[1]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; i++) sum += x[i] * y[i];  // DOT_LOOP
  static_cast<float *>(params[2])[0] = sum;
  return 0;
}

// out = 2 * x[idx] (idx: int32 indices into x); the loop in a function of its own, whose restrict parameters
// tell GCC the arrays do not overlap
__attribute__((noinline)) static void gather(int n, const float *__restrict x, const int *__restrict idx,
                                             float *__restrict out) {
  for (int i = 0; i < n; i++) out[i] = x[idx[i]] * 2.0f;  // GATHER_LOOP
}

extern "C" int Gather(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                      void *extra) {
  gather(static_cast<int>(elements(ndims, shapes, 1)), static_cast<const float *>(params[0]),
         static_cast<const int *>(params[1]), static_cast<float *>(params[2]));
  return 0;
}

// out[r] = sum_c a[r, c] * v[c] for a 2-D a and a 1-D v
extern "C" int MatVec(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                      void *extra) {
  const int64_t rows = shapes[0][0], cols = shapes[0][1];
  const float *a = static_cast<const float *>(params[0]), *v = static_cast<const float *>(params[1]);
  float *out = static_cast<float *>(params[2]);
  for (int64_t r = 0; r < rows; r++) {  // ROWS_LOOP
    float sum = 0.0f;
    for (int64_t c = 0; c < cols; c++) sum += a[r * cols + c] * v[c];  // COLS_LOOP
    out[r] = sum * 0.5f + 1.0f;
  }
  return 0;
}

// out[i] = out[i - 1] / 2 + x[i]: each iteration needs the last, so no compiler vectorizes or unrolls it
extern "C" int Recurrence(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                          void *stream, void *extra) {
  const int64_t n = elements(ndims, shapes, 0);
  const float *x = static_cast<const float *>(params[0]);
  float *out = static_cast<float *>(params[1]);
  out[0] = x[0];
  for (int64_t i = 1; i < n; i++) out[i] = 0.5f * out[i - 1] + x[i];  // RECURRENCE_LOOP
  return 0;
}
"""

NEEDS_MCA = pytest.mark.skipif(hotloop.find_llvm_mca() is None,
                               reason=f"no llvm-mca on PATH ({hotloop.INSTALL_HINT}; .ci/run installs it)")


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("hotloop") / "loops.cc"
    path.write_text(SOURCE)
    return path


_OPS: dict[tuple[str, str], aotbench.Op] = {}


def _op(source: Path, name: str, flags: str) -> aotbench.Op:
    """One kernel of SOURCE built with ``flags`` (once per module)."""
    key = (name, flags)
    if key not in _OPS:
        shape = (lambda a, v: (a[0],)) if name == "MatVec" else (lambda *s: (1,)) if name == "Dot" else \
            (lambda *s: s[-1]) if name == "Gather" else (lambda *s: s[0])
        _OPS[key] = aotbench.Custom(f"{source}:{name}", shape, np.float32, flags=flags.split())
    return _OPS[key]


def _line(marker: str, text: str = SOURCE) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if marker in line)


def _address(instruction: str) -> int:
    return int(instruction.split()[0], 16)


def _loop(functions, name: str, marker: str, pattern: str = "", text: str = SOURCE,
          innermost: bool = True) -> hotloop.Loop:
    """The first (innermost) loop of the function named ``name`` (or ``name(...)``) with code from the marked
    line and an instruction matching ``pattern``."""
    line = _line(marker, text)
    every = hotloop.loops(functions)
    picked = [lp for lp in every if lp.function.split("(")[0] == name and line in {n for _, n in lp.lines}
              and any(re.search(pattern, i) for i in lp.instructions)
              and not (innermost and any(lp.contains(other) for other in every))]
    assert picked, (name, marker, pattern, [lp.where for lp in hotloop.loops(functions)])
    return picked[0]


def _samples_on(loop: hotloop.Loop, rng, low: int = 5, high: int = 50) -> dict[int, int]:
    return {_address(i): int(rng.integers(low, high)) for i in loop.instructions}


def _sample_everywhere_else(functions, loop: hotloop.Loop, rng, high: int = 3) -> dict[int, int]:
    """A few samples on every instruction outside ``loop``."""
    out = {}
    for f in functions:
        for b in f.blocks:
            for i in b.instructions:
                a = _address(i)
                if not loop.start <= a <= loop.end:
                    out[a] = int(rng.integers(0, high))
    return out


# -------------------------------------------------------------------------------------------- finding it


@pytest.mark.slow  # builds kernels
def test_the_loop_holding_the_samples_is_found_with_its_lines_and_share(rng):
    op = aotbench.Custom(f"{KERNELS / 'codeview_loops.cc'}:Loops", None, np.float32, flags=["-O3", "-march=native"])
    functions = op.disassemble().functions
    text = (KERNELS / "codeview_loops.cc").read_text()
    candidates = [_loop(functions, "Loops", "RECURRENCE_LOOP", text=text),
                  _loop(functions, "Loops", "VECTORIZED_LOOP", r"[xy]mm\d", text=text)]
    marker = ["RECURRENCE_LOOP", "VECTORIZED_LOOP"][int(rng.integers(2))]
    wanted = candidates[0] if marker == "RECURRENCE_LOOP" else candidates[1]
    samples = _samples_on(wanted, rng, 30, 80)
    inside = sum(samples.values())
    samples.update(_sample_everywhere_else(functions, wanted, rng, high=2))
    found = hotloop.find_hot_loop(functions, samples)
    assert found is not None and (found.start, found.end) == (wanted.start, wanted.end), (found, wanted)
    assert found.function == "Loops" and found.branch == found.end
    assert found.samples == inside and found.share == pytest.approx(inside / sum(samples.values()))
    assert _line(marker, text) in {n for _, n in found.lines}
    branch = found.instructions[-1]
    assert _address(branch) == found.branch and re.search(rf"\bj\w+ {found.start:x}\b", branch), branch
    assert [_address(i) for i in found.instructions] == sorted(_address(i) for i in found.instructions)
    # the share can be of the whole call's samples, library and all
    assert hotloop.find_hot_loop(functions, samples, total=4 * inside).share == pytest.approx(0.25)


@pytest.mark.slow  # builds kernels
def test_the_innermost_loop_wins_over_the_loop_around_it(source, rng):
    functions = _op(source, "MatVec", "-O3").disassemble().functions
    outer = _loop(functions, "MatVec", "ROWS_LOOP", innermost=False)
    inner = [lp for lp in hotloop.loops(functions) if outer.contains(lp)]
    assert inner, [lp.where for lp in hotloop.loops(functions)]
    inside = {a for lp in inner for a in map(_address, lp.instructions)}
    # most samples on the outer loop's own instructions, one on each of the inner loop's
    samples = {_address(i): (1 if _address(i) in inside else int(rng.integers(20, 60))) for i in outer.instructions}
    found = hotloop.find_hot_loop(functions, samples)
    assert found is not None and any((found.start, found.end) == (lp.start, lp.end) for lp in inner), found
    assert _line("COLS_LOOP") in {n for _, n in found.lines}
    assert found.samples == sum(samples.get(_address(i), 0) for i in found.instructions) < sum(samples.values())


def _function(name: str, listing: str) -> Function:
    block = Block("k.cc", 1, [" ".join(line.split()).replace(" ", "  ", 1) for line in listing.strip().splitlines()])
    return Function(name, "x86-64", [block])


def test_ties_go_to_the_smaller_loop_then_the_lower_address(rng):
    f = _function("f", """
        1000 xor eax,eax
        1002 add eax,0x1
        1005 cmp eax,edi
        1007 jne 1002 <f+0x2>
        1009 xor ecx,ecx
        100b add ecx,0x1
        100e add ecx,0x2
        1011 cmp ecx,edi
        1013 jne 100b <f+0xb>
        1015 xor edx,edx
        1017 add edx,0x1
        101a cmp edx,esi
        101c jne 1017 <f+0x17>
        101e ret""")
    count = int(rng.integers(3, 40))
    small, big, small_too = [0x1002, 0x1007], [0x100b, 0x1013], [0x1017, 0x101c]
    tie = {small[0]: count, big[0]: count, small_too[0]: count}
    assert hotloop.find_hot_loop([f], tie).start == 0x1002  # fewer instructions, then the lower address
    assert hotloop.find_hot_loop([f], {**tie, small_too[1]: 1}).start == 0x1017  # one more sample decides
    assert hotloop.find_hot_loop([f], {**tie, 0x100e: 1}).start == 0x100b
    assert hotloop.find_hot_loop([f], {0x1000: 9, 0x101e: 4}) is None  # no loop holds a sample
    assert hotloop.find_hot_loop([f], {}) is None


def test_a_backward_jump_that_never_comes_back_is_no_loop():
    # g++ -O3 -march=native's saxpy: 0x1242 jumps back into the scalar loop from the preheader, and 0x1254 into
    # the tail; neither target can reach its jump again
    f = _function("saxpy", """
        1100 mov rcx,rdi
        1103 test rdi,rdi
        1106 jle 114c <saxpy+0x4c>
        110c cmp r8,0x2
        1110 jbe 1240 <saxpy+0x140>
        1126 ja 1150 <saxpy+0x50>
        1130 vmovss xmm1,DWORD PTR [rsi+rax*4]
        1135 vfmadd213ss xmm1,xmm0,DWORD PTR [rdx+rax*4]
        113b vmovss DWORD PTR [rdx+rax*4],xmm1
        1140 inc rax
        1143 cmp rcx,rax
        1146 jne 1130 <saxpy+0x30>
        1148 ret
        1149 vzeroupper
        114c ret
        1150 cmp r8,0x6
        1154 jbe 1247 <saxpy+0x147>
        1170 vmovups ymm1,YMMWORD PTR [rsi+rax*1]
        1175 vfmadd213ps ymm1,ymm2,YMMWORD PTR [rdx+rax*1]
        117b vmovups YMMWORD PTR [rdx+rax*1],ymm1
        1180 add rax,0x20
        1184 cmp rax,rdi
        1187 jne 1170 <saxpy+0x70>
        1196 je 1149 <saxpy+0x49>
        11a6 jbe 1251 <saxpy+0x151>
        11ac vzeroupper
        11d5 je 114c <saxpy+0x4c>
        11db vmovss xmm1,DWORD PTR [rsi+rax*4]
        11fd jle 114c <saxpy+0x4c>
        1239 ret
        1240 xor eax,eax
        1242 jmp 1130 <saxpy+0x30>
        1247 xor r9d,r9d
        124c jmp 11ac <saxpy+0xac>
        1251 vzeroupper
        1254 jmp 11db <saxpy+0xdb>""")
    assert [(lp.start, lp.end) for lp in hotloop.loops([f])] == [(0x1130, 0x1146), (0x1170, 0x1187)]
    assert hotloop.find_hot_loop([f], {0x11db: 50, 0x1239: 50, 0x1175: 1}).start == 0x1170
    assert hotloop.find_hot_loop([f], {0x11db: 50, 0x1239: 50}) is None


def test_bad_arguments_are_named():
    f = _function("f", "1000 jmp 1000 <f>")
    with pytest.raises(ArgumentTypeError, match="disassemble"):
        hotloop.find_hot_loop(["not a function"], {})
    with pytest.raises(ArgumentTypeError, match="address"):
        hotloop.find_hot_loop([f], [(0x1000, 1)])
    with pytest.raises(ArgumentValueError, match="sample count"):
        hotloop.find_hot_loop([f], {0x1000: -1})
    with pytest.raises(ArgumentValueError, match="instruction address"):
        hotloop.find_hot_loop([f], {"0x1000": 1})
    assert hotloop.find_hot_loop([f], {0x1000: 3}).size == 1  # a branch to itself is a loop too
    counted = hotloop.find_hot_loop([f], {np.int64(0x1000): np.int32(3), 0x2000: 1})  # numpy's counts too
    assert counted.samples == 3 and counted.share == pytest.approx(0.75)
    with pytest.raises(ArgumentValueError, match="at least the 4"):
        hotloop.find_hot_loop([f], {0x1000: 3, 0x2000: 1}, total=3)
    with pytest.raises(ArgumentTypeError, match="Loop"):
        hotloop.predict("1000  jmp 1000")
    with pytest.raises(ArgumentValueError, match="iterations"):
        hotloop.predict(hotloop.find_hot_loop([f], {0x1000: 3}), iterations=0)


# --------------------------------------------------------------------------------------- predicting it


def _mca_version() -> str:
    out = subprocess.run([hotloop.find_llvm_mca(), "--version"], capture_output=True, text=True).stdout
    return re.search(r"LLVM version (\S+)", out)[1]


def _check_prediction(p: hotloop.Prediction, loop: hotloop.Loop) -> None:
    """The prediction is llvm-mca's report read back, from input without any of objdump's own forms."""
    assert p.ok, p.reason
    assert p.left_out == (), p.left_out
    total = int(re.search(r"^Total Cycles:\s+(\d+)", p.output, re.M)[1])
    iterations = int(re.search(r"^Iterations:\s+(\d+)", p.output, re.M)[1])
    assert iterations == hotloop.ITERATIONS and p.cycles_per_iteration == pytest.approx(total / iterations)
    assert p.block_rthroughput == float(re.search(r"^Block RThroughput:\s+([\d.]+)", p.output, re.M)[1])
    assert p.cycles_per_iteration >= p.block_rthroughput * 0.95 > 0
    assert p.version == _mca_version() and p.cpu and p.bottleneck and p.pressure
    assert max(p.pressure.values()) <= p.cycles_per_iteration * 1.05
    instructions = int(re.search(r"^Instructions:\s+(\d+)", p.output, re.M)[1])
    assert instructions == loop.size * iterations  # every instruction of the loop was analysed
    body = p.source.splitlines()[1:]
    addresses = {i.split()[0] for i in loop.instructions}
    assert not any(line.split()[0] in addresses or "<" in line or "#" in line for line in body), body
    labels = {line[:-1] for line in body if line.endswith(":")}
    assert f".L{loop.start:x}" in labels
    assert re.search(rf"\bj\w+ \.L{loop.start:x}$", "\n".join(body), re.M)


@pytest.mark.slow  # builds kernels
@NEEDS_MCA
@pytest.mark.parametrize("flags, name, marker, pattern, mcpu", [
    ("-O0", "Saxpy", "SAXPY_LOOP", "", "native"),
    ("-O3 -march=native", "Saxpy", "SAXPY_LOOP", r"[xyz]mm\d", "native"),
    ("-O3 -march=native", "Recurrence", "RECURRENCE_LOOP", "", "native"),
    ("-O3 -mavx2 -mfma", "Saxpy", "SAXPY_LOOP", r"vfmadd\w+ps ymm", "haswell"),
    ("-O3 -march=skylake-avx512 -mprefer-vector-width=512", "Saxpy", "SAXPY_LOOP", r"vfmadd\w+ps zmm",
     "skylake-avx512"),
    ("-O3 -march=haswell", "Gather", "GATHER_LOOP", r"vgatherdps ymm", "haswell"),
    ("-O3 -march=skylake-avx512 -mprefer-vector-width=512", "Gather", "GATHER_LOOP", r"vgatherdps zmm\d+\{k",
     "skylake-avx512"),
    ("-O3 -march=native", "MatVec", "COLS_LOOP", "", "native"),
])
def test_llvm_mca_predicts_the_loops_gcc_makes(source, rng, flags, name, marker, pattern, mcpu):
    functions = _op(source, name, flags).disassemble().functions
    wanted = _loop(functions, {"Gather": "gather"}.get(name, name), marker, pattern)  # Gather calls gather()
    loop = hotloop.find_hot_loop(functions, _samples_on(wanted, rng))
    assert (loop.start, loop.end) == (wanted.start, wanted.end)
    p = hotloop.predict(loop, mcpu=mcpu)
    _check_prediction(p, loop)
    if mcpu != "native":
        assert p.cpu == mcpu
    assert p.text.startswith(f"Predicted by llvm-mca {p.version} for {p.cpu}")
    assert f"{p.cycles_per_iteration:.2f} cycles/iteration" in p.text


@NEEDS_MCA
@pytest.mark.slow  # builds kernels
def test_the_bottleneck_in_words(source, rng):
    """On Skylake's model: -O0 code keeps every value on the stack (the load ports), a float sum in order waits
    for each add (a dependency), and the vectorized saxpy is limited by a resource, not a dependency."""
    def predicted(name, flags, marker, pattern=""):
        functions = _op(source, name, flags).disassemble().functions
        return hotloop.predict(_loop(functions, name, marker, pattern), mcpu="skylake")

    slow = predicted("Saxpy", "-O0", "SAXPY_LOOP")
    assert slow.bottleneck.startswith("load ports (2, 3): ") and slow.model == "SKL", slow.bottleneck
    dot = predicted("Dot", "-O3 -march=skylake", "DOT_LOOP")
    assert "dependency carried from one iteration to the next" in dot.bottleneck, dot.bottleneck
    assert dot.cycles_per_iteration > 1.2 * dot.block_rthroughput
    fast = predicted("Saxpy", "-O3 -march=skylake", "SAXPY_LOOP", r"vfmadd\w+ps ymm")
    assert "dependency" not in fast.bottleneck and fast.cycles_per_iteration < slow.cycles_per_iteration
    assert re.search(r"(?:port|dispatch width).*: \d+\.\d\d cycles/iteration$", fast.bottleneck), fast.bottleneck


@NEEDS_MCA
@pytest.mark.slow  # builds kernels
def test_att_syntax_is_read_too(source, rng):
    op = _op(source, "Saxpy", "-O3 -mavx2 -mfma")
    intel = _loop(op.disassemble().functions, "Saxpy", "SAXPY_LOOP", r"vfmadd\w+ps ymm")
    att = _loop(op.disassemble(syntax="att").functions, "Saxpy", "SAXPY_LOOP", r"vfmadd\w+ps .*%ymm")
    assert (att.start, att.end) == (intel.start, intel.end)
    a, i = hotloop.predict(att, mcpu="haswell"), hotloop.predict(intel, mcpu="haswell")
    _check_prediction(a, att)
    assert a.cycles_per_iteration == i.cycles_per_iteration and a.bottleneck == i.bottleneck


def test_objdump_forms_become_llvm_forms():
    converted = dict((o, t) for t, o in hotloop.to_llvm_asm([
        "1000  vaddps zmm0,zmm1,DWORD BCST [rip+0xd2d]        # 2000 <_fini+0x940>",
        "1006  vfmadd231pd ymm0{k1},ymm2,QWORD BCST [rax+rcx*8+0x8]",
        "100c  mov rax,QWORD PTR fs:0x28",
        "1015  cs nop WORD PTR [rax+rax*1+0x0]",
        "1020  vgatherdps zmm0{k2},DWORD PTR [rsi+zmm1*4]",
        "1026  vpgatherdd ymm0,DWORD PTR [rsi+ymm1*4],ymm2",
        "102c  vscatterqps DWORD PTR [rsi+zmm1*4]{k1},ymm0",
        "1032  call 1030 <memset@plt>",
        "1037  jne 1000 <f+0x0>",
        "103d  jmp 2000 <g>",
    ]))
    assert converted["vaddps zmm0,zmm1,DWORD BCST [rip+0xd2d]        # 2000 <_fini+0x940>"] == \
        "vaddps zmm0,zmm1,DWORD PTR [rip+0xd2d]{1to16}"
    assert converted["vfmadd231pd ymm0{k1},ymm2,QWORD BCST [rax+rcx*8+0x8]"].endswith("QWORD PTR [rax+rcx*8+0x8]{1to4}")
    assert converted["mov rax,QWORD PTR fs:0x28"] == "mov rax,QWORD PTR fs:[0x28]"
    assert converted["cs nop WORD PTR [rax+rax*1+0x0]"] == "nop WORD PTR [rax+rax*1+0x0]"
    assert converted["vgatherdps zmm0{k2},DWORD PTR [rsi+zmm1*4]"] == "vgatherdps zmm0{k2},ZMMWORD PTR [rsi+zmm1*4]"
    assert converted["vpgatherdd ymm0,DWORD PTR [rsi+ymm1*4],ymm2"].startswith("vpgatherdd ymm0,YMMWORD PTR")
    assert converted["vscatterqps DWORD PTR [rsi+zmm1*4]{k1},ymm0"].startswith("vscatterqps YMMWORD PTR")
    assert converted["call 1030 <memset@plt>"] == "call .L1030"
    assert converted["jne 1000 <f+0x0>"] == "jne .L1000" and converted["jmp 2000 <g>"] == "jmp .L2000"
    labels = [t for t, o in hotloop.to_llvm_asm(["1000  nop", "1001  jne 1000 <f>", "1003  jmp 2000 <g>"])
              if o is None]
    assert labels == [".L1000:", ".L2000:"]  # the target inside before its instruction, the one outside after


@NEEDS_MCA
def test_instructions_llvm_mca_cannot_read_are_left_out_not_a_crash(rng):
    n = int(rng.integers(2, 6))
    body = [f"{0x1000 + 4 * k:x}  add rax,0x{k + 1:x}" for k in range(n)]
    loop = hotloop.find_hot_loop([_function("f", "\n".join([
        *(line.replace("  ", " ") for line in body), f"{0x1000 + 4 * n:x} (bad)",
        f"{0x1001 + 4 * n:x} jne 1000 <f>"]))], {0x1000: 1})
    p = hotloop.predict(loop)
    assert p.ok and p.left_out == ("(bad)",) and "could not read left out" in p.text
    assert int(re.search(r"^Instructions:\s+(\d+)", p.output, re.M)[1]) == (n + 1) * hotloop.ITERATIONS
    unreadable = hotloop.Loop("g", 0x2000, 0x2001, 0x2001, ("2000  (bad)", "2001  frobnicate rax"))
    q = hotloop.predict(unreadable)
    assert not q.ok and q.cycles_per_iteration is None and "could read none" in q.reason
    assert q.text.startswith("Predicted: none (")
    calling = hotloop.find_hot_loop([_function("h", "3000 call 1030 <memset@plt>\n3005 jne 3000 <h>")], {0x3000: 1})
    c = hotloop.predict(calling)
    assert c.ok and any("call" in note for note in c.notes) and "[llvm-mca: " in c.text  # it does not model callees
    r = hotloop.predict(loop, mcpu="no-such-cpu-here")
    assert not r.ok and "llvm-mca failed on this loop" in r.reason and "no-such-cpu-here" in r.reason


def test_without_llvm_mca_the_reason_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert hotloop.find_llvm_mca() is None
    loop = hotloop.find_hot_loop([_function("f", "1000 add rax,0x1\n1004 jne 1000 <f>")], {0x1004: 2})
    p = hotloop.predict(loop)
    assert not p.ok and "apt-get install llvm" in p.reason and "\n" not in p.reason
    assert "apt-get install llvm" in hotloop.HotLoopReport(loop, p).text


@NEEDS_MCA
def test_a_versioned_llvm_mca_is_found(tmp_path, monkeypatch, rng):
    real = os.path.realpath(hotloop.find_llvm_mca())
    for number in rng.choice(np.arange(11, 40), size=3, replace=False):
        (tmp_path / f"llvm-mca-{number}").symlink_to(real)
    (tmp_path / "llvm-mca-notes").write_text("not a tool")
    monkeypatch.setenv("PATH", str(tmp_path))
    newest = max(int(p.name.rsplit("-", 1)[1]) for p in tmp_path.glob("llvm-mca-[0-9]*"))
    assert hotloop.find_llvm_mca() == str(tmp_path / f"llvm-mca-{newest}")
    loop = hotloop.find_hot_loop([_function("f", "1000 add rax,0x1\n1004 jne 1000 <f>")], {0x1004: 2})
    p = hotloop.predict(loop)
    assert p.ok and p.llvm_mca == str(tmp_path / f"llvm-mca-{newest}")


# --------------------------------------------------------------------------------------- measuring it


def _loaded(op) -> callable:
    """address_of for an op loaded in this process: its kernel's loaded address minus its offset in the file."""
    plain = host_asm.parse(host_asm.objdump_listing(op.library.path))
    offset = _address(next(f for f in plain if f.name == op.name).blocks[0].instructions[0])
    return lambda address: op.library.kernel - offset + address


def test_the_budget_decides_whether_iterations_are_counted(monkeypatch, rng):
    loop = hotloop.Loop("f", 0x1000, 0x1004, 0x1004, ("1000  add rax,0x1", "1004  jne 1000 <f>"), samples=3,
                        share=float(rng.uniform(0.3, 0.9)))
    monkeypatch.setattr(perf_events, "breakpoint_hit_ns", lambda: 16_000.0)
    calls = []
    clock = hotloop.Clock(float(rng.uniform(1000, 4000)), "test")
    per_call = float(rng.uniform(1e6, 1e7))
    cycles = float(rng.uniform(1, 8))
    prediction = hotloop.Prediction(cycles_per_iteration=cycles, block_rthroughput=1.0)
    m = hotloop.measure_iterations(loop, lambda: calls.append(1), lambda a: a, [threading.get_native_id()],
                                   prediction=prediction, time_per_call_ns=per_call, clock=clock)
    estimate = per_call * loop.share * clock.mhz / 1000 / cycles
    assert m.estimated_iterations == pytest.approx(estimate)
    assert m.iterations_per_call is None and m.ns_per_iteration is None and not calls
    assert "budget" in m.reason and f"{estimate:,.0f} iterations" in m.reason
    assert "iterations not counted" in m.text
    roomy = hotloop.measure_iterations(loop, lambda: calls.append(1), lambda a: a, [threading.get_native_id()],
                                       prediction=None, time_per_call_ns=per_call, clock=clock, budget_s=1e-9)
    assert roomy.estimated_iterations == pytest.approx(estimate * cycles)  # 1 cycle each without a prediction
    with pytest.raises(ArgumentValueError, match="budget_s"):
        hotloop.measure_iterations(loop, lambda: None, lambda a: a, [1], budget_s=0)
    with pytest.raises(ArgumentValueError, match="tids"):
        hotloop.measure_iterations(loop, lambda: None, lambda a: a, [])


@pytest.mark.slow  # builds kernels
@pytest.mark.skipif(os.environ.get("AOTBENCH_BREAKPOINTS") != "1", reason="hardware breakpoints armed in-process: a "
                    "stray SIGTRAP ended the test process in CI's VM; AOTBENCH_BREAKPOINTS=1 runs it")
def test_a_breakpoint_on_the_branch_counts_the_iterations(source, rng):
    if not perf_events.probe().breakpoints:
        pytest.skip(f"execute breakpoints do not open here: {perf_events.probe().breakpoint_reason}")
    op = _op(source, "Recurrence", "-O3 -march=native")
    n = int(rng.integers(2_000, 20_000))
    x = rng.standard_normal(n, dtype=np.float32)
    out = op(x)
    assert out[-1] == pytest.approx(0.5 * out[-2] + x[-1], rel=1e-5)
    functions = op.disassemble().functions
    loop = hotloop.find_hot_loop(functions, _samples_on(_loop(functions, "Recurrence", "RECURRENCE_LOOP"), rng))
    address_of = _loaded(op)
    plain = host_asm.parse(host_asm.objdump_listing(op.library.path))
    in_library = {_address(i): i for f in plain for b in f.blocks for i in b.instructions}
    assert in_library[loop.branch] == loop.instructions[-1]  # the inspection build's code is at the same offsets
    # the budget only gates on an estimate (here: 1 cycle per iteration, no prediction); n hits cost well under it
    m = hotloop.measure_iterations(loop, lambda: op(x), address_of, [threading.get_native_id()], budget_s=60)
    assert m.reason is None, m.reason
    assert m.iterations_per_call == n - 1 and m.calls_counted == 1 and m.hit_ns > 0
    assert m.ns_per_iteration == pytest.approx(m.loop_ns_per_call / (n - 1))
    if m.clock is not None:
        assert m.cycles_per_iteration == pytest.approx(m.ns_per_iteration * m.clock.mhz / 1000)
        assert f"{m.clock.mhz:.0f} MHz ({m.clock.source})" in m.text
    assert f"{n - 1:,} iterations per call" in m.text
    # the middle of the loop's first instruction: never executed as an instruction
    other = hotloop.measure_iterations(loop, lambda: op(x), lambda a: address_of(loop.start) + 1,
                                       [threading.get_native_id()], budget_s=60)
    assert other.iterations_per_call is None and "never fired" in other.reason


def test_the_cpu_clock_says_where_it_was_read():
    clock = hotloop.cpu_clock()
    if clock is None:
        pytest.skip("neither sysfs cpufreq nor /proc/cpuinfo gives a clock here")
    assert clock.mhz > 100 and ("cpuinfo" in clock.source or "cpufreq" in clock.source)


# --------------------------------------------------------------------------------------- rendering it


@pytest.mark.slow  # builds kernels
def test_the_report_in_text_and_html(source, rng):
    functions = _op(source, "Dot", "-O3").disassemble().functions
    wanted = _loop(functions, "Dot", "DOT_LOOP")
    samples = _samples_on(wanted, rng)
    report = hotloop.report(functions, samples, predict_speed=hotloop.find_llvm_mca() is not None)
    assert report.loop.start == wanted.start
    lines = report.text.splitlines()
    assert lines[0] == (f"Hottest loop: Dot {wanted.start:#x}-{wanted.end:#x} ({wanted.size} instructions, "
                        f"line {_line('DOT_LOOP')}), 100.0% of the samples")
    if report.prediction is not None:
        assert lines[1] == report.prediction.text and len(lines) == 2
    measured = hotloop.Measured(1e6, 5e5, 1e5, hotloop.Clock(3000.0, "/proc/cpuinfo cpu MHz"), 125_000.0, 1, 1e4)
    full = hotloop.HotLoopReport(report.loop, report.prediction, measured)
    assert full.text.splitlines()[-1] == measured.text and "4 ns/iteration = 12.00 cycles at 3000 MHz" in measured.text
    page = full._repr_html_()
    assert page.count("<div>") == len(full.lines) and "the loop's" in page and "color:" not in page
    assert html.escape(wanted.instructions[-1]) in page
    none = hotloop.report(functions, {})
    assert none.loop is None and none.text == "Hottest loop: none (no loop holds a sample)\n"
    assert "none" in none._repr_html_() and repr(none) == none.text.strip()

