"""Rendering a chat request with tools and thinking through the model's own template.

A template that reads ``tools`` (Hugging Face's convention) gets them as ``apply_chat_template``
passes them: a list of ``{"type": "function", "function": {...}}``, with assistant ``tool_calls``
(arguments as objects) and ``tool`` messages in the conversation. A template that knows no tools
gets Hearth's generic format instead: the tools described in the system prompt, earlier calls
written as ``<tool_call>`` blocks and their results as ``<tool_response>`` blocks in user turns.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from engine.errors import InvalidRequest
from engine.literal_text import MarkedPrompt
from engine.tools.call_watch import CallWatch, ThinkEndWatch
from engine.tools.constraint import ToolCallConstraint, strict_call_constraint, tool_call_constraint
from engine.tools.harmony import is_harmony_template
from engine.tools.reasoning import THINK_TAGS, strip_reasoning, template_thinks
from engine.tools.spec import ToolSpec

if TYPE_CHECKING:
    from engine.chat_template import ChatTemplate
    from engine.types import ChatMessage, GenerationRequest


#: The texts each family's calls are written with, which some vocabularies hold as control tokens (Mistral's
#: [TOOL_CALLS] and [ARGS], Magistral's [THINK]): the answer's text shows them, for its parser to read, as
#: llama.cpp keeps its "preserved tokens". (Llama 3's <|python_tag|> stays hidden: its calls read as bare JSON.)
CALL_MARKERS: dict[str, tuple[str, ...]] = {
    "hermes": ("<tool_call>", "</tool_call>"),
    "generic": ("<tool_call>", "</tool_call>"),
    "mistral": ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"),
    "deepseek": ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
                 "<｜tool▁calls▁end｜>"),  # fmt: skip
    "gemma4": ("<|tool_call>", "<tool_call|>", '<|"|>'),
    "granite": ("<|tool_call|>",),
    "pythonic": ("<|tool_call_start|>", "<|tool_call_end|>"),
    "seed": ("<seed:tool_call>", "</seed:tool_call>"),
    "apertus": ("<|tools_prefix|>", "<|tools_suffix|>"),
    "cohere": ("<|START_ACTION|>", "<|END_ACTION|>"),
    "minimax": ("<minimax:tool_call>", "</minimax:tool_call>"),
    "kimi": ("<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
             "<|tool_calls_section_end|>"),  # fmt: skip
    "harmony": ("<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|constrain|>"),
}


@dataclass(frozen=True, slots=True)
class RenderedChat:
    """A chat request rendered to a prompt, and how to read the model's answer to it.

    ``tools`` are the tools the answer may call (empty: do not look for calls); ``constraint`` is set
    when the answer must be a call; ``strict_calls`` when a call the model chooses to make must follow the
    strict tools' schemas from its opening on (:meth:`call_watch`); ``thinking_started`` when the prompt itself opened the thinking
    section. ``literal`` holds the character spans of ``prompt`` where messages or tools wrote a special token's
    text: they are tokenized as plain text (:func:`engine.literal_text.encode_marked`).
    """

    prompt: str
    tool_format: str = "generic"
    tools: tuple[ToolSpec, ...] = ()
    constraint: ToolCallConstraint | None = None
    think_tags: tuple[str, str] = THINK_TAGS[0]
    thinking_started: bool = False
    literal: tuple[tuple[int, int], ...] = ()
    strict_calls: ToolCallConstraint | None = None
    bare_calls: bool = True  # False: a JSON answer is the answer (a response format asked for it), never a bare call

    @property
    def markers(self) -> tuple[str, ...]:
        """The texts of the answer's markup that its parser reads (thinking tags; the calls' markup where a call
        may be made), to be shown in its text whatever kind of token the vocabulary holds them as."""
        calls = CALL_MARKERS.get(self.tool_format, ()) if self.tools or self.tool_format == "harmony" else ()
        forced = CALL_MARKERS.get(self.constraint.fmt, ()) if self.constraint is not None else ()
        thinking = ("<|channel>", "<channel|>") if self.think_tags == GEMMA4_THINK_TAGS else self.think_tags
        return tuple(dict.fromkeys(m for m in (*calls, *forced, *thinking) if m))

    def call_watch(self) -> CallWatch | None:
        """A fresh watch for where a strict call opens in the answer, or None when no call is held to a schema
        from its opening (``strict_calls`` is not set)."""
        if self.strict_calls is None:
            return None
        return CallWatch(self.strict_calls.trigger, self.think_tags, thinking=self.thinking_started)

    def thinking_watch(self) -> ThinkEndWatch | None:
        """Where the answer starts inside its thinking: a fresh watch for the thinking's end, from which a grammar
        that holds the whole answer (a response format, a forced call) holds it; else None (it holds from the start)."""
        return ThinkEndWatch(self.think_tags[1]) if self.thinking_started and self.think_tags[1] else None


def detect_tool_format(template: ChatTemplate, architecture: str = "") -> str:
    """The tool-call family a model writes, from its chat template (and architecture as a hint).

    ``generic`` when the template knows no tools or uses markup Hearth does not recognise.
    """
    src = template.source
    if is_harmony_template(src):  # gpt-oss: calls, thinking and answer are messages of their own
        return "harmony"
    if "<|tool_call>call:" in src:  # Gemma 4's
        return "gemma4"
    if not template.knows_tools:
        return "generic"
    if "<tool_call>" in src:
        return "hermes"
    if "<|python_tag|>" in src or "ipython" in src:
        return "llama3"
    if "[TOOL_CALLS]" in src:
        return "mistral"
    if "tool▁calls▁begin" in src:
        return "deepseek"
    if "<|tool_call|>" in src:  # Granite 3's
        return "granite"
    if "<|tool_list_start|>" in src or "List of tools: [" in src:  # LFM2's
        return "pythonic"
    if "<seed:tool_call>" in src:  # Seed-OSS's
        return "seed"
    if "<|tools_prefix|>" in src:  # Apertus's
        return "apertus"
    if "<|START_ACTION|>" in src:  # Cohere's
        return "cohere"
    if "minimax:tool_call" in src:  # MiniMax M2's
        return "minimax"
    if "<|tool_calls_section_begin|>" in src:  # Kimi K2's
        return "kimi"
    if '<function name="' in src and "<param name=" in src:  # MiniCPM 5's
        return "minicpm"
    if architecture.startswith("qwen"):
        return "hermes"
    return "generic"


def detect_think_tags(template: ChatTemplate) -> tuple[str, str]:
    if "<|channel>thought" in template.source:  # Gemma 4's thinking channel
        return GEMMA4_THINK_TAGS
    if "<seed:think>" in template.source:  # Seed-OSS's
        return ("<seed:think>", "</seed:think>")
    if "<|START_THINKING|>" in template.source:  # Cohere's
        return ("<|START_THINKING|>", "<|END_THINKING|>")
    return THINK_TAGS[1] if "[THINK]" in template.source else THINK_TAGS[0]


#: Gemma 4's thinking: a channel of its own, ``<|channel>thought\n...<channel|>``.
GEMMA4_THINK_TAGS = ("<|channel>thought", "<channel|>")


def generic_tools_prompt(tools: tuple[ToolSpec, ...], *, forced: str | None = None) -> str:
    """The system-prompt block of the generic format (``forced``: ``required`` or a tool's name)."""
    lines = "\n".join(json.dumps(t.as_openai()["function"], ensure_ascii=False) for t in tools)
    text = (
        "You can call these tools (function signatures as JSON schemas):\n"
        f"<tools>\n{lines}\n</tools>\n"
        "To call a tool, answer with one block per call, and nothing else:\n"
        '<tool_call>\n{"name": "<tool name>", "arguments": {<the arguments as JSON>}}\n</tool_call>\n'
        "Each result comes back to you in a <tool_response> block. If no tool is needed, answer normally."
    )
    if forced == "required":
        text += "\nCall at least one tool now."
    elif forced:
        text += f"\nCall the tool '{forced}' now."
    return text


def _generic_call_text(msg: ChatMessage) -> str:
    blocks = [
        "<tool_call>\n"
        + json.dumps({"name": c.name, "arguments": c.arguments_object}, ensure_ascii=False)
        + "\n</tool_call>"
        for c in msg.tool_calls
    ]
    return "\n".join(([msg.content] if msg.content else []) + blocks)


def _generic_messages(messages: tuple[ChatMessage, ...], system_block: str | None) -> list[ChatMessage]:
    from engine.types import ChatMessage

    out: list[ChatMessage] = []
    for m in messages:
        if m.role == "assistant" and m.tool_calls:  # its thinking stays (kept only if the template asks)
            out.append(ChatMessage(role="assistant", content=_generic_call_text(m), reasoning=m.reasoning))
        elif m.role == "tool":
            body = json.dumps({"name": m.name, "content": m.content}, ensure_ascii=False) if m.name else m.content
            text = f"<tool_response>\n{body}\n</tool_response>"
            if out and out[-1].role == "user" and out[-1].content.startswith("<tool_response>"):
                out[-1] = ChatMessage(role="user", content=out[-1].content + "\n" + text)
            else:
                out.append(ChatMessage(role="user", content=text))
        else:
            out.append(m)
    if system_block:
        if out and out[0].role in ("system", "developer"):
            out[0] = ChatMessage(role=out[0].role, content=f"{out[0].content}\n\n{system_block}".lstrip())
        else:
            out.insert(0, ChatMessage(role="system", content=system_block))
    return out


def _history(messages: tuple[ChatMessage, ...], template: ChatTemplate, tags: tuple[str, str]) -> tuple:
    """Earlier assistant turns without their thinking, unless the template takes it as ``reasoning_content`` (or
    harmony's ``thinking``, which gpt-oss's template shows for the calls of the turn going on)."""
    keep = "reasoning_content" in template.source or is_harmony_template(template.source)
    out = []
    for m in messages:
        if m.role == "assistant":
            m = replace(m, content=strip_reasoning(m.content, tags), reasoning=m.reasoning if keep else None)
        out.append(m)
    return tuple(out)


def _named_results(messages: tuple) -> tuple:
    """Each tool result that names no function given the name of the call it answers (``tool_call_id``), as the
    dialects that carry it give it: a template then sees which result answers which call."""
    names: dict[str, str] = {}
    out = []
    for m in messages:
        if m.role == "assistant":
            names.update((c.id, c.name) for c in m.tool_calls if c.id)
        elif m.role == "tool" and not m.name and m.tool_call_id in names:
            m = replace(m, name=names[m.tool_call_id])
        out.append(m)
    return tuple(out)


def _nine_character_ids(messages: tuple) -> tuple:
    """Every call's id as Mistral's templates require it, nine letters and digits (they refuse any other): each id
    mapped to one, the same for a call and its result; a result that names no call (Ollama's) takes the next
    call's in order."""

    def nine(call_id: str) -> str:
        return call_id if len(call_id) == 9 and call_id.isalnum() else hashlib.sha256(call_id.encode()).hexdigest()[:9]

    waiting: list[str] = []
    out = []
    for m in messages:
        if m.role == "assistant" and m.tool_calls:
            calls = tuple(replace(c, id=nine(c.id)) for c in m.tool_calls)
            waiting = [c.id for c in calls]
            m = replace(m, tool_calls=calls)
        elif m.role == "tool":
            call_id = nine(m.tool_call_id) if m.tool_call_id else (waiting[0] if waiting else nine(m.name or "result"))
            if call_id in waiting:
                waiting.remove(call_id)
            m = replace(m, tool_call_id=call_id)
        out.append(m)
    return tuple(out)


def _roles_it_takes(messages: list, template: ChatTemplate, *, harmony: bool) -> list:
    """``messages`` in the roles ``template`` writes, as llama.cpp fits them: ``developer`` as ``system`` (but for
    gpt-oss's, which has both), and where it takes no system message, the first one's text opening the next
    message's (alone, it is left out); where it refuses two user messages in a row, each run of user messages (and
    of plain assistant ones) joined into one."""
    if not harmony:
        messages = [replace(m, role="system") if m.role == "developer" else m for m in messages]
    if messages and messages[0].role == "system" and not template.takes_system:
        first, rest = messages[0], messages[1:]
        if rest:
            rest = [replace(rest[0], content=f"{first.content}\n{rest[0].content}", media=first.media + rest[0].media), *rest[1:]]
        messages = rest
    if template.alternates:
        messages = _runs_joined(messages)
    return messages


def _runs_joined(messages: list) -> list:
    """``messages`` with each run of user messages joined into one, and each run of assistant messages without
    tool calls (a compaction's summary before the next question, a client's context before its question)."""
    out: list = []
    for m in messages:
        prev = out[-1] if out else None
        if prev is not None and prev.role == m.role and (
            m.role == "user" or (m.role == "assistant" and not prev.tool_calls and not m.tool_calls and not m.reasoning)
        ):
            out[-1] = replace(prev, content=f"{prev.content}\n\n{m.content}", media=prev.media + m.media)
        else:
            out.append(m)
    return out


def _render_answered(template: ChatTemplate, messages: list, opening: bool, extra: dict) -> MarkedPrompt:
    """``messages`` rendered; where a template that wants alternating roles refuses a user message right after tool
    results (Mistral's checks the roles with tool turns left out, so a call, its results and the user's next words,
    as an Anthropic client sends a result and text in one turn, read as two user turns in a row), rendered again
    with an empty answer between them, as the model would have closed its turn.

    Raises:
        ChatTemplateError: the template refused the messages either way (its first refusal).
    """
    from engine.chat_template import ChatTemplateError, ChatTemplateTooCostly

    try:
        return template.render_marked(messages, add_generation_prompt=opening, **extra)
    except ChatTemplateTooCostly:
        raise
    except ChatTemplateError as refused:
        answered = _answers_after_results(messages) if template.alternates else messages
        if answered is messages:
            raise
        try:
            return template.render_marked(answered, add_generation_prompt=opening, **extra)
        except ChatTemplateError:
            raise refused from None


def _answers_after_results(messages: list) -> list:
    """``messages`` with an empty assistant answer between each tool result and a user message right after it
    (``messages`` itself where there is no such place)."""
    from engine.types import ChatMessage

    out: list = []
    for m in messages:
        if m.role == "user" and out and out[-1].role == "tool":
            out.append(ChatMessage("assistant", ""))
        out.append(m)
    return out if len(out) > len(messages) else messages


def _cut_after(marked: MarkedPrompt, answer: str) -> MarkedPrompt:
    """``marked`` up to where the last message, the answer going on, ends (what its template closes it with,
    such as an end-of-turn token, left out).

    Raises:
        InvalidRequest: the template does not write the answer's text as it is (it cannot be continued).
    """
    text = marked.text
    for needle in (answer, answer.strip()):  # as it is, or as a template that trims it writes it
        at = text.rfind(needle)
        if at >= 0:
            end = at + len(needle)
            literal = tuple((a, min(b, end)) for a, b in marked.literal if a < end)
            return MarkedPrompt(text[:end], literal)
    raise InvalidRequest("The model's chat template rewrites the last answer, so it cannot be continued; "
                         "send it without 'continue_final_message'.", param="continue_final_message")  # fmt: skip


def render_request(template: ChatTemplate, request: GenerationRequest, *, architecture: str = "") -> RenderedChat:
    """Render ``request.messages`` with its tools and thinking switch through ``template``.

    Raises:
        ChatTemplateError: the template failed or was refused by the sandbox.
    """
    if request.require_thinking and not template_thinks(template.source):
        raise InvalidRequest(f'"{request.model}" does not support thinking; ask without \'think\'.', param="think")
    tags = detect_think_tags(template)
    choice = request.tool_choice
    offered = request.tools if (choice is None or choice.mode != "none") else ()
    fmt = detect_tool_format(template, architecture)
    messages = _named_results(_history(tuple(request.messages or ()), template, tags))
    if fmt == "mistral" or "length 9" in template.source:
        messages = _nine_character_ids(messages)
    # Going on with an answer: rendered as a finished turn, then cut where its text ends. An empty one is
    # the assistant's turn not begun, which the generation prompt begins.
    going_on = messages[-1].content if request.continue_final and messages[-1].content.strip() else None
    if request.continue_final and going_on is None:
        messages = messages[:-1]
    opening = going_on is None
    extra = dict(request.template_kwargs)
    if request.thinking is not None:
        extra.setdefault("enable_thinking", request.thinking)
    if fmt == "generic" and not template.knows_tools:
        forced = None if choice is None or not choice.forced else (choice.name or "required")
        block = generic_tools_prompt(offered, forced=forced) if offered else None
        listed = _roles_it_takes(_generic_messages(messages, block), template, harmony=False)
        marked = template.render_marked(listed, add_generation_prompt=opening, **extra)
    else:
        if offered:
            extra["tools"] = [t.as_openai() for t in offered]
        listed = _roles_it_takes(list(messages), template, harmony=fmt == "harmony")
        marked = _render_answered(template, listed, opening, extra)
    if going_on is not None:
        marked = _cut_after(marked, going_on)
    prompt = marked.text
    constraint = tool_call_constraint(fmt, offered, choice, parallel=request.parallel_tool_calls is True)
    # calls the model chooses to make: as many as it writes, unless the request said one
    strict_calls = strict_call_constraint(fmt, offered, choice, parallel=request.parallel_tool_calls is not False)
    return RenderedChat(
        prompt=prompt,
        tool_format=fmt,
        tools=choice.callable(offered) if choice is not None else offered,  # a call to another is read as text
        constraint=constraint,
        think_tags=tags,
        thinking_started=prompt.rstrip().endswith(tags[0]),
        literal=marked.literal,
        strict_calls=strict_calls,
        # a forced call's grammar wins over a response format: its bare JSON (llama3, mistral) is the call
        bare_calls=request.response_format.type == "text" or constraint is not None,
    )


__all__ = ["RenderedChat", "detect_tool_format", "detect_think_tags", "generic_tools_prompt", "render_request"]
