"""The at-most-once mark's statement (pure: no I/O): one job row's update under the
lease guard, with its one event and the wake-up, from scalar parameters.

The general apply statement (`statements.apply_sql`) parses JSON arrays of changes,
rows and events and runs every branch of the compare-and-set for a batch; a mark alone
(the first send of an idle at-most-once partition: the handler waits for its commit)
needs one of them. The guard is the general statement's: the partition's lease row,
held by this pod and not expired, locked `FOR SHARE` until the commit; then the
compare-and-set on the row's stream version.
"""

from __future__ import annotations

from jobledger.domain.jobs import TRANSITION_FIELDS
from jobledger.storage.postgres.sql_parts import EVENT_INSERT, EVENT_TYPES, JOB_TYPES, base


def guarded_update_sql(s: str, channel: str) -> str:
    """Parameters, in order (`encode.guarded_update_params`): the partition, the pod and
    its clock's now; the row's `TRANSITION_FIELDS`; its id and expected stream version;
    the event's columns after its position; the wake-up's payload. One row back when
    the change was applied."""
    columns = ", ".join(TRANSITION_FIELDS)
    values = ", ".join(f"%s::{JOB_TYPES.get(f, 'text')}" for f in TRANSITION_FIELDS)
    event_values = ", ".join(
        f"%s::{EVENT_TYPES.get(c, 'text')}" for c in EVENT_INSERT.split(", ")[1:]
    )
    return f"""
WITH held AS (
  SELECT partition FROM {s}.partitions
  WHERE partition = %s::integer AND owner = %s AND lease_until > %s::timestamptz
  FOR SHARE
),
u AS (
  UPDATE {s}.jobs SET ({columns}) = ({values})
  WHERE id = %s AND stream_version = %s::integer AND EXISTS (SELECT 1 FROM held)
  RETURNING 1
),
{base(s)},
e AS (INSERT INTO {s}.events ({EVENT_INSERT}) SELECT base.b + 1, {event_values} FROM base, u)
SELECT pg_notify('{channel}', %s) FROM u
"""
