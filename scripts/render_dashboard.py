"""Draw docs/grafana-dashboard.json from real scrapes of a running worker, as a PNG.

    .venv/bin/python scripts/render_dashboard.py                    # 60 s, docs/grafana-dashboard.png
    .venv/bin/python scripts/render_dashboard.py --seconds 90 --out dash.png

Grafana is not needed: the script starts `jobledger worker --metrics-port` on a SQLite
app (an ok target, a failing one, an unreachable one, a long-lane one and one whose
`async def` handler blocks the event loop), feeds it jobs for `--seconds` while
scraping its `/metrics` every second, then evaluates each panel's PromQL over those
scrapes (the subset the dashboard uses: selectors with `=~`, `rate`, `increase`,
`sum`/`max` with `by`, `histogram_quantile`; `$__rate_interval` is 10 s, a variable
is "all"), and draws each panel at its grid position with its title, legend and unit
as SVG in one HTML page, which headless Chromium (`/usr/bin/chromium`) saves as the
PNG. Layout and colours are this script's, not Grafana's.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).with_name("jobledger"))
RATE_WINDOW_S = 10.0
COLORS = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#fade2a"]

APP = """
import asyncio, random, time
import jobledger
from jobledger.domain.errors import TargetUnreachable

app = jobledger.App(store="sqlite:///jobs.db")

@app.target("mail:welcome", lane="fast", delivery_mode="at_least_once")
async def welcome(job):
    await asyncio.sleep(random.uniform(0.001, 0.02))

@app.target("orders:sync", lane="fast", delivery_mode="at_least_once", max_attempts=2)
async def sync(job):
    if job.payload["n"] % 3 == 0:
        raise RuntimeError("partner answered 500")

@app.target("crm:push", lane="fast", delivery_mode="at_least_once")
async def push(job):
    raise TargetUnreachable("crm.example: connection refused")

@app.target("report:build", lane="long", delivery_mode="at_least_once")
async def build(job):
    await asyncio.sleep(random.uniform(0.2, 1.5))

@app.target("report:legacy", lane="long", delivery_mode="at_least_once")
async def legacy(job):
    time.sleep(0.9)   # blocks the event loop: the watchdog names it
"""

FEED = """
import asyncio, sys
from myjobs import app

async def main(seconds):
    await app.start(workers=False)
    loop = asyncio.get_running_loop()
    end, n = loop.time() + seconds, 0
    while loop.time() < end:
        n += 1
        async with app.transaction() as tx:
            for i in range(n % 7 + 3):
                await app.enqueue("mail:welcome", {"n": n, "i": i}, tx=tx)
            await app.enqueue("orders:sync", {"n": n}, tx=tx)
            if n % 10 == 0:
                await app.enqueue("crm:push", {"n": n}, tx=tx)
            if n % 4 == 0:
                await app.enqueue("report:build", {"n": n}, tx=tx)
            if n % 25 == 0:
                await app.enqueue("report:legacy", {"n": n}, tx=tx)
        await asyncio.sleep(0.5)
    await app.stop()

asyncio.run(main(float(sys.argv[1])))
"""

Series = dict[tuple[tuple[str, str], ...], float]


# --- scraping -------------------------------------------------------------------------
def scrape(url: str, instance: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = dict(s.labels, instance=instance, job="jobledger")
            out[(s.name, tuple(sorted(labels.items())))] = float(s.value)
    return out


def collect(seconds: float) -> list[tuple[float, dict[Any, float]]]:
    """Run a worker and a feeder in a temporary directory; scrape once a second."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    scrapes: list[tuple[float, dict[Any, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "myjobs.py").write_text(APP)
        Path(tmp, "feed.py").write_text(FEED)
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBLEDGER_")}
        env.update(
            JOBLEDGER_RETRY_DELAYS_MINUTES="0.05",
            JOBLEDGER_PROBE_INTERVAL_S="5",
            JOBLEDGER_LOG_LEVEL="ERROR",
        )
        worker = subprocess.Popen(
            [CLI, "worker", "--app", "myjobs", "--metrics-port", str(port)], cwd=tmp, env=env
        )
        feeder = None
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            for _ in range(100):
                try:
                    scrape(url, "")
                    break
                except OSError:
                    time.sleep(0.1)
            feeder = subprocess.Popen([sys.executable, "feed.py", str(seconds)], cwd=tmp, env=env)
            start = time.monotonic()
            while time.monotonic() - start < seconds + 5:
                scrapes.append((time.monotonic() - start, scrape(url, f"127.0.0.1:{port}")))
                time.sleep(1.0)
        finally:
            if feeder is not None:
                feeder.wait(timeout=60)
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
    return scrapes


# --- the PromQL subset ----------------------------------------------------------------
TOKEN = re.compile(r'\s*(?:(\d+(?:\.\d+)?[smh]?)|(\w+)|("(?:[^"\\]|\\.)*")|(=~|!=|[(){}\[\],=]))')


def tokens(text: str) -> list[str]:
    out, pos = [], 0
    while pos < len(text.rstrip()):
        match = TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"cannot read {text[pos:]!r}")
        out.append(next(g for g in match.groups() if g is not None))
        pos = match.end()
    return out


class Query:
    def __init__(self, text: str, scrapes: list[tuple[float, dict[Any, float]]]) -> None:
        text = text.replace("$__rate_interval", f"{int(RATE_WINDOW_S)}s")
        text = re.sub(r'"\$\w+"', '".*"', text)
        self.toks = tokens(text)
        self.scrapes = scrapes
        self.ast = self.parse()

    def take(self, expected: str | None = None) -> str:
        tok = self.toks.pop(0)
        if expected is not None and tok != expected:
            raise ValueError(f"expected {expected!r}, got {tok!r}")
        return tok

    def parse(self) -> Any:
        head = self.take()
        if head in ("sum", "max"):
            by: list[str] | None = None
            if self.toks[0] == "by":
                self.take()
                by = self.labels()
            self.take("(")
            inner = self.parse()
            self.take(")")
            return ("agg", head, by, inner)
        if head in ("rate", "increase"):
            self.take("(")
            sel = self.selector(self.take())
            self.take("[")
            window = duration(self.take())
            self.take("]")
            self.take(")")
            return ("range", head, sel, window)
        if head == "histogram_quantile":
            self.take("(")
            q = float(self.take())
            self.take(",")
            inner = self.parse()
            self.take(")")
            return ("quantile", q, inner)
        return ("instant", self.selector(head))

    def labels(self) -> list[str]:
        self.take("(")
        out = []
        while self.toks[0] != ")":
            tok = self.take()
            if tok != ",":
                out.append(tok)
        self.take(")")
        return out

    def selector(self, name: str) -> tuple[str, list[tuple[str, str, str]]]:
        matchers = []
        if self.toks and self.toks[0] == "{":
            self.take("{")
            while self.toks[0] != "}":
                label, op, value = self.take(), self.take(), json.loads(self.take())
                matchers.append((label, op, value))
                if self.toks[0] == ",":
                    self.take()
            self.take("}")
        return name, matchers

    # evaluation at the scrape index i
    def at(self, i: int) -> Series:
        return self.eval(self.ast, i)

    def eval(self, node: Any, i: int) -> Series:
        kind = node[0]
        if kind == "instant":
            return self.select(node[1], i)
        if kind == "range":
            _, fn, sel, window = node
            t = self.scrapes[i][0]
            first = next(j for j in range(i + 1) if self.scrapes[j][0] >= t - window)
            if first == i:
                return {}
            old, new = self.select(sel, first), self.select(sel, i)
            span = self.scrapes[i][0] - self.scrapes[first][0]
            out = {}
            for labels, value in new.items():
                delta = max(value - old.get(labels, 0.0), 0.0)
                # increase: the delta seen, scaled up to the window when the scrapes
                # cover less of it (Prometheus extrapolates to the window's edges only)
                out[labels] = delta / span if fn == "rate" else delta * min(window / span, 1.1)
            return out
        if kind == "agg":
            _, how, by, inner = node
            groups: dict[Any, list[float]] = defaultdict(list)
            for labels, value in self.eval(inner, i).items():
                kept = tuple((k, v) for k, v in labels if by is not None and k in by)
                groups[kept].append(value)
            return {k: (sum(v) if how == "sum" else max(v)) for k, v in groups.items()}
        _, q, inner = node
        buckets: dict[Any, list[tuple[float, float]]] = defaultdict(list)
        for labels, value in self.eval(inner, i).items():
            le = dict(labels)["le"]
            rest = tuple((k, v) for k, v in labels if k != "le")
            buckets[rest].append((math.inf if le == "+Inf" else float(le), value))
        return {k: quantile(q, sorted(v)) for k, v in buckets.items() if v}

    def select(self, sel: tuple[str, list[tuple[str, str, str]]], i: int) -> Series:
        name, matchers = sel
        out = {}
        for (metric, labels), value in self.scrapes[i][1].items():
            if metric != name:
                continue
            found = dict(labels)
            if all(matches(found.get(k, ""), op, v) for k, op, v in matchers):
                out[labels] = value
        return out


def matches(value: str, op: str, pattern: str) -> bool:
    if op == "=":
        return value == pattern
    if op == "!=":
        return value != pattern
    return re.fullmatch(pattern, value) is not None


def duration(text: str) -> float:
    unit = {"s": 1, "m": 60, "h": 3600}[text[-1]]
    return float(text[:-1]) * unit


def quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus's histogram_quantile: linear within the bucket that holds rank q."""
    total = buckets[-1][1]
    if total <= 0:
        return math.nan
    rank = q * total
    lower_le, lower_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return lower_le
            if count == lower_count:
                return le
            return lower_le + (le - lower_le) * (rank - lower_count) / (count - lower_count)
        lower_le, lower_count = le, count
    return lower_le


# --- drawing --------------------------------------------------------------------------
COL, ROW, PAD = 66, 30, 8


def fmt(value: float, unit: str) -> str:
    if math.isnan(value):
        return "—"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
    if unit == "ops":
        return f"{value:.2f}/s"
    return f"{value:.0f}" if abs(value - round(value)) < 1e-9 else f"{value:.2f}"


def legend(template: str, labels: tuple[tuple[str, str], ...]) -> str:
    found = dict(labels)
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: found.get(m.group(1), ""), template).strip()


def draw(panel: dict[str, Any], scrapes: list[tuple[float, dict[Any, float]]]) -> str:
    pos = panel["gridPos"]
    w, h = pos["w"] * COL - PAD, pos["h"] * ROW - PAD
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
    lines: dict[str, list[tuple[float, float]]] = {}
    for target in panel["targets"]:
        query = Query(target["expr"], scrapes)
        for i, (t, _) in enumerate(scrapes):
            for labels, value in query.at(i).items():
                if not math.isnan(value):
                    name = legend(target.get("legendFormat", ""), labels) or target["expr"]
                    lines.setdefault(name, []).append((t, value))
    title = html.escape(panel["title"])
    parts = [
        f'<div class="panel" style="left:{pos["x"] * COL}px;top:{pos["y"] * ROW}px;'
        f'width:{w}px;height:{h}px"><div class="title">{title}</div>'
    ]
    if panel["type"] == "stat":
        last = [points[-1][1] for points in lines.values() if points]
        text = fmt(sum(last), unit) if last else "—"
        parts.append(f'<div class="stat">{html.escape(text)}</div></div>')
        return "".join(parts)
    chart_h = h - 30 - 18 * math.ceil(len(lines) / 3)
    t_max = scrapes[-1][0] if scrapes else 1.0
    v_max = max((v for pts in lines.values() for _, v in pts), default=1.0) or 1.0
    bars = panel.get("fieldConfig", {}).get("defaults", {}).get("custom", {}).get("drawStyle")
    svg = [f'<svg width="{w - 16}" height="{max(chart_h, 40)}">']
    for k in range(5):
        y = 4 + (max(chart_h, 40) - 20) * k / 4
        value = v_max * (1 - k / 4)
        svg.append(f'<line x1="60" x2="{w - 16}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        svg.append(
            f'<text x="56" y="{y + 4:.1f}" class="axis">{html.escape(fmt(value, unit))}</text>'
        )
    for n, (_name, points) in enumerate(sorted(lines.items())):
        color = COLORS[n % len(COLORS)]

        def xy(t: float, v: float, _h: int = max(chart_h, 40)) -> tuple[float, float]:
            return 60 + (w - 80) * t / t_max, 4 + (_h - 20) * (1 - v / v_max)

        if bars == "bars":
            for t, v in points:
                x, y = xy(t, v)
                svg.append(
                    f'<rect x="{x:.1f}" y="{y:.1f}" width="4" height="{max(chart_h, 40) - 16 - y:.1f}"'
                    f' fill="{color}"/>'
                )
        else:
            path = " ".join(f"{xy(t, v)[0]:.1f},{xy(t, v)[1]:.1f}" for t, v in points)
            svg.append(
                f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5"/>'
            )
    svg.append("</svg>")
    parts.append("".join(svg))
    items = [
        f'<span><i style="background:{COLORS[n % len(COLORS)]}"></i>{html.escape(name)}</span>'
        for n, name in enumerate(sorted(lines))
    ]
    parts.append(f'<div class="legend">{"".join(items) or "no data"}</div></div>')
    return "".join(parts)


PAGE = """<!doctype html><html><head><meta charset="utf-8"><style>
body {{ margin: 0; background: #111217; font: 12px sans-serif; color: #ccccdc; }}
h1 {{ font-size: 16px; margin: 12px 16px 4px; font-weight: 500; }}
.note {{ margin: 0 16px 10px; color: #8e8e9e; }}
.grid-area {{ position: relative; margin: 0 16px; }}
.panel {{ position: absolute; background: #181b1f; border: 1px solid #2c3235; border-radius: 3px;
  padding: 6px 8px; box-sizing: border-box; overflow: hidden; }}
.title {{ font-weight: 500; margin-bottom: 4px; }}
.stat {{ font-size: 34px; color: #73bf69; text-align: center; margin-top: 16px; }}
.legend span {{ display: inline-block; margin-right: 12px; white-space: nowrap; }}
.legend i {{ display: inline-block; width: 12px; height: 3px; margin-right: 4px; vertical-align: middle; }}
line.grid {{ stroke: #2c3235; }} text.axis {{ fill: #8e8e9e; font-size: 10px; text-anchor: end; }}
</style></head><body><h1>{title}</h1>
<p class="note">{note}</p><div class="grid-area" style="height:{height}px">{panels}</div></body></html>"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--dashboard", default=str(ROOT / "docs" / "grafana-dashboard.json"))
    parser.add_argument("--out", default=str(ROOT / "docs" / "grafana-dashboard.png"))
    args = parser.parse_args()
    dashboard = json.loads(Path(args.dashboard).read_text())
    scrapes = collect(args.seconds)
    panels = dashboard["panels"]
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels) * ROW
    note = (
        f"{len(scrapes)} scrapes of one jobledger worker's /metrics, one a second; each panel"
        " is the dashboard JSON's own query evaluated over them (not Grafana)."
    )
    page = PAGE.format(
        title=html.escape(dashboard["title"]),
        note=html.escape(note),
        height=height,
        panels="".join(draw(p, scrapes) for p in panels),
    )
    with tempfile.TemporaryDirectory() as tmp:
        page_path = Path(tmp, "dashboard.html")
        page_path.write_text(page)
        subprocess.run(
            [
                "chromium",
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--hide-scrollbars",
                f"--window-size={24 * COL + 32},{height + 80}",
                f"--screenshot={Path(args.out).resolve()}",
                page_path.as_uri(),
            ],
            check=True,
            capture_output=True,
        )
    print(f"wrote {args.out} from {len(scrapes)} scrapes")


if __name__ == "__main__":
    main()
