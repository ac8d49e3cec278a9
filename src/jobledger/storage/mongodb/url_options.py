"""The store's own options in a `mongodb://` URL, taken out before the driver sees it.

    mongodb://host/app?replicaSet=rs0&dead_ttl_seconds=2592000

`dead_ttl_seconds` is not a driver option (PyMongo warns about an option it does not
know), so it is removed from the URL the client is given. The setting
`mongodb_dead_ttl_seconds` gives the same value when the URL names none; both naming
different values is an error, as for a PostgreSQL URL's schema. Pure text work: no
driver import.
"""

from __future__ import annotations

from urllib.parse import unquote_plus, urlsplit, urlunsplit

from jobledger.domain.errors import ConfigError

DEAD_TTL = "dead_ttl_seconds"


def _seconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(
            f"MongoDB store URL: {DEAD_TTL}={text!r} must be a whole number of seconds above 0"
        )
    return value


def split_dead_ttl(url: str) -> tuple[str, int | None]:
    """(`url` without its `dead_ttl_seconds` parameter, the seconds it names or None).
    The driver's own options are left exactly as written (PyMongo reads `&` or `;`
    between them)."""
    parts = urlsplit(url)
    delimiter = ";" if ";" in parts.query and "&" not in parts.query else "&"
    options = parts.query.split(delimiter) if parts.query else []
    named = [o.split("=", 1)[1] for o in options if o.split("=", 1)[0] == DEAD_TTL and "=" in o]
    if not named:
        return url, None
    if len({unquote_plus(v) for v in named}) > 1:
        raise ConfigError(f"MongoDB store URL names {DEAD_TTL} twice: give one value")
    rest = delimiter.join(o for o in options if o.split("=", 1)[0] != DEAD_TTL)
    return urlunsplit(parts._replace(query=rest)), _seconds(unquote_plus(named[0]))


def dead_ttl(from_url: int | None, setting: int | None) -> int | None:
    """The DEAD-row TTL: the URL's, else the setting's; the two may not differ."""
    if from_url is not None and setting is not None and from_url != setting:
        raise ConfigError(
            f"the store URL names {DEAD_TTL}={from_url}, the mongodb_dead_ttl_seconds "
            f"setting {setting}: give one"
        )
    return from_url if from_url is not None else setting
