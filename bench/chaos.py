"""The long chaos run: `python bench/chaos.py --jobs 100000 --minutes 15`.

Same harness as tests/chaos/test_chaos_short.py (tests/chaos/harness.py), longer and
bigger: workers SIGKILLed every few seconds, worker backends terminated, the broker
hung, away while the workers run (the proxy in front of it refusing connections) and
restarted, the run's private PostgreSQL cluster (initdb on a free loopback
port, removed at the end) restarted once; then every check, one summary table. A hot-keys
workload: `--keys 8`. Exit status 0 when every check passed and no problem was written
down; a failed run keeps its evidence in <workdir>/evidence. Run from the repository root.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.chaos.harness import Config, run_chaos  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--minutes", type=float, default=15.0, help="fault window")
    parser.add_argument("--store", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=50, help="items per business transaction")
    parser.add_argument("--kill-every", type=float, default=8.0, help="seconds")
    parser.add_argument("--terminate-every", type=float, default=20.0, help="seconds")
    parser.add_argument("--hangs", type=int, default=4)
    parser.add_argument("--broker-restarts", type=int, default=2)
    parser.add_argument("--outages", type=int, default=2, help="broker outages, workers live")
    parser.add_argument("--outage-seconds", type=float, default=5.0)
    parser.add_argument("--no-pg-restart", action="store_true")
    parser.add_argument("--drain-timeout", type=float, default=600.0, help="seconds")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="jobledger-chaos-"))
    config = Config(
        args.store,
        jobs=args.jobs,
        seconds=args.minutes * 60,
        workdir=workdir,
        workers=args.workers,
        keys=args.keys,
        batch=args.batch,
        kill_every_s=args.kill_every,
        terminate_every_s=args.terminate_every,
        hangs=args.hangs,
        broker_restarts=args.broker_restarts,
        outages=args.outages,
        outage_s=args.outage_seconds,
        pg_restart=not args.no_pg_restart,
        drain_timeout_s=args.drain_timeout,
    )
    summary = asyncio.run(run_chaos(config))
    print(f"\n{' '.join(['python', 'bench/chaos.py', *sys.argv[1:]])}  (logs: {workdir})\n")
    print(summary.table())
    return 0 if summary.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
