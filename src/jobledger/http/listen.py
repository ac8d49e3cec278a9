"""The admin server's listening socket, bound before anything else starts.

uvicorn binds inside its serve task and answers a taken port with `sys.exit(3)` from
that task (a SystemExit that escapes the event loop, with "Task exception was never
retrieved" and a traceback). Binding here instead raises an OSError the caller can
report in one line; uvicorn then serves on the socket it is given.
"""

from __future__ import annotations

import errno
import socket


class ListenError(OSError):
    """The address cannot be listened on; the message is one line for the user."""


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host:port` and listening (port 0: a free one)."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise ListenError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    family, _, _, _, address = infos[0]
    try:
        return socket.create_server(address, family=family, backlog=2048)
    except OSError as exc:
        reason = (
            "the address is already in use (another server on that port? try --port)"
            if exc.errno == errno.EADDRINUSE
            else exc.strerror or str(exc)
        )
        raise ListenError(exc.errno, f"cannot listen on {host}:{port}: {reason}") from exc
