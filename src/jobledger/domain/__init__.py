"""The pure core: events, state machines, policies and cron math. No I/O here."""
