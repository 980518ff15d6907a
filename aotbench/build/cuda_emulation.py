"""The CUDA emulator's source translator: a ``.cu`` text rewritten so that g++ (``-std=c++17``, with the emulation
header force-included) compiles it and its kernels run on the CPU.

Once the header has made ``__global__``, ``__shared__``, ``threadIdx`` and the rest into C++, g++ parses nearly all
of a CUDA source; the two constructs it cannot parse are rewritten here, as text, every line kept where it was (so
that g++'s diagnostics and ``__LINE__`` point at the user's lines):

* a launch ``KERNEL<<<CFG>>>(ARGS)`` becomes
  ``::aotb_emu::launch("KERNEL", __LINE__, [](auto... aotb_a) { KERNEL(aotb_a...); }, CFG)(ARGS)``: the lambda
  lets g++ deduce a template kernel's arguments at the call, as nvcc does;
* ``extern __shared__ TYPE NAME[];`` becomes ``TYPE *const NAME = ::aotb_emu::dynamic_shared<TYPE>();`` inside a
  function and ``static ::aotb_emu::DynamicShared<TYPE> NAME;`` at namespace scope.

Comments, string and character literals (raw strings included) and ``#include``/``#error``/``#warning`` lines are
never changed; the body of a ``#define`` is translated like other code (an ``extern __shared__`` array there takes
the in-function form). A declaration that does not fit the pattern (a sized array, several declarators, no ``;``)
is left as it is; a malformed launch is a ``ValueError`` naming its line. :func:`unsupported` lists what the
emulator refuses to run (inline assembly). Pure text to text: no compiler, no file, no other aotbench module.
"""

from __future__ import annotations

import bisect
import re

# Part of the emulated build's cache key: bump it whenever translate() gives a different text for some input.
TRANSLATOR_VERSION = "1"

_LITERAL = "\x01"  # what a literal's characters read as in the analysis views: neither a name nor punctuation
_WS = " \t\r\n\\"   # white space to the analysis, a line continuation's backslash included
_LEX = re.compile(r"""
    (?P<nl>\n)
  | (?P<comment>//(?:\\\r?\n|[^\n])*|/\*.*?(?:\*/|\Z))
  | (?P<literal>(?:u8|[uUL])?R"(?P<delim>[^()\\\s"]{0,16})\(.*?(?:\)(?P=delim)"|\Z)
      | (?:u8|[uUL])?(?P<quote>["'])(?:\\.|(?!(?P=quote))[^\\\n])*(?P=quote)?)
  | (?P<number>\.?\d(?:[eEpP][+-]|[\w.]|'\w)*)
  | (?P<word>[A-Za-z_]\w*)
  | (?P<hash>\#[ \t]*(?P<directive>\w*))
""", re.S | re.X)
_LOGICAL_LINE = re.compile(r"(?:\\\r?\n|[^\n])*")
_PROTECTED_DIRECTIVES = {"include", "include_next", "import", "error", "warning"}
_NOT_QUALIFIERS = {"return", "else", "do", "case", "goto", "throw", "co_return", "co_await", "new", "delete",
                   "typename", "template", "sizeof", "decltype", "operator"}
_OPEN = {"(": ")", "[": "]", "{": "}"}
_DECL_TOKEN = re.compile(r"""
    [ \t\r\n]+ | \\\r?\n
  | (?P<attr>(?:__align__|__attribute__|alignas|__declspec)\s*\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)
      | \[\[.*?\]\])
  | (?P<targs><(?:[^<>;]|<(?:[^<>;]|<[^<>;]*>)*>)*>)
  | (?P<word>[A-Za-z_]\w*)
  | (?P<punct>::|[*&\[\]])
""", re.S | re.X)


def _is_ident(c: str) -> bool:
    return c == "_" or (c.isascii() and c.isalnum())


def _continued(text: str, newline: int) -> bool:
    """Whether the newline at index newline ends a line continued by a backslash."""
    return text[max(newline - 2, 0):newline].endswith(("\\", "\\\r"))


class _Source:
    """A source with its analysis views, each as long as the text and with every newline kept: ``view`` (comments
    and the protected directive lines blanked to spaces, literals to ``_LITERAL``) for finding things, ``code``
    (the view with every directive blanked too), ``plain`` (only the comments blanked) for copying code into new
    text; and the spans (start of '#', ending newline) of the preprocessor directives."""

    def __init__(self, text: str):
        self.text = text
        view, plain = list(text), list(text)
        self.directives: list[tuple[int, int]] = []

        def blank(start: int, end: int, ch: str, chars: list[str]) -> None:
            chars[start:end] = re.sub(r"[^\n]", ch, text[start:end])

        open_directive = -1
        pos = 0
        while m := _LEX.search(text, pos):
            start, pos = m.span()
            kind = m.lastgroup
            if kind == "nl":
                if open_directive >= 0 and not _continued(text, start):
                    self.directives.append((open_directive, start))
                    open_directive = -1
            elif kind == "comment":
                blank(start, pos, " ", view)
                blank(start, pos, " ", plain)
            elif kind == "literal":
                blank(start, pos, _LITERAL, view)
            elif kind == "hash" and open_directive < 0 and not text[text.rfind("\n", 0, start) + 1:start].strip():
                if m["directive"] in _PROTECTED_DIRECTIVES:
                    pos = _LOGICAL_LINE.match(text, start).end()
                    blank(start, pos, " ", view)
                    self.directives.append((start, pos))
                else:
                    open_directive = start
        if open_directive >= 0:
            self.directives.append((open_directive, len(text)))
        self.view, self.plain = "".join(view), "".join(plain)
        for start, end in self.directives:
            blank(start, end, " ", view)
        self.code = "".join(view)
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self._directive_starts = [s for s, _ in self.directives]

    def line(self, pos: int) -> int:
        """The 1-based line number of index pos."""
        return bisect.bisect_right(self._line_starts, pos)

    def directive_at(self, pos: int) -> tuple[int, int] | None:
        k = bisect.bisect_right(self._directive_starts, pos) - 1
        return self.directives[k] if k >= 0 and pos <= self.directives[k][1] else None


def _back(view: str, j: int) -> int:
    """The index of the last character before j that is not white space, or -1."""
    j -= 1
    while j >= 0 and view[j] in _WS:
        j -= 1
    return j


def _skip(view: str, j: int, limit: int) -> int:
    """The index of the first character from j on that is not white space, or limit."""
    while j < limit and view[j] in _WS:
        j += 1
    return j


def _word_start(view: str, j: int) -> int:
    """The start of the name whose last character is at j."""
    while j > 0 and _is_ident(view[j - 1]):
        j -= 1
    return j


# -- launches -----------------------------------------------------------------------------------------------------
def _template_close(view: str, i: int, limit: int) -> int | None:
    """If the '<' at i opens template arguments (after a name, with a matching '>' before limit that is followed
    by something a template-id can be followed by), the index of that '>'; else None (a less-than)."""
    k = _back(view, i)
    if view.startswith(("<<", "<="), i) or view[i - 1:i] == "<" or k < 0 or not _is_ident(view[k]) \
            or view[_word_start(view, k)].isdigit():
        return None
    closers: list[str] = []
    j = i + 1
    while j < limit:
        c = view[j]
        if c in _OPEN:
            closers.append(_OPEN[c])
        elif c in ")]}":
            if not closers or closers.pop() != c:
                return None
        elif closers:
            pass
        elif c in ";?" or view.startswith(("&&", "||"), j):
            return None
        elif view.startswith("->", j):
            j += 1
        elif c == "<":
            j = _template_close(view, j, limit) or j
        elif c == ">":
            if view.startswith(">=", j) or (view.startswith(">>>", j) and not view.startswith(">>>>", j)):
                return None  # x >= y, or the launch's own '>>>'
            after = _skip(view, j + 1, limit)
            return j if after >= limit or view[after] in "({),>;" or view.startswith("::", after) else None
        j += 1
    return None


def _kernel_start(view: str, end: int) -> int | None:
    """The start of the kernel name that ends before end (``k``, ``::ns::k<float, 4>``, ``k<T, (N > 2)>``: template
    arguments matched backwards, parentheses inside them allowed), or None if no name ends there."""
    k = _back(view, end)
    while True:
        if k >= 0 and view[k] == ">" and view[k - 1:k] != "-":
            depth = parens = 0
            while k >= 0:
                c = view[k]
                if c in ")]":
                    parens += 1
                elif c in "([":
                    parens -= 1
                    if parens < 0:
                        return None
                elif c in ";{}":
                    return None
                elif parens == 0 and c == ">" and view[k - 1:k] != "-":
                    depth += 1
                elif parens == 0 and c == "<":
                    depth -= 1
                    if depth == 0:
                        break
                k -= 1
            k = _back(view, k)
        if k < 0 or not _is_ident(view[k]) or view[_word_start(view, k)].isdigit():
            return None
        start = _word_start(view, k)
        k = _back(view, start)
        t = _back(view, k - 7) if k >= 0 and view[_word_start(view, k):k + 1] == "template" else -1
        if t >= 1 and view[t - 1:t + 1] == "::":
            k = t  # ns::template k<T>: the keyword belongs to the name
        if k < 1 or view[k - 1:k + 1] != "::":
            return start
        q = _back(view, k - 1)
        if q < 0 or not (view[q] == ">" or _is_ident(view[q]) and view[_word_start(view, q):q + 1]
                         not in _NOT_QUALIFIERS):
            return k - 1  # a leading '::'
        k = q  # a qualifier before '::': go on with it


def _config_parts(src: _Source, begin: int, line: int, kernel: str) -> tuple[int, list[str]]:
    """The index of the '>>>' closing the launch configuration that starts at begin (after '<<<'), and the
    configuration's parts as analysis text. In a directive the search ends with the directive."""
    view = src.view
    directive = src.directive_at(begin)
    limit = directive[1] if directive is not None else len(view)
    closers: list[str] = []  # ')', ']', '}' and '>' for the template arguments open
    parts: list[str] = []
    last = j = begin
    while j < limit:
        c = view[j]
        if c in _OPEN:
            closers.append(_OPEN[c])
        elif c in ")]}":
            while closers and closers[-1] == ">":
                closers.pop()  # a '<' taken for a template's that was not one
            if not closers or closers.pop() != c:
                raise ValueError(f"line {src.line(j)}: unbalanced '{c}' in the launch configuration of `{kernel}`")
        elif view.startswith("->", j):
            j += 1
        elif c == "<" and _template_close(view, j, limit) is not None:
            closers.append(">")
        elif c == ">" and closers and closers[-1] == ">":
            closers.pop()
        elif c == ">" and not closers and view.startswith(">>>", j):
            return j, parts + [view[last:j]]
        elif c == "," and not closers:
            parts.append(view[last:j])
            last = j + 1
        elif c == ";" and not set(closers) & set(")]}"):
            break
        j += 1
    raise ValueError(f"line {line}: the launch of `{kernel}` has no closing '>>>' (the '<<<' is never closed before "
                     f"the end of the statement)")


def _launches(src: _Source) -> list[tuple[int, int, str]]:
    """The replacements (start, end, new text) for every launch in the source."""
    view, plain = src.view, src.plain
    out: list[tuple[int, int, str]] = []
    pos = 0
    while (lt := view.find("<<<", pos)) >= 0:
        start = _kernel_start(view, lt)
        if start is None:
            raise ValueError(f"line {src.line(lt)}: '<<<' does not follow a kernel name (a launch is "
                             f"`kernel<<<grid, block>>>(args)`, the kernel a name, optionally qualified and with "
                             f"template arguments)")
        kend = _back(view, lt) + 1
        if re.fullmatch(r"(?:.*\W)?operator", view[start:kend], re.S):
            pos = lt + 2  # operator<<<T>: a template operator<<, not a launch
            continue
        kernel_code = plain[start:kend]
        kernel = " ".join(re.sub(r"\\\r?\n", " ", kernel_code).split())
        line = src.line(start)
        gt, parts = _config_parts(src, lt + 3, line, kernel)
        if not 2 <= len(parts) <= 4:
            raise ValueError(f"line {line}: the launch of `{kernel}` has {len(parts)} launch configuration "
                             f"part{'s' if len(parts) != 1 else ''}; it takes 2 to 4: "
                             f"<<<grid, block[, dynamic shared memory bytes[, stream]]>>>")
        for k, part in enumerate(parts):
            if not part.replace("\\", " ").strip():
                raise ValueError(f"line {line}: the launch of `{kernel}` has an empty launch configuration part "
                                 f"(part {k + 1} of {len(parts)})")
        paren = _skip(view, gt + 3, len(view))
        if view[paren:paren + 1] != "(":
            raise ValueError(f"line {src.line(gt)}: the launch `{kernel}<<<...>>>` is not followed by '(' and the "
                             f"kernel's arguments")
        literal = kernel.replace("\\", "\\\\").replace('"', '\\"')
        # the name's and the gap's newlines (continuations included) and the configuration's text, as they were
        out.append((start, gt + 3, f'::aotb_emu::launch("{literal}", __LINE__, [](auto... aotb_a) {{ {kernel_code}'
                                   f'(aotb_a...); }},{plain[kend:lt]} {src.text[lt + 3:gt]})'))
        pos = gt + 3
    return out


# -- extern __shared__ ----------------------------------------------------------------------------------------------
def _function_depth(src: _Source) -> tuple[list[int], list[int]]:
    """The positions of the braces outside directives and the function/block depth after each: braces that open
    a ``namespace`` or an ``extern "C"`` block do not count."""
    code = src.code
    positions: list[int] = []
    depths: list[int] = []
    counted: list[bool] = []
    last_stop = 0
    for m in re.finditer(r"[{};]", code):
        if m[0] == "{":
            head = code[last_stop:m.start()].strip()
            counted.append(not (re.match(r"(?:inline\s+)?namespace\b", head)
                                or re.fullmatch(r"extern\s*" + _LITERAL + "+", head)))
        elif m[0] == "}" and counted:
            counted.pop()
        last_stop = m.end()
        if m[0] != ";":
            positions.append(m.start())
            depths.append(sum(counted))
    return positions, depths


def _decl_tokens(view: str, start: int, end: int) -> list[tuple[str, int, int]] | None:
    """The declaration view[start:end] (up to its ';') as tokens (kind, start, end), kind 'attr' (with its
    parentheses), 'targs' (template arguments), 'word' or 'punct'; None if it has anything else."""
    tokens = []
    while start < end:
        m = _DECL_TOKEN.match(view, start, end)
        if not m:
            return None
        if m.lastgroup:
            tokens.append((m.lastgroup, m.start(), m.end()))
        start = m.end()
    return tokens


def _extern_shared(src: _Source) -> list[tuple[int, int, str]]:
    """The replacements (start, end, new text) for every ``extern __shared__ TYPE NAME[];``."""
    out: list[tuple[int, int, str]] = []
    braces: tuple[list[int], list[int]] | None = None
    for m in re.finditer(r"\bextern\b", src.view):
        directive = src.directive_at(m.start())
        # the statement: from after the last ';', '{', '}' (or the #define's head) to the next ';'
        if directive is not None:
            view = src.view
            head = re.compile(r"#\s*define\s+[A-Za-z_]\w*(?:\([^)]*\))?").match(view, directive[0])
            lower, upper = (head.end() if head else directive[0] + 1), directive[1]
        else:
            view, lower, upper = src.code, 0, len(src.code)
        begin = max(view.rfind(c, lower, m.start()) for c in ";{}") + 1 or lower
        semi = view.find(";", m.start(), upper)
        tokens = _decl_tokens(view, max(begin, lower), semi) if semi >= 0 else None
        if not tokens or len(tokens) < 4 or [view[a:b] for _, a, b in tokens[-2:]] != ["[", "]"] \
                or tokens[-3][0] != "word":
            continue
        words = [view[a:b] for kind, a, b in tokens if kind == "word"]
        type_tokens = [(kind, a, b) for kind, a, b in tokens[:-3]
                       if kind != "attr" and view[a:b] not in ("extern", "__shared__")]
        if "__shared__" not in words or words.count("extern") != 1 or not type_tokens \
                or any(view[a:b] in "[]" for _, a, b in type_tokens):
            continue
        type_text = ""
        for _, a, b in type_tokens:
            piece = " ".join(re.sub(r"\\\r?\n", " ", src.plain[a:b]).split())
            type_text += (" " if type_text and _is_ident(type_text[-1]) and _is_ident(piece[0]) else "") + piece
        name = view[tokens[-3][1]:tokens[-3][2]]
        start = tokens[0][1]
        if directive is not None:
            in_function = True  # a macro's body: written for use inside a kernel
        else:
            braces = braces or _function_depth(src)
            k = bisect.bisect_left(braces[0], start) - 1
            in_function = k >= 0 and braces[1][k] > 0
        new = (f"{type_text} *const {name} = ::aotb_emu::dynamic_shared<{type_text}>();" if in_function
               else f"static ::aotb_emu::DynamicShared<{type_text}> {name};")
        # the line ends the declaration spanned, after it (continued with a backslash in a directive)
        breaks = "".join((" \\" if directive else "") + ("\r\n" if src.text[k - 1:k] == "\r" else "\n")
                         for k in range(start, semi) if src.text[k] == "\n")
        out.append((start, semi + 1, new + breaks))
    return out


# -- the API ------------------------------------------------------------------------------------------------------
def translate(source: str) -> str:
    """The CUDA source as g++ compiles it under the emulator: same number of lines, every line where it was.

    Launches ``KERNEL<<<grid, block[, smem[, stream]]>>>(args)`` become calls of ``::aotb_emu::launch`` and
    ``extern __shared__`` arrays become the header's dynamic shared memory; nothing else changes (see the module
    docstring). A malformed launch raises ``ValueError("line N: ...")`` naming the line and what is wrong.
    """
    src = _Source(source)
    pieces = []
    pos = 0
    for start, end, new in sorted(_launches(src) + _extern_shared(src)):
        if start >= pos:  # (a declaration inside a launch's text, were there one, would be left as it is)
            pieces += [source[pos:start], new]
            pos = end
    return "".join(pieces) + source[pos:]


def unsupported(source: str) -> list[tuple[int, str]]:
    """(line, feature) for what the emulator refuses to run, e.g. inline PTX: (12, "inline PTX (asm)").

    Each ``asm``/``__asm__``/``__asm`` keyword outside comments, literals and ``#include`` lines is one entry,
    in source order.
    """
    src = _Source(source)
    return [(src.line(m.start()), "inline PTX (asm)") for m in re.finditer(r"\b(?:asm|__asm__|__asm)\b", src.view)]
