"""``%%aot_kernel`` and ``%aot_doctor``: parse the magic line, delegate to the library, bind one name.

Everything else (writing the cell for the compiler, finding the kernel function, building, rendering errors)
lives in the core; this module only turns IPython's world into arguments and back.
"""

from __future__ import annotations

import ast
import keyword
import os
import shlex

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import HTML, display

from ..native import elf
from ..build import cells
from ..build import compile as build
from ..op.custom import Custom
from ..errors import CompileError, ShapeError
from ..op.op import Op


def unquote(token: str) -> str:
    """``token`` without one pair of surrounding shell quotes (IPython keeps them when it splits a magic line)."""
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "'\"":
        return token[1:-1]
    return token


def parse_attr(text: str) -> tuple[str, object]:
    """``NAME=VALUE`` with VALUE a Python literal (``axis=1``, ``paddings=[2.0,2.0]``, ``mode="fast"``)."""
    name, sep, value = unquote(text).partition("=")
    if not sep or not name.strip().isidentifier():
        raise UsageError(f"--attr {text!r}: write NAME=VALUE, e.g. --attr axis=1")
    try:
        return name.strip(), ast.literal_eval(value.strip())
    except (ValueError, SyntaxError) as exc:
        raise UsageError(f"--attr {text!r}: the value must be a Python literal such as 1, 2.5, True, "
                         "\"text\" or [1, 2] (quote strings)") from exc


@magics_class
class AotMagics(Magics):
    """The aotbench IPython magics."""

    @magic_arguments("%aot_kernel")  # IPython writes the usage as "%" + this name: a cell magic needs two
    @argument("target", choices=["cpu", "gpu"], help="build for the CPU (g++) or the GPU (nvcc)")
    @argument("--attr", action="append", default=[], metavar="NAME=VALUE",
              help="an attribute, VALUE a Python literal (repeatable): --attr axis=1 --attr keep_dim=False")
    @argument("--out-shape", metavar="EXPR", help="output shape rule, evaluated in the notebook: (4,), "
              "'lambda x, y: x'; default: the kernel's InferShape")
    @argument("--out-dtype", metavar="EXPR", help="output dtype, evaluated in the notebook: np.float32; "
              "default: the first input's dtype")
    @argument("--flags", default="", metavar="'FLAGS'", help="extra compiler flags, e.g. --flags '-O3 -march=native'")
    @argument("--func", metavar="NAME", help="the kernel function, when the cell defines several")
    @argument("--name", metavar="VAR", help="bind the op to this variable (default: the function's name)")
    @argument("--arch", metavar="SM", help="gpu: the CUDA architecture to build for (sm_90, 90 or 9.0); "
              "default: the detected GPU's, or the documented targets plus PTX")
    @argument("--check", action="store_true", help="run the op's first call in check mode (guards, poison): "
              "a contract violation raises ContractViolation with the report")
    @argument("--profile", action="store_true", help="after the op's next call, profile it on that call's inputs "
              "(op.profile: the share of the time per source line and instruction, from sampling) and show it")
    @argument("--export", metavar="DIR", help="after the op's next call, export it for MindSpore into DIR (kernel, "
              "headers, registration, Cell, that call's inputs and aotbench's outputs for them, a test for PyNative "
              "and graph mode)")
    @argument("--no-guard", action="store_true", help="do not guard the first call of each new input signature "
              "(by default it runs on fenced, poisoned buffers: an out-of-bounds write raises ContractViolation)")
    @argument("--emulate", action="store_true", help="gpu: run the kernels on aotbench's CUDA emulator, on the "
              "CPU, even where a GPU is usable (default: the GPU if there is one, else the emulator)")
    @argument("--no-emulate", action="store_true", help="gpu: require a usable GPU (no emulator)")
    @argument("--sanitize", choices=["address", "undefined"], help="run a separate ASan or UBSan build, isolated; "
              "its report raises SanitizerError pointing at the cell line")
    @argument("--isolate", action="store_true", help="run every call in a worker process: a crash (SIGSEGV ...) "
              "raises KernelCrashedError instead of killing the notebook, and the next call starts a fresh worker")
    @argument("--timeout-s", type=float, metavar="SECONDS", help="with --isolate (implied): kill a call that runs "
              "longer than this and raise KernelTimeoutError")
    @argument("--asm", action="store_true", help="after the build, show the generated code under the cell: host "
              "assembly (cpu) or SASS (gpu), each instruction under its source line (op.disassemble())")
    @argument("--annotate", action="store_true", help="after the build, show the cell annotated with the compiler's "
              "remarks: vectorized loops and why others are not (cpu), registers and spills (gpu) (op.annotate())")
    @argument("--force", action="store_true", help="rebuild even if the library is cached")
    @argument("--verbose", action="store_true", help="show the exact command and, on a rebuild, what changed")
    @cell_magic
    def aot_kernel(self, line: str, cell: str):
        """Compile the cell as an aot kernel and bind it as a callable op.

        The cell is C++ (cpu) or CUDA (gpu) written to MindSpore's aot calling convention. The op is bound under
        the kernel function's name (or --name); re-running the cell rebuilds it into the same object.
        """
        args = parse_argstring(self.aot_kernel, line)
        if args.emulate and args.no_emulate:
            raise UsageError("--emulate and --no-emulate contradict each other: give one of them (or neither)")
        emulate = True if args.emulate else (False if args.no_emulate else None)
        if emulate is not None and args.target != "gpu":
            raise UsageError(f"--{'no-' if emulate is False else ''}emulate is for gpu cells (%%aot_kernel gpu)")
        func = self._choose_function(cell, args.target, unquote(args.func) if args.func else None)
        name = unquote(args.name) if args.name else func
        if not name.isidentifier() or keyword.iskeyword(name):
            raise UsageError(f"--name {name!r} is not a valid Python variable name")
        attrs = dict(parse_attr(a) for a in args.attr)
        source = cells.write_cell_source(cell, func, args.target)
        flags = shlex.split(unquote(args.flags))
        if cells.includes_local_headers(cell):
            flags.append(f"-I{os.getcwd()}")  # the notebook's folder, where its own headers live
        try:
            op = Custom(f"{source}:{func}", self._eval(args.out_shape), self._eval(args.out_dtype), attrs=attrs,
                        target=args.target, flags=flags, force=args.force,
                        arch=unquote(args.arch) if args.arch else None,
                        isolate=args.isolate or args.timeout_s is not None, timeout_s=args.timeout_s,
                        sanitize=args.sanitize, guard=not args.no_guard, emulate=emulate)
        except ShapeError as err:
            if args.out_shape is not None or "InferShape" not in str(err):
                raise
            raise ShapeError(  # the same error in the words of the magic line, not of Custom(out_shape=)
                f"{func} has no {func}InferShape and the cell has no --out-shape, so the output shape is unknown. "
                "Add --out-shape to the magic line (a shape such as --out-shape \"(4,)\", or a function of the input "
                f"shapes such as --out-shape \"lambda x: x\"), or define extern \"C\" std::vector<int64_t> "
                f"{func}InferShape(int *ndims, int64_t **shapes, AotExtra *extra) in the cell.") from None
        except CompileError as err:
            err.sources[cells.CELL_LABEL] = cell
            previous = self.shell.user_ns.get(name)
            if isinstance(previous, Op):
                previous.reload_failed(err)  # open panels say so; the op keeps its previous build
            if _in_notebook(self.shell):
                from .display import compile_error_html

                display(HTML(compile_error_html(err)))
                err.html_shown = True
            raise
        previous = self.shell.user_ns.get(name)
        if args.verbose:
            self._explain(op, previous)
        # Same kind of op (isolated or not) and target: re-running the cell rebuilds into the same object.
        if (isinstance(previous, Op) and type(previous) is type(op) and previous.spec.target == op.spec.target
                and previous.emulated == op.emulated):
            previous.reload_from(op)
            op = previous
        op.check_next_call = args.check
        op.profile_next_call = args.profile  # re-running without it cancels
        op.export_after_next_call(unquote(args.export) if args.export else None)  # re-running without it cancels
        if args.export:
            print(f"{op.name} will be exported for MindSpore to {unquote(args.export)} after its next call "
                  "(op.last_export says what was written)")
        self.shell.user_ns[name] = op
        for wanted, view in ((args.annotate, op.annotate), (args.asm, op.disassemble)):
            if wanted:
                display(view())
        return op

    @line_magic
    def aot_doctor(self, line: str) -> None:
        """Print the versions, compilers, GPU and cache facts to paste into a bug report."""
        from ..cli import doctor

        print(doctor.report())

    def _choose_function(self, cell: str, target: str, requested: str | None) -> str:
        found = cells.kernel_functions(cell)
        if requested is not None:
            if not requested.isidentifier():
                raise UsageError(f"--func {requested!r} is not a C identifier")
            if found and requested not in found:
                raise UsageError(f"--func {requested}: not a kernel function of this cell (a kernel has the "
                                 f"7-parameter signature; Init and InferShape are companions). Kernel functions "
                                 f"here: {', '.join(found)}")
            return requested
        if len(found) == 1:
            return found[0]
        if found:
            raise UsageError(f"the cell defines several kernel functions ({', '.join(found)}); choose one with "
                             f"--func, e.g. %%aot_kernel {target} --func {found[0]}")
        raise UsageError('no kernel function found: the cell must define extern "C" int NAME(int nparam, '
                         "void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream, "
                         "void *extra) (or name it with --func)")

    def _eval(self, expr: str | None):
        """Evaluate an option's Python expression in the user namespace (one pair of shell quotes removed
        first, since the magic line keeps them: --out-shape "lambda x, y: x")."""
        if expr is None:
            return None
        expr = unquote(expr)
        try:
            return eval(expr, self.shell.user_ns)  # the user's own expression, in their namespace
        except Exception as exc:
            raise UsageError(f"cannot evaluate {expr!r}: {type(exc).__name__}: {exc}") from exc

    @staticmethod
    def _explain(op: Op, previous: object) -> None:
        print("command:", shlex.join(op.command or []))
        if op.artifact is not None and op.artifact.manifest.arch_reason is not None:
            print("architectures:", op.artifact.manifest.arch_reason)
        if op.artifact is None or op.artifact.cache_hit:
            print("cache hit: the compiler did not run")
        elif isinstance(previous, Op) and previous.artifact is not None:
            changes = build.describe_change(previous.artifact, op.artifact) or ["nothing (a forced rebuild)"]
            print("rebuilt because:", "; ".join(changes))
        else:
            print("rebuilt: no earlier build of this cell in this session to compare with")
        exported = elf.exported_c_functions(elf.dynamic_symbols(op.library.path.read_bytes()))
        print("exported functions:", ", ".join(exported))


def _in_notebook(shell) -> bool:
    return type(shell).__name__ == "ZMQInteractiveShell"


def load_ipython_extension(ipython) -> None:
    """``%load_ext aotbench``: register the magics, and write aotbench's warnings from cells by the cell's name
    (:func:`aotbench.notebook.display.install_warning_format`)."""
    from .display import install_warning_format

    install_warning_format()
    ipython.register_magics(AotMagics)
