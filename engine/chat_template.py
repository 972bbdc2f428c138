"""Chat templates from model files, rendered in jinja2's sandbox.

A template inside a downloaded model is untrusted input: it runs in an
:class:`ImmutableSandboxedEnvironment`, which refuses attribute access to Python
internals (``__class__``, ``__mro__``, ...) and mutation of passed-in objects.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import datetime
from functools import cached_property
from typing import Any

import jinja2
from jinja2 import meta as jinja_meta
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.errors import InvalidRequest
from engine.types import ChatMessage

log = logging.getLogger(__name__)

# Used when a model ships no template: ChatML, which most instruction-tuned models understand.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class ChatTemplateError(InvalidRequest):
    """The model's chat template failed or was refused by the sandbox."""


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def message_payload(m: ChatMessage) -> dict[str, Any]:
    """A message as Hugging Face chat templates take it: tool calls with their arguments as objects."""
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_object}}
            for c in m.tool_calls
        ]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    if m.name is not None:
        out["name"] = m.name
    if m.reasoning is not None:
        out["reasoning_content"] = m.reasoning
    return out


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)


class ChatTemplate:
    """A model's chat template, compiled once and rendered per request.

    Args:
        source: The Jinja source, or None to use the ChatML fallback.
        bos_token: The model's beginning-of-sequence text, passed to the template.
        eos_token: The model's end-of-sequence text, passed to the template.
    """

    def __init__(self, source: str | None, *, bos_token: str = "", eos_token: str = "") -> None:
        self.is_fallback = not source
        if self.is_fallback:
            log.info("model has no chat template; using ChatML")
        self.source = source or CHATML_TEMPLATE
        self.bos_token = bos_token
        self.eos_token = eos_token

    @cached_property
    def _env(self) -> ImmutableSandboxedEnvironment:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, loader=None)
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        return env

    @cached_property
    def variables(self) -> frozenset[str]:
        """The variables the template reads from its caller (``messages``, ``tools``, ``enable_thinking``...)."""
        try:
            return frozenset(jinja_meta.find_undeclared_variables(self._env.parse(self.source)))
        except jinja2.TemplateSyntaxError:
            return frozenset()

    @property
    def knows_tools(self) -> bool:
        """True when the template renders a ``tools`` list itself (as Hugging Face templates with tool support do)."""
        return "tools" in self.variables

    @cached_property
    def _template(self) -> jinja2.Template:
        env = self._env
        try:
            return env.from_string(self.source)
        except jinja2.TemplateSyntaxError as exc:
            raise ChatTemplateError(
                f"The model's chat template does not compile ({exc.message}); use a raw prompt instead."
            ) from exc

    def render(
        self,
        messages: Sequence[ChatMessage],
        *,
        add_generation_prompt: bool = True,
        **extra: Any,
    ) -> str:
        """Render messages to the prompt text the model expects.

        Raises:
            ChatTemplateError: the template raised, failed, or tried something the sandbox forbids.
        """
        payload = [message_payload(m) for m in messages]
        try:
            return self._template.render(
                messages=payload,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **extra,
            )
        except SecurityError as exc:
            raise ChatTemplateError(
                f"The model's chat template tried an unsafe operation and was refused ({exc}); "
                "use a raw prompt or another model."
            ) from exc
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(f"The model's chat template failed: {exc}.") from exc
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            raise ChatTemplateError(f"The model's chat template failed: {exc}.") from exc


__all__ = ["ChatTemplate", "ChatTemplateError", "CHATML_TEMPLATE", "message_payload"]
