"""The build record (aotbench.build.manifest): one typed record per build, read once; one check of what changed
since the build, raised alike by the views of the code, travel and the MindSpore export; one way to carry a
lambda rule to another process."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.build import cache
from aotbench.build.compile import build, describe_change
from aotbench.build.hostflags import Resolution
from aotbench.build.manifest import Dependency, Manifest
from aotbench.errors import SourceChangedError
from aotbench.op.travel import Parcel, TravellingOp, pack
from aotbench.spec.pickling import CloudCallable, portable_spec, restored_spec
from aotbench.spec.spec import OpSpec
from aotbench.tools import compute_sanitizer

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ on PATH")

KERNEL = """#include <cstdint>
#include "custom_aot_extra.h"
#include "factor.h"
extern "C" int Scale(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                     void *extra) {
  const float *x = static_cast<const float *>(params[0]);
  float *o = static_cast<float *>(params[1]);
  for (int64_t i = 0; i < shapes[0][0]; i++) o[i] = x[i] * factor();
  return 0;
}
"""


def write_kernel(folder: Path, factor: float) -> Path:
    """A kernel in ``folder/src`` whose factor comes from ``folder/inc/factor.h`` (an -I folder)."""
    (folder / "src").mkdir(parents=True, exist_ok=True)
    (folder / "inc").mkdir(parents=True, exist_ok=True)
    (folder / "inc" / "factor.h").write_text(f"#pragma once\ninline float factor() {{ return {factor!r}f; }}\n")
    (folder / "src" / "k.cc").write_text(KERNEL)
    return folder / "src" / "k.cc"


def make_op(folder: Path, factor: float):
    source = write_kernel(folder, factor)
    return aotbench.Custom(f"{source}:Scale", lambda s: s, np.float32, flags=["-O1", f"-I{folder / 'inc'}"],
                           cache_dir=folder / "cache")


def random_record(rng: np.random.Generator, gpu: bool) -> Manifest:
    """A record with every field set to fresh values (a CUDA build's fields too when ``gpu``)."""
    def word() -> str:
        return "".join(rng.choice(list("abcdefxyz"), 8))

    def digest() -> str:
        return bytes(rng.integers(0, 256, 32, dtype=np.uint8)).hex()

    return Manifest(
        source=f"/src/{word()}.cc", argv=("g++", "-o", f"/cache/{word()}.so", f"/src/{word()}.cc", "-O2"),
        log=word(), artifact_sha256=digest(), build_time_s=float(rng.uniform(0, 9)),
        dependencies=tuple(Dependency(f"/inc/{word()}.h", digest()) for _ in range(int(rng.integers(1, 4)))),
        key=word(), base_key=digest()[:32], source_sha256=digest(), argv_run=("g++", word()), compiler=word(),
        aotbench_version=aotbench.__version__, header_version=int(rng.integers(1, 9)),
        created=float(rng.uniform(1e9, 2e9)), native=Resolution(("-march=native",), word(), "gcc"),
        arch_reason=word() if gpu else None,
        resource_usage=({"kernel": word(), "arch": "sm_90", "registers": int(rng.integers(1, 255))},) if gpu else (),
        notes=(word(),) if gpu else ())


# -- the typed record ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gpu", [False, True])
def test_a_record_round_trips_through_its_file(tmp_path, rng, gpu):
    record = random_record(rng, gpu)
    record.write(tmp_path / "m.json")
    again = Manifest.read(tmp_path / "m.json")
    assert again is not None and again.to_json() == record.to_json() == json.loads((tmp_path / "m.json").read_text())
    assert again.dependencies == record.dependencies and isinstance(again.dependencies[0], Dependency)
    assert again.argv == record.argv and isinstance(again.argv, tuple)
    assert again.native == record.native and again.build_time_s == record.build_time_s
    assert again.resource_usage == record.resource_usage and again.notes == record.notes
    assert ("arch_reason" in again) is gpu and again["key"] == record.key  # read as the dict it is written as


def test_a_build_holds_its_typed_record(tmp_path, rng):
    op = make_op(tmp_path, float(rng.uniform(1.5, 3)))
    record = op.artifact.manifest
    assert isinstance(record, Manifest) and record == Manifest.read(op.artifact.manifest_path)
    header = str(tmp_path / "inc" / "factor.h")
    assert header in {d.path for d in record.dependencies} and record.own_headers(op.artifact.path.parent) == (header,)
    assert record.argv == op.artifact.command and record.user_flags == ("-O1", f"-I{tmp_path / 'inc'}")
    hit = build(Path(op.source_path), flags=op.spec.flags, cache_dir=tmp_path / "cache")
    assert hit.cache_hit and hit.manifest == record


DAMAGE = {  # the text written in place of a whole record's JSON ``d``
    "not-json": lambda d: json.dumps(d)[:-9],
    "a-list": lambda d: json.dumps([d]),
    "argv-missing": lambda d: json.dumps({k: v for k, v in d.items() if k != "argv"}),
    "dependency-a-string": lambda d: json.dumps({**d, "dependencies": ["a.h"]}),
    "dependency-without-hash": lambda d: json.dumps({**d, "dependencies": [{"path": "a.h"}]}),
    "created-a-string": lambda d: json.dumps({**d, "created": "yesterday"}),
    "native-partial": lambda d: json.dumps({**d, "native": {"flags": []}}),
    "time-negative": lambda d: json.dumps({**d, "build_time_s": -1.0}),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_or_partial_record_is_none(tmp_path, rng, damage):
    path = tmp_path / "m.json"
    random_record(rng, gpu=True).write(path)
    path.write_text(DAMAGE[damage](json.loads(path.read_text())))
    assert Manifest.read(path) is None
    assert Manifest.read(tmp_path / "missing.json") is None


def test_the_record_is_read_once_per_artifact(tmp_path, rng, monkeypatch):
    """A cache hit reads the record with the library and keeps it: later reads, a damaged file or a pruned cache
    change nothing it says."""
    first = make_op(tmp_path, float(rng.uniform(1.5, 3))).artifact
    hit = build(Path(first.manifest["source"]), flags=first.manifest.user_flags, cache_dir=tmp_path / "cache")
    assert hit.cache_hit
    reads = []
    real = cache.read_json
    monkeypatch.setattr(cache, "read_json", lambda path: reads.append(path) or real(path))
    record = hit.manifest
    hit.manifest_path.write_text("{}")
    assert hit.manifest is record and first.manifest is first.manifest and reads == []
    hit.manifest_path.unlink()
    assert hit.manifest.source_sha256 == first.manifest.source_sha256 and reads == []
    assert describe_change(first, hit) == []


# -- one staleness check, one error -------------------------------------------------------------------------------
def refusals(op, tmp_path, x, travel: bool = True) -> list[SourceChangedError]:
    """What the views of the code, travel (unless not ``travel``) and the MindSpore export raise for ``op`` now."""
    found = []
    attempts = (op.disassemble, lambda: pickle.dumps(op), lambda: op.export_mindspore(tmp_path / "out", x))
    for attempt in attempts if travel else attempts[::2]:
        with pytest.raises(SourceChangedError) as err:
            attempt()
        found.append(err.value)
    return found


def test_a_header_edited_after_the_build_is_refused_alike_everywhere(tmp_path, rng):
    factor = float(rng.uniform(1.5, 3))
    op = make_op(tmp_path, factor)
    x = rng.standard_normal(9).astype(np.float32)
    header = tmp_path / "inc" / "factor.h"
    original = header.read_text()
    assert op.artifact.changed_files() == ()
    header.write_text(original.replace("return", "return 1.0f +"))
    assert op.artifact.changed_files() == (str(header),)
    for error in refusals(op, tmp_path, x):
        assert error.path == str(header) and "factor.h changed since" in str(error) and error.name == op.name
    header.write_text(original)  # the same bytes again: nothing changed
    assert op.artifact.changed_files() == () and isinstance(pickle.loads(pickle.dumps(op)), TravellingOp)
    header.unlink()
    assert op.artifact.changed_files() == (str(header),)
    assert all(e.path == str(header) for e in refusals(op, tmp_path, x))
    assert not (tmp_path / "out").exists()
    np.testing.assert_allclose(op(x), x * np.float32(factor), rtol=1e-6)  # the op itself still runs what it built


def test_a_source_edited_after_the_build_is_refused_by_the_views_and_the_export(tmp_path, rng):
    """The views and the export read the file, and refuse it; travel carries the text the op was built from."""
    op = make_op(tmp_path, float(rng.uniform(1.5, 3)))
    x = rng.standard_normal(5).astype(np.float32)
    source = Path(op.source_path)
    built = source.read_bytes()
    source.write_text(source.read_text().replace("= x[i]", "= 2 * x[i]"))
    assert op.artifact.changed_files() == (str(source),)
    views, export = refusals(op, tmp_path, x, travel=False)
    assert views.path == export.path == str(source)
    assert "its source changed since the op was built" in str(views)  # the views' own wording
    assert "k.cc changed since Scale was built" in str(export)  # the export's own wording
    assert pack(op).source_bytes == built


# -- one way to carry a callable ----------------------------------------------------------------------------------
def module_rule(shape):
    return shape


def call_elsewhere(payload: bytes, shape: tuple) -> str:
    """Unpickle ``payload`` (a rule, or a recipe) in a fresh Python and apply its out_shape to ``shape``."""
    code = ("import pickle, sys; x = pickle.loads(sys.stdin.buffer.read()); f = getattr(x, 'out_shape', x); "
            f"print(f({shape!r}))")
    out = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout.decode().strip()


def test_a_lambda_rule_is_carried_by_the_one_function(tmp_path, rng):
    extra = int(rng.integers(1, 50))
    spec = OpSpec("k.cc:K", out_shape=lambda s: (s[0] + extra,), out_dtype=np.float32)
    carried = portable_spec(spec, "the recipe")
    assert isinstance(carried.out_shape, CloudCallable) and carried.out_dtype is np.float32
    n = int(rng.integers(1, 1000))
    assert call_elsewhere(pickle.dumps(carried), (n,)) == str((n + extra,))
    assert restored_spec(pickle.loads(pickle.dumps(carried))).out_shape((n,)) == (n + extra,)
    plain = OpSpec("k.cc:K", out_shape=module_rule)
    assert portable_spec(plain, "the recipe") is plain  # what plain pickle carries is left as it is


def test_travel_and_the_sanitizer_carry_an_ops_lambda_the_same_way(tmp_path, rng):
    op = make_op(tmp_path, float(rng.uniform(1.5, 3)))
    n = int(rng.integers(1, 1000))
    for spec in (pack(op).spec, compute_sanitizer._travelling_spec(op)):
        assert isinstance(spec, OpSpec) and isinstance(spec.out_shape, CloudCallable)
        assert call_elsewhere(pickle.dumps(spec), (n,)) == str((n,))
    assert compute_sanitizer._travelling_spec(op).flags[-1] == "-lineinfo"


def test_a_parcel_pickled_by_an_earlier_aotbench_still_reads():
    """Parcels used to hold a recipe with a lambda as its cloudpickle bytes: such a parcel still names its op."""
    import cloudpickle

    spec = OpSpec("/nowhere/lib.so:Older", out_shape=lambda s: s)
    assert repr(TravellingOp(Parcel(cloudpickle.dumps(spec), "", b"", ()))).startswith("<aotbench.TravellingOp Older")
