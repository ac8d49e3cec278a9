"""The admin server's listening socket, bound before anything else starts.

uvicorn binds inside its serve task and answers a taken port with `sys.exit(3)` from
that task (a SystemExit that escapes the event loop, with "Task exception was never
retrieved" and a traceback). Binding here instead raises an OSError the caller can
report in one line; uvicorn then serves on the socket it is given.

The socket is made with protocol `IPPROTO_TCP` and `TCP_NODELAY` set. asyncio turns
Nagle's algorithm off only on sockets whose protocol is `IPPROTO_TCP`, and an accepted
socket takes the listening socket's protocol (0 from `socket.create_server`). With
Nagle on, every response after the first on a kept-alive connection waited ~40 ms:
uvicorn writes the head and the body in two sends, and the second waited for the
client's delayed ACK of the first. Linux also copies `TCP_NODELAY` from the listening
socket to the sockets it accepts.
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
            host or None,
            port,
            type=socket.SOCK_STREAM,
            proto=socket.IPPROTO_TCP,
            flags=socket.AI_PASSIVE,
        )
    except socket.gaierror as exc:
        raise ListenError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        reason = (
            "the address is already in use (another server on that port? try --port)"
            if exc.errno == errno.EADDRINUSE
            else exc.strerror or str(exc)
        )
        raise ListenError(exc.errno, f"cannot listen on {host}:{port}: {reason}") from exc
    return sock
