"""`jobledger config`: the effective configuration and where each value came from."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from jobledger.config.load import explain


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "config",
        help="print the effective configuration and the source of each value",
        description="Load the settings as a pod would (defaults < config file < environment),"
        " validate them, and print each value with its source. Exits 2 on invalid"
        " configuration. Secrets (API keys, URL passwords) are masked.",
    )
    parser.add_argument(
        "--config", default=argparse.SUPPRESS, help="config file (TOML); or JOBLEDGER_CONFIG"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per setting")
    parser.set_defaults(func=run)


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value) or "-"
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value) if value != "" else "-"


def run(args: argparse.Namespace) -> int:
    rows = explain(file=getattr(args, "config", None))  # ConfigError → exit 2 in cli.main
    out = sys.stdout
    if args.json:
        for name, value, source in rows:
            plain = list(value) if isinstance(value, tuple) else value
            out.write(json.dumps({"name": name, "value": plain, "source": source}) + "\n")
        return 0
    width = max(len(name) for name, _, _ in rows)
    value_width = min(max(len(_text(value)) for _, value, _ in rows), 40)
    for name, value, source in rows:
        out.write(f"{name:<{width}}  {_text(value):<{value_width}}  {source}\n")
    return 0
