"""`--app module:attribute`: find the application a command runs, the way `uvicorn` and
`celery -A` do. The current directory is importable (no PYTHONPATH=. needed);
`module` alone means `module:app`.

The attribute is a `jobledger.App`, or — as before the App existed — a setup function:
`setup(pod)` (serve's old `--setup`) or `setup(engine[, pod])` (worker's old `--app`,
recognised by its first parameter's name), sync or async. Both are wrapped in an App.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

from jobledger.app import App
from jobledger.domain.errors import ConfigError


def load_app(spec: str, *, option: str = "--app") -> App:
    module_name, _, attr = spec.partition(":")
    attr = attr or "app"
    if not module_name:
        raise ConfigError(f"{option} {spec!r}: expected module:attribute (e.g. myapp:app)")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise ConfigError(
                f"{option} {spec!r}: no module {module_name!r} here ({cwd}) or on sys.path"
            ) from exc
        raise ConfigError(f"{option} {spec!r}: importing {module_name} failed: {exc}") from exc
    found = getattr(module, attr, None)
    if isinstance(found, App):
        return found
    if found is None:
        raise ConfigError(f"{option} {spec!r}: {module_name} has no attribute {attr!r}")
    if not callable(found):
        raise ConfigError(
            f"{option} {spec!r}: {attr} is a {type(found).__name__}, not a jobledger.App"
        )
    return app_from_setup(found)


def app_from_setup(setup: Callable[..., Any]) -> App:
    """An App whose build calls the old-style `setup` function with the pod."""
    app = App()
    try:
        params = list(inspect.signature(setup).parameters)
    except (TypeError, ValueError):
        params = []

    def hook(pod: Any) -> Any:
        if params and params[0] == "engine":
            return setup(pod.engine, pod) if len(params) >= 2 else setup(pod.engine)
        return setup(pod)

    app.on_build(hook)
    return app
