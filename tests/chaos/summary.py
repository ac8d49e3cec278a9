"""What a chaos run found: the summary table, and the faults it injected.

`Summary.ok` fails closed: any check that counted something, any problem written down
(a fault that could not be injected, a recorder that did not catch up, a liveness
check that could not run), or a run that checked nothing (no jobs) is a FAIL.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class FaultHit:
    """One injected fault: when it started and ended, and which pods it hit (None: all)."""

    name: str
    at: datetime
    until: datetime
    pods: frozenset[str] | None = None
    #: a kill's victim's partitions, as the lease rows said just before it
    partitions: frozenset[int] = frozenset()

    def hits(self, pod: str | None) -> bool:
        return self.pods is None or (pod is not None and pod in self.pods)


@dataclass
class Summary:
    kind: str
    jobs: int = 0  # committed business rows (one job each)
    enqueued: int = 0
    delivered: int = 0  # records on the topics
    offsets_reread: int = 0  # offsets the recorder skipped, then read on a second read
    offsets_unread: int = 0  # skipped and never read: records that could not be checked
    succeeded: int = 0
    dead: Counter[str] = field(default_factory=Counter)  # reason -> jobs
    dead_justified: int = 0  # at-most-once DEAD whose in-flight mark a fault hit
    dead_unjustified: int = 0
    kills: int = 0
    crashes: int = 0  # workers that exited without being killed, or hung
    boot_exits: int = 0  # exited 1 because App.start failed (e.g. store down > 30 s)
    boot_hangs: int = 0
    pg_terminations: int = 0  # rounds
    pg_connections_killed: int = 0  # backends pg_terminate_backend actually ended
    pg_restarts: int = 0
    broker_hangs: int = 0
    broker_restarts: int = 0
    broker_outages: int = 0  # the proxy refused connections while workers ran
    outage_connections_cut: int = 0
    outage_connects_refused: int = 0  # probes from outside the proxy, all refused
    outage_worker_refusals: int = 0  # connects refused, as the workers' own logs report
    driver_retries: int = 0  # business transactions that failed and were retried
    lost: int = 0
    lost_causes: Counter[str] = field(default_factory=Counter)  # tests/chaos/acks.py
    acks_logged: int = 0  # records the workers logged as acknowledged (CHAOS_ACKS)
    acks_unread: int = 0  # acknowledged records not read at their offset
    fences: int = 0  # quiesce fence records the harness wrote (Recorder.quiesced)
    # measured, not checked: records v3's end-offset quiesce would have lost to a broker
    # restart (read only after it held), those acknowledged to a worker, and restarts
    # where it never held within 10 s
    v3_missed: int = 0
    v3_missed_acked: int = 0
    v3_unsettled: int = 0
    amo_duplicates: int = 0
    alo_duplicates: int = 0  # allowed: resends share event_id
    alo_undelivered: int = 0
    resend_runs: int = 0  # a key going back to an already delivered version (allowed)
    order_violations: int = 0
    versions_in_flight_together: int = 0  # (v, v+1) of a key: v+1 committed before v closed
    slots: int = 0
    slot_errors: int = 0
    slot_reruns: int = 0  # a reclaimed slot runs again (long lane is at-least-once)
    projection_diffs: int = 0
    chain_problems: int = 0
    recovery_s: dict[str, list[float]] = field(
        default_factory=dict
    )  # by fault kind: end -> next record
    #: per kill: the kill -> the first record of the victim's partitions a survivor sent
    takeover_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    drain_s: float = 0.0
    evidence: str | None = None  # folder kept when the run failed
    problems: list[str] = field(default_factory=list)
    hidden_problems: int = 0  # problems beyond the 50 listed

    @property
    def ok(self) -> bool:
        return not (
            self.problems
            or self.hidden_problems
            or self.lost
            or self.offsets_unread
            or self.acks_unread
            or self.amo_duplicates
            or self.alo_undelivered
            or self.dead_unjustified
            or self.order_violations
            or self.slot_errors
            or self.projection_diffs
            or self.chain_problems
            or self.crashes
            or self.boot_hangs
            or self.jobs == 0
            or self.enqueued == 0
        )

    def takeover_line(self) -> str:
        """max / median (kills): each kill's, in kill order."""
        times = sorted(self.takeover_s)
        if not times:
            return "-"
        each = " ".join(f"{t:.1f}" for t in self.takeover_s)
        return f"{times[-1]:.1f} / {times[len(times) // 2]:.1f} ({len(times)}): {each}"

    def problem(self, text: str) -> None:
        if len(self.problems) < 50:
            self.problems.append(text)
        else:
            self.hidden_problems += 1

    def table(self) -> str:
        dead = ", ".join(f"{n} {r}" for r, n in self.dead.most_common()) or "0"
        causes = ", ".join(f"{n} {c}" for c, n in self.lost_causes.most_common()) or "-"
        recovery = ", ".join(
            f"{kind} {max(times):.1f} / {sorted(times)[len(times) // 2]:.1f}"
            for kind, times in sorted(self.recovery_s.items())
        )
        outages = (
            f"{self.outage_connections_cut} / {self.outage_connects_refused}"
            f" / {self.outage_worker_refusals}"
        )
        rows = [
            ("store", self.kind),
            ("jobs (committed business rows)", self.jobs),
            ("jobs enqueued (JobEnqueued)", self.enqueued),
            ("records on the topics", self.delivered),
            ("offsets skipped by the recorder, then read", self.offsets_reread),
            ("offsets never read (unchecked records)", self.offsets_unread),
            ("succeeded", self.succeeded),
            ("DEAD, by reason", dead),
            ("at-most-once DEAD justified by a fault", self.dead_justified),
            ("DEAD not justified by a fault", self.dead_unjustified),
            ("worker SIGKILLs (+ restarts)", self.kills),
            ("worker crashes (not killed by us)", self.crashes),
            ("workers exiting 1 after a failed boot", self.boot_exits),
            ("workers hung after a failed boot", self.boot_hangs),
            ("pg_terminate_backend rounds", self.pg_terminations),
            ("worker connections terminated", self.pg_connections_killed),
            ("PostgreSQL restarts (private cluster)", self.pg_restarts),
            ("broker hangs (SIGSTOP/SIGCONT)", self.broker_hangs),
            ("broker kill + restart", self.broker_restarts),
            ("broker outages (proxy refusing, workers live)", self.broker_outages),
            ("outages: connections cut / probes refused / worker connects refused", outages),
            ("driver transactions retried", self.driver_retries),
            ("lost", self.lost),
            ("lost, by cause (workers' ack log)", causes),
            ("records acknowledged to the workers (ack log)", self.acks_logged),
            ("acknowledged records not read at their offset", self.acks_unread),
            ("quiesce fence records written", self.fences),
            (
                "v3 end-offset quiesce would have missed: records / acked / never held",
                f"{self.v3_missed} / {self.v3_missed_acked} / {self.v3_unsettled}",
            ),
            ("at-most-once duplicates", self.amo_duplicates),
            ("at-least-once duplicates (allowed)", self.alo_duplicates),
            ("at-least-once undelivered", self.alo_undelivered),
            ("resend runs (allowed)", self.resend_runs),
            ("order violations (every delivery)", self.order_violations),
            ("consecutive versions pending together", self.versions_in_flight_together),
            ("schedule slots checked", self.slots),
            ("slot errors", self.slot_errors),
            ("slot handler reruns (allowed)", self.slot_reruns),
            ("projection diffs (replay)", self.projection_diffs),
            ("hash-chain problems", self.chain_problems),
            ("recovery after a fault: max / median s", recovery or "-"),
            ("takeover after a kill: max / median s (kills): each", self.takeover_line()),
            ("wall time (s)", f"{self.wall_s:.0f}"),
            ("drain after the last enqueue (s)", f"{self.drain_s:.0f}"),
            ("problems", len(self.problems) + self.hidden_problems),
            ("verdict", "PASS" if self.ok else "FAIL"),
        ]
        width = max(len(name) for name, _ in rows)
        lines = [f"| {'check'.ljust(width)} | result |", f"|{'-' * (width + 2)}|--------|"]
        lines += [f"| {name.ljust(width)} | {value} |" for name, value in rows]
        if self.evidence:
            lines.append(f"evidence kept in {self.evidence}")
        return "\n".join(lines + [f"problem: {p}" for p in self.problems])
