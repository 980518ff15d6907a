"""A :class:`aotbench.tools.profile.Profile` as text and as HTML: the summary, the source shaded by time, the
disassembly with a share per instruction.

As in the compiler views (:mod:`aotbench.tools.codeview.views`), the HTML never sets a text colour: a line's time
is a translucent background over the page's own colours, so it reads in light and dark themes alike.
"""

from __future__ import annotations

import html

from .codeview.listing import Function

HEAT = "rgba(230, 90, 30, {alpha:.2f})"  # a line's or instruction's background, alpha by its share of the hottest
_PRE = "font-family: var(--jp-code-font-family, monospace); font-size: 12px; line-height: 1.45; margin: 0"
_BOX = "max-height: 36em; overflow: auto; border: 1px solid rgba(128, 128, 128, 0.35); padding: 4px"


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _pct(share: float) -> str:
    return f"{100 * share:5.1f}%"


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms" if ns >= 1e5 else f"{ns / 1e3:.2f} us"


def summary_lines(p) -> list[str]:
    """The profile in a few sentences: what was sampled, the kernel's share, where the rest went, overhead."""
    what = f" ({p.label})" if p.label else ""
    threads = "1 thread" if p.threads == 1 else f"{p.threads} threads"
    out = [f"Profile of {p.name}{what}: {p.samples} samples of {threads} over {p.seconds:.2f} s, {p.calls} calls "
           f"({_ms(p.ns_per_call)} per call; sampling every {p.interval_ns / 1e6:g} ms per thread made a call "
           f"{100 * p.overhead:+.1f}% slower than unsampled, {_ms(p.baseline_ns_per_call)})"]
    if p.waiting_samples:
        out.append(f"  {p.waiting_samples} more samples found a thread waiting (off the CPU): they weigh nothing")
    inside = f"  in the kernel: {_pct(p.inside).strip()}"
    if p.called:
        inside += " (of which in what it calls: " + ", ".join(
            f"{k} {_pct(v).strip()}" for k, v in list(p.called.items())[:4]) + ")"
    out.append(inside)
    if p.outside:
        out.append("  outside the kernel: " + ", ".join(f"{k} {_pct(v).strip()}" for k, v in p.outside.items()))
    if p.elsewhere:
        out.append("  in the kernel's library, not on a line of its source: " + ", ".join(
            f"{k} {_pct(v).strip()}" for k, v in list(p.elsewhere.items())[:4]))
    out += [f"  note: {n}" for n in p.notes]
    if p.counters is not None:
        out += [f"  {line}" for line in p.counters.lines()]
    if p.hot_loop is not None:
        out += [f"  {line}" for line in p.hot_loop.lines]
    elif p.hot_loop_note:
        out.append(f"  hottest loop: {p.hot_loop_note}")
    return out


def profile_text(p) -> str:
    out = summary_lines(p)
    if p.by_line and p.source is not None:
        out.append("")
        out.append(f"Source ({p.source.path}), share of the time per line:")
        out += source_lines(p)
    return "\n".join(out) + "\n"


def source_lines(p) -> list[str]:
    """Every line of the source with its share (blank where no sample fell)."""
    rows = []
    for number, text in enumerate(p.source.lines, start=1):
        share = p.by_line.get(number)
        label = _pct(share) if share else ""
        rows.append(f"{label:>6} {number:5d} | {text}")
    return rows


def source_html(p) -> str:
    if p.source is None:
        return f"<div>{_e(p.mapping.note or 'no source for this op')}</div>"
    top = max(p.by_line.values(), default=0.0) or 1.0
    rows = []
    for number, text in enumerate(p.source.lines, start=1):
        share = p.by_line.get(number, 0.0)
        shade = HEAT.format(alpha=0.08 + 0.55 * share / top) if share else "transparent"
        label = _pct(share) if share else ""
        rows.append(f"<div style=\"background: {shade}\" title=\"{_e(_pct(share).strip())} of the time\">"
                    f"{_e(f'{label:>6} {number:5d} | {text}')}</div>")
    return f"<pre style=\"{_PRE}\">{''.join(rows)}</pre>"


def _sampled_functions(p) -> list[Function]:
    hit = set(p.by_instruction)
    return [f for f in p.mapping.functions
            if any(_address(i) in hit for b in f.blocks for i in b.instructions)]


def _address(text: str) -> int | None:
    try:
        return int(text.split(" ", 1)[0], 16)
    except ValueError:
        return None


def disassembly_text(p, function: str | None = None) -> str:
    """The disassembly of the functions with samples, each instruction with its share of the time."""
    functions = [f for f in _sampled_functions(p) if function is None or function in f.name]
    if not functions:
        return "(no disassembly with samples: " + (p.mapping.note or "no line table for this library") + ")\n"
    out = []
    for f in functions:
        out.append(f"== {f.name} [{f.arch}] ==")
        for block in f.blocks:
            if block.line is not None and p.source is not None and p.source.owns(block.file):
                out.append(f"       {block.line:5d} | {p.source.line(block.line)}")
            for text in block.instructions:
                share = p.by_instruction.get(_address(text))
                label = _pct(share) if share else ""
                out.append(f"{label:>6}         {text}")
    return "\n".join(out) + "\n"


def _disassembly_html(p) -> str:
    parts = []
    top = max(p.by_instruction.values(), default=0.0) or 1.0
    for n, f in enumerate(_sampled_functions(p)):
        rows = []
        for block in f.blocks:
            if block.line is not None and p.source is not None and p.source.owns(block.file):
                rows.append(f"<div style=\"font-weight: bold\">{_e(f'       {block.line:5d} | ')}"
                            f"{_e(p.source.line(block.line))}</div>")
            for text in block.instructions:
                share = p.by_instruction.get(_address(text), 0.0)
                shade = HEAT.format(alpha=0.08 + 0.55 * share / top) if share else "transparent"
                label = _pct(share) if share else ""
                rows.append(f"<div style=\"background: {shade}\">{_e(f'{label:>6}  {text}')}</div>")
        parts.append(f"<details{' open' if n == 0 else ''}><summary><code>{_e(f.name)}</code> [{_e(f.arch)}]"
                     f"</summary><pre style=\"{_PRE}\">{''.join(rows)}</pre></details>")
    return "".join(parts)


def profile_html(p) -> str:
    head = "".join(f"<div>{_e(line.strip())}</div>" for line in summary_lines(p))
    body = [f"<div style=\"{_BOX}\">{head}"]
    if p.source is not None and p.by_line:
        body.append(f"<details open><summary>Source, shaded by time</summary>{source_html(p)}</details>")
    if p.mapping.functions:
        body.append(f"<details><summary>Disassembly, share per instruction</summary>{_disassembly_html(p)}</details>")
    return "".join(body) + "</div>"
