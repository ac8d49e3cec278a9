"""The schema a PostgreSQL store URL names, and the URL libpq is given without it.

    postgresql://host/db?schema=billing                     -> schema billing
    postgresql://host/db?options=-csearch_path%3Dbilling    -> schema billing
    postgresql://host/db?options=-c%20search_path=billing,public -> billing (the first)

`schema` is not a libpq parameter (libpq refuses the URL), so it is taken out; an
`options` search path stays in the URL as given. Pure text work: this module imports
no driver.
"""

from __future__ import annotations

import re
import shlex
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from jobledger.domain.errors import ConfigError

_SEARCH_PATH = re.compile(r"^search_path\s*=\s*(.+)$", re.IGNORECASE)


def _search_path_schema(options: str) -> str | None:
    """The first schema of a `-c search_path=…` (or `-csearch_path=…`) in `options`."""
    try:
        words = shlex.split(options.replace("\\ ", " "))
    except ValueError as exc:  # an unbalanced quote
        raise ConfigError(f"PostgreSQL store URL: options {options!r}: {exc}") from None
    settings = []
    for i, word in enumerate(words):
        if word == "-c" and i + 1 < len(words):
            settings.append(words[i + 1])
        elif word.startswith("-c") and len(word) > 2:
            settings.append(word[2:])
        elif word.startswith("--"):  # --search-path=x, as `postgres --name=value` takes it
            settings.append(word[2:].replace("-", "_"))
    for text in settings:
        match = _SEARCH_PATH.match(text.strip())
        if match:
            first = match.group(1).split(",")[0].strip().strip('"')
            return first or None
    return None


def split_schema(url: str) -> tuple[str, str | None]:
    """(`url` without its `schema=` parameter, the schema it names or None)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    named = [value for key, value in query if key == "schema"]
    from_options = [_search_path_schema(value) for key, value in query if key == "options"]
    found = set(named) | {schema for schema in from_options if schema}
    if len(found) > 1:
        raise ConfigError(
            f"PostgreSQL store URL names two schemas ({', '.join(sorted(found))}):"
            " give one, as schema= or options=-csearch_path="
        )
    if named:  # libpq decodes %XX only (not + for a space): quote, not quote_plus
        rest = [(key, value) for key, value in query if key != "schema"]
        url = urlunsplit(parts._replace(query=urlencode(rest, quote_via=quote)))
    return url, (found.pop() if found else None)


def store_schema(url: str, configured: str | None) -> tuple[str, str | None]:
    """(DSN, schema) for a store: the URL's schema, else the `postgres_schema` setting
    (`configured`); both given and different is a mistake worth one line."""
    dsn, named = split_schema(url)
    if named and configured and named != configured:
        raise ConfigError(
            f"the store URL names PostgreSQL schema {named!r}, the postgres_schema setting"
            f" {configured!r}: remove one"
        )
    return dsn, named or configured
