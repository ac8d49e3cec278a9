"""Projections: read models folded from the log, replay, audit, stats and retention.

The jobs and schedules read models are *inline* projections: the store writes them in
the same transaction as the events (`Change.row`). Everything here either rebuilds
them from the log to prove they agree (`replay`), audits the log itself (`audit`), or
keeps a checkpointed projection of its own (`runner`, `stats`).
"""
