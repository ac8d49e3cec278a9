"""JSON shown in the page's tables, breakable only between tokens.

`json_pairs` renders an object as its top-level `"key": value` pairs, each in a
`<span class="pair">` the stylesheet keeps on one line where it fits: a long event
payload wraps between pairs (never inside a key, a number or a short string), and only
a single value wider than the cell breaks inside itself. Everything is escaped.
"""

from __future__ import annotations

import json
from typing import Any

from markupsafe import Markup


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def json_pairs(value: Any) -> Markup:
    """`{"a": 1, "b": "x"}` as `{<span class="pair">"a": 1,</span> …}`, HTML-escaped."""
    if not isinstance(value, dict) or not value:
        return Markup('<span class="pair">{}</span>').format(_dump(value))
    items = sorted(value.items(), key=lambda item: str(item[0]))
    spans = [
        Markup('<span class="pair">{}{}: {}{}</span>').format(
            "{" if n == 0 else "",
            _dump(str(key)),
            _dump(item),
            "}" if n == len(items) - 1 else ",",
        )
        for n, (key, item) in enumerate(items)
    ]
    return Markup(" ").join(spans)
