"""The CUDA emulator's source translator (``aotbench.build.cuda_emulation``): launches and ``extern __shared__``
arrays rewritten for g++, every line kept where it was, nothing else touched; and the rewritten text compiled by
g++ against a small stand-in for the emulation header, run, and its diagnostics checked for the original lines."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from aotbench.build.cuda_emulation import TRANSLATOR_VERSION, translate, unsupported

EXAMPLES = Path(__file__).resolve().parents[2] / "aotbench" / "examples"
GXX = shutil.which("g++")
needs_gxx = pytest.mark.skipif(GXX is None, reason="needs g++")


def launch(kernel: str, config: str, literal: str | None = None) -> str:
    """What translate() writes for ``kernel<<<config>>>`` (up to, not including, the arguments)."""
    literal = kernel if literal is None else literal
    return (f'::aotb_emu::launch("{literal}", __LINE__, [](auto... aotb_a) {{ {kernel}(aotb_a...); }}, '
            f'{config})')


def same_lines(source: str, translated: str) -> list[int]:
    """The 1-based numbers of the lines that differ; asserts first that the line counts are equal."""
    a, b = source.split("\n"), translated.split("\n")
    assert len(a) == len(b)
    return [k + 1 for k, (x, y) in enumerate(zip(a, b)) if x != y]


def test_version_is_a_string():
    assert isinstance(TRANSLATOR_VERSION, str) and TRANSLATOR_VERSION


# -- launches -----------------------------------------------------------------------------------------------------
LAUNCHES = {
    "saxpy's grid with static_cast and a comparison":
        ("saxpy4<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), threads, 0, s>>>(a, x, y, out, n4);",
         launch("saxpy4", "static_cast<unsigned>(blocks < 65536 ? blocks : 65536), threads, 0, s")
         + "(a, x, y, out, n4);"),
    "add_reduce's template kernel with a stream":
        ("row_sums<true><<<rows, kThreads, 0, s>>>(a, b, out, cols);",
         launch("row_sums<true>", "rows, kThreads, 0, s") + "(a, b, out, cols);"),
    "a namespaced template kernel":
        ("ns::detail::k<float, 4><<<g, b>>>(x);", launch("ns::detail::k<float, 4>", "g, b") + "(x);"),
    "a globally qualified kernel":
        ("::k<<<g, b>>>(x);", launch("::k", "g, b") + "(x);"),
    "a template argument with a comparison in parentheses":
        ("k<T, (N > 2)><<<g, b>>>(x);", launch("k<T, (N > 2)>", "g, b") + "(x);"),
    "nested template arguments":
        ("k<Vec<float, 4>, std::array<int, 2>><<<g, b>>>(x);",
         launch("k<Vec<float, 4>, std::array<int, 2>>", "g, b") + "(x);"),
    "dim3 expressions, a size in bytes and a stream":
        ("k<<<dim3((n + 255) / 256, 2), dim3(16, 16), smem * sizeof(float), stream>>>(x, n);",
         launch("k", "dim3((n + 255) / 256, 2), dim3(16, 16), smem * sizeof(float), stream") + "(x, n);"),
    "a template call with a comma in the grid":
        ("k<<<std::min<int64_t>(a, b), 256>>>(x);", launch("k", "std::min<int64_t>(a, b), 256") + "(x);"),
    "template arguments with a top-level comma in the block":
        ("k<<<g, std::integral_constant<int, 3>{}>>>(x);", launch("k", "g, std::integral_constant<int, 3>{}")
         + "(x);"),
    "a shift inside parentheses":
        ("k<<<(n >> 8) + 1, 256>>>(x);", launch("k", "(n >> 8) + 1, 256") + "(x);"),
    "a less-than at the top level":
        ("k<<<n < 4 ? 1 : 2, m>>>(x);", launch("k", "n < 4 ? 1 : 2, m") + "(x);"),
    "member access through a pointer":
        ("k<<<cfg->grid, cfg->block>>>(x);", launch("k", "cfg->grid, cfg->block") + "(x);"),
    "braces in the configuration":
        ("k<<<dim3{4, 2}, dim3{32, 8}>>>(x);", launch("k", "dim3{4, 2}, dim3{32, 8}") + "(x);"),
    "white space around the brackets":
        ("k <<< g, b >>> (x);",
         '::aotb_emu::launch("k", __LINE__, [](auto... aotb_a) { k(aotb_a...); },   g, b ) (x);'),
    "two launches on one line":
        ("a<<<1, 2>>>(x); b<<<3, 4>>>(y);", launch("a", "1, 2") + "(x); " + launch("b", "3, 4") + "(y);"),
    "a launch after return":
        ("return k<<<1, 2>>>();", "return " + launch("k", "1, 2") + "();"),
    "a char literal template argument":
        ("k<'\"'><<<1, 2>>>();", launch("k<'\"'>", "1, 2", literal="k<'\\\"'>") + "();"),
}


@pytest.mark.parametrize("source, expected", LAUNCHES.values(), ids=LAUNCHES.keys())
def test_launch_is_rewritten(source, expected):
    assert translate(source) == expected


def test_launch_over_three_lines_keeps_its_lines():
    source = ("void f() {\n"
              "  k<float>\n"
              "      <<<(n + 255) / 256,  // blocks\n"
              "         256, 0, s>>>(x,\n"
              "                      n);\n"
              "}\n")
    out = translate(source)
    assert same_lines(source, out) == [2, 3, 4]
    lines = out.split("\n")
    assert lines[1] == ('  ::aotb_emu::launch("k<float>", __LINE__, [](auto... aotb_a) { k<float>(aotb_a...); },')
    assert lines[2] == "       (n + 255) / 256,  // blocks"  # the configuration's text, its comment included
    assert lines[3] == "         256, 0, s)(x,"
    assert lines[4] == source.split("\n")[4]  # the arguments, untouched


def test_kernel_name_over_two_lines_is_one_name_in_the_literal():
    source = "ns::\n  k<int,\n    2><<<1, 2>>>(x);\n"
    out = translate(source)
    assert out.count("\n") == 3
    assert out.startswith('::aotb_emu::launch("ns:: k<int, 2>", __LINE__,')
    assert "{ ns::\n  k<int,\n    2>(aotb_a...); }" in out


def test_untouched_in_comments_strings_and_includes():
    source = ('#include "tiles<<<a, b>>>.h"\n'
              "// k<<<1, 2>>>(x);\n"
              "/* k<<<1, 2>>>(x);\n"
              "   still a comment: j<<<3, 4>>>(y); */\n"
              'const char *s = "k<<<1, 2>>>(x)";\n'
              "const char *r = R\"cu(k<<<1, 2>>>(x) \" )\" )cu\";\n"
              "const char c = '<';\n"
              "extern __shared__ float in_a_line_comment[]; // extern __shared__ float no[];\n")
    out = translate(source)
    assert same_lines(source, out) == [8]
    assert out.split("\n")[7] == ("static ::aotb_emu::DynamicShared<float> in_a_line_comment; "
                                  "// extern __shared__ float no[];")


def test_launch_in_a_macro_body_is_rewritten_and_keeps_its_continuations():
    source = ("#define LAUNCH(x, n) \\\n"
              "  scale<<<((n) + 255) / 256, \\\n"
              "          256>>>(x, n)\n"
              "void f(float *x) { LAUNCH(x, 10); }\n")
    out = translate(source)
    assert same_lines(source, out) == [2, 3]
    assert out.split("\n")[1:3] == [
        '  ::aotb_emu::launch("scale", __LINE__, [](auto... aotb_a) { scale(aotb_a...); }, ((n) + 255) / 256, \\',
        "          256)(x, n)"]


def test_every_other_line_is_byte_for_byte_the_same():
    source = (EXAMPLES / "add_reduce.cu").read_text()
    out = translate(source)
    changed = same_lines(source, out)
    assert changed == [k + 1 for k, line in enumerate(source.split("\n")) if "<<<" in line]
    assert "<<<" not in out and ">>>" not in out


# -- the real examples --------------------------------------------------------------------------------------------
def test_saxpy_example():
    source = (EXAMPLES / "saxpy.cu").read_text()
    out = translate(source)
    changed = same_lines(source, out)
    lines = out.split("\n")
    assert [lines[k - 1].strip() for k in changed] == [
        launch("saxpy4", "static_cast<unsigned>(blocks < 65536 ? blocks : 65536), threads, 0, s") + "(",
        launch("saxpy_tail", "static_cast<unsigned>(blocks), 256, 0, s") + "(a, x, y, out, n4 * 4, n);"]


def test_add_reduce_example():
    source = (EXAMPLES / "add_reduce.cu").read_text()
    lines = translate(source).split("\n")
    launched = [line.strip() for line in lines if "::aotb_emu::launch" in line]
    assert launched == [
        launch("row_sums<true>", "static_cast<unsigned>(rows), kThreads, 0, s") + "(a, b, out, cols);",
        launch("row_sums<false>", "static_cast<unsigned>(rows), kThreads, 0, s") + "(a, b, out, cols);",
        launch("column_partials", "grid, kThreads, 0, s") + "(a, b, partial, rows, cols, plan.rows_per_chunk);",
        launch("add_partials", "static_cast<unsigned>((cols + kSumThreads - 1) / kSumThreads), kSumThreads, 0, s")
        + "("]


# -- extern __shared__ --------------------------------------------------------------------------------------------
SHARED = {
    "in a kernel":
        ("__global__ void k() {\n  extern __shared__ float s[];\n}",
         "__global__ void k() {\n  float *const s = ::aotb_emu::dynamic_shared<float>();\n}"),
    "in a template kernel":
        ("template <class T>\n__global__ void k(T *x) {\n  extern __shared__ T tile[];\n  tile[0] = x[0];\n}",
         "template <class T>\n__global__ void k(T *x) {\n  T *const tile = ::aotb_emu::dynamic_shared<T>();\n"
         "  tile[0] = x[0];\n}"),
    "with __align__ and two words of type":
        ("void k() { extern __shared__ __align__(16) unsigned char smem[]; }",
         "void k() { unsigned char *const smem = ::aotb_emu::dynamic_shared<unsigned char>(); }"),
    "with __attribute__ first":
        ("void k() { __attribute__((aligned(16))) extern __shared__ float2 v[]; }",
         "void k() { float2 *const v = ::aotb_emu::dynamic_shared<float2>(); }"),
    "with alignas and a qualified type":
        ("void k() { extern __shared__ alignas(alignof(float4)) std::int32_t q[]; }",
         "void k() { std::int32_t *const q = ::aotb_emu::dynamic_shared<std::int32_t>(); }"),
    "volatile, over two lines":
        ("void k() {\n  extern __shared__ volatile\n      int32_t q[];\n}",
         "void k() {\n  volatile int32_t *const q = ::aotb_emu::dynamic_shared<volatile int32_t>();\n\n}"),
    "in a block inside a namespace":
        ("namespace a { namespace {\nvoid k() { if (x) { extern __shared__ double d[]; } }\n} }",
         "namespace a { namespace {\nvoid k() { if (x) { double *const d = ::aotb_emu::dynamic_shared<double>(); } }"
         "\n} }"),
    "at namespace scope":
        ("extern __shared__ float s[];", "static ::aotb_emu::DynamicShared<float> s;"),
    "in a namespace, aligned":
        ("namespace {\nextern __shared__ __align__(16) unsigned char smem[];\n}",
         "namespace {\nstatic ::aotb_emu::DynamicShared<unsigned char> smem;\n}"),
    "in an extern \"C\" block":
        ('extern "C" {\nextern __shared__ int32_t q[];\n}',
         'extern "C" {\nstatic ::aotb_emu::DynamicShared<int32_t> q;\n}'),
    "after a kernel at namespace scope":
        ("namespace n {\nvoid k() { }\n}\nextern __shared__ float s[];",
         "namespace n {\nvoid k() { }\n}\nstatic ::aotb_emu::DynamicShared<float> s;"),
    "after a pragma":
        ("void k() {\n#pragma unroll\n  extern __shared__ float s[];\n}",
         "void k() {\n#pragma unroll\n  float *const s = ::aotb_emu::dynamic_shared<float>();\n}"),
    "in a macro":
        ("#define SMEM(T, name) extern __shared__ T name[]",
         "#define SMEM(T, name) extern __shared__ T name[]"),  # no ';' in the macro: left alone
    "in a macro with its semicolon":
        ("#define SMEM(T, name) \\\n  extern __shared__ T name[];",
         "#define SMEM(T, name) \\\n  T *const name = ::aotb_emu::dynamic_shared<T>();"),
}


@pytest.mark.parametrize("source, expected", SHARED.values(), ids=SHARED.keys())
def test_extern_shared_is_rewritten(source, expected):
    assert translate(source) == expected


@pytest.mark.parametrize("source", [
    'extern "C" int Saxpy(int n);',
    "extern float not_shared[];",
    "void k() { __shared__ float tile[32][33]; }",  # static shared memory: the header's business
    "void k() { extern __shared__ float sized[64]; }",
    "extern template class std::vector<int>;",
])
def test_other_declarations_are_left_alone(source):
    assert translate(source) == source


# -- errors -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("source, message", [
    ("void f() {\n  k<<<1, 2(x);\n}", r"^line 2: the launch of `k` has no closing '>>>'"),
    ("\n\nk<<<1, 2>>>;", r"^line 3: the launch `k<<<\.\.\.>>>` is not followed by '\('"),
    ("k<<<g>>>(x);", r"^line 1: the launch of `k` has 1 launch configuration part; it takes 2 to 4"),
    ("k<<<g, b, 0, s, t>>>(x);", r"^line 1: the launch of `k` has 5 launch configuration parts; it takes 2 to 4"),
    ("k<<<g, , b>>>(x);", r"^line 1: the launch of `k` has an empty launch configuration part \(part 2 of 3\)"),
    ("\nx = (<<<1, 2>>>)(y);", r"^line 2: '<<<' does not follow a kernel name"),
    ("#define L k<<<1, 2\nint f() { return a >> b; }", r"^line 1: the launch of `k` has no closing '>>>'"),
])
def test_malformed_launch_is_a_value_error_naming_the_line(source, message):
    with pytest.raises(ValueError, match=message):
        translate(source)


def test_a_template_operator_shift_is_not_a_launch():
    source = "template <class T> std::ostream &operator<<<T>(std::ostream &o, const V<T> &v);\n"
    assert translate(source) == source


# -- unsupported --------------------------------------------------------------------------------------------------
def test_unsupported_lists_each_inline_assembly_with_its_line():
    source = ("__device__ unsigned lane() {\n"
              "  unsigned r;\n"
              '  asm("mov.u32 %0, %%laneid;" : "=r"(r));\n'
              '  asm volatile ("membar.gl;");\n'
              '  __asm__ __volatile__("bar.sync 0;"); asm("nop;");\n'
              "  // asm(\"in a comment\");\n"
              '  const char *s = "asm(\\"in a string\\")";\n'
              "  return r;\n"
              "}\n")
    assert unsupported(source) == [(3, "inline PTX (asm)"), (4, "inline PTX (asm)"), (5, "inline PTX (asm)"),
                                   (5, "inline PTX (asm)")]
    assert unsupported((EXAMPLES / "add_reduce.cu").read_text()) == []


# -- compiled by g++ against a stand-in for the emulation header ---------------------------------------------------
# One "thread" after another over a 1-D grid of 1-D blocks: enough to run the translated text, not an emulator.
STAND_IN = r"""
#include <cstddef>
#include <cstdio>
#include <tuple>
#include <vector>
#define __global__
#define __device__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
typedef void *cudaStream_t;
namespace aotb_emu {
inline dim3 thread_idx, block_idx, block_dim, grid_dim;
inline std::vector<unsigned char> shared_bytes;
template <class T> T *dynamic_shared() { return reinterpret_cast<T *>(shared_bytes.data()); }
template <class T> struct DynamicShared {
  operator T *() const { return dynamic_shared<T>(); }
  T &operator[](std::size_t i) const { return dynamic_shared<T>()[i]; }
};
template <class F, class... C> auto launch(const char *name, int line, F f, dim3 grid, dim3 block, C... rest) {
  std::size_t smem = 0;
  if constexpr (sizeof...(C) > 0) smem = static_cast<std::size_t>(std::get<0>(std::tuple<C...>(rest...)));
  std::printf("launch %s line %d grid %u block %u smem %zu\n", name, line, grid.x, block.x, smem);
  return [=](auto... args) {
    shared_bytes.assign(smem, 0);
    grid_dim = grid; block_dim = block;
    for (unsigned b = 0; b < grid.x; b++)
      for (unsigned t = 0; t < block.x; t++) { block_idx = dim3(b); thread_idx = dim3(t); f(args...); }
  };
}
}  // namespace aotb_emu
#define threadIdx ::aotb_emu::thread_idx
#define blockIdx ::aotb_emu::block_idx
#define blockDim ::aotb_emu::block_dim
#define gridDim ::aotb_emu::grid_dim
"""

PROGRAM = r"""#include <cstdio>
#include <cstdint>
// a template kernel, its argument deduced at the launch
template <class T>
__global__ void scale(T *x, T a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}

namespace stage_ns {
__global__ void stage(const float *in, float *out, int n) {
  extern __shared__ __align__(16) float buf[];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    buf[threadIdx.x] = in[i];
    out[i] = buf[threadIdx.x] + 1.0f;
  }
}
}  // namespace stage_ns

extern __shared__ int counts[];  // namespace scope
__global__ void count(int n) { if (blockIdx.x * blockDim.x + threadIdx.x < n) counts[0] += 1; }

#define STAGE(in, out, n) \
  stage_ns::stage<<<((n) + 3) / 4, 4, \
                    4 * sizeof(float)>>>(in, out, n)

int main() {
  float x[10];
  double d[3] = {1, 2, 3};
  for (int i = 0; i < 10; i++) x[i] = i;
  scale<<<(10 + 3) / 4,
          4>>>(x, 2.0f, 10);
  scale<<<1, 3>>>(d, 0.5, 3); /* "k<<<1, 2>>>" */ float y[10];
  STAGE(x, y, 10);
  count<<<dim3(3), dim3(4), sizeof(int), nullptr>>>(10);
  for (int i = 0; i < 10; i++) std::printf("%g ", y[i]);
  std::printf("| %g %g %g | %d\n", d[0], d[1], d[2], static_cast<int *>(counts)[0]);
  return 0;
}
"""


def _compile(tmp_path: Path, text: str) -> subprocess.CompletedProcess:
    (tmp_path / "emu.h").write_text(STAND_IN)
    (tmp_path / "translated.cc").write_text(text)
    return subprocess.run([GXX, "-std=c++17", "-include", str(tmp_path / "emu.h"), "-o", str(tmp_path / "prog"),
                           str(tmp_path / "translated.cc")], capture_output=True, text=True, timeout=120)


@needs_gxx
def test_translated_program_compiles_and_runs(tmp_path):
    result = _compile(tmp_path, translate(PROGRAM))
    assert result.returncode == 0, result.stderr
    run = subprocess.run([str(tmp_path / "prog")], capture_output=True, text=True, timeout=60, check=True)
    # each launch reports its kernel and the ORIGINAL line the launch starts on (the macro's: where it is used)
    assert run.stdout.splitlines() == [
        "launch scale line 32 grid 3 block 4 smem 0",
        "launch scale line 34 grid 1 block 3 smem 0",
        f"launch stage_ns::stage line 35 grid 3 block 4 smem {4 * 4}",
        "launch count line 36 grid 3 block 4 smem 4",
        "1 3 5 7 9 11 13 15 17 19 | 0.5 1 1.5 | 10",
    ]


@needs_gxx
def test_compile_error_is_reported_at_the_original_line(tmp_path):
    lines = PROGRAM.split("\n")
    error_line = 37  # after the multi-line launch and the macro
    assert lines[error_line - 1].startswith("  for (int i = 0; i < 10; i++) std::printf")
    lines[error_line - 1] = "  undeclared_thing(y);"
    result = _compile(tmp_path, '#line 1 "orig.cu"\n' + translate("\n".join(lines)))
    assert result.returncode != 0
    assert re.search(rf"orig\.cu:{error_line}:\d+: error: .*undeclared_thing", result.stderr), result.stderr
