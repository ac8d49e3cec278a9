"""What the engine tells the outside world: structured logs, Prometheus metrics,
OpenTelemetry traces and alerts, all fed through the `observe.Observers` fan-out."""
