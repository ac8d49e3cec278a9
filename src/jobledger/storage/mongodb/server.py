"""What server the adapter needs: a replica set (or sharded cluster) running 6.0 or later.

Transactions and change streams exist only on replica sets; 6.0 is the oldest release
still supported by MongoDB that the adapter's claims are argued against (snapshot
transactions, `$exists` partial filters, change-stream `updateDescription`). `open()`
asks the server and fails with one line instead of at the first transaction.
"""

from __future__ import annotations

from typing import Any

from jobledger.storage.mongodb.codec import Client

MINIMUM_VERSION = (6, 0)


def server_problem(hello: dict[str, Any], build_info: dict[str, Any]) -> str | None:
    """Why this server cannot hold the store, or None: from the `hello` and `buildInfo`
    command replies."""
    version = tuple(int(part) for part in list(build_info.get("versionArray", []))[:2])
    if version < MINIMUM_VERSION:
        found = build_info.get("version", "unknown")
        return (
            f"MongoDB {found} is too old: jobledger needs MongoDB "
            f"{MINIMUM_VERSION[0]}.{MINIMUM_VERSION[1]} or later"
        )
    if hello.get("msg") == "isdbgrid":
        return None  # mongos: the shards are replica sets
    if not hello.get("setName"):
        return (
            "MongoDB is a standalone server: jobledger needs a replica set (transactions and "
            "change streams); a single node will do: mongod --replSet rs0, then rs.initiate()"
        )
    return None


async def check_server(client: Client) -> None:
    """Raise `ConfigError` with `server_problem`'s line when the server cannot serve."""
    from jobledger.domain.errors import ConfigError

    admin = client.admin
    problem = server_problem(await admin.command("hello"), await admin.command("buildInfo"))
    if problem is not None:
        raise ConfigError(problem)
