"""A MindSpore-style aot test: it runs unmodified under MindSpore (``pytest test_add_reduce.py``) and under
aotbench's stand-in (``python -m aotbench run -m pytest test_add_reduce.py``); tests copy it beside
``add_reduce.cc`` and ``custom_aot_extra.h`` as ``test_add_reduce.py``. Set ADD_REDUCE_WRONG=1 to make it
expect wrong numbers (so a run that reports success must have compared something)."""

import os

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, context, nn, ops
from mindspore.common import dtype as mstype
from mindspore.ops import CustomRegOp, DataType

KERNEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "add_reduce.cc") + ":CustomKernel"
SHIFT = 1.0 if os.environ.get("ADD_REDUCE_WRONG") else 0.0


class ReduceNet(nn.Cell):
    def __init__(self, axis, keep_dim):
        super().__init__()
        reg = (CustomRegOp(f"add_reduce_{axis}_{int(keep_dim)}")
               .input(0, "x1").input(1, "x2").output(0, "y")
               .dtype_format(DataType.F32_Default, DataType.F32_Default, DataType.F32_Default)
               .attr("axis", "required", "all", value=axis)
               .attr("keep_dim", "required", "all", value=keep_dim)
               .target("CPU")
               .get_op_info())
        self.op = ops.Custom(KERNEL, None, mstype.float32, "aot", reg_info=reg)

    def construct(self, x, y):
        return self.op(x, y)


@pytest.mark.parametrize("mode", [ms.PYNATIVE_MODE, ms.GRAPH_MODE])
@pytest.mark.parametrize("axis,keep_dim", [(0, False), (1, True)])
def test_add_reduce(mode, axis, keep_dim):
    context.set_context(mode=mode, device_target="CPU")
    rng = np.random.default_rng()
    x = rng.random((7, 5), np.float32)
    y = rng.random((7, 5), np.float32)
    out = ReduceNet(axis, keep_dim)(Tensor(x), Tensor(y))
    assert out.dtype == mstype.float32
    np.testing.assert_allclose(out.asnumpy(), (x + y).sum(axis=axis, keepdims=keep_dim) + SHIFT, rtol=1e-5)
