"""The base of every answer model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Answer(BaseModel):
    """Frozen: the app passes these around in signals and never edits them. Unknown fields are ignored when
    parsing (the app reads what it knows) and dropped when the worker answers (it sends what is declared)."""

    model_config = ConfigDict(frozen=True)
