"""The MongoDB adapter (a replica set: transactions and change streams need one).

`builders.py` holds every document sent to the server as pure functions; `store.py` is
the thin executor. See docs/mongodb.md.
"""

from jobledger.storage.mongodb.store import MongoStore

__all__ = ["MongoStore"]
