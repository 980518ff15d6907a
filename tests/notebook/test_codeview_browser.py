"""The annotated source in Chromium: every shaded line keeps readable contrast in a light and a dark theme."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import aotbench
import browser_support as support

pytestmark = pytest.mark.slow

# JupyterLab 4's theme colours: --jp-layout-color0 and --jp-content-font-color1 of the light and dark themes
THEMES = {"light": ("#ffffff", "rgba(0, 0, 0, 0.87)"), "dark": ("#111111", "rgba(255, 255, 255, 1)")}
WCAG_AA = 4.5

# Blends every line's background (and text colour) over the page, then computes WCAG's contrast ratio.
CONTRAST_JS = """
() => {
  const parse = s => { const m = s.match(/[\\d.]+/g).map(Number); return m.length === 3 ? [...m, 1] : m; };
  const over = (top, base) => top.slice(0, 3).map((c, i) => c * top[3] + base[i] * (1 - top[3]));
  const lum = rgb => { const l = rgb.map(c => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; });
                       return 0.2126 * l[0] + 0.7152 * l[1] + 0.0722 * l[2]; };
  const page = parse(getComputedStyle(document.body).backgroundColor);
  return [...document.querySelectorAll('.aotb-line, .aotb-remark')].map(el => {
    const s = getComputedStyle(el);
    const bg = over(parse(s.backgroundColor), page), fg = over(parse(s.color), bg);
    const [a, b] = [lum(bg), lum(fg)].sort((x, y) => y - x);
    return {shaded: s.backgroundColor !== 'rgba(0, 0, 0, 0)', ratio: (a + 0.05) / (b + 0.05)};
  });
}
"""


@pytest.mark.browser
@pytest.mark.skipif(support.missing("playwright") is not None, reason=str(support.missing("playwright")))
def test_annotated_source_is_readable_in_light_and_dark_themes(tmp_path):
    from playwright.sync_api import sync_playwright

    kernel = Path(__file__).resolve().parents[1] / "support" / "kernels" / "codeview_loops.cc"
    op = aotbench.Custom(f"{kernel}:Loops", None, np.float32, flags="-O3")
    html = op.annotate()._repr_html_()
    shots = support.screenshot_dir(tmp_path)
    with sync_playwright() as pw:
        browser = support.launch(pw)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            for theme, (background, text) in THEMES.items():
                page.set_content(f"<html><body style='background: {background}; color: {text}; "
                                 f"font-family: sans-serif'>{html}</body></html>")
                lines = page.evaluate(CONTRAST_JS)
                shaded = [line for line in lines if line["shaded"]]
                assert len(shaded) >= 4, lines
                worst = min(line["ratio"] for line in lines)
                assert worst >= WCAG_AA, f"{theme}: a line has contrast {worst:.2f} < {WCAG_AA}"
                path = shots / f"annotated_source_{theme}.png"
                page.screenshot(path=str(path), full_page=True)
                print(f"{theme} theme: worst contrast {worst:.1f}, screenshot {path}")
        finally:
            browser.close()
