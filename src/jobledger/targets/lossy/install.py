"""Which lossy runner a pod uses: Redis streams when `lossy_redis_url` is set, else the
in-process queue; hooked to the engine's after-commit hand-off."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobledger.config.settings import Settings
from jobledger.targets.lossy.redis_stream import RedisLossyRunner
from jobledger.targets.lossy.runner import InProcessLossyRunner, LossyRunner

if TYPE_CHECKING:
    from jobledger.engine import Engine


def install_lossy(engine: Engine, settings: Settings | None = None) -> LossyRunner:
    """Pick the runner for `settings` and hook it to `engine.lossy_handoff`.

    The caller starts it (`await runner.start()`) with the other workers and stops it
    on shutdown. With `settings.workers` False the consumer does not run; hand-off
    still publishes to Redis, or drops (counted, logged) in-process.
    """
    settings = settings or engine.settings
    runner: LossyRunner
    if settings.lossy_redis_url:
        runner = RedisLossyRunner(
            engine,
            settings.lossy_redis_url,
            consume=settings.workers,
            maxlen=settings.lossy_queue_size,
        )
    else:
        runner = InProcessLossyRunner(engine, settings.lossy_queue_size, consume=settings.workers)
    engine.lossy_handoff = runner.hand_off
    return runner
