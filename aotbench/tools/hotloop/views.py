"""The hottest loop, its prediction and its measurement as a few lines of text and HTML (:class:`HotLoopReport`),
for the profile view to embed. The HTML never sets a text colour, so it reads in light and dark themes."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..codeview.listing import Function
from .finding import Loop, find_hot_loop
from .mca import Prediction, predict
from .measure import Measured


@dataclass(frozen=True, repr=False)
class HotLoopReport:
    """The hottest loop, its prediction and its measurement (each may be None; ``why_none`` says why there is
    no loop), as a few lines of text (``text``, ``str``) and HTML (``_repr_html_``) for the profile view."""

    loop: Loop | None
    prediction: Prediction | None = None
    measured: Measured | None = None
    why_none: str = "no loop holds a sample"

    @property
    def headline(self) -> str:
        lp = self.loop
        if lp is None:
            return f"Hottest loop: none ({self.why_none})"
        return (f"Hottest loop: {lp.where} ({lp.size} instructions, {lp.line_text()}), "
                f"{lp.share:.1%} of the samples")

    @property
    def lines(self) -> list[str]:
        out = [self.headline]
        if self.loop is not None:
            if self.prediction is not None:
                out.append(self.prediction.text)
            if self.measured is not None:
                out.append(self.measured.text)
        return out

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.headline

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(self.text.rstrip("\n"))

    def _repr_html_(self) -> str:
        box = ("font-family: var(--jp-code-font-family, monospace); font-size: 12px; line-height: 1.45; "
               "border: 1px solid rgba(128, 128, 128, 0.35); padding: 4px")
        rows = [f"<div>{html.escape(line)}</div>" for line in self.lines]
        if self.loop is not None:
            code = "\n".join(html.escape(i) for i in self.loop.instructions)
            rows.append(f"<details><summary>the loop's {self.loop.size} instructions</summary>"
                        f"<pre style=\"margin: 0; background: rgba(128, 128, 128, 0.12)\">{code}</pre></details>")
        return f"<div style=\"{box}\">{''.join(rows)}</div>"


def report(functions: Iterable[Function], samples: Mapping[int, int], *, predict_speed: bool = True,
           total: int | None = None, mcpu: str = "native") -> HotLoopReport:
    """:func:`find_hot_loop` and :func:`predict` together (no measurement: add one with
    ``dataclasses.replace(report, measured=measure_iterations(...))``)."""
    loop = find_hot_loop(functions, samples, total=total)
    if loop is None:
        return HotLoopReport(None)
    return HotLoopReport(loop, predict(loop, mcpu=mcpu) if predict_speed else None)
