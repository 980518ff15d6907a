"""``op.export_mindspore(directory, *example_inputs)``: a folder a MindSpore user drops in, with its own test.

The folder holds the kernel source and the headers it was compiled with from its own folders (``custom_aot_extra.h``
included: aotbench's, binary- and source-compatible with MindSpore's, whose wheel ships none a kernel can include,
unless the kernel had its own copy beside it), ``<name>_op.py`` with the ``CustomRegOp`` registration and a
``Cell`` calling ``ops.Custom(..., "aot", reg_info=...)``, the example inputs and aotbench's outputs (``.npz``),
and ``test_<name>.py``, which runs the op in MindSpore in PyNative and graph mode and exits non-zero unless every
output equals aotbench's bit for bit. MindSpore compiles the source with its documented command, so the outputs
saved are those of aotbench's build with that command (and its include-path flags), whatever else the op had.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..native.dtypes import dtype_string
from ..build import toolchain
from .._userframe import user_stacklevel
from ..errors import AotbenchError, ArgumentTypeError, ArgumentValueError, ExportWarning, SourceChangedError
from ..tools.accuracy import as_arrays, to_host
from .export_text import HEADER, module_text, readme_text, test_text

if TYPE_CHECKING:
    from ..op.op import Op

MARKER = "aotbench-export.json"  # lists the files an export wrote, so a new export may replace exactly those
RUN_LEFTOVERS = ("custom_kernel_meta", "__pycache__", ".pytest_cache")  # MindSpore's build, Python's, pytest's
IGNORED = ("rank_0", ".ipynb_checkpoints")  # MindSpore's graph dumps, Jupyter's: left alone, not refused


@dataclass(frozen=True)
class Export:
    """What :func:`export` wrote: the folder, its files, and the command that checks it in MindSpore."""

    directory: Path
    files: tuple[str, ...]
    test: str

    def __repr__(self) -> str:
        return (f"<MindSpore export in {self.directory}: {', '.join(self.files)}; check it in MindSpore with: "
                f"cd {self.directory} && python {self.test}>")


def _stem(text: str) -> str:
    """A file and module name for the op: lower case, letters, digits and underscores."""
    name = re.sub(r"\W", "_", text, flags=re.ASCII).strip("_").lower() or "custom_op"
    return name if not name[0].isdigit() else f"op_{name}"


def _include_flags(flags: tuple[str, ...]) -> list[str]:
    """The op's include-path flags (kept for the export's build: it needs them to find the kernel's headers)."""
    kept, pending = [], False
    for flag in flags:
        if pending or flag.startswith(toolchain.INCLUDE_OPTIONS):
            kept.append(flag)
            pending = flag in toolchain.INCLUDE_OPTIONS
    return kept


def _system_roots() -> list[Path]:
    """Where headers that every machine with a compiler has live (not copied)."""
    roots = {Path("/usr"), Path(sys.prefix), Path(sys.base_prefix), toolchain.include_dir()}
    return [r.resolve() for r in roots]


def _refuse_changed(op: Op) -> None:
    """SourceChangedError naming the first of the source and the user's headers that changed or are gone since
    the build (the build record's check): the export must hold what the op was compiled from."""
    changed = op.artifact.changed_files()
    if changed:
        raise SourceChangedError(f"{changed[0]} changed since {op.name} was built: rebuild the op (re-run its cell "
                                 "or aotbench.Custom) so that the export holds what it was compiled from",
                                 name=op.name, path=changed[0])


def _headers(op: Op, source: Path) -> dict[str, Path]:
    """The user headers ``op``'s build read, by their path in the export folder (relative to the innermost of
    the kernel's folder and its -I folders that holds them: MindSpore adds only -I<the kernel's folder>, where
    they will be); refuses a header that cannot travel (one changed since the build was refused before)."""
    ours = toolchain.include_dir().resolve()
    roots = [r for r in map(Path, toolchain.user_include_dirs(source, op.spec.flags)) if r.resolve() != ours]
    system = _system_roots()
    found: dict[str, Path] = {}
    outside = []
    for dep in op.artifact.manifest.dependencies:
        path = Path(dep.path).resolve()
        if path == source.resolve() or not path.name:
            continue
        holding = [r for r in roots if r in path.parents]
        if not holding:
            if not any(s in path.parents for s in system):
                outside.append(str(path))
            continue
        name = path.relative_to(max(holding, key=lambda r: len(r.parts))).as_posix()
        if name in found and found[name] != path:
            raise ArgumentValueError(f"{found[name]} and {path} would both be {name} in the export: give the headers "
                                "different names")
        found[name] = path
    if outside:
        raise ArgumentValueError(f"{op.name} includes {', '.join(outside)}, outside the kernel's folder and its -I "
                            "folders: MindSpore compiles with -I<the kernel's folder> only, so the export could not "
                            "find it; move it beside the kernel (or under a folder given with -I)")
    return found


def _prepare(directory: Path, source: Path) -> None:
    """Create ``directory``, or empty the files of a previous export in it; refuse anything else in it."""
    if directory.exists() and not directory.is_dir():
        raise ArgumentValueError(f"{directory} is a file: export_mindspore needs a folder (new or empty)")
    if directory.resolve() == source.parent.resolve():
        raise ArgumentValueError(f"{directory} is the kernel's own folder: export into a new folder")
    directory.mkdir(parents=True, exist_ok=True)
    for made in RUN_LEFTOVERS:  # what running the export's test leaves: stale, and not the user's
        shutil.rmtree(directory / made, ignore_errors=True)
    present = {p.relative_to(directory).as_posix() for p in directory.rglob("*")
               if p.is_file() and p.relative_to(directory).parts[0] not in IGNORED}
    if not present:
        return
    marker = directory / MARKER
    previous = set()
    if marker.is_file():
        try:
            previous = set(json.loads(marker.read_text(encoding="utf-8"))["files"]) | {MARKER}
        except (ValueError, KeyError, TypeError):
            previous = set()
    others = sorted(present - previous)
    if others:
        raise ArgumentValueError(f"{directory} is not empty ({', '.join(others[:5])}{' ...' if len(others) > 5 else ''})"
                            " and is not an earlier aotbench export: export into a new or empty folder")
    for name in previous & present:
        (directory / name).unlink()


def _refuse_bfloat16(what: str, arrays: list[np.ndarray]) -> None:
    for i, a in enumerate(arrays):
        if dtype_string(a.dtype) == "bfloat16":
            raise ArgumentTypeError(f"{what} {i} is bfloat16, which .npz cannot carry faithfully (it stores raw void "
                                "bytes): export an op with another dtype")


def export(op: Op, directory: str | Path, *example_inputs: Any) -> Export:
    """Write ``op`` as a MindSpore aot op into ``directory`` (created), checked against these example inputs."""
    if op.source_path is None or not op.artifact:
        raise ArgumentValueError(f"{op.name} was loaded from a prebuilt library: exporting needs the kernel's source "
                            "(make the op from a .cc/.cpp/.cu file or a %%aot_kernel cell)")
    if not example_inputs:
        raise ArgumentTypeError("export_mindspore(directory, *example_inputs): give the inputs to check the op with "
                            "(arrays, then the values of attributes registered without value=)")
    if not isinstance(directory, (str, Path)) or str(directory) == "":
        raise ArgumentTypeError(f"export_mindspore needs a folder path, got {directory!r}")
    spec = op.spec
    arrays, extras = op.kernel.split(example_inputs)
    host_inputs = [np.asarray(to_host(a), order="C") for a in arrays]  # 0-d stays 0-d
    _refuse_bfloat16("input", host_inputs)
    kept = _include_flags(spec.flags)
    source = Path(op.source_path)
    _refuse_changed(op)  # the documented build below compiles the files on disk
    headers = _headers(op, source)
    documented = op if list(spec.flags) == kept else op.with_flags(kept)  # MindSpore uses the documented command
    outputs = [np.asarray(to_host(o), order="C") for o in as_arrays(documented(*example_inputs))]
    _refuse_bfloat16("output", outputs)
    reg_name = spec.reg_info.name if spec.reg_info and spec.reg_info.name != "Custom" else op.name.lower()
    stem = _stem(reg_name)
    out = Path(directory)
    _prepare(out, source)
    kernel_file = f"{stem}{source.suffix}"
    files = {kernel_file: op.source}
    if HEADER not in headers:
        headers[HEADER] = toolchain.include_dir() / HEADER
    module, test = f"{stem}_op", f"test_{stem}.py"
    files[f"{module}.py"] = module_text(op, stem, reg_name, kernel_file, host_inputs, outputs, extras)
    files[test] = test_text(op, stem, module, len(outputs))
    files["README.md"] = readme_text(op, stem, module, test, kernel_file, [f for f in spec.flags if f not in kept])
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
    for name, path in headers.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(path.read_bytes())
    np.savez(out / "inputs.npz", *host_inputs)
    np.savez(out / "expected.npz", *outputs)
    written = [kernel_file, *sorted(headers), "inputs.npz", "expected.npz", f"{module}.py", test, "README.md"]
    (out / MARKER).write_text(json.dumps({"op": op.name, "files": written}, indent=1), encoding="utf-8")
    return Export(out.resolve(), tuple(written), test)


def exporting_call(op: Op, directory: Any, call, args: tuple) -> Any:
    """``call(args)``, then the export ``op.export_after_next_call(directory)`` asked for, with these arguments as
    the example (the op runs it once: :meth:`aotbench.op.op.Op.call_next_through`); a failed export warns and
    the result is kept."""
    result = call(args)
    if directory is not None:
        try:
            op.last_export = export(op, directory, *args)
        except (AotbenchError, OSError) as exc:
            warnings.warn(f"{op.name}: the export to {directory} after this call failed ({type(exc).__name__}: "
                          f"{exc}); the call's result is returned. op.export_mindspore({str(directory)!r}, *inputs) "
                          "tries again.", ExportWarning, stacklevel=user_stacklevel())
    return result
