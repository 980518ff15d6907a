"""The files of a MindSpore export, as text: the ``<name>_op.py`` module (registration and Cell), the
``test_<name>.py`` that checks MindSpore against aotbench's saved outputs, and the folder's README.

Every name and string is written with ``repr`` and every attribute value with :func:`literal` (numpy scalars and
arrays as Python numbers and lists, NaN and infinities as ``float(...)``), so the files are valid Python, needing
no import, for the names and values aotbench accepts.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .._version import __version__
from ..native.dtypes import dtype_string
from ..spec.registration import _SHORT

if TYPE_CHECKING:
    from ..op.op import Op

_DATATYPE = {dtype: f"DataType.{short}_Default" for short, dtype in _SHORT.items()}
HEADER = "custom_aot_extra.h"


def literal(value: Any) -> str:
    """A Python literal for an attribute value (tuples as lists, as MindSpore users write them)."""
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, np.ndarray):
        return literal(value.tolist())
    value = value.item() if isinstance(value, np.generic) else value
    if isinstance(value, float) and not math.isfinite(value):
        return "float('nan')" if math.isnan(value) else ("float('inf')" if value > 0 else "-float('inf')")
    return repr(value)


def _value_type(declared: str | None) -> str:
    """A registration's value_type as Python source ("all" where it declared none)."""
    return json.dumps(declared if declared is not None else "all")


def mstype_name(dtype: np.dtype) -> str:
    name = dtype_string(np.dtype(dtype))
    return "mstype.bool_" if name == "bool" else f"mstype.{name}"


def class_name(stem: str) -> str:
    return "".join(part.capitalize() for part in stem.split("_")) + "Net"


def registration(op: Op, reg_name: str, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> list[str]:
    """The ``REG_INFO = (CustomRegOp(...)...get_op_info())`` lines."""
    spec = op.spec
    reg = spec.reg_info
    in_names = list(reg.inputs) if reg and reg.inputs else [f"x{i}" for i in range(len(inputs))]
    out_names = list(reg.outputs) if reg and reg.outputs else [f"y{i}" for i in range(len(outputs))]
    lines = [f"REG_INFO = (CustomRegOp({reg_name!r})"]
    lines += [f"            .input({i}, {n!r})" for i, n in enumerate(in_names)]
    lines += [f"            .output({i}, {n!r})" for i, n in enumerate(out_names)]
    rows = list(reg.dtype_formats) if reg and reg.dtype_formats else []
    example = tuple(dtype_string(a.dtype) for a in inputs + outputs)
    if not any(all(w in ("", h) for w, h in zip(r, example)) for r in rows):
        rows.append(example)  # MindSpore refuses a registration without one
    for row in rows:
        lines.append("            .dtype_format(" + ", ".join(_DATATYPE.get(d, "DataType.None_None") for d in row) + ")")
    declared = reg.declared if reg else {}  # the value_types the registration gave, kept ("all" where none)
    for attr in spec.attrs:
        lines.append(f'            .attr({attr.name!r}, "required", {_value_type(attr.declared)}, '
                     f'value={literal(attr.value)})')
    for attr_name in spec.call_attrs:
        lines.append(f'            .attr({attr_name!r}, "required", {_value_type(declared.get(attr_name))})  '
                     '# given with each call')
    lines.append(f'            .target("{spec.target.upper()}")')
    lines.append("            .get_op_info())")
    return lines


def output_rules(op: Op, outputs: list[np.ndarray]) -> tuple[str, str, str]:
    """(note, ``OUT_SHAPE`` text, ``OUT_DTYPE`` text) in the forms MindSpore 2.10 takes together: both tuples for
    a tuple of outputs, both single for one output; ``None`` with a tuple of dtypes only for several outputs."""
    spec = op.spec
    dtypes = [mstype_name(o.dtype) for o in outputs]
    several = len(outputs) > 1
    if spec.out_shape is None:
        dtype_text = "(" + ", ".join(dtypes) + ",)" if several else dtypes[0]
        return "", "None  # the kernel's InferShape decides", dtype_text
    shapes = [tuple(int(d) for d in o.shape) for o in outputs]
    note = ("# out_shape was a Python function in aotbench; these are its shapes for the example inputs.\n"
            "# Give MindSpore a function of the input shapes (or an InferShape) for other shapes.\n"
            if callable(spec.out_shape) else "")
    if spec.returns_tuple:
        return note, repr(tuple(shapes)), "(" + ", ".join(dtypes) + ",)"
    return note, repr(shapes[0]), dtypes[0]


def module_text(op: Op, stem: str, reg_name: str, kernel_file: str, inputs, outputs, extras) -> str:
    """``<stem>_op.py``: the registration, the output rules and a Cell calling the op."""
    spec = op.spec
    note, shape_text, dtype_text = output_rules(op, outputs)
    params = ", ".join(f"x{i}" for i in range(len(inputs)))
    call_attrs = [f"attr_{a}" for a in spec.call_attrs]  # never a keyword, a builtin or one of the Cell's names
    init_args = "".join(f", {a}={literal(v)}" for a, v in zip(call_attrs, extras))
    stored = "".join(f"\n        self.{a} = {a}" for a in call_attrs)
    call_args = params + "".join(f", self.{a}" for a in call_attrs)
    lines = [
        f'"""{op.name} as a MindSpore aot op, exported by aotbench {__version__}.',
        "",
        f"MindSpore compiles {kernel_file} itself (with its documented command) the first time the op is made;",
        f"{HEADER} beside it is the header the kernel was built against.",
        '"""',
        "",
        "import os",
        "",
        "from mindspore import nn, ops",
        "from mindspore.common import dtype as mstype",
        "from mindspore.ops import CustomRegOp, DataType",
        "",
        "HERE = os.path.dirname(os.path.abspath(__file__))",
        f"KERNEL = os.path.join(HERE, {kernel_file!r}) + {':' + op.name!r}",
        "",
        *registration(op, reg_name, inputs, outputs),
        "",
        f"{note}OUT_SHAPE = {shape_text}",
        f"OUT_DTYPE = {dtype_text}",
        "",
        "",
        f"class {class_name(stem)}(nn.Cell):",
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


_TEST = '''"""Runs {func} in MindSpore, PyNative and graph mode, on the saved inputs; exits non-zero unless every
output equals what aotbench computed, bit for bit (exported by aotbench {version}).

    python test_{stem}.py     or     pytest test_{stem}.py
"""

import os
import sys

import numpy as np

import mindspore as ms

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from {module} import {net}  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name):
    with np.load(os.path.join(HERE, name)) as data:
        return [data["arr_%d" % i] for i in range(len(data.files))]


INPUTS = _load("inputs.npz")
EXPECTED = _load("expected.npz")


def differences(mode):
    """The ways MindSpore's outputs in ``mode`` differ from aotbench's (an empty list when they are equal)."""
    ms.set_context(mode=mode)
    ms.set_device({target!r})
    result = {net}()(*[ms.Tensor(a) for a in INPUTS])
    got = [t.asnumpy() for t in (result if isinstance(result, (tuple, list)) else (result,))]
    if len(got) != len(EXPECTED):
        return ["%d outputs, expected %d" % (len(got), len(EXPECTED))]
    found = []
    for i, (g, e) in enumerate(zip(got, EXPECTED)):
        if g.shape != e.shape or g.dtype != e.dtype:
            found.append("output %d: %s%s, expected %s%s" % (i, g.dtype, list(g.shape), e.dtype, list(e.shape)))
        elif g.tobytes() != e.tobytes():
            same = (g == e) | (np.isnan(g) & np.isnan(e)) if g.dtype.kind in "fc" else g == e
            found.append("output %d: %d of %d values differ from aotbench's" % (i, int(np.sum(~same)), e.size))
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
        print({func!r} + " " + label + ": " + ("; ".join(found) if found else
              "{n_outputs} output(s) equal aotbench's bit for bit"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
'''


def test_text(op: Op, stem: str, module: str, n_outputs: int) -> str:
    """``test_<stem>.py``: PyNative and graph mode against the saved outputs, bit for bit."""
    return _TEST.format(func=op.name, version=__version__, stem=stem, module=module, net=class_name(stem),
                        target=op.spec.target.upper(), n_outputs=n_outputs)


def readme_text(op: Op, stem: str, module: str, test: str, kernel_file: str, dropped_flags: list[str]) -> str:
    """The folder's README: what each file is, how to run the test, which of the op's flags did not travel."""
    flags_note = (f"\naotbench built this op with `{' '.join(dropped_flags)}` as well; MindSpore's automatic "
                  "compilation uses only its documented command, so the saved outputs come from aotbench's build "
                  "with that command. To use the flags in MindSpore, build the library yourself and give "
                  "`ops.Custom` its path.\n" if dropped_flags else "")
    return f"""# {op.name}, exported from aotbench {__version__}

- `{kernel_file}`: the kernel; `{HEADER}`: the header it was built against (aotbench's is compatible with
  MindSpore's), with any headers it includes from its own folders.
- `{module}.py`: the `CustomRegOp` registration and `{class_name(stem)}`, a `Cell` calling
  `ops.Custom(..., "aot", reg_info=REG_INFO)`.
- `inputs.npz`, `expected.npz`: the example inputs and aotbench's outputs for them.
- `{test}`: runs the op in MindSpore in PyNative and graph mode; exits non-zero unless the outputs equal
  aotbench's bit for bit. Run `python {test}` (or `pytest {test}`) where MindSpore is installed.
{flags_note}"""
