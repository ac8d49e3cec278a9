"""Reactors: what runs jobs. Partition leases, the fast and long lanes, the one outcome
path, the per-pod pause map, and the runtime that wires them to the change feed."""

from jobledger.reactors.runtime import Runtime

__all__ = ["Runtime"]
