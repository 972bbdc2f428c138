"""What `hearth chat`'s flags ask of its answers beside their sampling, as `ollama run` takes them: ``--format``,
``--think`` and ``--keepalive``, for the worker's API and for a model in this process alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine import validation as valid


def parse_format(text: str) -> str | dict[str, Any]:
    """``--format``: ``json``, or a JSON schema object as text.

    Raises:
        InvalidRequest: neither.
    """
    import json

    from engine.errors import InvalidRequest

    if text.strip().lower() == "json":
        return "json"
    try:
        schema = json.loads(text)
    except ValueError:
        schema = None
    if not isinstance(schema, dict):
        raise InvalidRequest("'format' must be json or a JSON schema object; got " + repr(text[:80]) + ".", param="format")
    return schema


def parse_keepalive(text: str) -> float:
    """``--keepalive``: seconds, a duration (``10m``) or ``never`` (-1, as a request's ``keep_alive`` says it), as the
    other flags that keep a model loaded take it.

    Raises:
        InvalidRequest: anything else.
    """
    seconds = valid.keep_alive(text, name="keepalive")
    return -1.0 if seconds is None else seconds


def parse_think(text: str) -> bool | str:
    """``--think``: true or false, or an effort (low, medium, high), as `ollama run --think` takes it.

    Raises:
        InvalidRequest: anything else.
    """
    from engine.errors import InvalidRequest

    word = text.strip().lower()
    if word in ("true", "false"):
        return word == "true"
    if word in ("low", "medium", "high"):
        return word
    raise InvalidRequest(f"'think' must be true, false, low, medium or high; got {text!r}.", param="think")


@dataclass(frozen=True, slots=True)
class Shape:
    """What `hearth chat`'s flags ask of every answer beside its sampling: JSON (``--format``), thinking
    (``--think``) and, through the worker, how long the model stays loaded (``--keepalive``)."""

    format: str | dict[str, Any] | None = None
    think: bool | str | None = None
    keep_alive: float | None = None

    def body(self) -> dict[str, Any]:
        """The fields of the worker's chat completion request."""
        out: dict[str, Any] = {}
        if self.format == "json":
            out["response_format"] = {"type": "json_object"}
        elif self.format is not None:
            out["response_format"] = {"type": "json_schema", "json_schema": {"name": "format", "schema": self.format}}
        if isinstance(self.think, bool):
            out["chat_template_kwargs"] = {"enable_thinking": self.think}
        elif self.think is not None:
            out["reasoning_effort"] = self.think
        if self.keep_alive is not None:
            out["keep_alive"] = self.keep_alive
        return out

    def request(self) -> dict[str, Any]:
        """The same as :class:`GenerationRequest` fields, for a model in this process."""
        from engine.server.ollama_routes import response_format

        out: dict[str, Any] = {}
        if self.format is not None:
            out["response_format"] = response_format(self.format)
        if self.think is not None:
            out["thinking"] = bool(self.think)
            if isinstance(self.think, str):
                out["template_kwargs"] = (("reasoning_effort", self.think),)
        return out


__all__ = ["Shape", "parse_format", "parse_keepalive", "parse_think"]
