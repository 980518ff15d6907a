"""Compile a kernel source into a content-addressed shared library, or find it already built.

:func:`build` is the only entry point. A cache hit costs a hash of the source, a stat of each file it
included last time, and a hash of the library; it never runs the compiler. A miss compiles under an OS lock
into a temporary file, records the compiler's dependency output, and publishes library and manifest with
atomic renames.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from .._version import HEADER_VERSION, __version__
from ..native import elf
from ..errors import ArgumentValueError, CompileError, NoLibraryError, SourceReadError
from .diagnostics import Diagnostic
from . import cache, emulator_build, hostflags, instantiation, nvcc, pch, subproc, toolchain
from .cache import parse_depfile
from .manifest import Dependency, Manifest

_STEM_UNSAFE = re.compile(r"[^A-Za-z0-9_.+-]+")
_KEY = re.compile(r"[A-Za-z0-9_.+-]+")
_NVCC_DIAGNOSTIC = re.compile(
    r"^(?P<file>[^\n(]+)\((?P<line>\d+)\): (?P<sev>catastrophic error|error|warning|remark)(?: #[\w-]+)?: "
    r"(?P<msg>.*)$", re.MULTILINE)
_DIAGNOSTIC = re.compile(
    r"^(?P<file>[^\n:]+):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>fatal error|error|warning|note): (?P<msg>.*)$",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Artifact:
    """A built library and everything about how it was built (also in the JSON manifest beside it)."""

    path: Path
    manifest_path: Path
    key: str
    command: tuple[str, ...]
    log: str
    cache_hit: bool
    build_time_s: float
    dependencies: tuple[str, ...] = field(default=())
    source: str = ""  # the source text that was compiled (for a cache hit: identical by construction)
    record: Manifest | None = field(default=None, repr=False, compare=False)

    @property
    def manifest(self) -> Manifest | None:
        """The build record: the one a cache hit read or the build wrote, never read again (so it outlives a
        pruned cache). Read from ``manifest_path`` once only for an artifact made without it; None if gone."""
        if self.record is None:
            object.__setattr__(self, "record", Manifest.read(self.manifest_path))
        return self.record

    def changed_files(self) -> tuple[str, ...]:
        """The source and the user's own headers that changed or are gone since this build (source first): what
        a view of the code, a parcel or an export would read now is not what the library was built from. With no
        build record nothing can be vouched for: then the record's own path."""
        record = self.manifest
        if record is None:
            return (str(self.manifest_path),)
        return record.stale_files(record.own_headers(self.path.parent))


@dataclass(frozen=True)
class Recipe:
    """How one source is compiled: the compiler, the documented argv for an output path, what is added when
    it actually runs (flags that do not change the binary), the architecture choice for CUDA, and what flags
    such as ``-march=native`` mean on this machine (part of the key, :mod:`.hostflags`)."""

    compiler: str
    command: Callable[[Path], list[str]]
    run_extra: tuple[str, ...] = ()
    arch_reason: str | None = None
    native: hostflags.Resolution | None = None
    emulated: bool = False  # a .cu source built for aotbench's CUDA emulator (:mod:`.emulator_build`)


# Flags after which g++ or nvcc writes no shared library (or writes it to stdout), though it exits with status 0.
_NO_LINK_FLAGS = frozenset({"-fsyntax-only", "-E", "-S", "-c", "-M", "-MM", "--preprocess", "--compile",
                            "--ptx", "--cubin", "--fatbin", "-ptx", "-cubin", "-fatbin", "-dryrun", "--dryrun"})


def recipe_for(source: Path, flags: tuple[str, ...], arch: str | int | None = None,
               emulated_from: tuple[Path, Path] | None = None) -> Recipe:
    """g++ with the documented C++ flags for .cc/.cpp, nvcc with the adapted CUDA flags for .cu; for a .cu
    source built for the CUDA emulator, ``emulated_from`` is its translation and the scheduler's object
    (:mod:`.emulator_build`): g++ again."""
    if emulated_from is not None:
        cxx = toolchain.find_cxx()
        translated, runtime = emulated_from
        return Recipe(cxx, lambda out: emulator_build.command(cxx, source, translated, out, flags, runtime),
                      emulated=True)
    if source.suffix in toolchain.CXX_SUFFIXES:
        cxx = toolchain.find_cxx()
        return Recipe(cxx, lambda out: toolchain.cxx_command(cxx, source, out, flags),
                      native=hostflags.resolve(cxx, flags))
    if source.suffix in toolchain.CUDA_SUFFIXES:
        compiler = nvcc.find_nvcc()
        try:
            choice = nvcc.choose_archs(compiler, arch)
        except ValueError as exc:
            raise ArgumentValueError(str(exc)) from exc
        return Recipe(compiler, lambda out: nvcc.cuda_command(compiler, source, out, flags, choice.gencode),
                      (nvcc.RESOURCE_FLAG,), choice.reason)
    raise ArgumentValueError(f"{source.name}: kernel sources end in .cc or .cpp (g++) or .cu (nvcc)")


def build(source: Path, *, flags: tuple[str, ...] = (), cache_dir: Path | None = None,
          force: bool = False, arch: str | int | None = None, emulate: bool = False) -> Artifact:
    """Return the library for ``source`` built with the documented command plus ``flags`` (a g++ source that opens
    with the header also pre-includes its precompiled header, :mod:`.pch`: the same library, sooner).

    ``force`` rebuilds even when a matching library is cached (the new build gets its own file name only if
    its inputs differ; otherwise it replaces the entry atomically). ``arch`` overrides the CUDA architecture.
    ``emulate`` builds a .cu source for aotbench's CUDA emulator (g++, :mod:`.emulator_build`): a cache entry of
    its own.
    """
    source = Path(source).expanduser().absolute()
    try:
        source_bytes = source.read_bytes()
    except OSError as exc:
        raise SourceReadError(f"cannot read kernel source {source}: {exc.strerror or exc}", path=str(source)) from exc
    flags = tuple(flags)
    root = cache.prepare(cache_dir if cache_dir is not None else cache.default_cache_dir())
    stem = _STEM_UNSAFE.sub("_", source.stem)[:48] or "kernel"
    text = source_bytes.decode("utf-8", "replace")
    translated = None
    if emulate:
        if source.suffix not in toolchain.CUDA_SUFFIXES:
            raise ArgumentValueError(f"{source.name}: only a .cu source can be built for the CUDA emulator")
        cxx = toolchain.find_cxx()
        translated = (emulator_build.translated_path(root, source, text),
                      emulator_build.runtime_object(root, cxx, emulator_build.variant(flags)))
    documented = recipe_for(source, flags, arch, translated)
    search_dirs = toolchain.user_include_dirs(source, flags)
    pre = None if emulate else pch.for_build(root, documented.compiler, source, text, flags)
    recipe = documented if pre is None else _with_pch(documented, source, flags, pre)

    def base_of(r: Recipe) -> str:
        return _base_key(source_bytes, r.command(Path("<output>")), toolchain.compiler_identity(r.compiler),
                         None if r.native is None else r.native.resolved)

    base = base_of(recipe)
    hit = None if force else _lookup(root, base, search_dirs)
    if hit is None and pre is not None and not pch.prepare(pre, source.parent):
        pre, recipe = None, documented  # the PCH was refused: the documented command, under its own key
        base = base_of(recipe)
        hit = None if force else _lookup(root, base, search_dirs)
    if hit is not None:
        return replace(hit, source=text)
    with cache.locked(root / "locks" / f"{base}.lock"):
        if not force:
            hit = _lookup(root, base, search_dirs)  # another process may have built it while we waited
            if hit is not None:
                return replace(hit, source=text)
        verify = None if pre is None else partial(pch.verify, pre)
        try:
            artifact = _compile(root, base, stem, source, source_bytes, recipe, search_dirs, verify)
        except (CompileError, pch.DamagedPchError) as exc:
            damaged = isinstance(exc, pch.DamagedPchError)
            if pre is None or not pch.repair(pre, "" if damaged else exc.log, damaged):
                raise
            artifact = _compile(root, base, stem, source, source_bytes, recipe, search_dirs)  # past the bad PCH
    return replace(artifact, source=text)


def _with_pch(documented: Recipe, source: Path, flags: tuple[str, ...], pre: pch.Pch) -> Recipe:
    """The documented C++ recipe with the precompiled header pre-included; ``-fpch-deps`` makes the dependency
    output list the files the PCH was made from, so the cache still watches them."""
    return replace(documented, run_extra=(*documented.run_extra, "-fpch-deps"),
                   command=lambda out: toolchain.cxx_command(documented.compiler, source, out, flags, pre.header))


def describe_change(old: Artifact, new: Artifact) -> list[str]:
    """What differs between two builds' inputs, in words (empty when the inputs are the same)."""
    a, b = old.manifest, new.manifest
    if a is None or b is None:
        return [f"the build record {(old if a is None else new).manifest_path} is gone: nothing to compare"]
    changes = []
    if a.source_sha256 != b.source_sha256:
        changes.append("the kernel source changed")
    old_deps = {d.path: d.sha256 for d in a.dependencies}
    new_deps = {d.path: d.sha256 for d in b.dependencies}
    for path in sorted(old_deps.keys() | new_deps.keys()):
        if path not in old_deps:
            changes.append(f"now includes {path}")
        elif path not in new_deps:
            changes.append(f"no longer includes {path}")
        elif old_deps[path] != new_deps[path]:
            changes.append(f"included file changed: {path}")
    if a.user_flags != b.user_flags:
        changes.append(f"flags changed: {list(a.user_flags)} -> {list(b.user_flags)}")
    if a.native != b.native and a.user_flags == b.user_flags:
        native = (b.native or a.native).flags or ("-march=native",)
        changes.append(f"{' '.join(native)} resolves differently on this machine")
    if a.compiler != b.compiler:
        changes.append(f"compiler changed: {a.compiler} -> {b.compiler}")
    if a.header_version != b.header_version or a.aotbench_version != b.aotbench_version:
        changes.append("aotbench or its header changed")
    return changes


def invalidate(artifact: Artifact) -> None:
    """Forget a cached library that turned out to be unusable, so the next :func:`build` recompiles."""
    for p in (artifact.manifest_path, artifact.path):
        try:
            os.unlink(p)
        except OSError:
            pass


def _base_key(source_bytes: bytes, template: list[str], identity: str, native: str | None = None) -> str:
    """The hash of what a build's inputs are before its includes are known; ``native`` (what ``-march=native``
    and the like resolve to here) is hashed only when the flags have such options, so other keys never change."""
    h = hashlib.sha256()
    parts = (f"aotbench-build {__version__} header {HEADER_VERSION}", identity, json.dumps(template))
    for part in (*parts, *(() if native is None else (f"native {native}",))):
        h.update(part.encode() + b"\0")
    h.update(source_bytes)
    return h.hexdigest()[:32]


def _lookup(root: Path, base: str, search_dirs: list[str]) -> Artifact | None:
    for entry in cache.index_entries(root, base):
        try:
            key = entry["key"]
            if not (isinstance(key, str) and _KEY.fullmatch(key)):
                continue
            deps = [cache.DepStamp(*d) for d in entry["deps"]]
            listings = {d: h for d, h in entry.get("dirs", [])}
            if listings != {d: cache.listing_hash(d) for d in search_dirs}:
                continue  # a file appeared or vanished where includes are searched: it may shadow a header
            if not all(d.still_valid() for d in deps):
                continue
        except (KeyError, TypeError, ValueError, AttributeError):
            continue  # a damaged entry is a miss
        artifact = _load_manifest(root, key, cache_hit=True)
        if artifact is not None:
            return artifact
    return None


def _load_manifest(root: Path, name: str, *, cache_hit: bool) -> Artifact | None:
    """The artifact published as ``name``, if both files exist and the library matches its recorded hash."""
    manifest_path = root / f"{name}.json"
    record = Manifest.read(manifest_path)
    if record is None:
        return None  # missing, damaged or written by something else: a miss, and the rebuild replaces it
    lib = root / f"{name}.so"
    try:
        if cache.sha256_file(lib) != record.artifact_sha256:
            return None  # truncated or replaced: rebuild
    except OSError:
        return None
    return Artifact(path=lib, manifest_path=manifest_path, key=name, command=record.argv, log=record.log,
                    cache_hit=cache_hit, build_time_s=record.build_time_s,
                    dependencies=tuple(d.path for d in record.dependencies), record=record)


def _compile(root: Path, base: str, stem: str, source: Path, source_bytes: bytes, recipe: Recipe,
             search_dirs: list[str], verify: Callable[[], None] | None = None) -> Artifact:
    """Run the recipe into tmp/ and publish the library; ``verify`` runs while the compiler does, and what it
    raises discards the build."""
    scratch = root / "tmp" / f"{stem}-{base[:12]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp_lib, dep_file, marker = scratch.with_suffix(".so"), scratch.with_suffix(".d"), scratch.with_suffix(".start")
    argv_run = [*recipe.command(tmp_lib), *recipe.run_extra, "-MD", "-MF", str(dep_file)]
    listings = [[d, cache.listing_hash(d)] for d in search_dirs]
    with cache.full_disk_is_cache_error(root, f"creating {marker.name} in tmp/"):
        marker.touch()
    started_fs_ns = marker.stat().st_mtime_ns  # "now" on the filesystem's own clock
    started = time.perf_counter()
    try:
        proc = _run(argv_run, verify)
        elapsed = time.perf_counter() - started
        full = next((m for m in cache.DISK_FULL_MESSAGES if m in proc.stdout), None)
        if proc.returncode != 0 and full is not None:  # the compiler could not write into tmp/: not the kernel's
            line = next(ln for ln in proc.stdout.splitlines() if full in ln)
            raise cache.disk_full_error(root, f"the compiler said: {line.strip()}")
        if proc.returncode != 0:
            documented = recipe.command(root / f"{stem}-<key>.so")
            raise CompileError(documented, proc.returncode, proc.stdout, parse_diagnostics(proc.stdout))
        if not tmp_lib.is_file() or elf.structural_problem(tmp_lib.read_bytes()) is not None:
            documented = recipe.command(root / f"{stem}-<key>.so")
            raise NoLibraryError(documented, proc.stdout, [f for f in documented if f in _NO_LINK_FLAGS])
        own, pch_files = str(source), str(root / "pch") + os.sep  # the PCH's link: its key is in the command
        deps = [cache.stamp(p) for p in map(os.path.abspath, parse_depfile(dep_file.read_text()))
                if p != own and not p.startswith(pch_files)]
        # A file saved while the compiler ran may not be what it read: publish the library under a unique
        # name but do not index it, so the next build compiles again.
        unstable = source.read_bytes() != source_bytes or any(
            max(d.mtime_ns, d.ctime_ns or 0) > started_fs_ns for d in deps)
        salt = uuid.uuid4().hex if unstable else ""
        key = f"{stem}-{hashlib.sha256((base + cache.dependencies_key(deps) + salt).encode()).hexdigest()[:20]}"
        lib = root / f"{key}.so"
        argv = recipe.command(lib)
        gpu = recipe.arch_reason is not None
        if recipe.emulated:
            deps = [d for d in deps if not d.path.startswith(str(root / "emulated") + os.sep)]
        record = Manifest(
            key=key, base_key=base, source=str(source), source_sha256=hashlib.sha256(source_bytes).hexdigest(),
            argv=tuple(argv), argv_run=tuple(argv_run), compiler=toolchain.compiler_identity(recipe.compiler),
            aotbench_version=__version__, header_version=HEADER_VERSION, log=proc.stdout,
            build_time_s=round(elapsed, 4), created=time.time(), artifact_sha256=cache.sha256_file(tmp_lib),
            dependencies=tuple(Dependency(d.path, d.sha256) for d in deps), native=recipe.native,
            arch_reason=recipe.arch_reason,
            resource_usage=tuple(nvcc.resource_usage(proc.stdout)) if gpu else (),
            notes=tuple(nvcc.stream_notes(source_bytes.decode("utf-8", "replace"))) if gpu else ())
        entry = None if unstable else {"key": key, "deps": [list(vars(d).values()) for d in deps], "dirs": listings}
        _publish(root, base, key, tmp_lib, record, entry)
    finally:
        for p in (tmp_lib, dep_file, marker):
            try:
                os.unlink(p)
            except OSError:
                pass
    return Artifact(path=lib, manifest_path=root / f"{key}.json", key=key, command=tuple(argv), log=proc.stdout,
                    cache_hit=False, build_time_s=elapsed, dependencies=tuple(d.path for d in deps), record=record)


def _run(argv: list[str], during: Callable[[], None] | None) -> subprocess.CompletedProcess:
    """``subprocess.run`` of the compiler (output and errors together), calling ``during`` while it runs; an
    interrupt ends the compiler's whole process group (:mod:`.subproc`)."""
    return subproc.run(argv, during)


def _publish(root: Path, base: str, key: str, tmp_lib: Path, manifest: Manifest, entry: dict | None) -> None:
    """Move the library into place, then write its manifest and index entry. A failure (a full disk) removes
    what was written, so no library without a manifest is left, and raises CacheError."""
    lib, manifest_path = root / f"{key}.so", root / f"{key}.json"
    try:
        os.replace(tmp_lib, lib)
        manifest.write(manifest_path)
        if entry is not None:
            cache.record_index_entry(root, base, entry)
    except OSError as exc:
        for path in (manifest_path, lib):
            try:
                os.unlink(path)
            except OSError:
                pass
        if cache.is_disk_full(exc):
            raise cache.disk_full_error(root, f"writing the library and its manifest: {exc.strerror}") from exc
        raise cache.CacheError(f"cannot write the build into the cache {root}: {exc.strerror or exc}. Free some "
                               "space (python -m aotbench cache prune --max-size ...) or point AOTBENCH_CACHE_DIR "
                               "elsewhere.") from exc


def parse_diagnostics(log: str) -> list[Diagnostic]:
    """GCC-style ``file:line:col: severity: message`` lines and nvcc's front end's ``file(line): severity:
    message`` lines (``warning #177-D:``; a "catastrophic error" is a fatal one), in the order they came; an error
    inside a template in a header (aotbench's ``Attr<T>`` assertion) is located at the user's line instantiating it
    (:mod:`.instantiation`)."""
    found = [(m.start(), Diagnostic(m["file"], int(m["line"]), int(m["col"]) if m["col"] else None, m["sev"],
                                    m["msg"].strip())) for m in _DIAGNOSTIC.finditer(log)]
    found += [(m.start(), Diagnostic(m["file"], int(m["line"]), None,
                                     "fatal error" if m["sev"] == "catastrophic error" else m["sev"],
                                     m["msg"].strip())) for m in _NVCC_DIAGNOSTIC.finditer(log)]
    return instantiation.relocate(log, found)  # a header template's error moves to the line instantiating it
