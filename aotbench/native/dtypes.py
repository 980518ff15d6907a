"""numpy dtypes <-> the dtype strings a kernel receives in ``dtypes[i]`` (ABI.md section 2)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..errors import ArgumentTypeError, ArgumentValueError

#: Exactly the strings the host passes, in the order ABI.md lists them.
DTYPE_STRINGS = (
    "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "bool", "bfloat16", "complex64", "complex128",
)


def _bfloat16() -> np.dtype | None:
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


@lru_cache(maxsize=256)
def dtype_string(dtype: np.dtype) -> str:
    """The kernel-side name of ``dtype``; an :class:`ArgumentError` for dtypes kernels cannot receive."""
    name = "bool" if dtype == np.bool_ else dtype.name
    if not dtype.isnative:
        raise ArgumentTypeError(f"dtype {dtype.str} is not in this machine's byte order; convert it with "
                                "arr.astype(arr.dtype.newbyteorder('='))")
    if name in DTYPE_STRINGS and (name != "bfloat16" or dtype == _bfloat16()):
        return name
    raise ArgumentTypeError(
        f"arrays of dtype {dtype} cannot be passed to an aot kernel; supported: {', '.join(DTYPE_STRINGS)}"
        " (bfloat16 through the ml_dtypes package)"
    )


def resolve_dtype(spec: object) -> np.dtype:
    """A numpy dtype from a dtype, a type or a kernel dtype string (``"bfloat16"`` needs ml_dtypes)."""
    if isinstance(spec, str) and spec == "bfloat16":
        bf16 = _bfloat16()
        if bf16 is None:
            raise ArgumentValueError("bfloat16 needs the ml_dtypes package: pip install ml_dtypes")
        return bf16
    try:
        dtype = np.dtype(spec)  # type: ignore[call-overload]
    except TypeError as exc:
        raise ArgumentTypeError(f"{spec!r} is not a dtype; use a numpy dtype or a name such as 'float32'") from exc
    dtype_string(dtype)  # validates
    return dtype
