"""op.disassemble() and op.annotate(): real g++, objdump, nvcc, cuobjdump and nvdisasm (the CUDA tools come
from PyPI with the test extra); no GPU is needed for any of it."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.tools.codeview import host_asm, binaries as tools
from aotbench.tools.codeview.inspection import CPU_EXTRA
from aotbench.errors import AotbenchError, ArgumentError, ToolchainNotFoundError

pytestmark = pytest.mark.slow

KERNELS = Path(__file__).resolve().parents[1] / "support" / "kernels"


def _marked_line(path: Path, marker: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if marker in line)


def _reference(x, y):
    out = (x * np.float32(1.5) + y).astype(np.float32)
    for i in range(1, out.size):
        out[i] = out[i] + np.float32(0.25) * out[i - 1]
    return out


@pytest.fixture
def loops(tmp_path):
    """The two-loop kernel, copied so a test may edit it, built with -O3."""
    source = tmp_path / "loops.cc"
    source.write_text((KERNELS / "codeview_loops.cc").read_text())
    return source, aotbench.Custom(f"{source}:Loops", None, np.float32, flags="-O3")


def test_disassembly_shows_the_kernel_functions_under_their_source_lines(loops, rng):
    source, op = loops
    x, y = rng.standard_normal(777, dtype=np.float32), rng.standard_normal(777, dtype=np.float32)
    before = op(x, y)
    np.testing.assert_allclose(before, _reference(x, y), rtol=1e-5, atol=1e-5)
    d = op.disassemble()
    names = [f.name for f in d.functions]
    assert names[:2] == ["Loops", "LoopsInferShape"], names
    assert not any("@plt" in n or n in ("_init", "_fini", "frame_dummy") for n in names)
    loop_line = _marked_line(source, "VECTORIZED_LOOP")
    main = d.function("Loops")
    assert f"{loop_line:5d} | " + source.read_text().splitlines()[loop_line - 1] in main
    assert re.search(r"\n        [0-9a-f]+  (?:mov|add|lea|vmov|movups|mulps|addps)", main)
    assert d.for_line(loop_line).startswith("== Loops [x86-64] ==\n") and d.for_line(loop_line).count("\n") >= 3
    at_line = [i for b in d.functions[0].blocks if b.line == loop_line for i in b.instructions]
    assert [x.strip() for x in d.for_line(loop_line).splitlines()[2:2 + len(at_line)]] == at_line
    for f in d.functions:  # a discriminator does not start a new block under the same line
        assert all((a.file, a.line) != (b.file, b.line) for a, b in zip(f.blocks, f.blocks[1:])), f.name
    assert d.kind == "asm" and "-g" in d.command and "-g" not in op.command
    assert op.artifact.path != Path(d.command[d.command.index("-o") + 1])  # a cache entry of its own
    np.testing.assert_array_equal(op(x, y), before)  # the op's library and results are untouched


def test_debug_info_does_not_change_the_code(loops):
    _, op = loops
    d = op.disassemble()
    plain = {f.name: f for f in host_asm.parse(host_asm.objdump_listing(op.library.path))}

    def code(f):
        return [i.split("  ", 1)[1] for b in f.blocks for i in b.instructions]

    for f in d.functions:
        assert code(f) == code(plain[f.name]), f.name


def test_asking_twice_is_instant_and_att_syntax_differs(loops):
    _, op = loops
    first = op.disassemble()
    started = time.perf_counter()
    again = op.disassemble()
    elapsed = time.perf_counter() - started
    assert again.text == first.text
    compile_time = op.artifact.build_time_s
    assert elapsed < max(compile_time / 4, 0.05), (elapsed, compile_time)
    att = op.disassemble(syntax="att")
    assert "%r" in att.text or "%e" in att.text
    assert "%r" not in first.text


def test_annotation_says_which_loop_vectorized_and_why_the_other_did_not(loops):
    source, op = loops
    a = op.annotate()
    vec, rec = _marked_line(source, "VECTORIZED_LOOP"), _marked_line(source, "RECURRENCE_LOOP")
    assert vec in a.vectorized_lines
    assert rec in a.not_vectorized_lines and rec not in a.vectorized_lines
    reasons = [r.message for r in a.remarks if r.line == rec and r.kind == "not vectorized"]
    assert reasons and all(reasons), a.remarks
    assert any(r.kind == "vectorized" and "vectors" in r.message for r in a.remarks if r.line == vec)
    assert re.search(rf"^\s*{vec} V \| .*VECTORIZED_LOOP", a.text, re.MULTILINE)
    assert re.search(rf"^\s*{rec} X \| .*RECURRENCE_LOOP", a.text, re.MULTILINE)
    assert not a.note


def test_annotation_without_optimisation_says_so(tmp_path):
    op = aotbench.Custom(f"{KERNELS / 'codeview_loops.cc'}:Loops", None, np.float32)
    a = op.annotate()
    assert a.vectorized_lines == []
    assert "without optimisation" in a.note and "with_flags('-O3')" in a.note


def test_compare_flags_shows_the_vectorized_lines_per_flag_set(loops, rng):
    source, op = loops
    x, y = rng.standard_normal(4096, dtype=np.float32), rng.standard_normal(4096, dtype=np.float32)
    result = aotbench.compare_flags(op, x, y, flag_sets={"-O0": [], "-O3": ["-O3"]}, budget_ms=10)
    vec = _marked_line(source, "VECTORIZED_LOOP")
    assert result.vectorized["-O0"] == "none"
    assert str(vec) in result.vectorized["-O3"].split(" (not")[0]
    assert "vectorized (source lines)" in str(result) and result.vectorized["-O3"] in result._repr_html_()


def test_views_refuse_a_source_edited_since_the_build(loops):
    source, op = loops
    source.write_text(source.read_text().replace("1.5f", "2.5f"))
    with pytest.raises(AotbenchError, match="changed since the op was built"):
        op.disassemble()
    with pytest.raises(AotbenchError, match="Re-run the cell"):
        op.annotate()


def test_bad_arguments_and_prebuilt_libraries(loops):
    _, op = loops
    with pytest.raises(ArgumentError, match="'asm'"):
        op.disassemble("sass")
    with pytest.raises(ArgumentError, match="intel"):
        op.disassemble(syntax="arm")
    prebuilt = aotbench.Custom(f"{op.artifact.path}:Loops", None, np.float32)
    d = prebuilt.disassemble()
    assert [f.name for f in d.functions][:2] == ["Loops", "LoopsInferShape"]
    with pytest.raises(ArgumentError, match="prebuilt library"):
        prebuilt.annotate()


def test_a_missing_tool_names_how_to_get_it(monkeypatch):
    monkeypatch.setattr(tools, "cuda_tool_candidates", lambda tool: [Path("/nonexistent") / tool])
    with pytest.raises(ToolchainNotFoundError, match=r"\.\[nvcc\]. in aotbench.s clone.*nvidia-cuda-nvdisasm"):
        tools.find("nvdisasm")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ToolchainNotFoundError, match="binutils"):
        tools.find("objdump")


def test_threads_asking_at_once_get_one_inspection_build(tmp_path):
    source = tmp_path / "threads.cc"
    source.write_text((KERNELS / "codeview_loops.cc").read_text().replace("1.5f", "1.75f"))
    op = aotbench.Custom(f"{source}:Loops", None, np.float32, flags="-O2")
    results, errors = [], []

    def ask():
        try:
            results.append(op.disassemble().text)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(results)) == 1 and results[0]
    root = Path(op.artifact.path).parent
    inspection_builds = [p for p in root.glob("threads-*.json") if '"-g"' in p.read_text()]
    assert len(inspection_builds) == 1


def test_html_escapes_the_source_and_never_sets_a_text_colour(loops):
    _, op = loops
    for view in (op.annotate(), op.disassemble()):
        page = view._repr_html_()
        assert "std::vector&lt;int64_t&gt;" in page and "std::vector<int64_t>" not in page
        assert not re.search(r"(?<![-\w])color\s*:", page), "text colour must come from the theme"


def test_cell_magic_shows_both_views_with_the_cells_own_line_numbers(tmp_path):
    from IPython.utils.capture import capture_output

    from ipython_shell import aotbench_shell

    cell = (KERNELS / "codeview_loops.cc").read_text()
    vec = next(n for n, line in enumerate(cell.splitlines(), 1) if "VECTORIZED_LOOP" in line)
    with aotbench_shell(tmp_path) as shell, capture_output() as captured:
        shell.run_cell_magic("aot_kernel", "cpu --out-dtype np.float32 --flags '-O3' --annotate --asm", cell)
        op = shell.user_ns["Loops"]
    shown = [o.data for o in captured.outputs]
    assert len(shown) == 2, shown
    annotation, asm = (d["text/plain"] for d in shown)
    assert re.search(rf"^\s*{vec} V \| .*VECTORIZED_LOOP", annotation, re.MULTILINE)
    assert f"{vec:5d} | " + cell.splitlines()[vec - 1] in asm
    assert op.annotate().source.is_cell and CPU_EXTRA[0] == "-g"


@pytest.mark.nvcc
def test_gpu_sass_and_ptx_per_kernel_with_source_lines_and_registers():
    source = aotbench.examples_dir() / "saxpy.cu"
    op = aotbench.Custom(f"{source}:Saxpy", lambda s0, s1: s0, np.float32, target="gpu", attrs={"a": 2.0},
                         emulate=False)
    lines = source.read_text().splitlines()
    sass = op.disassemble()
    kernels = {f.name.split("::")[-1].split("(")[0] for f in sass.functions}
    assert kernels == {"saxpy4", "saxpy_tail"}, kernels
    archs = {f.arch for f in sass.functions}
    assert archs and all(re.fullmatch(r"sm_\d+", a) for a in archs)
    gencode = " ".join(op.command)
    assert all(a in gencode for a in archs)
    tail = sass.function("saxpy_tail")
    body = next(n for n, text in enumerate(lines, 1) if "out[i] = a * x[i] + y[i]" in text and "if (i < n)" in text)
    assert f"{body:5d} | {lines[body - 1]}" in tail and re.search(r"\n        [0-9a-f]{4}  \S+", tail)
    assert re.search(r"(?:LDG|STG)", tail) and "-lineinfo" in sass.command
    ptx = op.disassemble("ptx")
    assert {f.arch for f in ptx.functions} <= {a.replace("sm_", "compute_") for a in archs} | {"compute_?"}
    assert re.search(r"ld\.global|ld\.param", ptx.function("saxpy4")) and f"{body:5d} |" in ptx.function("saxpy_tail")
    a = op.annotate()
    regs = [r for r in a.remarks if r.kind == "registers"]
    defined = {n for n, text in enumerate(lines, 1) if text.startswith("__global__")}
    assert {r.line for r in regs} <= defined and len(regs) == len(op.resources) >= 2
    assert all(re.search(r"\d+ registers, \d+ B shared", r.message) for r in regs)
    with pytest.raises(ArgumentError, match="'sass' or 'ptx'"):
        op.disassemble("asm")


def test_a_helper_above_the_kernel_in_a_cell_keeps_the_kernel_and_its_lines(tmp_path):
    """GCC 12 writes DWARF 5 line tables that binutils 2.40's objdump misreads; the inspection build asks for
    DWARF 4, so a cell's kernel is found, under the cell's own lines."""
    from IPython.utils.capture import capture_output

    from ipython_shell import aotbench_shell

    cell = ("#include \"custom_aot_extra.h\"\nstatic float sq(float v) { return v * v; }\n"
            "extern \"C\" int K(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,\n"
            "                 void *stream, void *extra) {\n"
            "  const float *x = static_cast<const float *>(params[0]);\n"
            "  float *o = static_cast<float *>(params[1]);\n"
            "  for (int64_t i = 0; i < shapes[0][0]; i++) o[i] = sq(x[i]);\n  return 0;\n}\n")
    with aotbench_shell(tmp_path) as shell, capture_output():
        shell.run_cell_magic("aot_kernel", "cpu --out-shape 'lambda s: s' --out-dtype np.float32", cell)
        op = shell.user_ns["K"]
    d = op.disassemble()
    assert [f.name for f in d.functions][:1] == ["K"], [f.name for f in d.functions]
    assert "    7 |   for (int64_t i = 0; i < shapes[0][0]; i++) o[i] = sq(x[i]);" in d.function("K")
    assert not any(f.name.startswith("_GLOBAL__sub_I") for f in d.functions)
    assert "sq" in {f.name.split("(")[0] for f in d.functions}


def test_a_helper_from_the_kernels_own_header_shows_as_the_headers(rng):
    source = KERNELS / "codeview_helper.cc"
    op = aotbench.Custom(f"{source}:Scaled", lambda s: s, np.float32, flags="-O2")
    x = rng.standard_normal(333, dtype=np.float32)
    np.testing.assert_array_equal(op(x), x * np.float32(3.0))
    d = op.disassemble()
    helper = next(f for f in d.functions if f.name.startswith("scale_into"))
    assert {Path(b.file).name for b in helper.blocks if b.file} == {"codeview_helper.h"}
    assert "[codeview_helper.h:6]" in d.function("scale_into")
    main = next(f for f in d.functions if f.name == "Scaled")
    kernel_lines = {b.line for b in main.blocks if b.file == str(source)}
    code_lines = {n for n, text in enumerate(source.read_text().splitlines(), 1)
                  if text.strip() and not text.lstrip().startswith(("//", "#"))}
    assert kernel_lines and kernel_lines <= code_lines, kernel_lines - code_lines
    a = op.annotate()
    assert "remarks are about the kernel's own headers" in a.note


def test_the_last_optimisation_flag_decides_and_remark_files_are_named(tmp_path):
    op = aotbench.Custom(f"{KERNELS / 'codeview_loops.cc'}:Loops", None, np.float32, flags="-O3 -O0")
    assert "without optimisation" in op.annotate().note and not op.annotate().vectorized_lines
    out = tmp_path / "remarks.txt"
    op = aotbench.Custom(f"{KERNELS / 'codeview_loops.cc'}:Loops", None, np.float32,
                         flags=["-O3", f"-fopt-info-all={out}"])
    assert "send GCC's remarks to a file" in op.annotate().note


def test_remarks_pair_each_failed_loop_with_the_reason_that_follows_it():
    from aotbench.tools.codeview.listing import SourceText
    from aotbench.tools.codeview.remarks import gcc_remarks
    from aotbench.tools.codeview.views import Annotation

    source = SourceText("/k/a:b.cc", "int a;\nint b;\nint c;\n")
    log = ("/k/a:b.cc:3:5: missed: couldn't vectorize loop\n"
           "/k/a:b.cc:2:9: missed: not vectorized: control flow in loop.\n"
           "/k/a:b.cc:1:1: missed: couldn't vectorize loop\n"
           "/k/a:b.cc:9:2: optimized: loop vectorized using 32 byte vectors\n"
           "/other.h:1:1: optimized: loop vectorized using 64 byte vectors\n")
    found = gcc_remarks(log, source)
    assert [(r.line, r.kind, r.message) for r in found] == [
        (1, "not vectorized", "GCC gave no reason"), (3, "not vectorized", "control flow in loop."),
        (9, "vectorized", "loop vectorized using 32 byte vectors")]
    text = Annotation(source, tuple(found), ("-O3",)).text
    assert "(line 9) vectorized: loop vectorized using 32 byte vectors" in text


def test_views_still_work_after_the_cache_is_pruned_and_refuse_before_compiling_an_edit(tmp_path):
    from aotbench.build import cache_admin

    source = tmp_path / "pruned.cc"
    source.write_text((KERNELS / "codeview_loops.cc").read_text())
    op = aotbench.Custom(f"{source}:Loops", None, np.float32, flags="-O2", cache_dir=tmp_path / "cache")
    cache_admin.prune(tmp_path / "cache", everything=True)
    assert not op.artifact.manifest_path.exists()
    assert op.disassemble().functions[0].name == "Loops"
    source.write_text(source.read_text() + "\nthis is not C++\n")
    with pytest.raises(AotbenchError, match="changed since the op was built") as err:
        op.annotate()
    assert type(err.value) is aotbench.SourceChangedError  # refused, not a CompileError of a build nobody asked for
    source.unlink()
    with pytest.raises(AotbenchError, match="the views need the op's source"):
        op.disassemble()


def test_fork_while_threads_build_does_not_hang_the_child(tmp_path):
    """A forked child inherits the lock files the parent's threads hold; it closes its copies (build.cache),
    or the lock would outlive the parent's release and the child's own build wait for ever."""
    import os
    import signal

    source = tmp_path / "forked.cc"
    source.write_text((KERNELS / "codeview_loops.cc").read_text().replace("1.5f", "1.625f"))
    op = aotbench.Custom(f"{source}:Loops", None, np.float32, flags="-O1")
    threads = [threading.Thread(target=op.disassemble) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    pid = os.fork()
    if pid == 0:  # the child: a view of its own, then out without running pytest's teardown
        code = 1
        try:
            code = 0 if op.annotate().vectorized_lines is not None and op.disassemble().functions else 1
        finally:
            os._exit(code)
    for t in threads:
        t.join()
    deadline = time.monotonic() + 120
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung waiting for a build lock")
    assert os.waitstatus_to_exitcode(done[1]) == 0


@pytest.mark.nvcc
def test_ptxas_reports_go_to_the_defining_line_or_to_no_line_when_ambiguous():
    source = KERNELS / "codeview_multi.cu"
    op = aotbench.Custom(f"{source}:Scale", lambda s: s, np.float32, target="gpu")
    lines = source.read_text().splitlines()
    bounded = next(n for n, text in enumerate(lines, 1) if "__launch_bounds__(128) bounded" in text)
    regs = [r for r in op.annotate().remarks if r.kind == "registers"]
    assert {r.line for r in regs if "bounded" in r.message} == {bounded}
    twins = [r for r in regs if "twin" in r.message]
    assert twins and {r.line for r in twins} == {0}, twins  # two kernels named twin: no line is the right one
    sass = op.disassemble()
    for f in sass.functions:
        last = [i for b in f.blocks for i in b.instructions][-1]
        assert not last.endswith(":") and "NOP" not in last, (f.name, last)
        assert f.instruction_count == sum(1 for b in f.blocks for i in b.instructions if not i.endswith(":"))
