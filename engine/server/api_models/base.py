"""The bases of every model of the API: the answers, and the request bodies of every dialect."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, StrictFloat, WithJsonSchema, model_validator


class Answer(BaseModel):
    """Frozen: the app passes these around in signals and never edits them. Unknown fields are ignored when
    parsing (the app reads what it knows) and dropped when the worker answers (it sends what is declared).

    An answer whose fields match an engine type's attributes is validated from the engine object
    (``GpuInfo.model_validate(gpu)``), never copied field by field; tests/engine/server/test_answers_from_attributes.py
    checks that the fields still match."""

    model_config = ConfigDict(frozen=True, from_attributes=True)


class Body(BaseModel):
    """A request body: unknown fields are accepted and kept in ``model_extra`` (clients send many; an
    extension such as ``hearth`` is read from there), known fields are type-checked."""

    model_config = ConfigDict(extra="allow")


class NullAsDefaultBody(Body):
    """A body whose explicit ``null`` means the field's default: OpenAI's spec marks most fields nullable
    (``"n": null`` is ``n`` left out), and Hearth's own /api bodies read the same way."""

    @model_validator(mode="after")
    def _null_means_default(self):
        for name, info in _defaulted_fields(type(self)):  # most bodies' messages have none: a body may hold many
            if getattr(self, name) is None:
                setattr(self, name, info.get_default(call_default_factory=True))
        return self


class NullLeftOutBody(Body):
    """A body whose explicit ``null`` is the field left out, as Ollama's Go decoder reads one (``"stream": null``
    streams): its fields keep their types, so a ``null`` where a value is required is refused as a missing one."""

    @model_validator(mode="before")
    @classmethod
    def _null_left_out(cls, data: Any) -> Any:
        if isinstance(data, dict) and any(v is None for v in data.values()):
            return {k: v for k, v in data.items() if v is not None}
        return data


_DEFAULTED: dict[type, tuple] = {}


def _defaulted_fields(cls: type[BaseModel]) -> tuple:
    """The optional fields of ``cls`` whose default is not None (or made by a factory), with their infos."""
    found = _DEFAULTED.get(cls)
    if found is None:
        found = _DEFAULTED[cls] = tuple(
            (name, info) for name, info in cls.model_fields.items()
            if not info.is_required() and (info.default_factory is not None or info.default is not None)
        )  # fmt: skip
    return found


# Ollama's keep_alive (every dialect takes it): seconds (negative: never), a duration, or "never". The pattern
# says what the server reads (engine.validation.request_keep_alive, whose sentence refuses anything else).
KEEP_ALIVE_PATTERN = r"^\s*([Nn][Ee][Vv][Ee][Rr]|[0-9]+(\.[0-9]+)?|([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+)\s*$"
KeepAlive = StrictFloat | Annotated[str, WithJsonSchema({"type": "string", "pattern": KEEP_ALIVE_PATTERN})] | None
