"""Job targets: the registry and the shipped targets (Kafka, lossy runners)."""
