"""``aotbench.Custom``: MindSpore's ``ops.Custom(..., "aot")`` signature and meaning, without MindSpore."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..native.attrs import typed
from ..native.loading import KernelLibrary, check_function_name, load
from ..build import compile as build
from ..build import prebuilt
from ..build import toolchain
from ..build.native_runtime import get_runtime
from ..spec.registration import OpInfo
from ..spec.rules import count_outputs, declares_tuple
from ..spec.spec import OpSpec, parse_flags
from .._userframe import user_stacklevel
from ..errors import ArgumentTypeError, ArgumentValueError, EmulationWarning, LoadError
from .op import Op
from ..run.gpu_availability import gpu_unavailable_reason
from ..run.sanitize import check_kind as check_sanitizer

TARGETS = ("cpu", "gpu")


def Custom(func: str, out_shape: Any = None, out_dtype: Any = None, func_type: str = "aot",
           reg_info: OpInfo | None = None, *, attrs: dict[str, Any] | None = None, target: str | None = None,
           flags: Any = None, cache_dir: str | Path | None = None, force: bool = False,
           arch: str | int | None = None, isolate: bool = False, timeout_s: float | None = None,
           sanitize: str | None = None, guard: bool = True, emulate: bool | None = None) -> Op:
    """Build (or load) an aot kernel and return it as a callable :class:`~aotbench.op.op.Op`.

    ``func`` is ``"path:name"``, split at the first colon; a ``.cc``/``.cpp`` path is compiled with the
    documented command plus ``flags``, any other path is loaded as a prebuilt library. ``out_shape`` and
    ``out_dtype`` are MindSpore's (``out_shape=None`` uses the kernel's ``InferShape``). Attributes come from
    ``reg_info`` (``CustomRegOp``) and/or ``attrs={...}``. A ``.cu`` source is built with nvcc for the gpu target
    (``arch="sm_90"`` overrides the architecture choice). ``isolate=True`` runs every call in a worker process
    (:mod:`aotbench.run.worker`): a crash raises ``KernelCrashedError``, a call longer than ``timeout_s`` seconds
    ``KernelTimeoutError``, and the next call starts a fresh worker. ``sanitize="address"`` or ``"undefined"``
    runs a separate ASan/UBSan build in such a worker; the sanitizer's report raises ``SanitizerError``.
    ``guard=True`` (the default) runs the first call of every new input signature on guarded, poisoned buffers
    (:mod:`aotbench.run.guard`): a write outside them raises ``ContractViolation``, unwritten outputs or leaked
    poison warn (``ContractWarning``); later calls of that signature take the fast path. ``guard=False`` turns it
    off; a sanitized op has the sanitizer instead.

    ``emulate`` (gpu ops): ``True`` builds the .cu source for aotbench's CUDA emulator (g++, the kernels run on the
    CPU on numpy arrays: :mod:`aotbench.run.emulation`), ``False`` requires a usable GPU, ``None`` (the default)
    uses a GPU when there is one and the emulator otherwise, with one ``EmulationWarning`` saying so. An emulated
    op can also be isolated or sanitized like a cpu op.
    """
    spec = make_spec(func, out_shape, out_dtype, func_type, reg_info, attrs=attrs, target=target, flags=flags,
                     cache_dir=cache_dir, arch=arch, isolate=isolate, timeout_s=timeout_s, sanitize=sanitize,
                     guard=guard, emulate=emulate)
    return _from_spec(spec, force=force)


def make_spec(func: str, out_shape: Any = None, out_dtype: Any = None, func_type: str = "aot",
              reg_info: OpInfo | None = None, *, attrs: dict[str, Any] | None = None, target: str | None = None,
              flags: Any = None, cache_dir: str | Path | None = None, arch: str | int | None = None,
              isolate: bool = False, timeout_s: float | None = None, sanitize: str | None = None,
              guard: bool = True, emulate: bool | None = None) -> OpSpec:
    """Validate ``Custom``'s arguments into an :class:`OpSpec` (no compiler, no loading)."""
    if func_type != "aot":
        raise ArgumentValueError(f"func_type={func_type!r}: aotbench runs only 'aot' kernels")
    if not isinstance(func, str) or ":" not in func:
        raise (ArgumentValueError if isinstance(func, str) else ArgumentTypeError)(
            f"func must be 'path:function_name' (e.g. './kernel.cc:CustomKernel'), got {func!r}")
    if reg_info is not None and not isinstance(reg_info, OpInfo):
        raise ArgumentTypeError("reg_info must come from aotbench.CustomRegOp(...)...get_op_info()")
    target = _resolve_target(target, reg_info, func.partition(":")[0])
    if attrs is not None and not isinstance(attrs, Mapping):
        example = ", ".join(f"{k!r}: {v!r}" for k, v in attrs[:2]) if _is_pairs(attrs) else "'k': 1"
        raise ArgumentTypeError(f"attrs must be a dict of attribute name -> value, got {type(attrs).__name__} "
                                f"{attrs!r}: write attrs={{{example}}}")
    if cache_dir is not None and (not isinstance(cache_dir, (str, os.PathLike)) or str(cache_dir) == ""):
        raise ArgumentTypeError(f"cache_dir must be a directory path (a str or pathlib.Path) or None, got "
                                f"{type(cache_dir).__name__} {cache_dir!r}")
    merged = {a.name: a for a in (reg_info.attrs if reg_info else ())}
    call_attrs = reg_info.call_attrs if reg_info else ()
    for name, value in (attrs or {}).items():
        if name in call_attrs:
            raise ArgumentValueError(f"attribute {name!r} is registered without value=, so it is a call argument")
        merged[name] = typed(name, value)
    if emulate is not None and not isinstance(emulate, bool):
        raise ArgumentTypeError(f"emulate must be True, False or None, got {emulate!r}")
    if emulate is not None and target != "gpu":
        raise ArgumentValueError(f"emulate={emulate!r} is for gpu ops (a .cu source): a cpu op already runs on the CPU")
    if target == "gpu" and emulate is not True and (isolate or sanitize is not None):
        raise ArgumentValueError(
            "isolate= and sanitize= run kernels on the CPU in a worker process; a gpu op runs in this process, on "
            "the device. Add emulate=True to run this op on aotbench's CUDA emulator (a CPU op, which can be "
            "isolated or sanitized), or, on a GPU, use op.compute_sanitizer(*inputs, tool='memcheck' or "
            "'racecheck'): one call in a subprocess under NVIDIA's compute-sanitizer.")
    if check_sanitizer(sanitize) is not None:
        isolate = True  # a sanitized library can only run in a worker started with its runtime preloaded
    if not isinstance(isolate, bool):
        raise ArgumentTypeError(f"isolate must be True or False, got {isolate!r}")
    if not isinstance(guard, bool):
        raise ArgumentTypeError(f"guard must be True or False, got {guard!r}")
    if timeout_s is not None:
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise ArgumentValueError(f"timeout_s must be a positive number of seconds (or None), got {timeout_s!r}")
        if not isolate:
            raise ArgumentValueError("timeout_s needs isolate=True: only a call in a worker process can be stopped")
        timeout_s = float(timeout_s)
    return OpSpec(
        func=func, out_shape=out_shape, out_dtype=out_dtype, reg_info=reg_info, attrs=tuple(merged.values()),
        target=target, flags=parse_flags(flags), cache_dir=Path(cache_dir) if cache_dir is not None else None,
        n_outputs=count_outputs(out_shape, out_dtype, reg_info), call_attrs=tuple(call_attrs), arch=arch,
        isolate=isolate, timeout_s=timeout_s, sanitize=sanitize,
        guard=guard and sanitize is None,  # ASan/UBSan see the real buffers' bounds; guard zones would hide them
        tuple_result=declares_tuple(out_shape, out_dtype), emulate=emulate,
    )


def _is_pairs(value: object) -> bool:
    """True for a list or tuple of (name, value) pairs: what ``dict(value)`` would have accepted."""
    return isinstance(value, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value)


def _from_spec(spec: OpSpec, force: bool = False) -> Op:
    spec = _anchored(spec)
    path_text, _, name = spec.func.partition(":")
    check_function_name(name)
    path = Path(path_text).expanduser()
    host = get_runtime(spec.cache_dir)
    if path.suffix not in toolchain.CXX_SUFFIXES + toolchain.CUDA_SUFFIXES:
        if not path.exists():
            raise LoadError(str(path), "no such file", "Give the path of a .cc/.cpp source or a built .so library.")
        return _make_op(spec, _load_prebuilt(path.absolute(), name, spec.cache_dir), host)
    emulated = _emulated(spec, name, path)
    artifact = build.build(path, flags=spec.flags, cache_dir=spec.cache_dir, force=force, arch=spec.arch,
                           emulate=emulated)
    try:
        library = load(artifact.path, name, artifact.command)
    except LoadError:
        # A cached library that no longer loads is rebuilt once; a fresh one that fails is the user's to fix.
        if artifact.cache_hit:
            build.invalidate(artifact)
            artifact = build.build(path, flags=spec.flags, cache_dir=spec.cache_dir, force=True, arch=spec.arch,
                                   emulate=emulated)
            library = load(artifact.path, name, artifact.command)
        else:
            raise
    return _make_op(spec, library, host, artifact, path.absolute())


def _emulated(spec: OpSpec, name: str, path: Path) -> bool:
    """Whether this gpu op is built for the CUDA emulator: asked for, or (``emulate=None``) a .cu source and no
    usable GPU here, which an :class:`~aotbench.errors.EmulationWarning` says once for the op."""
    if spec.target != "gpu" or spec.emulate is False:
        return False
    if spec.emulate:
        if path.suffix not in toolchain.CUDA_SUFFIXES:
            raise ArgumentValueError(f"emulate=True needs a CUDA source (.cu); {path.name} is not one")
        return True
    if path.suffix not in toolchain.CUDA_SUFFIXES:
        return False  # host code for a gpu target: only a .cu source can be emulated
    reason = gpu_unavailable_reason()
    if reason is None:
        return False
    warnings.warn(EmulationWarning(
        f"{name} runs on aotbench's CUDA emulator, on the CPU, because {reason}. Its results are checked as a "
        "GPU's would be; its timings are the emulator's, not a GPU's. Pass emulate=True (%%aot_kernel: --emulate) "
        "to ask for the emulator and silence this, emulate=False (--no-emulate) to require a GPU."),
        stacklevel=user_stacklevel())
    return True


def _anchored(spec: OpSpec) -> OpSpec:
    """``spec`` with its relative paths (the source or library, the include folders, the cache) made absolute
    against the working directory now, when the op is made: a later ``os.chdir`` or ``%cd`` must not make
    ``with_flags``, ``compare_flags`` or a rebuild read another folder's files."""
    path_text, _, name = spec.func.partition(":")
    absolute = str(Path(path_text).expanduser().absolute())
    func = f"{absolute}:{name}" if ":" not in absolute else spec.func  # a colon in the folder would split there
    cache_dir = None if spec.cache_dir is None else Path(spec.cache_dir).expanduser().absolute()
    flags = toolchain.anchor_include_flags(tuple(spec.flags))
    if (func, cache_dir, flags) == (spec.func, spec.cache_dir, tuple(spec.flags)):
        return spec
    return replace(spec, func=func, cache_dir=cache_dir, flags=flags)


def _load_prebuilt(path: Path, name: str, cache_dir: Path | None) -> KernelLibrary:
    """Load a prebuilt library as its file is now: a file changed since this process loaded it is loaded from a
    private copy (:mod:`aotbench.build.prebuilt`), since ``dlopen`` of the same path would return the old code."""
    target, copied = prebuilt.path_to_load(path, cache_dir)
    try:
        return load(target, name)
    except LoadError as exc:
        if not copied:
            raise
        raise LoadError(str(path), "it changed since this process loaded it, and its copy does not load: "
                        f"{exc.reason}", prebuilt.CHANGED_HINT.format(path=path, copy=target)) from exc


def _make_op(spec: OpSpec, *args: Any) -> Op:
    if spec.isolate:
        from .isolated import IsolatedOp  # only isolated ops pay for importing it

        return IsolatedOp(spec, *args)
    return Op(spec, *args)


def _resolve_target(target: str | None, reg_info: OpInfo | None, path: str) -> str:
    """The explicit target, else the registration's, else gpu for a .cu source and cpu otherwise."""
    is_cuda = Path(path).suffix in toolchain.CUDA_SUFFIXES
    if target is None:
        target = reg_info.target if reg_info and reg_info.target else ("gpu" if is_cuda else "cpu")
    target = str(target).lower()
    if target not in TARGETS:
        raise ArgumentValueError(f"target={target!r}: use 'cpu' or 'gpu'")
    if is_cuda and target != "gpu":
        raise ArgumentValueError(f"{Path(path).name} is CUDA source: it needs target='gpu' (it is built with nvcc)")
    return target

