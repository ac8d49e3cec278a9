"""The adapter's own counters as Prometheus metrics, on the engine's registry.

`install_observers` hands its registry to `MongoStore.register_metrics`, which adds one
collector reading, at each scrape, what the change-stream watcher and the sequencer
count (prometheus_client is imported only then: it comes with the `http` extra):

    jobledger_mongodb_change_stream_failures_total     failed attempts since the store opened
    jobledger_mongodb_change_stream_consecutive_failures  failed attempts since the last stream opened
    jobledger_mongodb_change_streams_opened_total      change streams opened (1 unless it failed)
    jobledger_mongodb_sequencing_gave_way_total        sequencing steps that met another step

A consecutive-failures gauge above 0 means the lanes are woken only by their slow poll;
a gave-way counter that climbs while `jobledger_projection_lag_events` does means a
step holds the log's head document (decisions D41).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from jobledger.storage.mongodb.sequencer import Sequencer
from jobledger.storage.mongodb.watch import ChangeWatcher

logger = logging.getLogger("jobledger.storage.mongodb")


class AdapterCollector:
    """A prometheus_client collector over a watcher's and a sequencer's counters."""

    def __init__(self, watcher: ChangeWatcher, sequencer: Sequencer) -> None:
        self.watcher = watcher
        self.sequencer = sequencer

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        w = self.watcher
        yield CounterMetricFamily(
            "jobledger_mongodb_change_stream_failures",
            "Failed change-stream attempts since the store opened",
            value=w.failures,
        )
        yield GaugeMetricFamily(
            "jobledger_mongodb_change_stream_consecutive_failures",
            "Failed change-stream attempts since a stream last opened (0: streaming)",
            value=w.consecutive_failures,
        )
        yield CounterMetricFamily(
            "jobledger_mongodb_change_streams_opened",
            "Change streams opened since the store opened",
            value=w.streams_opened,
        )
        yield CounterMetricFamily(
            "jobledger_mongodb_sequencing_gave_way",
            "Log sequencing steps that met another step's write on the head document",
            value=self.sequencer.gave_way,
        )


def register(registry: Any, watcher: ChangeWatcher, sequencer: Sequencer) -> None:
    """Add the adapter's collector to `registry` (a second store on one registry is
    logged and left out: the names would clash)."""
    try:
        registry.register(AdapterCollector(watcher, sequencer))
    except ValueError as exc:
        logger.warning("MongoDB adapter metrics not registered: %s", exc)
