"""Lossy targets: one try, dropped on failure, never written to the store; the runners
(`runner`, `redis_stream`) and the choice between them (`install`)."""
