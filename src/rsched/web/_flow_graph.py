"""A flow drawn as inline SVG, built on the server (as rsched.web._charts): its steps as boxes in
columns by depth, the edges between them as lines.

A step's depth is the longest path to it from a root (a step that follows none), so every edge
goes from a column to one on its right. Each box is coloured by its step's state (classes
``f-<state>`` that ``static/rsched.css`` styles) and links to its job's page; a barrier (a join
that runs nothing) is a small circle marked ⋈. In a large flow (more than ``COLLAPSE_FLOW``
steps) a column of more than ``COLLAPSE_COLUMN`` steps is drawn as one box counting its steps
per state, and of more than ``MAX_COLUMNS`` columns (a long chain) the middle ones are drawn as
one such box, so the page stays small whatever the size and shape of the flow. Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from urllib.parse import quote

from markupsafe import Markup

from rsched import FlowStep

__all__ = ("COLLAPSE_COLUMN", "COLLAPSE_FLOW", "Graph", "depths", "draw")

#: A flow of more steps than this has its large columns collapsed.
COLLAPSE_FLOW = 200
#: In such a flow, a column of more steps than this is drawn as counts per state.
COLLAPSE_COLUMN = 20
#: In such a flow, the columns drawn at most: the first and last halves, the middle counted.
MAX_COLUMNS = 40
BOX_W, BOX_H = 168, 38
COL_GAP, ROW_GAP, MARGIN = 56, 12, 8
JOIN_R = 11
#: The states in the order a collapsed column lists them.
STATE_ORDER = ("running", "queued", "waiting", "completed", "dead", "expired", "cancelled")


@dataclass(frozen=True, slots=True)
class Graph:
    """The drawing, and what the page says of it: its columns and how many were collapsed."""

    svg: Markup
    columns: int
    collapsed: int


def depths(steps: Sequence[FlowStep]) -> dict[int, int]:
    """Each step's depth: the longest path to it from a root (0 for a root). Parents that are
    not among the steps are ignored; a cycle (never written by rsched) leaves its steps at 0."""
    by_number = {s.number: s for s in steps}
    waiting = {s.number: sum(1 for p in s.parents if p in by_number) for s in steps}
    depth = dict.fromkeys(by_number, 0)
    ready = [n for n, k in waiting.items() if k == 0]
    while ready:
        n = ready.pop()
        for c in by_number[n].children:
            if c not in by_number:
                continue
            depth[c] = max(depth[c], depth[n] + 1)
            waiting[c] -= 1
            if waiting[c] == 0:
                ready.append(c)
    return depth


def _x(column: int) -> int:
    return MARGIN + column * (BOX_W + COL_GAP)


def _y(row: int) -> int:
    return MARGIN + row * (BOX_H + ROW_GAP)


def _box(s: FlowStep, column: int, row: int, prefix: str) -> str:
    x, y = _x(column), _y(row)
    tip = f"step {s.number}: {s.task or 'join'}, {s.state}"
    if s.barrier:
        cx, cy = x + BOX_W // 2, y + BOX_H // 2
        return (
            f'<g class="join f-{escape(s.state)}" data-step="{s.number}">'
            f'<circle cx="{cx}" cy="{cy}" r="{JOIN_R}"/>'
            f'<text x="{cx}" y="{cy + 4}" text-anchor="middle">⋈</text>'
            f"<title>{escape(tip)} (a join: runs nothing)</title></g>"
        )
    attempts = f"{s.attempts} attempt{'' if s.attempts == 1 else 's'}"
    tip += f", {attempts}" + (", on failure: continue" if s.on_failure == "continue" else "")
    task = s.task if len(s.task) <= 22 else s.task[:21] + "…"
    href = f"{prefix}/jobs/{quote(s.execution_id, safe='')}"
    return (
        f'<a class="step f-{escape(s.state)}" href="{escape(href)}" data-step="{s.number}">'
        f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="4"/>'
        f'<text x="{x + 8}" y="{y + 15}">#{s.number} {escape(task)}</text>'
        f'<text class="sub" x="{x + 8}" y="{y + 30}">{escape(s.state)} · {attempts}</text>'
        f"<title>{escape(tip)}</title></a>"
    )


def _summary(column: int, items: Sequence[FlowStep]) -> tuple[str, int]:
    """A collapsed column: one box listing its steps' count per state; (svg, rows it takes)."""
    counts: Counter[str] = Counter(s.state for s in items)
    states = [st for st in STATE_ORDER if counts[st]] + sorted(set(counts) - set(STATE_ORDER))
    lines = 1 + len(states)
    height = 18 * lines + 10
    x, y = _x(column), _y(0)
    out = [
        f'<g class="collapsed" data-column="{column}">'
        f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{height}" rx="4"/>'
        f'<text x="{x + 8}" y="{y + 17}">{len(items)} steps</text>'
    ]
    for i, st in enumerate(states):
        ty = y + 17 + 18 * (i + 1)
        out.append(
            f'<rect class="key f-{escape(st)}" x="{x + 8}" y="{ty - 9}" width="10" height="10"/>'
            f'<text class="sub" x="{x + 24}" y="{ty}">{counts[st]} {escape(st)}</text>'
        )
    first, last = min(s.number for s in items), max(s.number for s in items)
    out.append(f"<title>steps {first} to {last}: {len(items)}</title></g>")
    rows = -(-(height + ROW_GAP) // (BOX_H + ROW_GAP))
    return "".join(out), rows


def draw(steps: Sequence[FlowStep], prefix: str = "", label: str = "the flow's steps") -> Graph:
    """The flow's steps as SVG (``prefix``: where the dashboard is mounted, for the links)."""
    depth = depths(steps)
    ncols = max(depth.values(), default=-1) + 1
    columns: list[list[FlowStep]] = [[] for _ in range(ncols)]
    for s in sorted(steps, key=lambda s: s.number):
        columns[depth[s.number]].append(s)
    large = len(steps) > COLLAPSE_FLOW
    merged = -1  # the place of the columns drawn as one, if any
    if large and ncols > MAX_COLUMNS:
        keep = MAX_COLUMNS // 2
        middle = [s for col in columns[keep : ncols - keep] for s in col]
        columns = [*columns[:keep], middle, *columns[ncols - keep :]]
        merged, ncols = keep, len(columns)
    # Where each step's edges start and end: its own box, or its column's summary box.
    anchor: dict[int, tuple[int, int]] = {}
    boxes: list[str] = []
    rows = 1
    collapsed = 0
    for c, items in enumerate(columns):
        if large and (len(items) > COLLAPSE_COLUMN or c == merged):
            svg, used = _summary(c, items)
            boxes.append(svg)
            collapsed += 1
            rows = max(rows, used)
            for s in items:
                anchor[s.number] = (c, -1)
            continue
        for r, s in enumerate(items):
            boxes.append(_box(s, c, r, prefix))
            anchor[s.number] = (c, r)
        rows = max(rows, len(items))
    edges: set[tuple[tuple[int, int], tuple[int, int]]] = set()
    for s in steps:
        for p in s.parents:
            if p in anchor and anchor[p] != anchor[s.number]:
                edges.add((anchor[p], anchor[s.number]))
    lines = []
    for (pc, pr), (cc, cr) in sorted(edges):
        x1, x2 = _x(pc) + BOX_W, _x(cc)
        y1 = _y(max(pr, 0)) + (BOX_H // 2 if pr >= 0 else 17)
        y2 = _y(max(cr, 0)) + (BOX_H // 2 if cr >= 0 else 17)
        mid = (x1 + x2) / 2
        lines.append(
            f'<path class="edge" d="M{x1},{y1} C{mid:.0f},{y1} {mid:.0f},{y2} {x2},{y2}"/>'
        )
    width = MARGIN * 2 + ncols * BOX_W + max(ncols - 1, 0) * COL_GAP
    height = MARGIN * 2 + rows * BOX_H + (rows - 1) * ROW_GAP
    svg = (
        f'<svg class="flow-graph" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}">'
        + "".join(lines)
        + "".join(boxes)
        + "</svg>"
    )
    return Graph(Markup(svg), ncols, collapsed)
