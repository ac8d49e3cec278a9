"""How the MongoDB adapter runs transactions (storage/mongodb/transactions.py, store.py),
against a session that answers as the server does: a write conflict is an
OperationFailure labelled TransientTransactionError (code 112, WriteConflict).

No server runs here; `FakeSession` stands for one, and `run_in_transaction` is driven
through PyMongo's own `AsyncClientSession.with_transaction` (the retry loop and its
backoff are the installed driver's, not a copy).
"""

from __future__ import annotations

import asyncio
import re
import tomllib
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import pymongo
import pytest
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.errors import OperationFailure

from jobledger.storage.mongodb import MongoStore, transactions
from jobledger.storage.port import Transaction
from tests.net import free_port

ROOT = Path(__file__).resolve().parents[2]


def write_conflict() -> OperationFailure:
    """What the server answers the second of two transactions writing one document (or
    one unique index key): WriteConflict, labelled TransientTransactionError."""
    message = "WriteConflict error: this operation conflicted with another operation."
    return OperationFailure(
        message,
        code=112,
        details={
            "ok": 0,
            "errmsg": message,
            "code": 112,
            "codeName": "WriteConflict",
            "errorLabels": ["TransientTransactionError"],
        },
    )


class FakeSession:
    """A client session as `with_transaction` and the store use it; each commit answers
    with the next of `commit_errors` (none: success)."""

    def __init__(self, commit_errors: list[BaseException] | None = None) -> None:
        self.in_transaction = False
        self.started = self.aborted = self.committed = 0
        self.commit_errors = list(commit_errors or [])

    async def start_transaction(self, *args: Any, **kwargs: Any) -> None:
        self.in_transaction = True
        self.started += 1

    async def abort_transaction(self) -> None:
        self.in_transaction = False
        self.aborted += 1

    async def commit_transaction(self) -> None:
        if self.commit_errors:
            raise self.commit_errors.pop(0)
        self.in_transaction = False
        self.committed += 1

    async def with_transaction(self, callback: Any, **options: Any) -> Any:
        # PyMongo's own retry loop, run on this session
        return await AsyncClientSession.with_transaction(self, callback, **options)  # type: ignore[arg-type]

    async def __aenter__(self) -> FakeSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


@pytest.fixture
async def store() -> AsyncIterator[MongoStore]:
    """A store on a client that never connects (a closed loopback port)."""
    made = MongoStore(
        f"mongodb://127.0.0.1:{free_port()}/?serverSelectionTimeoutMS=50", database="t"
    )
    try:
        yield made
    finally:
        await made.client.close()


def on_session(monkeypatch: pytest.MonkeyPatch, store: MongoStore, session: FakeSession) -> None:
    monkeypatch.setattr(store.client, "start_session", lambda **_: session)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The delays `asyncio.sleep` is asked for (it still yields to the loop)."""
    asked: list[float] = []
    real_sleep = asyncio.sleep

    async def record(delay: float, result: Any = None) -> Any:
        asked.append(delay)
        return await real_sleep(0, result)

    monkeypatch.setattr(asyncio, "sleep", record)
    return asked


async def test_run_in_transaction_runs_the_whole_callback_again_after_a_write_conflict(
    store: MongoStore, monkeypatch: pytest.MonkeyPatch, sleeps: list[float]
) -> None:
    """The second of two transactions enqueueing one dedupe key is aborted by the
    server; the callback runs again (and would then find the first one's job), and only
    the committed attempt's after-commit hooks run."""
    session = FakeSession()
    on_session(monkeypatch, store, session)
    attempts: list[Transaction] = []
    hooks: list[str] = []

    async def callback(tx: Transaction) -> str:
        attempts.append(tx)
        tx.after_commit(partial(hooks.append, f"attempt {len(attempts)}"))
        if len(attempts) == 1:
            raise write_conflict()
        return "committed"

    assert await store.run_in_transaction(callback) == "committed"
    assert len(attempts) == 2 and attempts[0] is not attempts[1]
    assert (session.started, session.aborted, session.committed) == (2, 1, 1)
    assert hooks == ["attempt 2"]
    # the installed PyMongo backs off between the two attempts (4.17 and later)
    assert len(sleeps) == 1 and 0.0 <= sleeps[0] <= 0.005 * 1.5


async def test_run_in_transaction_reruns_when_the_commit_meets_a_conflict(
    store: MongoStore, monkeypatch: pytest.MonkeyPatch, sleeps: list[float]
) -> None:
    session = FakeSession(commit_errors=[write_conflict()])
    on_session(monkeypatch, store, session)
    runs: list[int] = []

    async def callback(tx: Transaction) -> int:
        runs.append(1)
        return len(runs)

    assert await store.run_in_transaction(callback) == 2
    assert (session.started, session.committed) == (2, 1)


async def test_a_conflict_leaving_store_transaction_says_to_use_run_in_transaction(
    store: MongoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`async with store.writes.transaction()` (what `app.transaction()` opens) cannot run its
    block again: the error reaches the caller, aborted, its label kept, with one line
    naming the callback form."""
    session = FakeSession()
    on_session(monkeypatch, store, session)
    with pytest.raises(OperationFailure) as raised:
        async with store.writes.transaction():
            raise write_conflict()
    assert raised.value.has_error_label("TransientTransactionError")
    notes = getattr(raised.value, "__notes__", [])
    assert notes == [transactions.CONFLICT_NOTE]
    assert "run_in_transaction(callback)" in notes[0]
    assert (session.started, session.aborted, session.committed) == (1, 1, 0)

    failing_commit = FakeSession(commit_errors=[write_conflict()])
    on_session(monkeypatch, store, failing_commit)
    with pytest.raises(OperationFailure) as at_commit:
        async with store.writes.transaction():
            pass
    assert getattr(at_commit.value, "__notes__", []) == [transactions.CONFLICT_NOTE]


async def test_other_errors_leave_store_transaction_without_a_note(
    store: MongoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_session(monkeypatch, store, FakeSession())
    with pytest.raises(ValueError) as raised:
        async with store.writes.transaction():
            raise ValueError("the business code's own error")
    assert not getattr(raised.value, "__notes__", [])
    duplicate = OperationFailure("E11000 duplicate key", code=11000, details={"code": 11000})
    with pytest.raises(OperationFailure) as not_transient:
        async with store.writes.transaction():
            raise duplicate
    assert not getattr(not_transient.value, "__notes__", [])


async def test_one_attempt_gives_way_on_a_conflict_without_retrying(
    store: MongoStore, monkeypatch: pytest.MonkeyPatch, sleeps: list[float]
) -> None:
    """A sequencing step meets a head document another step holds (live, or a killed
    pod's until the server aborts it): one attempt, aborted, None — no retry loop that
    would wait up to 120 s for the holder."""
    session = FakeSession()
    on_session(monkeypatch, store, session)
    calls: list[object] = []

    async def body(s: object) -> int:
        calls.append(s)
        raise write_conflict()

    assert await store._one_attempt(body) is None
    assert calls == [session] and (session.started, session.aborted) == (1, 1)
    assert sleeps == []

    on_session(monkeypatch, store, FakeSession(commit_errors=[write_conflict()]))

    async def quiet(s: object) -> int:
        return 7

    assert await store._one_attempt(quiet) is None  # the conflict came at commit

    committed = FakeSession()
    on_session(monkeypatch, store, committed)
    assert await store._one_attempt(quiet) == 7 and committed.committed == 1


async def test_one_attempt_raises_what_is_not_a_conflict(
    store: MongoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = FakeSession()
    on_session(monkeypatch, store, session)

    async def body(s: object) -> int:
        raise OperationFailure("not authorized", code=13, details={"code": 13})

    with pytest.raises(OperationFailure, match="not authorized"):
        await store._one_attempt(body)
    assert session.aborted == 1


async def test_commit_is_retried_while_its_outcome_is_unknown() -> None:
    unknown = OperationFailure(
        "connection reset", details={"errorLabels": ["UnknownTransactionCommitResult"]}
    )
    session = FakeSession(commit_errors=[unknown, unknown])
    await transactions.commit(session)  # type: ignore[arg-type]
    assert session.committed == 1 and session.commit_errors == []


def _floor(requirement: str) -> tuple[int, ...]:
    found = re.fullmatch(r"pymongo>=([\d.]+)", requirement)
    assert found, requirement
    return tuple(int(part) for part in found.group(1).split("."))


def test_the_pymongo_floor_is_a_release_whose_with_transaction_backs_off() -> None:
    """with_transaction sleeps between attempts since PyMongo 4.17 (its exponential
    backoff with jitter); an older one retries a write conflict at once, in a loop. The
    test above shows the installed one backs off; this one that the floor allows no
    older one, and that the installed one meets the floor."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (requirement,) = pyproject["project"]["optional-dependencies"]["mongo"]
    floor = _floor(requirement)
    assert floor >= (4, 17)
    installed = tuple(int(p) for p in pymongo.version.split(".")[:2])
    assert installed >= floor[:2]
    docs = (ROOT / "docs" / "mongodb.md").read_text()
    assert "PyMongo 4.17" in docs
