"""Charts as inline SVG, built on the server: no script, no CDN, no library.

Each chart is a string of SVG (``markupsafe.Markup``) a template puts in the page as it is. The
colors come from classes that ``static/rsched.css`` styles (``c-fired``, ``c-dead``, ...), each
point or bar carries a ``<title>`` (the browser's tooltip, and what a screen reader reads), and
the chart's ``aria-label`` says what it shows. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

__all__ = ("Bar", "Series", "bars", "lines", "nice_max")

WIDTH = 560
HEIGHT = 150
_LEFT, _RIGHT, _TOP, _BOTTOM = 44, 8, 8, 20


@dataclass(frozen=True, slots=True)
class Series:
    """One line: its name (legend, tooltips), a value per x (None: no point), a CSS class."""

    name: str
    values: Sequence[float | None]
    css: str


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar: its height's value, its CSS class and its tooltip."""

    value: float
    css: str
    title: str


def nice_max(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k at or above ``value`` (1 for nothing): round axis
    ticks."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    base = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * base >= value:
            return float(step * base)
    return float(10 * base)


def _num(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _frame(
    label: str, top: float, unit: str, x_labels: Sequence[tuple[int, str]], n: int, width: int
) -> str:
    """The axes: the top and middle values, gridlines, and a few x labels (index, text)."""
    w, h = width - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM
    out = [
        f'<svg class="chart" viewBox="0 0 {width} {HEIGHT}" role="img" '
        f'aria-label="{escape(label)}">'
    ]
    for frac in (0.0, 0.5, 1.0):
        y = _TOP + h * (1 - frac)
        out.append(f'<line class="grid" x1="{_LEFT}" x2="{_LEFT + w}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(
            f'<text class="axis" x="{_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">'
            f"{escape(_num(top * frac))}{escape(unit) if frac else ''}</text>"
        )
    step = w / max(n, 1)
    for i, text in x_labels:
        x = _LEFT + step * (i + 0.5)
        out.append(
            f'<text class="axis" x="{x:.1f}" y="{HEIGHT - 5}" text-anchor="middle">'
            f"{escape(text)}</text>"
        )
    return "".join(out)


def lines(
    label: str,
    series: Sequence[Series],
    x_titles: Sequence[str],
    x_labels: Sequence[tuple[int, str]] = (),
    unit: str = "",
    width: int = WIDTH,
) -> Markup:
    """A line per series over the same x points (``x_titles``: each point's name in its
    tooltip), on a y axis from 0 to a round maximum. ``width``: of the drawing, in the units
    of its fixed height (the page scales it to its box, keeping its proportions)."""
    n = len(x_titles)
    top = nice_max(max((v for s in series for v in s.values if v is not None), default=0))
    w, h = width - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM
    step = w / max(n, 1)
    out = [_frame(label, top, unit, x_labels, n, width)]
    for s in series:
        # A gap (None) ends a polyline: no line is drawn through a point that has no value.
        runs: list[list[str]] = [[]]
        for i, v in enumerate(s.values):
            if v is None:
                runs.append([])
                continue
            x, y = _LEFT + step * (i + 0.5), _TOP + h * (1 - min(v, top) / top)
            runs[-1].append(f"{x:.1f},{y:.1f}")
        for pts in runs:
            if len(pts) > 1:
                out.append(f'<polyline class="line {s.css}" points="{" ".join(pts)}"/>')
            elif pts:
                cx, cy = pts[0].split(",")
                out.append(f'<circle class="dot {s.css}" cx="{cx}" cy="{cy}" r="2"/>')
    # One hover target per x: its tooltip lists every series' value there.
    for i, name in enumerate(x_titles):
        parts = [f"{s.name} {_num(v)}{unit}" for s in series if (v := s.values[i]) is not None]
        tip = f"{name}: " + (", ".join(parts) if parts else "nothing")
        x = _LEFT + step * i
        out.append(
            f'<rect class="hover" x="{x:.1f}" y="{_TOP}" width="{step:.1f}" height="{h}">'
            f"<title>{escape(tip)}</title></rect>"
        )
    out.append("</svg>")
    return Markup("".join(out))


def bars(
    label: str,
    items: Sequence[Bar],
    x_labels: Sequence[tuple[int, str]] = (),
    unit: str = "",
    width: int = WIDTH,
    slots: int = 1,
) -> Markup:
    """A bar per item, left to right (the last at the right end of ``slots`` places, at least),
    on a y axis from 0 to a round maximum; a bar of value 0 still shows a sliver, so that a run
    that took no time is seen."""
    n = len(items)
    # At least `slots` places, the bars at the right end: a few runs stay bars, not blocks.
    places = max(n, slots)
    top = nice_max(max((b.value for b in items), default=0))
    w, h = width - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM
    step = w / places
    gap = min(2.0, step * 0.2)
    out = [_frame(label, top, unit, x_labels, places, width)]
    for i, b in enumerate(items):
        bh = max(1.0, h * min(b.value, top) / top)
        x = _LEFT + step * (places - n + i) + gap / 2
        out.append(
            f'<rect class="bar {b.css}" x="{x:.1f}" y="{_TOP + h - bh:.1f}" '
            f'width="{max(step - gap, 1):.1f}" height="{bh:.1f}"><title>{escape(b.title)}</title>'
            "</rect>"
        )
    out.append("</svg>")
    return Markup("".join(out))
