"""aotbench: build, call and measure MindSpore-style "aot" custom-operator kernels, without MindSpore.

>>> op = aotbench.Custom("kernel.cc:CustomKernel", None, np.float32, attrs={"axis": 1, "keep_dim": False})
>>> op(x, y)

Importing this package loads numpy and the core modules only (no IPython, widgets, plotting or cupy).
"""

import sys
from pathlib import Path

from ._version import __version__
from .native import attrs as _attrs
from .build.diagnostics import Diagnostic
from .spec import registration as _reg
from .spec import spec as _spec
from .spec.registration import CustomRegOp, DataType
from .op.custom import Custom
from .tools.bandwidth import memory_bandwidth_gbps
from .run.gpu_availability import gpu_available
from .tools.timing import Timing, bench
from .errors import (
    AbiMismatchError,
    AotbenchError,
    AotbenchWarning,
    ArgumentError,
    ArgumentTypeError,
    ArgumentValueError,
    AttrError,
    AttrMemoryError,
    AttrTypeWarning,
    CacheError,
    CompileError,
    ContractViolation,
    ContractWarning,
    CudaError,
    EmulationWarning,
    EmulatorError,
    DeviceUnavailableError,
    DynamicShapeWarning,
    ExportWarning,
    FastMathWarning,
    FloatingPointEnvWarning,
    ForkedOpenMPError,
    HostCopyWarning,
    IsolatedCallInterrupted,
    IsolationMemoryError,
    KernelCrashedError,
    KernelError,
    KernelInterrupted,
    KernelTimeoutError,
    LoadError,
    MindSporeApiError,
    MindSporeAttributeError,
    NarrowingWarning,
    NoLibraryError,
    SanitizerError,
    ShapeError,
    SignalStateWarning,
    SourceChangedError,
    SourceReadError,
    SymbolNotFoundError,
    ToolFailedError,
    ToolchainNotFoundError,
    TravelError,
    WorkspaceError,
)
from .tools.check import check
from .tools.codeview.inspection import annotate, disassemble
from .tools.comparison import Comparison, compare, compare_flags
from .tools.compute_sanitizer import run_compute_sanitizer as compute_sanitizer
from .tools.sweeping import Sweep, sweep
from .tools.profile import Profile, profile
from .op.op import Op
from . import notebook as _notebook  # noqa: F401 - gives the errors their IPython rendering

# A pickled op names the classes of its recipe by module; ops pickled by earlier versions named these modules,
# which resolve to their new homes (nothing else ever lived at these names; ``aotbench.spec`` is now the package,
# which has ``OpSpec`` too).
from .op import travel as _travel

for _old, _module in {"aotbench.reg": _reg, "aotbench.attrs": _attrs, "aotbench.call.spec": _spec,
                      "aotbench.call.reg": _reg, "aotbench.abi.attrs": _attrs, "aotbench.travel": _travel}.items():
    sys.modules.setdefault(_old, _module)


# Verbs whose layers import a UI library or the MindSpore stand-in: loaded on first use, so that importing the
# package stays light (``aotbench.explore``, ``aotbench.export_mindspore``).
_LAZY_VERBS = {"explore": ("aotbench.notebook.widgets", "explore"),
               "export_mindspore": ("aotbench.mindspore.export", "export")}


def __getattr__(name: str):
    if name in _LAZY_VERBS:
        import importlib

        module, attr = _LAZY_VERBS[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'aotbench' has no attribute {name!r}")


def get_include() -> str:
    """The directory holding ``custom_aot_extra.h``, for ``-I`` when building kernels by hand."""
    return str(Path(__file__).resolve().parent / "native" / "include")


def load_ipython_extension(ipython) -> None:
    """``%load_ext aotbench``: registers ``%%aot_kernel`` and ``%aot_doctor`` (IPython is imported only now)."""
    from .notebook.magic import load_ipython_extension as load

    load(ipython)


def examples_dir() -> Path:
    """The directory of the example kernels that ship with aotbench (used by the demo and notebooks)."""
    return Path(__file__).resolve().parent / "examples"


__all__ = [
    "AbiMismatchError",
    "AotbenchError",
    "AotbenchWarning",
    "ArgumentError",
    "ArgumentTypeError",
    "ArgumentValueError",
    "AttrError",
    "AttrMemoryError",
    "AttrTypeWarning",
    "CacheError",
    "Comparison",
    "CompileError",
    "ContractViolation",
    "ContractWarning",
    "CudaError",
    "EmulationWarning",
    "EmulatorError",
    "Custom",
    "CustomRegOp",
    "DataType",
    "DeviceUnavailableError",
    "Diagnostic",
    "DynamicShapeWarning",
    "ExportWarning",
    "FastMathWarning",
    "FloatingPointEnvWarning",
    "ForkedOpenMPError",
    "HostCopyWarning",
    "IsolatedCallInterrupted",
    "IsolationMemoryError",
    "KernelCrashedError",
    "KernelError",
    "KernelInterrupted",
    "KernelTimeoutError",
    "LoadError",
    "MindSporeApiError",
    "MindSporeAttributeError",
    "NarrowingWarning",
    "NoLibraryError",
    "Op",
    "Profile",
    "SanitizerError",
    "ShapeError",
    "SignalStateWarning",
    "SourceChangedError",
    "SourceReadError",
    "Sweep",
    "SymbolNotFoundError",
    "Timing",
    "ToolFailedError",
    "ToolchainNotFoundError",
    "TravelError",
    "WorkspaceError",
    "__version__",
    "annotate",
    "bench",
    "check",
    "compare",
    "compare_flags",
    "compute_sanitizer",
    "disassemble",
    "examples_dir",
    "explore",
    "export_mindspore",
    "get_include",
    "gpu_available",
    "memory_bandwidth_gbps",
    "profile",
    "sweep",
]
