# The aot tutorial's test_custom_aot.py as it publishes it: only this comment is added and the Chinese comment
# below is translated. Run it unmodified, beside kernel.cc, with `python -m aotbench run test_custom_aot.py`
# (aotbench's MindSpore stand-in) or with `python test_custom_aot.py` where MindSpore is installed.
import numpy as np
from mindspore import Tensor, context, ops
from mindspore.common import dtype as mstype
from mindspore.nn import Cell
from mindspore.ops import CustomRegOp, DataType


class ReduceDynNet(Cell):
    def __init__(self, out_types, axis, keep_dim):
        super().__init__()
        reduce_cpu_info = CustomRegOp("reduce_kernel_cpu") \
            .input(0, "x1") \
            .input(0, "x2") \
            .output(0, "y") \
            .dtype_format(DataType.None_None, DataType.None_None, DataType.None_None) \
            .attr("axis", "required", "all", value=axis) \
            .attr("keep_dim", "required", "all", value=keep_dim) \
            .target("CPU") \
            .get_op_info()
        # the C++ shape inference function above is defined, so ouptut_shape here can be `None`
        self.program = ops.Custom("./kernel.cc:CustomKernel", None, out_types, "aot", reg_info=reduce_cpu_info)

    def construct(self, x, y):
        return self.program(x, y)


if __name__ == "__main__":
    shape = (4, 5)
    axis = 1
    keep_dim = False
    context.set_context(device_target="CPU")

    input_x = np.ones(shape).astype(np.float32)
    input_y = np.ones(shape).astype(np.float32)

    test = ReduceDynNet(mstype.float32, axis, keep_dim)
    dyn_x = Tensor(shape=[4, None], dtype=mstype.float32)
    # set the net to dynamic shape
    test.set_inputs(dyn_x, dyn_x)
    output = test(Tensor(input_x),Tensor(input_y))
    print(output)
