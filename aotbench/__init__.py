"""aotbench: build, call and measure MindSpore-style "aot" custom-operator kernels, without MindSpore.

>>> op = aotbench.Custom("kernel.cc:CustomKernel", None, np.float32, attrs={"axis": 1, "keep_dim": False})
>>> op(x, y)

Importing this package loads numpy and the core modules only (no IPython, widgets, plotting or cupy).
"""

import sys
from pathlib import Path

from ._version import __version__
from .native import attrs as _attrs
from .build.cache import CacheError
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
    ArgumentError,
    AttrError,
    CompileError,
    ContractViolation,
    ContractWarning,
    CudaError,
    DeviceUnavailableError,
    Diagnostic,
    DynamicShapeWarning,
    FastMathWarning,
    FloatingPointEnvWarning,
    ForkedOpenMPError,
    HostCopyWarning,
    IsolationMemoryError,
    KernelCrashedError,
    KernelError,
    KernelInterrupted,
    KernelTimeoutError,
    LoadError,
    MindSporeApiError,
    MindSporeAttributeError,
    NoLibraryError,
    ShapeError,
    SignalStateWarning,
    SymbolNotFoundError,
    ToolchainNotFoundError,
    WorkspaceError,
)
from .tools.comparison import Comparison, compare, compare_flags
from .tools.sweeping import Sweep, sweep
from .op.op import Op
from .run.sanitize import SanitizerError

# A pickled op names the classes of its recipe by module; ops pickled by earlier versions named these modules,
# which resolve to their new homes (nothing else ever lived at these names; ``aotbench.spec`` is now the package,
# which has ``OpSpec`` too).
for _old, _module in {"aotbench.reg": _reg, "aotbench.attrs": _attrs, "aotbench.call.spec": _spec,
                      "aotbench.call.reg": _reg, "aotbench.abi.attrs": _attrs}.items():
    sys.modules.setdefault(_old, _module)


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
    "ArgumentError",
    "AttrError",
    "CacheError",
    "Comparison",
    "CompileError",
    "ContractViolation",
    "ContractWarning",
    "CudaError",
    "Custom",
    "CustomRegOp",
    "DataType",
    "DeviceUnavailableError",
    "Diagnostic",
    "DynamicShapeWarning",
    "FastMathWarning",
    "FloatingPointEnvWarning",
    "ForkedOpenMPError",
    "HostCopyWarning",
    "IsolationMemoryError",
    "KernelCrashedError",
    "KernelError",
    "KernelInterrupted",
    "KernelTimeoutError",
    "LoadError",
    "MindSporeApiError",
    "MindSporeAttributeError",
    "NoLibraryError",
    "Op",
    "SanitizerError",
    "ShapeError",
    "SignalStateWarning",
    "Sweep",
    "SymbolNotFoundError",
    "Timing",
    "ToolchainNotFoundError",
    "WorkspaceError",
    "__version__",
    "bench",
    "compare",
    "compare_flags",
    "examples_dir",
    "get_include",
    "gpu_available",
    "memory_bandwidth_gbps",
    "sweep",
]
