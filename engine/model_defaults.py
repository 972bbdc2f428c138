"""A model's own defaults, applied to every request that does not set them.

Another app's model may come with the settings its owner runs it with: an Ollama model's Modelfile
``PARAMETER`` lines (its ``params`` layer) and its ``SYSTEM`` text, kept in the registry entry's
``origin_info["defaults"]``. Ollama's semantics are followed:

- sampling (``temperature``, ``top_p``, ``top_k``, ``min_p``, ``repeat_penalty``, ``repeat_last_n``, ``presence_penalty``,
  ``frequency_penalty``, ``seed``, ``stop``, ``num_predict``) fills what the request left unset; a value
  the client sent, an explicit 0 included, is never replaced (a request's ``stop`` replaces the Modelfile's);
- the system text becomes the first message of a chat that has no system message of its own (a raw
  prompt is left as it is);
- the Modelfile's ``MESSAGE`` lines (a conversation the model starts from) come after the system messages and
  before the request's own;
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
#: Modelfile PARAMETERs Ollama has that Hearth keeps and shows but does not use (docs/api.md lists them).
UNUSED_PARAMETERS = frozenset({
    "num_keep", "typical_p", "penalize_newline", "numa", "num_batch", "num_gpu", "main_gpu", "low_vram",
    "vocab_only", "use_mmap", "use_mlock", "num_thread", "tfs_z", "mirostat", "mirostat_tau", "mirostat_eta", "f16_kv",
    "logits_all",
})  # fmt: skip
#: Every parameter a Modelfile may set.
PARAMETERS = frozenset(SAMPLING_PARAMETERS) | {"num_ctx"} | UNUSED_PARAMETERS
#: The roles of a Modelfile's ``MESSAGE`` lines.
MESSAGE_ROLES = ("system", "user", "assistant")


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
        messages: The conversation every chat starts from (a Modelfile's ``MESSAGE`` lines).
    """

    sampling: tuple[tuple[str, Any], ...] = ()
    system: str | None = None
    n_ctx: int | None = None
    messages: tuple[ChatMessage, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.sampling and not self.system and self.n_ctx is None and not self.messages

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
        return cls(
            tuple(sampling), system if isinstance(system, str) and system.strip() else None, _n_ctx(raw),
            _messages(raw.get("messages")),
        )  # fmt: skip

    def apply(self, req: GenerationRequest) -> GenerationRequest:
        """``req`` with these defaults in what it left unset (``req.unset``), for a chat without a system message
        this system text first, and the model's own conversation after the system messages."""
        fill = {field: value for field, value in self.sampling if field in req.unset}
        out = replace(req, params=replace(req.params, **fill)) if fill else req
        if out.messages is None:
            return out
        messages = out.messages
        if self.system and not any(m.role in SYSTEM_ROLES for m in messages):
            messages = (ChatMessage("system", self.system), *messages)
        if self.messages and not out.context:  # a turn that continues an exchange's ids has them already
            lead = next((i for i, m in enumerate(messages) if m.role not in SYSTEM_ROLES), len(messages))
            messages = (*messages[:lead], *self.messages, *messages[lead:])
        return out if messages is out.messages else replace(out, messages=messages)


def _n_ctx(raw: Mapping[str, object]) -> int | None:
    value = raw.get("num_ctx")
    if value is None:
        return None
    try:
        return ModelLoadSettings(n_ctx=value).validate().n_ctx  # type: ignore[arg-type]
    except InvalidRequest as exc:
        log.info("the model's default num_ctx=%r is not used: %s", value, exc)
        return None


def _messages(raw: object) -> tuple[ChatMessage, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(
        ChatMessage(m["role"], m["content"])
        for m in raw
        if isinstance(m, Mapping) and m.get("role") in MESSAGE_ROLES and isinstance(m.get("content"), str)
    )


def checked_parameters(given: Mapping[str, object], *, where: str = "parameters") -> dict[str, Any]:
    """Modelfile parameters as a model keeps them (``origin_info["defaults"]``), each checked as a request's
    option is: ``stop`` as a list of strings, every other one a single value.

    Raises:
        InvalidRequest: an unknown parameter, or a value Hearth would not run with, named ``where.NAME``.
    """
    out: dict[str, Any] = {}
    for name, value in given.items():
        param = f"{where}.{name}"
        if name not in PARAMETERS:
            raise InvalidRequest(f"'{param}' is not a Modelfile parameter; leave it out (docs/api.md lists them).", param=param)
        if value is None:
            continue
        if name == "stop":
            value = [value] if isinstance(value, str) else value
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise InvalidRequest(f"'{param}' must be a string or a list of strings.", param=param)
        elif isinstance(value, (list, dict)):
            raise InvalidRequest(f"'{param}' must be a single value, not a list or an object.", param=param)
        field = SAMPLING_PARAMETERS.get(name)
        try:
            if field == "max_tokens":
                if not isinstance(value, int) or isinstance(value, bool):
                    raise InvalidRequest(f"'{param}' must be a whole number (-1: no limit).", param=param)
                if value > 0:
                    SamplingParams(max_tokens=value)
            elif field is not None:
                one: dict[str, Any] = {field: tuple(value) if isinstance(value, list) else value}
                SamplingParams(**one)
            elif name == "num_ctx":
                ModelLoadSettings(n_ctx=value).validate()  # type: ignore[arg-type]
        except InvalidRequest as exc:
            message = str(exc).replace(f"'{exc.param}'", f"'{param}'", 1) if exc.param else str(exc)
            raise InvalidRequest(message, param=param) from None
        except (TypeError, ValueError) as exc:
            raise InvalidRequest(f"'{param}' has a value Hearth cannot use ({exc}); change it.", param=param) from None
        out[name] = value
    return out


def checked_messages(given: object, *, where: str = "messages") -> list[dict[str, str]]:
    """A Modelfile's ``MESSAGE`` lines as a model keeps them.

    Raises:
        InvalidRequest: not a list of ``{"role", "content"}`` with a system, user or assistant role.
    """
    if not isinstance(given, list):
        raise InvalidRequest(f"'{where}' must be a list of messages.", param=where)
    out = []
    for i, m in enumerate(given):
        if not isinstance(m, Mapping) or m.get("role") not in MESSAGE_ROLES or not isinstance(m.get("content", ""), str):
            raise InvalidRequest(
                f"'{where}[{i}]' must have a role of system, user or assistant and text content.", param=f"{where}[{i}]"
            )
        out.append({"role": str(m["role"]), "content": str(m.get("content") or "")})
    return out


def load_defaults(origin_info: Mapping[str, object] | None) -> ModelLoadSettings:
    """The load settings a model's own defaults ask for (its Modelfile's ``num_ctx``); the model's saved
    load settings go over them, and a request's own load options over both."""
    return ModelLoadSettings(n_ctx=ModelDefaults.from_info(origin_info).n_ctx)


#: What a terminal chat (`hearth chat`) samples with where neither its flags, `/set parameter` nor the model's own
#: settings say: warmer than greedy, as a conversation wants.
CHAT_SAMPLING: Mapping[str, Any] = {"temperature": 0.7, "top_p": 0.95}


def chat_sampling(asked: Mapping[str, Any], origin_info: Mapping[str, object] | None) -> dict[str, Any]:
    """The sampling fields a terminal chat's request carries: those ``asked`` (its flags and `/set parameter`; None is
    not asked), and :data:`CHAT_SAMPLING`'s where the model has no setting of its own (a Modelfile's ``PARAMETER``, an
    Ollama model's), whose own settings then hold for the fields the request leaves out, as in ``ollama run``."""
    own = {field for field, _ in ModelDefaults.from_info(origin_info).sampling}
    out = {k: v for k, v in asked.items() if v is not None}
    out.update({k: v for k, v in CHAT_SAMPLING.items() if k not in out and k not in own})
    return out


__all__ = [
    "CHAT_SAMPLING", "MESSAGE_ROLES", "ModelDefaults", "PARAMETERS", "SAMPLING_FIELDS", "SAMPLING_PARAMETERS", "chat_sampling",
    "checked_messages", "checked_parameters", "left_unset", "load_defaults",
]  # fmt: skip
