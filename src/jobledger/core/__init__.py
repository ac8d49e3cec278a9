"""The shared kernel every layer above the domain builds on: the injected clock, job ids,
the request context, task handling and the registry of targets."""
