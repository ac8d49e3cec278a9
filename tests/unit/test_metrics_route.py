"""`/metrics` of the composed app answers at its own path (no redirect) with the engine's
Prometheus registry, as a scraper expects."""

from __future__ import annotations

import httpx

from jobledger.app import build
from jobledger.config.settings import Settings
from jobledger.storage.memory import MemoryStore


async def test_metrics_path_answers_without_redirect() -> None:
    app = build(Settings(), store=MemoryStore(), api_keys="k-admin-123456:admin:alice")
    app.engine.observers.partitions_owned("pod-a", 7)
    transport = httpx.ASGITransport(app=app.http)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert 'jobledger_partitions_owned{pod="pod-a"} 7.0' in response.text
