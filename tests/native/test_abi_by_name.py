"""The native host's ABI checked by name: its outcome codes and attribute kinds against the Python enums, its
``struct AotbCall`` against ``CallRecord`` field by field; and no C++ exception from an attribute setter reaches
ctypes (an out-of-memory attribute is an error, not an abort).

The out-of-memory cases run in a child process whose address space is capped (``RLIMIT_AS``) just below what
the host's copy of one large attribute needs.
"""

from __future__ import annotations

import ctypes
import enum
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from aotbench.build.compile import build
from aotbench.build.native_runtime import get_runtime
from aotbench.errors import LoadError
from aotbench.native import runtime
from aotbench.native.attrs import AttrKind
from aotbench.native.runtime import CallRecord, Outcome

KERNELS = Path(__file__).resolve().parents[1] / "support" / "kernels"


@pytest.fixture(scope="module")
def host(session_cache):
    return get_runtime()


# -- outcome codes and attribute kinds ------------------------------------------------------------------------
def test_enums_match_the_host_by_name(host):
    """The host's tables hold exactly the enums' names with the same values, flag bits included, and the module
    constants other layers import are the enum's members."""
    assert runtime.native_names(host.lib.aotb_outcomes) == {m.name: m.value for m in Outcome}
    assert runtime.native_names(host.lib.aotb_attr_kinds) == {m.name: m.value for m in AttrKind}
    for name in ("OK", "STATUS", "EXCEPTION", "ATTR_ERROR", "TOO_SMALL", "BAD_BUFFER", "BUSY", "INTERRUPTED",
                 "NO_MEMORY", "FP_CHANGED", "SIGNALS_CHANGED"):
        assert getattr(runtime, name) is Outcome[name]
    assert runtime.STATE_CHANGED == Outcome.FP_CHANGED | Outcome.SIGNALS_CHANGED


def test_swapped_outcome_values_are_named(host, rng):
    """Two codes with their values swapped: the same set of numbers, refused by name."""
    native = runtime.native_names(host.lib.aotb_outcomes)
    first, second = rng.choice(sorted(native), size=2, replace=False)
    members = {name: native[second] if name == first else native[first] if name == second else value
               for name, value in native.items()}
    swapped = enum.IntEnum("Outcome", members)
    with pytest.raises(LoadError) as info:
        runtime.check_names(swapped, native, "host.so")
    assert str(first) in str(info.value) or str(second) in str(info.value)
    assert "runtime.cc" in str(info.value) and "host.so" in str(info.value)


@pytest.mark.parametrize("change", ["missing", "extra"])
def test_missing_or_extra_outcome_is_named(host, rng, change):
    native = runtime.native_names(host.lib.aotb_outcomes)
    members = dict(native)
    if change == "missing":
        gone = str(rng.choice(sorted(native)))
        del members[gone]
        expected = gone
    else:
        expected = "SOMETHING_NEW"
        members[expected] = int(rng.integers(9, 0x100))
    with pytest.raises(LoadError, match=expected):
        runtime.check_names(enum.IntEnum("Outcome", members), native, "host.so")


# -- struct AotbCall ------------------------------------------------------------------------------------------
def same_size_pairs() -> list[tuple[int, int]]:
    """Index pairs of CallRecord fields of equal size (swapping them keeps sizeof)."""
    fields = CallRecord._fields_
    return [(i, j) for i in range(len(fields)) for j in range(i + 1, len(fields))
            if ctypes.sizeof(fields[i][1]) == ctypes.sizeof(fields[j][1])]


def record_with(fields: list) -> type[ctypes.Structure]:
    return type("WrongRecord", (ctypes.Structure,), {"_fields_": fields})


def test_call_record_matches_the_host(host):
    layout = runtime.native_call_layout(host.lib)
    assert [name for name, *_ in layout] == [name for name, _ in CallRecord._fields_]
    runtime.check_layout(CallRecord, layout, host.lib.aotb_host_call_size(), "host.so")


def test_swapped_fields_of_one_size_are_named(host, rng):
    """Swapping two fields of the same size keeps sizeof (what was checked before) but not the layout."""
    pairs = same_size_pairs()
    i, j = pairs[int(rng.integers(len(pairs)))]
    fields = list(CallRecord._fields_)
    fields[i], fields[j] = fields[j], fields[i]
    wrong = record_with(fields)
    assert ctypes.sizeof(wrong) == ctypes.sizeof(CallRecord)
    with pytest.raises(LoadError) as info:
        runtime.check_layout(wrong, runtime.native_call_layout(host.lib), host.lib.aotb_host_call_size(), "host.so")
    assert repr(fields[j][0]) in str(info.value), (fields[i][0], fields[j][0])  # the first field out of place


@pytest.mark.parametrize("change", ["renamed", "dropped", "added"])
def test_renamed_dropped_or_added_field_is_named(host, rng, change):
    fields = list(CallRecord._fields_)
    k = int(rng.integers(len(fields)))
    name = fields[k][0]
    if change == "renamed":
        fields[k] = (name + "_renamed", fields[k][1])
    elif change == "dropped":
        del fields[k]
    else:
        fields.append((name := "surplus", ctypes.c_int64))
    with pytest.raises(LoadError, match=repr(name)):
        runtime.check_layout(record_with(fields), runtime.native_call_layout(host.lib),
                             host.lib.aotb_host_call_size(), "host.so")


def edited_host(tmp_path: Path, edits: list[tuple[str, str]]) -> Path:
    """The host's source with ``edits`` (old, new) applied, built into ``tmp_path``."""
    text = runtime.source_path().read_text()
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    source = tmp_path / "runtime_edited.cc"
    source.write_text(text)
    return build(source, flags=("-O2",), cache_dir=tmp_path / "cache").path


@pytest.mark.parametrize("edits, named", [
    ([("  int32_t n_in;  ", "  int32_t n_out_;  "), ("  int32_t n_out;\n", "  int32_t n_in;\n"),
      ("  int32_t n_out_;  ", "  int32_t n_out;  "),
      ("AOTB_CALL_FIELD(n_in),    AOTB_CALL_FIELD(n_out)", "AOTB_CALL_FIELD(n_out),    AOTB_CALL_FIELD(n_in)")],
     "'n_out'"),
    ([("X(BUSY, 6)", "X(BUSY, 9)")], "BUSY"),
])
def test_a_host_built_otherwise_is_refused_at_load(tmp_path, edits, named):
    """A real host compiled with two int32 fields swapped (same size as before) or a code renumbered: Runtime
    refuses it before any call, naming the difference."""
    with pytest.raises(LoadError, match=named) as info:
        runtime.Runtime(edited_host(tmp_path, edits))
    assert "delete" in str(info.value)


# -- no C++ exception into ctypes -----------------------------------------------------------------------------
CHILD_PRELUDE = """
import resource
import numpy as np
from aotbench.build.native_runtime import get_runtime
from aotbench.native.attrs import AttrKind, TypedAttr

SIZE = 256 << 20  # bytes of the large attribute


def address_space() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024


def cap(headroom: int) -> None:
    # Room for `headroom` more bytes of address space and half the host's copy: that copy fails.
    resource.setrlimit(resource.RLIMIT_AS, (address_space() + headroom + SIZE // 2, resource.RLIM_INFINITY))


def uncap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
"""


def run_child(body: str) -> subprocess.CompletedProcess:
    script = CHILD_PRELUDE + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONFAULTHANDLER": ""})


def assert_survived(result: subprocess.CompletedProcess) -> list[str]:
    assert result.returncode == 0, f"child died ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    assert "terminate called" not in result.stderr
    return result.stdout.splitlines()


@pytest.mark.parametrize("kind", ["STR", "INT_VEC", "FLOAT_VEC"])
def test_an_attribute_too_large_for_memory_raises(session_cache, rng, kind):
    """The host's copy of a string or list attribute hits std::bad_alloc: an AttrError naming the attribute (its
    cause a MemoryError), not an abort; the process goes on and stores the next attribute."""
    seed = int(rng.integers(2**31))
    result = run_child(f"""
        rng = np.random.default_rng({seed})
        host = get_runtime()
        kind = AttrKind.{kind}
        if kind is AttrKind.STR:  # the host is handed an encoded copy: room for it
            value, headroom = "".join(rng.choice(list("abcxyz"), 64)) * (SIZE // 64), SIZE
        elif kind is AttrKind.INT_VEC:
            value, headroom = rng.integers(-2**62, 2**62, SIZE // 8), 0
        else:
            value, headroom = rng.standard_normal(SIZE // 4).astype(np.float32), 0
        cap(headroom)
        try:
            host.new_extra([TypedAttr("small", AttrKind.INT, 3), TypedAttr("huge_attr", kind, value)])
        except Exception as exc:
            print(type(exc).__name__, "|", isinstance(exc, MemoryError), "|", type(exc.__cause__).__name__, "|", exc)
        uncap()
        host.free_extra(host.new_extra([TypedAttr("after", AttrKind.STR, "fine")]))
        print("alive")
    """)
    lines = assert_survived(result)
    assert lines[-1] == "alive", lines
    name, is_memory_error, cause, message = lines[0].split(" | ", 3)
    assert name == "AttrMemoryError" and is_memory_error == "True" and cause == "MemoryError", lines
    assert "'huge_attr'" in message and "does not fit in memory" in message and "input array" in message


@pytest.mark.parametrize("setter", ["aotb_extra_set_int_2d", "aotb_extra_set_float_2d"])
def test_a_2d_attribute_too_large_for_memory_is_an_outcome(session_cache, rng, setter):
    """The 2-D setters, called directly on zeroed memory (no Python copy to make room for), return NO_MEMORY."""
    rows = int(rng.integers(2, 6))
    result = run_child(f"""
        from aotbench.native.runtime import Outcome
        host = get_runtime()
        dtype = np.int64 if "{setter}".endswith("int_2d") else np.float32
        flat = np.zeros(SIZE // dtype().itemsize, dtype)
        lengths = np.full({rows}, flat.size // {rows}, np.int64)
        extra = host.new_extra([])
        cap(0)
        code = host.lib.{setter}(extra, b"rows", flat.ctypes.data, lengths.ctypes.data, {rows})
        uncap()
        print(Outcome(code).name, host.lib.aotb_error_message().decode())
        host.free_extra(extra)
        print("alive")
    """)
    lines = assert_survived(result)
    assert lines == ["NO_MEMORY std::bad_alloc", "alive"], lines


def test_an_op_with_a_huge_string_attribute_raises_then_runs(session_cache, rng):
    """Through the public path: the op's first call raises (the plan's extra cannot hold the attribute); with
    memory back, the same op runs and its kernel reads a neighbouring attribute."""
    n = int(rng.integers(-2**40, 2**40))
    source = KERNELS / "op_attrs.cc"
    result = run_child(f"""
        import aotbench
        op = aotbench.Custom("{source}:Echo", (4096,), np.int64,
                             attrs={{"read": "i:n", "n": {n}, "huge_attr": "ab" * (SIZE // 2)}})
        x = np.random.default_rng({n % 1000}).standard_normal(3).astype(np.float32)
        cap(SIZE)
        try:
            op(x)
        except aotbench.AotbenchError as exc:
            print(type(exc).__name__, "|", type(exc.__cause__).__name__)
        uncap()
        print(int(op(x)[0]))
    """)
    lines = assert_survived(result)
    assert lines == ["AttrMemoryError | MemoryError", str(n)], (lines, result.stderr)
