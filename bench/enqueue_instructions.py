"""Instructions per transaction, client and server, jobledger against Procrastinate.

What it measures: with valgrind's callgrind, deterministic instruction counts (not
times, so no drift) of the two transactions of enqueue_lockstep on each side, on one
psycopg connection of the caller's:

    raw  BEGIN; INSERT a business row; COMMIT
    job  the same plus one enqueue on that connection (jobledger `engine.enqueue(...,
         tx=conn)` to a fast-lane target; Procrastinate `configure(connection=conn)
         .defer_async(i=i)`)

client  each side's process runs under `valgrind --tool=callgrind`, twice per kind:
        `--warmup` transactions then none, and the same warm-up then `--transactions`
        more; the difference of the two "Collected" totals over `--transactions` is
        one transaction (start-up, imports, schema set-up and warm-up cancel out;
        PYTHONHASHSEED=0 keeps the runs alike).
        Against peer_procrastinate's server (JOBLEDGER_BENCH_PG_DSN or 127.0.0.1:5432).
server  a private PostgreSQL cluster (initdb in a temporary folder, a free loopback
        port, autovacuum off) whose postmaster runs under callgrind with
        --trace-children=yes and one output file per process; the client (not under
        valgrind) prints its connection's backend pid, and that backend's file,
        written when it disconnects, gives its total. Again `--server-warmup` then none
        or `--server-transactions` more, differenced; since a backend's total creeps
        up by ~0.1 % from one run to the next (~1,000 instructions per transaction at
        N=60), the N run is taken between two N=0 runs, against their mean. Every run
        first truncates the side's tables (restarting sequences), so each sees the same
        table state. Only the caller's backend is counted, not other connections'.

    .venv/bin/python bench/enqueue_instructions.py --peer-python PEER_VENV/bin/python
        [--transactions 400] [--server-transactions 60] [--jobs 2] [--only client,server]
        [--baseline-src DIR | --baseline-src NAME=DIR ...] [--no-flush]

Slow: every client run is an interpreter under callgrind (~50x slower) and every
server connection a valgrind'd process: about 2.5 minutes with the defaults (N=400
client, N=60 server) and the two sides on a 2-core machine, under a minute more per
baseline; a larger N only narrows the small run-to-run noise (timer and event-loop
work). Client runs go `--jobs` at a time (instruction counts do not depend on the
load); server runs one at a time. Skips with a message when valgrind or initdb is
missing. The private cluster is stopped and removed at the end, also on error; so are
the client runs' schemas.

The figures, per side (instructions per transaction, rounded):
  raw         the raw transaction;  job  the job transaction
  enqueue     job - raw: the enqueue's own instructions
for the client process, the server backend, and their total; then, for each jobledger
side, Procrastinate's total per job transaction (and per enqueue) divided by that
side's (> 1: jobledger executes fewer instructions).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import enqueue_lockstep as ls
import peer_procrastinate as pp

ROOT = Path(__file__).resolve().parent.parent
KEEP = ("schema_version", "partitions")  # jobledger's rows set once by its migrations
TIMEOUT = 3600
ABOUT: dict[str, str] = {}  # side -> its version or jobledger source folder, as it said


# --- one run's client process (both interpreters) --------------------------------------
async def truncate(schema: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(pp.bench_dsn(), autocommit=True) as admin:
        cur = await admin.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename <> ALL(%s)",
            (schema, list(KEEP)),
        )
        tables = ", ".join(f'"{schema}"."{row[0]}"' for row in await cur.fetchall())
        await admin.execute(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")


async def run_side(args: argparse.Namespace) -> None:
    """setup: the schema created (kept); server: truncate, reuse it; else a fresh schema
    dropped at the end. Prints {"pid": the caller's backend, "about": ...}."""
    await pp.ensure_database()
    if args.mode == "server":
        await truncate(args.schema)
    side = await ls.open_side(args.side, args.schema, fresh=args.mode != "server")
    step = side.raw if args.what == "raw" else side.job
    for i in range(args.warmup + args.n):
        await step(i)
    print(json.dumps({"pid": side.conn.info.backend_pid, "about": side.about}), flush=True)
    await side.close(args.mode == "client")


# --- the driver ------------------------------------------------------------------------------
def side_command(
    spec: ls.Spec, schema: str, mode: str, what: str, n: int, warmup: int
) -> list[str]:
    return [
        spec.python,
        str(Path(__file__).resolve()),
        *("--side", spec.kind, "--schema", schema, "--mode", mode),
        *("--what", what, "--n", str(n), "--warmup", str(warmup)),
    ]


def finish(spec: ls.Spec, done: subprocess.CompletedProcess[str], what: str) -> dict[str, Any]:
    if done.returncode != 0 or not done.stdout.strip():
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise SystemExit(f"{spec.name} {what} failed (exit {done.returncode}):\n{tail}")
    reply: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if spec.src is not None and not reply["about"].startswith(spec.src.rstrip("/")):
        raise SystemExit(f"{spec.name}: imported jobledger from {reply['about']}, not {spec.src}")
    ABOUT[spec.name] = reply["about"]
    return reply


def client_total(spec: ls.Spec, what: str, n: int, warmup: int) -> int:
    """The "Collected" total of one run of the side's process under callgrind."""
    schema = spec.schema(f"cgc_{what}{n}")
    command = side_command(spec, schema, "client", what, n, warmup)
    valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    try:
        done = subprocess.run(
            [*valgrind, *command],
            capture_output=True,
            text=True,
            check=False,
            timeout=TIMEOUT,
            env=spec.env(PYTHONHASHSEED="0"),
        )
    finally:  # a run that failed leaves its schema behind
        asyncio.run(pp.reset_schema(schema, create=False))
    finish(spec, done, f"client {what} N={n}")
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"{spec.name} client {what}: no callgrind total in\n{done.stderr}")
    print(f"  client {spec.name} {what} N={n}: {int(found[1]):,}", file=sys.stderr, flush=True)
    return int(found[1])


def per_tx(totals: dict[tuple[str, int], float], n: int) -> dict[str, float]:
    raw = (totals["raw", n] - totals["raw", 0]) / n
    job = (totals["job", n] - totals["job", 0]) / n
    return {"raw": raw, "job": job, "enqueue": job - raw}


def client_phase(specs: list[ls.Spec], args: argparse.Namespace) -> dict[str, dict[str, float]]:
    asyncio.run(pp.ensure_database())
    n = args.transactions
    runs = [(s, what, m) for s in specs for what in ("raw", "job") for m in (0, n)]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        totals = list(pool.map(lambda r: client_total(*r, args.warmup), runs))
    out = {}
    for spec in specs:
        mine = {(what, m): t for (s, what, m), t in zip(runs, totals, strict=True) if s is spec}
        out[spec.name] = per_tx(mine, n)
    return out


def server_bin() -> Path | None:
    """The PostgreSQL server binaries' folder, if initdb and postgres are there."""
    sys.path.insert(0, str(ROOT / "tests"))
    from private_pg import pg_bin

    found = pg_bin()
    ok = found is not None and all((found / b).exists() for b in ("initdb", "postgres"))
    return found if ok else None


class ValgrindCluster:
    """A private cluster (tests/private_pg.py's initdb/pg_ctl, as postgres when root)
    whose postmaster runs under callgrind: one file per process in `self.out`."""

    def __init__(self, bin_dir: Path) -> None:
        from private_pg import PrivateCluster

        self.cluster = PrivateCluster(bin_dir)
        self.out = self.cluster.root / "callgrind"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.cluster.init()  # the folder belongs to the server's user from here on
        command = [
            *("valgrind", "--tool=callgrind", "--trace-children=yes"),
            f"--callgrind-out-file={self.out}/cg.%p",
            *(str(self.cluster.bin_dir / "postgres"), "-D", str(self.cluster.data)),
            *("-c", "autovacuum=off"),
        ]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
            self._as_server_user("mkdir", str(self.out))
        else:
            self.out.mkdir()
        with self.cluster.log.open("ab") as log:
            self.proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        asyncio.run(self._wait_ready())

    def _as_server_user(self, *command: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *command], check=True)

    async def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + 300
        while True:
            try:
                await (await psycopg.AsyncConnection.connect(self.cluster.dsn)).close()
                return
            except psycopg.OperationalError:
                if self.proc is None or self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the server did not start: {self.cluster.log}") from None
                await asyncio.sleep(1)

    def backend_total(self, pid: int) -> int:
        """The backend's callgrind total, once it has written its file (on exit)."""
        path = self.out / f"cg.{pid}"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            text = path.read_text() if path.exists() else ""
            found = re.search(r"^totals: (\d+)", text, re.M)
            if found:
                return int(found[1])
            time.sleep(0.5)
        raise RuntimeError(f"no callgrind total in {path}")

    def remove(self) -> None:
        try:
            self.cluster.remove()  # pg_ctl stop -m immediate, then the folder
        finally:
            if self.proc is not None and self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the group this started
                self.proc.wait()
            shutil.rmtree(self.cluster.root, ignore_errors=True)


def server_total(
    server: ValgrindCluster, spec: ls.Spec, mode: str, what: str, m: int, warmup: int
) -> int:
    """The caller's backend's total of one run of the side (not valgrind'd) against it."""
    command = side_command(spec, spec.schema("cgs"), mode, what, m, warmup)
    env = spec.env(PYTHONHASHSEED="0", JOBLEDGER_BENCH_PG_DSN=server.cluster.dsn)
    done = subprocess.run(
        command, capture_output=True, text=True, check=False, timeout=TIMEOUT, env=env
    )
    total = server.backend_total(finish(spec, done, f"{mode} {what} N={m}")["pid"])
    print(f"  {mode} {spec.name} {what} N={m}: {total:,}", file=sys.stderr, flush=True)
    return total


def server_phase(specs: list[ls.Spec], args: argparse.Namespace) -> dict[str, dict[str, float]]:
    n, warmup = args.server_transactions, args.server_warmup
    server = ValgrindCluster(args.bin_dir)
    out = {}
    try:
        server.start()
        for spec in specs:
            server_total(server, spec, "setup", "raw", 0, 0)  # schema, business table
            totals: dict[tuple[str, int], float] = {}
            for what in ("raw", "job"):  # N=0, N, N=0: a linear creep cancels
                first, totals[what, n], again = (
                    server_total(server, spec, "server", what, m, warmup) for m in (0, n, 0)
                )
                totals[what, 0] = (first + again) / 2
            out[spec.name] = per_tx(totals, n)
    finally:
        server.remove()
    return out


def report(specs: list[ls.Spec], phases: dict[str, dict[str, dict[str, float]]]) -> None:
    if len(phases) == 2:
        phases["total"] = {
            s.name: {
                k: phases["client"][s.name][k] + phases["server"][s.name][k]
                for k in ("raw", "job", "enqueue")
            }
            for s in specs
        }
    for phase, rows in phases.items():
        print(f"{phase}: instructions per transaction")
        print(f"  {'side':14s} {'raw':>12s} {'job':>12s} {'enqueue':>12s}")
        for name, row in rows.items():
            print(f"  {name:14s} {row['raw']:12,.0f} {row['job']:12,.0f} {row['enqueue']:12,.0f}")
    last = list(phases)[-1]
    ref = phases[last][ls.PEER]
    for spec in specs[1:]:
        mine = phases[last][spec.name]
        print(
            f"{last}: {ls.PEER} / {spec.name}: per job transaction {ref['job'] / mine['job']:.2f}x,"
            f" per enqueue {ref['enqueue'] / mine['enqueue']:.2f}x"
        )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ls.add_side_arguments(parser)
    parser.add_argument("--transactions", type=int, default=400, help="client: N")
    parser.add_argument("--warmup", type=int, default=200, help="client: transactions first")
    parser.add_argument("--server-transactions", type=int, default=60, help="server: N")
    parser.add_argument("--server-warmup", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=2, help="client runs at a time")
    parser.add_argument("--only", default="client,server")
    parser.add_argument("--side", choices=[ls.PEER, "jobledger"], help=argparse.SUPPRESS)
    parser.add_argument("--schema", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=["client", "server", "setup"], help=argparse.SUPPRESS)
    parser.add_argument("--what", choices=["raw", "job"], help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        asyncio.run(run_side(args))
        return 0
    if shutil.which("valgrind") is None:
        print("skipped: valgrind is not installed (apt-get install valgrind)")
        return 0
    if args.no_flush:
        os.environ[pp.NO_FLUSH_ENV] = "1"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the cluster's cleanup runs
    args.bin_dir = server_bin()
    only = args.only.split(",")
    if "server" in only and args.bin_dir is None:
        print("skipped: initdb/postgres not found (PostgreSQL 15 server binaries are needed)")
        return 0
    specs = ls.sides(ls.peer_python(args.peer_python), args.baseline_src)
    phases: dict[str, dict[str, dict[str, float]]] = {}
    started = time.monotonic()
    if "client" in only:
        phases["client"] = client_phase(specs, args)
    if "server" in only:
        phases["server"] = server_phase(specs, args)
    print(
        "instructions per transaction (callgrind) = (total with N more - total with none) / N;"
        f" client N={args.transactions} after {args.warmup} warm-up, server"
        f" N={args.server_transactions} after {args.server_warmup} (none: the mean of two"
        f" runs); {time.monotonic() - started:.0f} s"
    )
    for spec in specs:
        print(f"  {spec.name}: {ABOUT.get(spec.name)} ({spec.python})")
    report(specs, phases)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
