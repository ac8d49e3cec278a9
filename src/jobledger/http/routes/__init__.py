"""Route modules: each exposes `routes() -> list[BaseRoute]`."""
