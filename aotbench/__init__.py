"""aotbench: build, call and measure MindSpore-style "aot" custom-operator kernels, without MindSpore.

>>> op = aotbench.Custom("kernel.cc:CustomKernel", None, np.float32, attrs={"axis": 1, "keep_dim": False})
>>> op(x, y)

Importing this package loads numpy and the core modules only (no IPython, widgets, plotting or cupy).
"""

from pathlib import Path

from ._version import __version__
from .bandwidth import memory_bandwidth_gbps
from .cache import CacheError
from .comparison import Comparison, compare, compare_flags
from .custom import Custom
from .devices import gpu_available
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
    FastMathWarning,
    HostCopyWarning,
    IsolationMemoryError,
    KernelCrashedError,
    KernelError,
    KernelTimeoutError,
    LoadError,
    NoLibraryError,
    ShapeError,
    SymbolNotFoundError,
    ToolchainNotFoundError,
    WorkspaceError,
)
from .op import Op
from .reg import CustomRegOp, DataType
from .sanitize import SanitizerError
from .sweeping import Sweep, sweep
from .timing import Timing, bench


def get_include() -> str:
    """The directory holding ``custom_aot_extra.h``, for ``-I`` when building kernels by hand."""
    return str(Path(__file__).resolve().parent / "include")


def load_ipython_extension(ipython) -> None:
    """``%load_ext aotbench``: registers ``%%aot_kernel`` and ``%aot_doctor`` (IPython is imported only now)."""
    from .magic import load_ipython_extension as load

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
    "FastMathWarning",
    "HostCopyWarning",
    "IsolationMemoryError",
    "KernelCrashedError",
    "KernelError",
    "KernelTimeoutError",
    "LoadError",
    "NoLibraryError",
    "Op",
    "SanitizerError",
    "ShapeError",
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
