"""The admin API over every store: input no store can hold (U+0000) is refused before
it reaches the database, so PostgreSQL's DataError never surfaces as a 500."""

from __future__ import annotations

from jobledger.core.clock import FakeClock
from jobledger.storage.port import Store
from tests.unit.http_helpers import ADMIN, client, world


async def test_nul_in_filters_and_codes_never_reaches_the_store(
    store: Store, clock: FakeClock
) -> None:
    async with world(store, clock) as w, client(w.app) as http:
        await w.dead(key="k1")
        for query in ("key=%00", "target=a%00b", "code=x%00", "status=DEAD&key=%00"):
            response = await http.get(f"/api/v1/jobs?{query}", headers=ADMIN)
            assert response.status_code == 400, (query, response.text)
            assert response.json()["code"] == "validation_failed"
        for method, path in (
            ("POST", "/api/v1/schedules/%00/enable"),
            ("POST", "/api/v1/schedules/a%00/disable"),
            ("PUT", "/api/v1/schedules/a%00/cron_override"),
            ("DELETE", "/api/v1/schedules/a%00/cron_override"),
        ):
            body = {"cron_override": "* * * * *"} if method == "PUT" else None
            response = await http.request(method, path, json=body, headers=ADMIN)
            assert response.status_code == 404, (path, response.text)
        listing = await http.get("/api/v1/jobs?key=k1", headers=ADMIN)
        assert listing.status_code == 200 and listing.json()["total"] == 1
