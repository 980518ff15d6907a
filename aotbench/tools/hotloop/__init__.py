"""The hottest loop of a kernel: which loop the samples fall in, how fast llvm-mca predicts it runs, and how
fast it runs. Three steps, each usable alone, and a view of the three:

1. :func:`find_hot_loop` (:mod:`aotbench.tools.hotloop.finding`) reads the host disassembly
   (:class:`~aotbench.tools.codeview.listing.Function` objects from ``op.disassemble().functions``) and a dict
   of sample counts by instruction address, and returns the innermost loop that holds the most samples as a
   :class:`Loop`.
2. :func:`predict` (:mod:`aotbench.tools.hotloop.mca`) turns the loop's instructions into assembly llvm-mca
   reads, runs ``llvm-mca -mcpu=native`` and returns a :class:`Prediction`: cycles per iteration, the block
   throughput and the bottleneck in words; without llvm-mca, a reason naming the fix instead.
3. :func:`measure_iterations` (:mod:`aotbench.tools.hotloop.measure`) counts how often the loop's branch
   executes during one call with an execute breakpoint, when that costs little enough, and returns a
   :class:`Measured`: iterations per call and the time and cycles per iteration.

:func:`report` (:mod:`aotbench.tools.hotloop.views`) puts them together as a :class:`HotLoopReport`, a few lines
of text and HTML.
"""

from __future__ import annotations

from .finding import Loop, find_hot_loop, loops
from .mca import INSTALL_HINT, ITERATIONS, Prediction, describe_resources, find_llvm_mca, predict, to_llvm_asm
from .measure import DEFAULT_BUDGET_S, Clock, Measured, cpu_clock, measure_iterations
from .views import HotLoopReport, report

__all__ = ["DEFAULT_BUDGET_S", "INSTALL_HINT", "ITERATIONS", "Clock", "HotLoopReport", "Loop", "Measured",
           "Prediction", "cpu_clock", "describe_resources", "find_hot_loop", "find_llvm_mca", "loops",
           "measure_iterations", "predict", "report", "to_llvm_asm"]
