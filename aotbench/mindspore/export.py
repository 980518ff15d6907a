"""``op.export_mindspore(directory, *example_inputs)``: a folder a MindSpore user drops in, with its own test.

The folder holds the kernel source (and the headers it includes from its own folder), aotbench's
``custom_aot_extra.h`` (binary- and source-compatible with MindSpore's; MindSpore's wheel ships none a kernel can
include), ``<name>_op.py`` with the ``CustomRegOp`` registration and a ``Cell`` calling
``ops.Custom(..., "aot", reg_info=...)``, the example inputs and aotbench's outputs (``.npz``), and
``test_<name>.py``, which runs the op in MindSpore in PyNative and graph mode and exits non-zero unless every
output equals aotbench's bit for bit. MindSpore compiles the source with its documented command, so the
outputs saved are those of aotbench's build with that command, whatever flags the op itself was built with.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._version import __version__
from ..abi.dtypes import dtype_string
from ..call.reg import _SHORT
from ..errors import ArgumentError
from ..measure.accuracy import as_arrays, to_host

if TYPE_CHECKING:
    from ..op.op import Op

_DATATYPE = {dtype: f"DataType.{short}_Default" for short, dtype in _SHORT.items()}
HEADER = "custom_aot_extra.h"


@dataclass(frozen=True)
class Export:
    """What :func:`export` wrote: the folder, its files, and the command that checks it in MindSpore."""

    directory: Path
    files: tuple[str, ...]
    test: str

    def __repr__(self) -> str:
        return (f"<MindSpore export in {self.directory}: {', '.join(self.files)}; check it in MindSpore with: "
                f"cd {self.directory} && python {self.test}>")


def _identifier(text: str) -> str:
    name = re.sub(r"\W", "_", text).strip("_").lower() or "custom_op"
    return name if not name[0].isdigit() else f"op_{name}"


def _literal(value: Any) -> str:
    """A Python literal for an attribute value (tuples as lists, as MindSpore users write them)."""
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return repr(value.item() if isinstance(value, np.generic) else value)


def _mstype(dtype: np.dtype) -> str:
    name = dtype_string(np.dtype(dtype))
    return "mstype.bool_" if name == "bool" else f"mstype.{name}"


def export(op: Op, directory: str | Path, *example_inputs: Any) -> Export:
    """Write ``op`` as a MindSpore aot op into ``directory`` (created), checked against these example inputs."""
    if op.source_path is None or not op.artifact:
        raise ArgumentError(f"{op.name} was loaded from a prebuilt library: exporting needs the kernel's source "
                            "(make the op from a .cc/.cpp/.cu file or a %%aot_kernel cell)")
    if not example_inputs:
        raise ArgumentError("export_mindspore(directory, *example_inputs): give the inputs to check the op with "
                            "(arrays, then the values of attributes registered without value=)")
    spec = op.spec
    arrays, extras = op._arrays_and_extras(example_inputs)
    host_inputs = [np.ascontiguousarray(to_host(a)) for a in arrays]
    for i, a in enumerate(host_inputs):
        if dtype_string(a.dtype) == "bfloat16":
            raise ArgumentError(f"input {i} is bfloat16: numpy's .npz and MindSpore's Tensor(numpy) do not agree on "
                                "it; export with another dtype")
    documented = op.with_flags(None) if spec.flags else op  # MindSpore compiles with the documented command
    result = documented(*example_inputs)
    outputs = [np.ascontiguousarray(to_host(o)) for o in as_arrays(result)]
    name = _identifier(spec.reg_info.name if spec.reg_info and spec.reg_info.name != "Custom" else op.name)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    source = Path(op.source_path)
    kernel_file = f"{name}{source.suffix}"
    (out / kernel_file).write_text(op.source)
    files = [kernel_file, HEADER]
    shutil.copyfile(Path(__file__).resolve().parents[1] / "abi" / "include" / HEADER, out / HEADER)
    for dep in op.artifact.manifest.get("dependencies", []):
        path = Path(dep.get("path", ""))
        if path.name != HEADER and path != source and source.parent in path.parents:
            target = out / path.relative_to(source.parent)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            files.append(str(path.relative_to(source.parent)))
    np.savez(out / "inputs.npz", *host_inputs)
    np.savez(out / "expected.npz", *outputs)
    module = f"{name}_op"
    (out / f"{module}.py").write_text(_module_text(op, name, kernel_file, host_inputs, outputs, extras))
    test = f"test_{name}.py"
    (out / test).write_text(_test_text(op, name, module, len(outputs)))
    (out / "README.md").write_text(_readme_text(op, name, module, test, kernel_file))
    files += ["inputs.npz", "expected.npz", f"{module}.py", test, "README.md"]
    return Export(out.resolve(), tuple(files), test)


def _registration(op: Op, name: str, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> list[str]:
    spec = op.spec
    reg = spec.reg_info
    in_names = list(reg.inputs) if reg and reg.inputs else [f"x{i}" for i in range(len(inputs))]
    out_names = list(reg.outputs) if reg and reg.outputs else [f"y{i}" for i in range(len(outputs))]
    lines = [f'REG_INFO = (CustomRegOp("{name}")']
    lines += [f'            .input({i}, "{n}")' for i, n in enumerate(in_names)]
    lines += [f'            .output({i}, "{n}")' for i, n in enumerate(out_names)]
    rows = list(reg.dtype_formats) if reg and reg.dtype_formats else []
    example = tuple(dtype_string(a.dtype) for a in inputs + outputs)
    if example not in rows and not any(all(w in ("", h) for w, h in zip(r, example)) for r in rows):
        rows.append(example)
    for row in rows:
        lines.append("            .dtype_format(" + ", ".join(_DATATYPE.get(d, "DataType.None_None") for d in row) + ")")
    for attr in spec.attrs:
        lines.append(f'            .attr("{attr.name}", "required", "all", value={_literal(attr.value)})')
    for attr_name in spec.call_attrs:
        lines.append(f'            .attr("{attr_name}", "required", "all")  # given with each call')
    lines.append(f'            .target("{spec.target.upper()}")')
    lines.append("            .get_op_info())")
    return lines


def _module_text(op: Op, name: str, kernel_file: str, inputs, outputs, extras) -> str:
    spec = op.spec
    rule = spec.out_shape
    note = ""
    if rule is None:
        shape_text = "None  # the kernel's InferShape decides"
    elif callable(rule):
        shapes = [list(o.shape) for o in outputs]
        shape_text = repr(tuple(shapes) if spec.returns_tuple else shapes[0])
        note = ("# out_shape was a Python function in aotbench; these are its shapes for the example inputs.\n"
                "# Give MindSpore a function of the input shapes (or an InferShape) for other shapes.\n")
    else:
        shape_text = repr(rule)
    dtypes = [_mstype(o.dtype) for o in outputs]
    dtype_text = "(" + ", ".join(dtypes) + ",)" if spec.returns_tuple else dtypes[0]
    params = ", ".join(f"x{i}" for i in range(len(inputs)))
    call_attrs = list(spec.call_attrs)
    init_args = "".join(f", {a}={_literal(v)}" for a, v in zip(call_attrs, extras))
    stored = "".join(f"\n        self.{a} = {a}" for a in call_attrs)
    call_args = params + "".join(f", self.{a}" for a in call_attrs)
    func = f"{op.name}"
    lines = [
        f'"""{op.name} as a MindSpore aot op, exported by aotbench {__version__}.',
        "",
        f"MindSpore compiles {kernel_file} itself (with its documented command) the first time the op is made;",
        f"{HEADER} beside it is aotbench's, binary- and source-compatible with MindSpore's.",
        '"""',
        "",
        "import os",
        "",
        "from mindspore import nn, ops",
        "from mindspore.common import dtype as mstype",
        "from mindspore.ops import CustomRegOp, DataType",
        "",
        "HERE = os.path.dirname(os.path.abspath(__file__))",
        f'KERNEL = os.path.join(HERE, "{kernel_file}") + ":{func}"',
        "",
        *_registration(op, name, inputs, outputs),
        "",
        f"{note}OUT_SHAPE = {shape_text}",
        f"OUT_DTYPE = {dtype_text}",
        "",
        "",
        f"class {_class_name(name)}(nn.Cell):",
        f'    """{op.name}: {len(inputs)} input(s), {len(outputs)} output(s)."""',
        "",
        f"    def __init__(self{init_args}):",
        "        super().__init__()",
        f'        self.op = ops.Custom(KERNEL, OUT_SHAPE, OUT_DTYPE, "aot", reg_info=REG_INFO){stored}',
        "",
        f"    def construct(self, {params}):",
        f"        return self.op({call_args})",
        "",
    ]
    return "\n".join(lines)


def _class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_")) + "Net"


def _test_text(op: Op, name: str, module: str, n_outputs: int) -> str:
    target = op.spec.target.upper()
    return f'''"""Runs {op.name} in MindSpore, PyNative and graph mode, on the saved inputs; exits non-zero unless every
output equals what aotbench computed, bit for bit (exported by aotbench {__version__}).

    python test_{name}.py     or     pytest test_{name}.py
"""

import os
import sys

import numpy as np

import mindspore as ms

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from {module} import {_class_name(name)}  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name):
    with np.load(os.path.join(HERE, name)) as data:
        return [data[f"arr_{{i}}"] for i in range(len(data.files))]


INPUTS = _load("inputs.npz")
EXPECTED = _load("expected.npz")


def differences(mode):
    """The ways MindSpore's outputs in ``mode`` differ from aotbench's (an empty list when they are equal)."""
    ms.set_context(mode=mode)
    ms.set_device("{target}")
    net = {_class_name(name)}()
    result = net(*[ms.Tensor(a) for a in INPUTS])
    got = [t.asnumpy() for t in (result if isinstance(result, (tuple, list)) else (result,))]
    if len(got) != len(EXPECTED):
        return [f"{{len(got)}} outputs, expected {{len(EXPECTED)}}"]
    found = []
    for i, (g, e) in enumerate(zip(got, EXPECTED)):
        if g.shape != e.shape or g.dtype != e.dtype:
            found.append(f"output {{i}}: {{g.dtype}}{{list(g.shape)}}, expected {{e.dtype}}{{list(e.shape)}}")
        elif g.tobytes() != e.tobytes():
            bad = int(np.sum(g != e)) if g.dtype.kind != "f" else int(np.sum(~((g == e) | (np.isnan(g) & np.isnan(e)))))
            found.append(f"output {{i}}: {{bad}} of {{e.size}} values differ from aotbench's")
    return found


def test_pynative():
    assert differences(ms.PYNATIVE_MODE) == []


def test_graph():
    assert differences(ms.GRAPH_MODE) == []


def main():
    failed = 0
    for label, mode in (("PYNATIVE", ms.PYNATIVE_MODE), ("GRAPH", ms.GRAPH_MODE)):
        found = differences(mode)
        failed += bool(found)
        print(f"{op.name} {{label}}: " + ("; ".join(found) if found else
              f"{n_outputs} output(s) equal aotbench's bit for bit"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
'''


def _readme_text(op: Op, name: str, module: str, test: str, kernel_file: str) -> str:
    flags = " ".join(op.spec.flags)
    flags_note = (f"\naotbench built this op with `{flags}` as well; MindSpore's automatic compilation uses only its "
                  "documented command, so the saved outputs come from aotbench's build with that command. To use "
                  "the flags in MindSpore, build the library yourself and give `ops.Custom` its path.\n"
                  if flags else "")
    return f"""# {op.name}, exported from aotbench {__version__}

- `{kernel_file}`: the kernel; `{HEADER}`: the header it includes (aotbench's, compatible with MindSpore's).
- `{module}.py`: the `CustomRegOp` registration and `{_class_name(name)}`, a `Cell` calling
  `ops.Custom(..., "aot", reg_info=REG_INFO)`.
- `inputs.npz`, `expected.npz`: the example inputs and aotbench's outputs for them.
- `{test}`: runs the op in MindSpore in PyNative and graph mode; exits non-zero unless the outputs equal
  aotbench's bit for bit. Run `python {test}` (or `pytest {test}`) where MindSpore is installed.
{flags_note}"""
