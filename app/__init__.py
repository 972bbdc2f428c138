"""Hearth's desktop app (PySide6). It reaches the engine only through the worker's HTTP API.

Entry points (imported lazily by ``hearth gui``): :func:`app.application.run_app` and
:func:`app.application.run_smoke`.
"""

__all__ = ["application"]
