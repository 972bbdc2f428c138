"""Chat templates from model files, rendered in jinja2's sandbox.

A template inside a downloaded model is untrusted input: it runs in an
:class:`ImmutableSandboxedEnvironment`, which refuses attribute access to Python
internals (``__class__``, ``__mro__``, ...) and mutation of passed-in objects.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from functools import cached_property
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2 import meta as jinja_meta
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range

from engine.errors import InvalidRequest
from engine.literal_text import ContentGuard, MarkedPrompt, SpecialTexts
from engine.types import ChatMessage

log = logging.getLogger(__name__)

# Used when a model ships no template: ChatML, which most instruction-tuned models understand.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


# The budget of one render: a template is code from a model file, and a recursive macro or a huge loop
# must end with a clear error instead of holding the request thread (and the memory) for ever.
RENDER_SECONDS = 2.0
RENDER_MAX_CHARS = 4_000_000  # characters of output (a prompt past any model's context)
# The functions a template may call (those Hearth's sandbox adds, and Jinja's namespace that Hugging Face
# templates use): a render's own variables never replace them.
TEMPLATE_GLOBALS = ("raise_exception", "strftime_now", "range", "namespace")

# The conversation a template is tried on when its model loads.
_PROBE = (
    ChatMessage("system", "You are a helpful assistant."),
    ChatMessage("user", "Hello"),
    ChatMessage("assistant", "Hi! How can I help?"),
    ChatMessage("user", "Tell me a joke."),
)


class ChatTemplateError(InvalidRequest):
    """The model's chat template failed or was refused by the sandbox."""


class ChatTemplateTooCostly(ChatTemplateError):
    """The model's chat template recursed too deeply, ran too long or wrote too much (see the budget above)."""


_render_state = threading.local()


def _check_budget() -> None:
    deadline = getattr(_render_state, "deadline", None)
    if deadline is not None and time.monotonic() > deadline:
        raise ChatTemplateTooCostly(
            f"The model's chat template ran for over {_render_state.seconds:g} s and was stopped; "
            "use a raw prompt or another model."
        )


def _budgeted_range(*args: int) -> Iterator[int]:
    for i in safe_range(*args):  # the sandbox's own range, which refuses more than MAX_RANGE items
        _check_budget()
        yield i


def _too_long(n: int) -> ChatTemplateTooCostly:
    return ChatTemplateTooCostly(
        f"The model's chat template wrote {n} characters, over the limit of {RENDER_MAX_CHARS}; "
        "use a raw prompt or another model."
    )


class _BudgetedSandbox(ImmutableSandboxedEnvironment):
    """The sandbox, with the render's deadline checked at every call, and repetition bounded by size."""

    intercepted_binops = frozenset({"*", "**"})

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja2's own signature
        _check_budget()
        return super().call(__context, __obj, *args, **kwargs)

    def call_binop(self, context, operator, left, right):
        _check_budget()
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(times, int) and len(seq) * times > RENDER_MAX_CHARS:
                    raise _too_long(len(seq) * times)
        if operator == "**" and isinstance(right, (int, float)) and abs(right) > 1024:
            raise ChatTemplateTooCostly("The model's chat template raised a number to a huge power; use another model.")
        return super().call_binop(context, operator, left, right)


def _template_dict(*args: Any, **kwargs: Any) -> dict:
    return dict(*args, **kwargs)


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
        if m.tool_calls and not m.content:
            # gpt-oss's template reads the thinking that led to a call as `thinking` (and refuses it beside text)
            out["thinking"] = m.reasoning
    return out


def _tojson(
    value: Any, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False, separators: Any = None
) -> str:
    """Hugging Face's ``tojson`` (no HTML escaping; its options); a filter's lazy result (``map``, ``select``) is
    written as the list it gives."""
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys,
                      separators=tuple(separators) if separators else None, default=_json_list)  # fmt: skip


def _json_list(value: Any) -> list:
    if isinstance(value, Iterator):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


class _Generation(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``, which Hugging Face's templates mark the assistant's text with
    (for training masks): rendered as its body."""

    tags = {"generation"}  # noqa: RUF012 - jinja2's own class attribute

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


class ChatTemplate:
    """A model's chat template, compiled once and rendered per request.

    Args:
        source: The Jinja source, or None to use the ChatML fallback.
        bos_token: The model's beginning-of-sequence text, passed to the template.
        eos_token: The model's end-of-sequence text, passed to the template.
        render_seconds: How long one render may run.
        specials: The texts the model's vocabulary reads as special tokens: written in messages or tools, they
            are marked in :meth:`render_marked`'s output, to be tokenized as plain text.
    """

    def __init__(
        self, source: str | None, *, bos_token: str = "", eos_token: str = "", render_seconds: float = RENDER_SECONDS,
        specials: SpecialTexts | None = None,
    ) -> None:
        self.render_seconds = render_seconds
        self.specials = specials or SpecialTexts()
        self.is_fallback = not source
        if self.is_fallback:
            log.info("model has no chat template; using ChatML")
        self.source = source or CHATML_TEMPLATE
        self.bos_token = bos_token
        self.eos_token = eos_token

    @cached_property
    def _env(self) -> ImmutableSandboxedEnvironment:
        # as Hugging Face renders templates: {% break %} and {% continue %}, {% generation %}, dict()
        env = _BudgetedSandbox(trim_blocks=True, lstrip_blocks=True, loader=None,
                               extensions=[jinja2.ext.loopcontrols, _Generation])  # fmt: skip
        env.filters["tojson"] = _tojson
        env.globals["dict"] = _template_dict
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        env.globals["range"] = _budgeted_range
        return env

    @cached_property
    def variables(self) -> frozenset[str]:
        """The variables the template reads from its caller (``messages``, ``tools``, ``enable_thinking``...)."""
        try:
            return frozenset(jinja_meta.find_undeclared_variables(self._env.parse(self.source)))
        except jinja2.TemplateSyntaxError:
            return frozenset()

    @cached_property
    def takes_system(self) -> bool:
        """Whether the template writes a system message (Gemma 2's refuses one, others drop it), found as llama.cpp
        finds it: by rendering one."""
        probe = "Hearth system probe 7f3a"
        try:
            text = self.render([ChatMessage("system", probe), ChatMessage("user", "Hello")], add_generation_prompt=True)
        except (ChatTemplateError, InvalidRequest):
            return False
        return probe in text

    @cached_property
    def alternates(self) -> bool:
        """Whether the template refuses two user messages in a row ("roles must alternate", as Gemma's and Mistral's
        do), found by rendering them: a conversation it is given then has such runs of one role joined."""
        try:
            self.render([ChatMessage("user", "Hello")], add_generation_prompt=True)
        except (ChatTemplateError, InvalidRequest):
            return False  # it refuses more than that: the request's own render says so
        try:
            self.render([ChatMessage("user", "Hello"), ChatMessage("user", "Hello again")], add_generation_prompt=True)
        except (ChatTemplateError, InvalidRequest):
            return True
        return False

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
        """Render messages to the prompt text the model expects, within ``render_seconds`` and
        :data:`RENDER_MAX_CHARS`.

        Raises:
            ChatTemplateTooCostly: the template recursed too deeply, ran too long or wrote too much.
            ChatTemplateError: the template raised, failed, or tried something the sandbox forbids.
        """
        return self._render([message_payload(m) for m in messages], add_generation_prompt, extra)

    def render_marked(
        self,
        messages: Sequence[ChatMessage],
        *,
        add_generation_prompt: bool = True,
        **extra: Any,
    ) -> MarkedPrompt:
        """:meth:`render`, with the places where messages, tools or ``extra`` wrote a special token's text marked:
        the template's own markup is all that is tokenized as special tokens.

        Raises:
            ChatTemplateTooCostly: the template recursed too deeply, ran too long or wrote too much.
            ChatTemplateError: the template raised, failed, or tried something the sandbox forbids.
            InvalidRequest: the template changed a message's text where it held a special text.
        """
        guard = ContentGuard(self.specials)
        payload = guard.protect([message_payload(m) for m in messages])
        rendered = self._render(payload, add_generation_prompt, guard.protect(extra))
        return guard.restore(rendered)

    def _render(self, payload: list[dict[str, Any]], add_generation_prompt: bool, extra: dict[str, Any]) -> str:
        template = self._template
        _render_state.seconds = self.render_seconds
        _render_state.deadline = time.monotonic() + self.render_seconds
        try:
            pieces, size = [], 0
            for piece in template.generate(
                messages=payload,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **extra,
            ):
                size += len(piece)
                if size > RENDER_MAX_CHARS:
                    raise _too_long(size)
                pieces.append(piece)
            return "".join(pieces)
        except ChatTemplateError:
            raise
        except RecursionError as exc:
            raise ChatTemplateTooCostly(
                "The model's chat template recursed too deeply and was stopped; use a raw prompt or another model."
            ) from exc
        except MemoryError as exc:
            raise ChatTemplateTooCostly(
                "The model's chat template ran out of memory and was stopped; use a raw prompt or another model."
            ) from exc
        except SecurityError as exc:
            raise ChatTemplateError(
                f"The model's chat template tried an unsafe operation and was refused ({exc}); "
                "use a raw prompt or another model."
            ) from exc
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(f"The model's chat template failed: {exc}.") from exc
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            raise ChatTemplateError(f"The model's chat template failed: {exc}.") from exc
        finally:
            _render_state.deadline = None

    def check(self) -> None:
        """Render a short conversation, as a model load does before serving the template.

        A template may refuse a conversation on purpose (no system role, say): that is left for the
        requests to report. One that runs past the render budget on it is unusable.

        Raises:
            ChatTemplateTooCostly: the template recursed too deeply, ran too long or wrote too much.
        """
        try:
            self.render(_PROBE, add_generation_prompt=True)
        except ChatTemplateTooCostly:
            raise
        except ChatTemplateError as exc:
            log.debug("the chat template refused the probe conversation: %s", exc)


__all__ = [
    "ChatTemplate", "ChatTemplateError", "ChatTemplateTooCostly", "CHATML_TEMPLATE", "RENDER_SECONDS",
    "TEMPLATE_GLOBALS",
    "RENDER_MAX_CHARS", "message_payload",
]  # fmt: skip
