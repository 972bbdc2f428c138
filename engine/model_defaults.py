"""A model's own defaults, applied to every request that does not set them.

Another app's model may come with the settings its owner runs it with: an Ollama model's Modelfile
``PARAMETER`` lines (its ``params`` layer) and its ``SYSTEM`` text, kept in the registry entry's
``origin_info["defaults"]``. Ollama's semantics are followed:

- sampling (``temperature``, ``top_p``, ``top_k``, ``min_p``, ``repeat_penalty``, ``repeat_last_n``, ``presence_penalty``,
  ``frequency_penalty``, ``seed``, ``stop``, ``num_predict``) fills what the request left unset; a value
  the client sent, an explicit 0 included, is never replaced (a request's ``stop`` replaces the Modelfile's);
- the system text becomes the first message of a chat that has no system message of its own (a raw
  prompt is left as it is);
- ``num_ctx`` is a load setting: it is taken by :meth:`engine.pool.ModelManager.options_for`, under the
  model's saved load settings (see :func:`load_defaults`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from engine.errors import InvalidRequest
from engine.load_settings import ModelLoadSettings
from engine.types import ChatMessage, GenerationRequest, SamplingParams

log = logging.getLogger(__name__)

# A Modelfile PARAMETER -> the SamplingParams field it sets
SAMPLING_PARAMETERS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repeat_penalty": "repetition_penalty",
    "repeat_last_n": "penalty_last_n",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "seed": "seed",
    "stop": "stop",
    "num_predict": "max_tokens",
}
SAMPLING_FIELDS = frozenset(SAMPLING_PARAMETERS.values())
SYSTEM_ROLES = ("system", "developer")


def left_unset(given: Mapping[str, object]) -> frozenset[str]:
    """The sampling fields a request leaves to the defaults: those ``given`` holds no value for (None, or
    not a field of the dialect at all, such as ``stop`` in OpenAI's Responses)."""
    return frozenset(f for f in SAMPLING_FIELDS if given.get(f) is None)


@dataclass(frozen=True, slots=True)
class ModelDefaults:
    """What a model runs with when a request does not say otherwise.

    Attributes:
        sampling: ``(SamplingParams field, value)`` pairs, each valid on its own.
        system: The system text a chat without a system message starts with.
        n_ctx: The context length the model is loaded with, under its saved load settings.
    """

    sampling: tuple[tuple[str, Any], ...] = ()
    system: str | None = None
    n_ctx: int | None = None

    @property
    def is_empty(self) -> bool:
        return not self.sampling and not self.system and self.n_ctx is None

    @classmethod
    def from_info(cls, origin_info: Mapping[str, object] | None) -> ModelDefaults:
        """The defaults recorded in a registry entry's ``origin_info`` (empty when it has none). A value
        that is out of range or of the wrong type is left out, with a line in the log."""
        raw = (origin_info or {}).get("defaults")
        if not isinstance(raw, Mapping):
            return cls()
        sampling: list[tuple[str, Any]] = []
        for name, field in SAMPLING_PARAMETERS.items():
            value: Any = raw.get(name)
            if value is None or (field == "max_tokens" and isinstance(value, int) and value <= 0):
                continue  # num_predict -1 or -2: no limit, as Hearth's own default
            if field == "stop" and isinstance(value, str):
                value = (value,)
            elif field == "stop" and isinstance(value, list):
                value = tuple(value)
            one: dict[str, Any] = {field: value}
            try:
                SamplingParams(**one)
            except (InvalidRequest, TypeError, ValueError) as exc:
                log.info("the model's default %s=%r is not used: %s", name, value, exc)
                continue
            sampling.append((field, value))
        system = raw.get("system")
        return cls(tuple(sampling), system if isinstance(system, str) and system.strip() else None, _n_ctx(raw))

    def apply(self, req: GenerationRequest) -> GenerationRequest:
        """``req`` with these defaults in what it left unset (``req.unset``) and, for a chat without a
        system message, this system text first."""
        fill = {field: value for field, value in self.sampling if field in req.unset}
        out = replace(req, params=replace(req.params, **fill)) if fill else req
        if self.system and out.messages is not None and not any(m.role in SYSTEM_ROLES for m in out.messages):
            out = replace(out, messages=(ChatMessage("system", self.system), *out.messages))
        return out


def _n_ctx(raw: Mapping[str, object]) -> int | None:
    value = raw.get("num_ctx")
    if value is None:
        return None
    try:
        return ModelLoadSettings(n_ctx=value).validate().n_ctx  # type: ignore[arg-type]
    except InvalidRequest as exc:
        log.info("the model's default num_ctx=%r is not used: %s", value, exc)
        return None


def load_defaults(origin_info: Mapping[str, object] | None) -> ModelLoadSettings:
    """The load settings a model's own defaults ask for (its Modelfile's ``num_ctx``); the model's saved
    load settings go over them, and a request's own load options over both."""
    return ModelLoadSettings(n_ctx=ModelDefaults.from_info(origin_info).n_ctx)


__all__ = ["ModelDefaults", "SAMPLING_FIELDS", "SAMPLING_PARAMETERS", "left_unset", "load_defaults"]
