"""Charts drawn on the server as inline SVG: no chart library, no CDN, no script.

`chart` draws time series as lines or stacked bars over a shared x axis of bucket
labels, with a y axis on "nice" steps (1, 2, 5 * 10^k), a legend, and one transparent
column per bucket whose `<title>` is the browser's own hover tooltip (every series'
value at that bucket). `sparkline` is the small line in a table cell. Colours and
strokes come from the page's stylesheet through classes (`s-<name>`): the CSP allows
no inline style, and SVG presentation needs none. Every text is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup

LEFT, RIGHT, TOP, BOTTOM = 52, 12, 12, 26
X_LABELS = 6


@dataclass(frozen=True, slots=True)
class Line:
    name: str
    values: Sequence[float | None]  # None: no data for that bucket (a gap)


def nice_ceiling(value: float) -> float:
    """The top of the y axis: four grid steps of 1, 2 or 5 * 10^k (at least 1, as the
    charts count things), together at least `value`."""
    need = max(value / 4, 1.0)
    power = 10.0 ** math.floor(math.log10(need))
    return 4 * next(step * power for step in (1, 2, 5, 10) if step * power >= need)


def _number(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    if value >= 1000:
        return f"{value / 1000:.1f}k".replace(".0k", "k")
    return f"{value:g}"


def _top(lines: Sequence[Line], stacked: bool) -> float:
    if stacked:
        width = max((len(line.values) for line in lines), default=0)
        sums = [
            sum((line.values[i] or 0) for line in lines if i < len(line.values))
            for i in range(width)
        ]
        return max(sums, default=0)
    return max((v for line in lines for v in line.values if v is not None), default=0)


def chart(
    labels: Sequence[str],
    lines: Sequence[Line],
    *,
    title: str,
    bars: bool = False,
    width: int = 720,
    height: int = 220,
    unit: str = "",
) -> Markup:
    """An SVG chart of `lines` over `labels` (one value per label), with its legend."""
    count = max(len(labels), 1)
    plot_w, plot_h = width - LEFT - RIGHT, height - TOP - BOTTOM
    top = nice_ceiling(_top(lines, bars))
    step_x = plot_w / count

    def y(value: float) -> float:
        return TOP + plot_h - plot_h * value / top

    parts = [
        Markup(
            '<svg class="chart" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img"'
            ' aria-label="{t}" xmlns="http://www.w3.org/2000/svg"><title>{t}</title>'
        ).format(w=width, h=height, t=title)
    ]
    for n in range(5):  # grid lines and y labels at 0, 1/4 … of the top
        value = top * n / 4
        parts.append(
            Markup(
                '<line class="grid-line" x1="{x1}" x2="{x2}" y1="{y:.1f}" y2="{y:.1f}"/>'
                '<text class="axis" x="{tx}" y="{ty:.1f}" text-anchor="end">{v}</text>'
            ).format(
                x1=LEFT,
                x2=width - RIGHT,
                y=y(value),
                tx=LEFT - 6,
                ty=y(value) + 4,
                v=_number(value) + unit,
            )
        )
    every = max(1, math.ceil(count / X_LABELS))
    for i in range(0, len(labels), every):
        parts.append(
            Markup(
                '<text class="axis" x="{x:.1f}" y="{y}" text-anchor="middle">{label}</text>'
            ).format(x=LEFT + step_x * (i + 0.5), y=height - 8, label=labels[i])
        )
    parts.append(_bars(lines, step_x, y) if bars else _lines(lines, step_x, y))
    for i, label in enumerate(labels):  # hover columns: the browser shows the <title>
        values = " · ".join(
            f"{line.name} {'—' if v is None else _number(v)}"
            for line in lines
            for v in [line.values[i] if i < len(line.values) else None]
        )
        parts.append(
            Markup(
                '<rect class="hover" x="{x:.1f}" y="{y}" width="{w:.1f}" height="{h}">'
                "<title>{label}: {values}</title></rect>"
            ).format(x=LEFT + step_x * i, y=TOP, w=step_x, h=plot_h, label=label, values=values)
        )
    parts.append(Markup("</svg>"))
    legend = Markup("").join(
        Markup('<span class="key"><i class="swatch s-{name}"></i>{name}</span>').format(
            name=line.name
        )
        for line in lines
    )
    return Markup(
        '<figure class="chart-box">{}<figcaption class="legend">{}</figcaption></figure>'
    ).format(Markup("").join(parts), legend)


def _lines(lines: Sequence[Line], step_x: float, y: Callable[[float], float]) -> Markup:
    out = []
    for line in lines:
        runs: list[list[str]] = [[]]
        for i, value in enumerate(line.values):
            if value is None:
                runs.append([])
                continue
            runs[-1].append(f"{LEFT + step_x * (i + 0.5):.1f},{y(value):.1f}")
        for run in runs:
            if len(run) == 1:  # a lone point: a dot
                x, yy = run[0].split(",")
                out.append(
                    Markup('<circle class="s-{}" cx="{}" cy="{}" r="2.5"/>').format(
                        line.name, x, yy
                    )
                )
            elif run:
                out.append(
                    Markup('<polyline class="s-{}" points="{}"/>').format(line.name, " ".join(run))
                )
    return Markup("").join(out)


def _bars(lines: Sequence[Line], step_x: float, y: Callable[[float], float]) -> Markup:
    out = []
    width = max(step_x * 0.7, 1.0)
    for i in range(max((len(line.values) for line in lines), default=0)):
        base = 0.0
        for line in lines:
            value = line.values[i] if i < len(line.values) else None
            if not value:
                continue
            top, bottom = y(base + value), y(base)
            out.append(
                Markup(
                    '<rect class="s-{}" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}"/>'
                ).format(
                    line.name, LEFT + step_x * i + (step_x - width) / 2, top, width, bottom - top
                )
            )
            base += value
    return Markup("").join(out)


def sparkline(
    values: Sequence[float | None], name: str, *, width: int = 120, height: int = 24
) -> Markup:
    """A small line of `values` (no axes) for a table cell."""
    known = [v for v in values if v is not None]
    top = max(known, default=0) or 1
    step = width / max(len(values) - 1, 1)
    points = " ".join(
        f"{step * i:.1f},{height - 2 - (height - 4) * v / top:.1f}"
        for i, v in enumerate(values)
        if v is not None
    )
    return Markup(
        '<svg class="spark" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{n}"'
        ' xmlns="http://www.w3.org/2000/svg"><polyline class="s-{n}" points="{p}"/></svg>'
    ).format(w=width, h=height, n=name, p=points)
