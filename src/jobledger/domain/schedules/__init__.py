"""The schedule domain (pure): the row, what code declares, cron, the changes and commands,
the tick and the slot run."""
