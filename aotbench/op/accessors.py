"""What an op offers besides calling it (a mixin of :class:`~aotbench.op.op.Op`): the shape rule on its own and the
plan it would make, and one-line methods over the verbs of the layers above (check mode, timing, the panel,
export, compute-sanitizer), which they import when called."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..spec import rules
from ..run.kernel import contiguous
from ..run.plan import MAX_RANK, call_infer_shape
from ..errors import ArgumentTypeError, ArgumentValueError, ShapeError


class Accessors:
    """``infer_shape``, ``check``, ``bench``, ``launcher``, ``compute_sanitizer``, ``explore``,
    ``export_mindspore`` and ``plan_info``, on the op's recipe, library and host."""

    def infer_shape(self, *shapes: Any):
        """Run only the shape rule: ``None`` for an unknown dim or an unknown rank, as InferShape's -1/-2.

        Arguments are input shapes (``None`` inside a shape is an unknown dim, ``None`` for a whole shape an
        unknown rank), then the values of call attributes, if the op has any.
        """
        kernel = self.kernel
        spec, n_attr, n_inputs = kernel.spec, len(kernel.spec.call_attrs), kernel.n_inputs
        if n_inputs is not None and len(shapes) != n_inputs + n_attr:
            raise ArgumentTypeError(f"{self.name}.infer_shape takes {n_inputs} input shape(s)"
                                + (f" then {n_attr} attribute value(s)" if n_attr else "") + f"; got {len(shapes)}")
        shape_args, extras = (shapes[:len(shapes) - n_attr], shapes[len(shapes) - n_attr:]) if n_attr else (shapes, ())
        coded = rules.code_unknown_dims(shape_args)
        if spec.out_shape is not None:
            if any(-1 in s or -2 in s for s in coded) and callable(spec.out_shape):
                raise ShapeError("out_shape is a function of concrete shapes; it cannot infer from unknown dims")
            result = rules.output_shapes(spec.out_shape, coded, spec.n_outputs)
        else:
            attrs = kernel.all_attrs(extras)
            runtime = kernel.runtime
            extra = runtime.new_extra(attrs)
            try:
                result = call_infer_shape(spec, runtime, kernel.library, coded, extra, attrs)
            except KeyboardInterrupt as exc:  # the stop button on an endless InferShape: its extra is leaked
                self.interrupted(exc, ordinary=lambda: runtime.free_extra(extra))
            runtime.free_extra(extra)
        for i, s in enumerate(result):
            if len(s) > MAX_RANK:
                raise ShapeError(f"output {i} of {self.name} would have {len(s)} dimensions; arrays have at most "
                                 f"{MAX_RANK} (numpy's limit): check the shape rule")
        decoded = [None if list(s) == [-2] else tuple(None if d == -1 else d for d in s) for s in result]
        return tuple(decoded) if spec.returns_tuple else decoded[0]

    def check(self, *arrays: Any, reference: Any = None, rtol: float | None = None, atol: float | None = None,
              dynamic: list | None = None):
        """Run once with guarded, poisoned buffers and report contract violations: :func:`aotbench.check`."""
        from ..tools.check import check

        return check(self, *arrays, reference=reference, rtol=rtol, atol=atol, dynamic=dynamic)

    def bench(self, *arrays: Any, **options: Any):
        """Time calls on these inputs: :func:`aotbench.bench` (``budget_ms=``, ``warmup=``, ``flush_cache=``)."""
        from ..tools.timing import bench

        return bench(self, *arrays, **options)

    def profile(self, *arrays: Any, seconds: float = 1.0, **options: Any):
        """Where the time goes, per source line and instruction, from sampling calls on these inputs for
        ``seconds``: :func:`aotbench.profile` (no privileges needed)."""
        from ..tools.profile import profile

        return profile(self, *arrays, seconds=seconds, **options)

    def launcher(self, *arrays: Any):
        """A gpu op's call prepared on these inputs: :class:`aotbench.run.gpu.Launcher` (``launch()`` enqueues
        without waiting, ``launch.finish()`` synchronizes; what device timing and CUDA graphs use)."""
        if not self.device.runs_elsewhere:
            raise ArgumentValueError(f"{self.name} is a cpu op: its calls are synchronous already; call it directly")
        from ..run.gpu import Launcher

        return Launcher(self, *arrays)

    def compute_sanitizer(self, *arrays: Any, tool: str = "memcheck", timeout_s: float = 300.0):
        """One call of this gpu op under NVIDIA's compute-sanitizer: :func:`aotbench.compute_sanitizer`."""
        from ..tools.compute_sanitizer import run_compute_sanitizer

        return run_compute_sanitizer(self, *arrays, tool=tool, timeout_s=timeout_s)

    def explore(self, *example_inputs: Any, reference: Any = None, dynamic: list | None = None,
                debounce_ms: float = 100.0, **options: Any):
        """An interactive panel over this op (attributes, dims, errors, timings, live): :func:`aotbench.explore`."""
        from ..notebook.widgets import explore  # the UI layer, imported only when a panel is asked for

        return explore(self, *example_inputs, reference=reference, dynamic=dynamic, debounce_ms=debounce_ms,
                       **options)

    def export_mindspore(self, directory: Any, *example_inputs: Any):
        """Write this op as a MindSpore aot op checked against these inputs: :func:`aotbench.export_mindspore`."""
        from ..mindspore.export import export

        return export(self, directory, *example_inputs)

    def plan_info(self, *arrays: Any) -> dict:
        """What the op would allocate for these inputs: output shapes/dtypes and workspace sizes (runs Init).

        Only shapes and dtypes are read, so a gpu op's device arrays stay where they are (and no workspace is
        allocated on the device: this plan is the host's)."""
        kernel = self.kernel
        if self.device.runs_elsewhere:
            head, extras = kernel.split(arrays)
            converted = tuple(a if self.device.owns(a) else contiguous(a, i) for i, a in enumerate(head))
        else:
            converted, extras = kernel.host_arrays(arrays)
        plan = kernel.plan(converted, kernel.call_attrs(extras))
        return {"outputs": [(s, np.dtype(d)) for s, d in plan.outputs],
                "workspaces": [{"requested": r, "allocated": a} for r, a in plan.workspaces]}


__all__ = ["Accessors"]
