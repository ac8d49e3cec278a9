"""Options several commands share, each checked where it is parsed (argparse prints
`jobledger <command>: error: …` and exits 2)."""

from __future__ import annotations

import argparse
import socket

from jobledger.domain.errors import ConfigError

STORE_HELP = (
    "store URL: sqlite:///path.db (default sqlite:///jobledger.db), postgresql://…,"
    " mongodb://…; or JOBLEDGER_STORE"
)
CONFIG_HELP = "config file (TOML); or JOBLEDGER_CONFIG"


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is out of range (0-65535)")
    return value


def seconds(text: str) -> float:
    """A positive duration in seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def add_stop_timeout_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stop-timeout-s",
        type=seconds,
        default=None,
        help="seconds a SIGTERM / SIGINT stop takes at most (default: the stop_timeout_s"
        " setting, 10)",
    )


def add_http_options(parser: argparse.ArgumentParser, *, default_port: int = 8080) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument(
        "--port",
        type=port,
        default=default_port,
        help=f"listen port (default {default_port}; 0 picks a free one)",
    )


def bind(args: argparse.Namespace) -> socket.socket:
    """The listening socket for --host/--port, bound before anything starts: a taken
    port is one line and exit 2, not uvicorn's SystemExit from inside a task."""
    from jobledger.http.listen import ListenError, listen

    try:
        return listen(args.host, args.port)
    except ListenError as exc:
        raise ConfigError(str(exc.strerror)) from exc


def add_app_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--app",
        "--setup",
        dest="app",
        metavar="MODULE:ATTR",
        default=None,
        help="your jobledger.App (module:app; found in the current directory)",
    )


def add_global_options(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """--store and --config, before the command (`top`) or after it: a value given
    after the command wins, an absent one leaves the value given before it."""
    default = None if top else argparse.SUPPRESS
    have = parser._option_string_actions
    if "--store" not in have:
        parser.add_argument("--store", default=default, help=STORE_HELP)
    if "--config" not in have:
        parser.add_argument("--config", default=default, help=CONFIG_HELP)
