"""Server-drawn SVG charts: well-formed, escaped, scaled to the data, gaps kept."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from jobledger.http.svg_chart import BOTTOM, TOP, Line, chart, nice_ceiling, sparkline

SVG = "{http://www.w3.org/2000/svg}"


def _svg(markup: str) -> ET.Element:
    figure = ET.fromstring(markup)  # a <figure> holding the <svg> and its legend
    svg = figure.find(f"{SVG}svg")
    assert svg is not None
    return svg


def test_nice_ceiling_gives_four_whole_steps() -> None:
    assert [nice_ceiling(v) for v in (0, 3, 4, 5, 13, 41, 99, 1234)] == [
        4,
        4,
        4,
        8,
        20,
        80,
        200,
        2000,
    ]


def test_stacked_bars_are_scaled_and_every_bucket_has_a_tooltip() -> None:
    html = chart(
        ["09:00", "09:01", "<09:02>"],
        [Line("succeeded", [1, 2, 0]), Line("dead", [0, 2, None])],
        title='ok & "dead"',
        bars=True,
        height=220,
    )
    svg = _svg(str(html))
    plot = 220 - TOP - BOTTOM
    bars = {
        (r.get("class"), round(float(r.get("height", 0)), 1))
        for r in svg.iter(f"{SVG}rect")
        if r.get("class") != "hover"
    }
    # the top is 4 (four steps of 1): heights are plot * value / 4
    assert bars == {
        ("s-succeeded", round(plot / 4, 1)),
        ("s-succeeded", round(plot / 2, 1)),
        ("s-dead", round(plot / 2, 1)),
    }
    tips = [t.text for r in svg.iter(f"{SVG}rect") if r.get("class") == "hover" for t in r]
    assert tips == [
        "09:00: succeeded 1 · dead 0",
        "09:01: succeeded 2 · dead 2",
        "<09:02>: succeeded 0 · dead —",
    ]
    assert "&lt;09:02&gt;" in str(html) and svg.findtext(f"{SVG}title") == 'ok & "dead"'
    assert [t.text for t in svg.iter(f"{SVG}text")][:5] == ["0", "1", "2", "3", "4"]


def test_lines_break_at_gaps_and_a_lone_point_is_a_dot() -> None:
    svg = _svg(
        str(chart(["a", "b", "c", "d", "e"], [Line("pending", [None, 3, 5, None, 2])], title="t"))
    )
    polylines = list(svg.iter(f"{SVG}polyline"))
    assert len(polylines) == 1 and len(polylines[0].get("points", "").split()) == 2
    assert len(list(svg.iter(f"{SVG}circle"))) == 1
    assert len([r for r in svg.iter(f"{SVG}rect") if r.get("class") == "hover"]) == 5


def test_sparkline() -> None:
    svg = ET.fromstring(str(sparkline([0, 4, 2, None, 1], "succeeded")))
    points = svg.find(f"{SVG}polyline")
    assert points is not None and len(points.get("points", "").split()) == 4
    assert points.get("class") == "s-succeeded"
