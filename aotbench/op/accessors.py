"""What an op offers besides calling it: the shape rule on its own, check mode, timing, the panel, export and the
plan it would make (a mixin of :class:`~aotbench.op.op.Op`; the accessors into higher layers import lazily)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..spec import rules
from ..run.plan import MAX_RANK, call_infer_shape, make_plan
from ..errors import ArgumentError, ShapeError


class Accessors:
    """``infer_shape``, ``check``, ``bench``, ``launcher``, ``compute_sanitizer``, ``explore``,
    ``export_mindspore`` and ``plan_info``, on the op's recipe, library and host."""

    def infer_shape(self, *shapes: Any):
        """Run only the shape rule: ``None`` for an unknown dim or an unknown rank, as InferShape's -1/-2.

        Arguments are input shapes (``None`` inside a shape is an unknown dim, ``None`` for a whole shape an
        unknown rank), then the values of call attributes, if the op has any.
        """
        n_attr = len(self._spec.call_attrs)
        if self._n_inputs is not None and len(shapes) != self._n_inputs + n_attr:
            raise ArgumentError(f"{self.name}.infer_shape takes {self._n_inputs} input shape(s)"
                                + (f" then {n_attr} attribute value(s)" if n_attr else "") + f"; got {len(shapes)}")
        shape_args, extras = (shapes[:len(shapes) - n_attr], shapes[len(shapes) - n_attr:]) if n_attr else (shapes, ())
        coded = rules.code_unknown_dims(shape_args)
        if self._spec.out_shape is not None:
            if any(-1 in s or -2 in s for s in coded) and callable(self._spec.out_shape):
                raise ShapeError("out_shape is a function of concrete shapes; it cannot infer from unknown dims")
            result = rules.output_shapes(self._spec.out_shape, coded, self._spec.n_outputs)
        else:
            attrs = self._attr_list + self._typed_call_attrs(extras)
            extra = self._host.new_extra(attrs)
            try:
                result = call_infer_shape(self._spec, self._host, self.library, coded, extra, attrs)
            except KeyboardInterrupt as exc:  # the stop button on an endless InferShape: its extra is leaked
                self._interrupted(exc, ordinary=lambda: self._host.free_extra(extra))
            self._host.free_extra(extra)
        for i, s in enumerate(result):
            if len(s) > MAX_RANK:
                raise ShapeError(f"output {i} of {self.name} would have {len(s)} dimensions; arrays have at most "
                                 f"{MAX_RANK} (numpy's limit): check the shape rule")
        decoded = [None if list(s) == [-2] else tuple(None if d == -1 else d for d in s) for s in result]
        return tuple(decoded) if self._spec.returns_tuple else decoded[0]

    def check(self, *arrays: Any, reference: Any = None, rtol: float | None = None, atol: float | None = None,
              dynamic: list | None = None):
        """Run once with guarded, poisoned buffers and report contract violations (see :mod:`aotbench.check`).

        ``reference`` is the expected output(s) or a function of the inputs; ``dynamic`` lists one shape per
        input with ``None`` for dims MindSpore would see as -1, to also check Init as graph mode calls it.
        """
        from ..tools.check import check

        try:
            return check(self, *arrays, reference=reference, rtol=rtol, atol=atol, dynamic=dynamic)
        except KeyboardInterrupt as exc:  # the stop button on an endless kernel: retire what the call used
            self._interrupted(exc)

    def bench(self, *arrays: Any, **options: Any):
        """Time calls on these inputs: :func:`aotbench.bench` (``budget_ms=``, ``warmup=``, ``flush_cache=``)."""
        from ..tools.timing import bench

        return bench(self, *arrays, **options)

    def launcher(self, *arrays: Any):
        """A gpu op's call prepared on these inputs: ``launch()`` enqueues the kernel on the current cupy stream
        without waiting, ``launch.finish()`` synchronizes and raises a CUDA error, ``launch.outputs`` are written
        (allocated once). What device timing and CUDA graphs use (:class:`aotbench.gpu.Launcher`)."""
        if not self.device.runs_elsewhere:
            raise ArgumentError(f"{self.name} is a cpu op: its calls are synchronous already; call it directly")
        from ..run.gpu import Launcher

        return Launcher(self, *arrays)

    def compute_sanitizer(self, *arrays: Any, tool: str = "memcheck", timeout_s: float = 300.0):
        """Run one call of this gpu op under NVIDIA's compute-sanitizer (``memcheck``, ``racecheck``,
        ``initcheck`` or ``synccheck``) in a subprocess, built with ``-lineinfo``; returns a
        :class:`~aotbench.gpu_sanitize.SanitizerReport` (``ok``, ``findings`` with kernel, source line, thread)."""
        from ..tools.compute_sanitizer import run_compute_sanitizer

        return run_compute_sanitizer(self, *arrays, tool=tool, timeout_s=timeout_s)

    def explore(self, *example_inputs: Any, reference: Any = None, dynamic: list | None = None,
                debounce_ms: float = 100.0, **options: Any):
        """An interactive panel (ipywidgets) over this op: attribute and dimension controls, the inferred shape,
        errors against ``reference``, timings and a plot, updated live (see :mod:`aotbench.widgets`)."""
        from ..notebook.widgets import explore  # the UI layer, imported only when a panel is asked for

        return explore(self, *example_inputs, reference=reference, dynamic=dynamic, debounce_ms=debounce_ms,
                       **options)

    def export_mindspore(self, directory: Any, *example_inputs: Any):
        """Write this op as a MindSpore aot op (kernel, header, registration and Cell, the example inputs and
        this op's outputs, and a test that checks MindSpore agrees bit for bit) into ``directory``."""
        from ..mindspore.export import export  # the MindSpore layer, above this one

        return export(self, directory, *example_inputs)

    def plan_info(self, *arrays: Any) -> dict:
        """What the op would allocate for these inputs: output shapes/dtypes and workspace sizes (runs Init).

        Only shapes and dtypes are read, so a gpu op's device arrays stay where they are (and no workspace is
        allocated on the device: this plan is the host's)."""
        if self.device.runs_elsewhere:
            head, extras = self._arrays_and_extras(arrays)
            converted = tuple(a if self.device.owns(a) else self._contiguous(a, i) for i, a in enumerate(head))
        else:
            converted, extras = self._split(arrays)
        plan = make_plan(self._spec, self._host, self.library, converted,
                         self._attr_list + self._typed_call_attrs(extras))
        return {"outputs": [(s, np.dtype(d)) for s, d in plan.outputs],
                "workspaces": [{"requested": r, "allocated": a} for r, a in plan.workspaces]}


__all__ = ["Accessors"]
