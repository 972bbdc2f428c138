"""Tool calling and thinking: the domain logic under every HTTP dialect (no HTTP, no backend here).

Public API (import from ``engine.tools``):

Definitions (frozen dataclasses, :mod:`engine.tools.spec`)
    ``ToolSpec(name, description, parameters, strict, custom)`` — a function the model may call; ``as_openai()``.
    A custom (freeform) tool is offered as a function of one string, ``CUSTOM_INPUT``; ``custom_input(call)`` is the
    text a call gives it, ``custom_call`` one sent back, ``CustomInputStream`` its text as the arguments stream in.
    ``ToolChoice(mode, name)`` — ``mode`` is ``auto | none | required | function``; ``forced``.
    ``ToolCall(name, arguments, id)`` — ``arguments`` is JSON text; ``arguments_object``; ``as_openai()``.
    ``parse_tools(items)``, ``parse_tool_choice(value, tools)``, ``parse_tool_calls(items)`` — from OpenAI's
    request shapes, raising ``InvalidRequest`` that names the bad tool. ``new_call_id()`` gives ``call_...``.

On a request (:class:`engine.types.GenerationRequest`)
    ``tools``, ``tool_choice``, ``parallel_tool_calls``, ``thinking`` (None: the model's default),
    ``template_kwargs``; messages (:class:`engine.types.ChatMessage`) carry ``tool_calls``,
    ``tool_call_id``, ``name`` and ``reasoning``. Backends render with :func:`render_request` and pass
    their output through :func:`parse_stream`, so every chat stream arrives already split.

On a stream (:class:`engine.types.GenerationChunk`)
    ``text`` is answer text only; ``reasoning`` the thinking in this piece; ``tool_call_deltas``
    (:class:`ToolCallDelta` ``index, id, name, arguments``: the first delta of a call has id and name,
    later ones pieces of arguments); the final chunk has ``tool_calls`` (every :class:`ToolCall`),
    ``reasoning_tokens``, and ``finish_reason`` ``"tool_calls"`` when it stopped after calling.

Rendering (:mod:`engine.tools.render`)
    ``render_request(template, request, architecture=) -> RenderedChat`` (prompt, tool_format, tools,
    constraint, think_tags, thinking_started); ``detect_tool_format``; ``generic_tools_prompt``.

Parsing (:mod:`engine.tools.parsers`, :mod:`engine.tools.reasoning`, :mod:`engine.tools.stream`)
    ``ToolCallParser(fmt, tool_names)`` with ``feed(text)``/``finish()`` -> ``ParsedOutput(content,
    tool_calls)``; ``parse_tool_calls_text(fmt, text, names)``; ``ReasoningSplitter(tags, started=)``
    with ``feed``/``flush`` -> ``ReasoningPiece(reasoning, content)``; ``split_reasoning``;
    ``ChatOutputParser(rendered)``; ``parse_stream(chunks, rendered)``. Formats: ``TOOL_FORMATS``.

Constraints (:mod:`engine.tools.constraint`)
    ``tool_call_constraint(fmt, tools, choice, parallel=) -> ToolCallConstraint | None``;
    ``call_schema(tools, arguments_key)`` (JSON schema of one call); ``to_lark(constraint)`` (llguidance).
"""

from engine.tools.constraint import ToolCallConstraint, call_schema, to_lark, tool_call_constraint
from engine.tools.parsers import (
    TOOL_FORMATS,
    ParsedOutput,
    ToolCallDelta,
    ToolCallParser,
    parse_tool_calls_text,
)
from engine.tools.reasoning import THINK_TAGS, ReasoningPiece, ReasoningSplitter, split_reasoning
from engine.tools.render import RenderedChat, detect_tool_format, generic_tools_prompt, render_request
from engine.tools.spec import (
    CUSTOM_INPUT,
    CustomInputStream,
    ToolCall,
    ToolChoice,
    ToolSpec,
    custom_call,
    custom_input,
    new_call_id,
    parse_tool_calls,
    parse_tool_choice,
    parse_tools,
)
from engine.tools.stream import ChatOutputParser, ChatStreamParser, OutputPiece, parse_stream

__all__ = [
    "CUSTOM_INPUT",
    "CustomInputStream",
    "custom_call",
    "custom_input",
    "ToolSpec",
    "ToolChoice",
    "ToolCall",
    "new_call_id",
    "parse_tools",
    "parse_tool_choice",
    "parse_tool_calls",
    "RenderedChat",
    "render_request",
    "detect_tool_format",
    "generic_tools_prompt",
    "TOOL_FORMATS",
    "ToolCallParser",
    "ToolCallDelta",
    "ParsedOutput",
    "parse_tool_calls_text",
    "THINK_TAGS",
    "ReasoningSplitter",
    "ReasoningPiece",
    "split_reasoning",
    "ChatOutputParser",
    "OutputPiece",
    "parse_stream",
    "ChatStreamParser",
    "ToolCallConstraint",
    "tool_call_constraint",
    "call_schema",
    "to_lark",
]
