"""Messages between the parts of the engine: what to generate, and the stream that comes back.

Every backend takes a :class:`GenerationRequest` and yields :class:`GenerationChunk` items;
the last item of every stream carries a ``finish_reason``.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from engine.errors import InvalidRequest
from engine.infill import Infill
from engine.limits import MAX_CHOICES, MAX_GRAMMAR_CHARS, check_grammar, check_schema, check_stops

if TYPE_CHECKING:  # engine.tools imports this module; only annotations refer back to it
    from engine.tools.parsers import ToolCallDelta
    from engine.tools.spec import ToolCall, ToolChoice, ToolSpec

# "tool_calls" is set by the tool-call parser (engine.tools) on top of a backend's stream.
FinishReason = Literal["stop", "length", "cancelled", "error", "tool_calls"]
FINISH_REASONS: tuple[str, ...] = ("stop", "length", "cancelled", "error", "tool_calls")
ROLES: tuple[str, ...] = ("system", "developer", "user", "assistant", "tool")
# Where a picture or a sound sits in a message's text: libmtmd's own default marker, which the llama.cpp
# backend hands to mtmd with the media in order.
MEDIA_MARKER = "<__media__>"
MediaKind = Literal["image", "audio"]


def _check_range(name: str, value: float, lo: float, hi: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise InvalidRequest(f"'{name}' must be a number.", param=name)
    if not lo <= value <= hi:
        if hi == math.inf:
            raise InvalidRequest(f"'{name}' must be {lo:g} or more, got {value}.", param=name)
        raise InvalidRequest(f"'{name}' must be between {lo} and {hi}, got {value}.", param=name)


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to pick tokens. Defaults are greedy-free sampling with OpenAI's defaults.

    ``temperature == 0`` means greedy decoding. ``top_k == 0`` disables top-k,
    ``top_p == 1`` and ``min_p == 0`` disable those filters, penalties of 0 (1 for
    ``repetition_penalty``) are off. ``logprobs`` is None for none, else how many
    alternatives to report beside the chosen token (0..20); ``prompt_logprobs`` the same for each token of
    the prompt after the first (what the model gives it, read in order).

    ``penalty_last_n`` says which tokens the penalties read (:meth:`penalty_windows`): None as vLLM and OpenAI
    read them (repetition: the prompt's and the answer's; presence and frequency: the answer's), N the last N of
    prompt and answer for all three, as llama.cpp's ``repeat_last_n`` (-1: all of them, 0: none).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    max_tokens: int | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()
    logprobs: int | None = None
    ignore_eos: bool = False
    prompt_logprobs: int | None = None
    penalty_last_n: int | None = None
    include_stop: bool = False  # the stop string that ends the answer is kept at its end (vLLM's include_stop_str_in_output)
    min_tokens: int = 0  # vLLM's: before this many tokens, no end of generation, stop token or stop string ends it
    # tokens the model may think before its thinking is closed for it (engine.tools.thinking_budget); -1: no cap,
    # None: the server's default (--reasoning-budget), else no cap
    thinking_budget: int | None = None

    def __post_init__(self) -> None:
        # no upper bound here (as Ollama, llama-server and vLLM take any): the dialects with one (OpenAI's 2, Anthropic's
        # 1) check their own
        _check_range("temperature", self.temperature, 0.0, math.inf)
        _check_range("top_p", self.top_p, 0.0, 1.0)
        _check_range("min_p", self.min_p, 0.0, 1.0)
        _check_range("repetition_penalty", self.repetition_penalty, 0.01, 10.0)
        _check_range("presence_penalty", self.presence_penalty, -2.0, 2.0)
        _check_range("frequency_penalty", self.frequency_penalty, -2.0, 2.0)
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or self.top_k < 0:
            raise InvalidRequest("'top_k' must be a whole number of 0 or more (0 turns it off).", param="top_k")
        if self.max_tokens is not None and (
            not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool) or self.max_tokens < 1
        ):
            raise InvalidRequest("'max_tokens' must be a whole number of at least 1.", param="max_tokens")
        if not isinstance(self.min_tokens, int) or isinstance(self.min_tokens, bool) or self.min_tokens < 0:
            raise InvalidRequest("'min_tokens' must be a whole number of 0 or more.", param="min_tokens")
        if self.thinking_budget is not None and (
            not isinstance(self.thinking_budget, int) or isinstance(self.thinking_budget, bool) or self.thinking_budget < -1
        ):
            raise InvalidRequest("The thinking budget must be a whole number of tokens (-1: no cap).", param="thinking_budget")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise InvalidRequest(f"'min_tokens' ({self.min_tokens}) must not be more than 'max_tokens' ({self.max_tokens}).",
                                 param="min_tokens")  # fmt: skip
        if self.penalty_last_n is not None and (
            not isinstance(self.penalty_last_n, int) or isinstance(self.penalty_last_n, bool) or self.penalty_last_n < -1
        ):
            raise InvalidRequest("'repeat_last_n' must be a whole number: how many recent tokens the penalties read "
                                 "(0: none, -1: all).", param="repeat_last_n")  # fmt: skip
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)):
            raise InvalidRequest("'seed' must be a whole number.", param="seed")
        if self.logprobs is not None and (
            not isinstance(self.logprobs, int) or isinstance(self.logprobs, bool) or not 0 <= self.logprobs <= 20
        ):
            raise InvalidRequest("'top_logprobs' must be a whole number from 0 to 20.", param="top_logprobs")
        if self.prompt_logprobs is not None and (
            not isinstance(self.prompt_logprobs, int) or isinstance(self.prompt_logprobs, bool)
            or not 0 <= self.prompt_logprobs <= 20
        ):  # fmt: skip
            raise InvalidRequest("'prompt_logprobs' must be a whole number from 0 to 20.", param="prompt_logprobs")
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop) if isinstance(self.stop, (list, tuple)) else None
        if stop is None or any(not isinstance(s, str) for s in stop):
            raise InvalidRequest("'stop' must be a string or a list of strings.", param="stop")
        check_stops(stop)
        object.__setattr__(self, "stop", tuple(s for s in stop if s))
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))
        bias = self.logit_bias
        items = bias.items() if isinstance(bias, Mapping) else bias
        try:
            pairs = tuple((int(k), float(v)) for k, v in items)
        except (TypeError, ValueError) as exc:
            raise InvalidRequest(
                "'logit_bias' must map token ids to numbers between -100 and 100.", param="logit_bias"
            ) from exc
        for _, v in pairs:
            _check_range("logit_bias", v, -100.0, 100.0)
        object.__setattr__(self, "logit_bias", pairs)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def holds_end(self, generated: int) -> bool:
        """Whether the answer, ``generated`` tokens long so far, may not end yet (``min_tokens``): its next token is
        drawn with the end-of-generation and stop tokens banned."""
        return generated < self.min_tokens

    @property
    def penalized(self) -> bool:
        """Whether some penalty is on (and reads any token)."""
        on = self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
        return on and self.penalty_last_n != 0

    def penalty_windows(self, prompt: Sequence[int], answer: Sequence[int]) -> tuple[list[int], list[int]]:
        """The tokens the repetition penalty reads, and those presence and frequency penalties count, of a sequence
        whose ``prompt`` (placeholders of pictures, negative, left out) is followed by ``answer`` so far."""
        last = self.penalty_last_n
        if last == 0:
            return [], []
        answer = list(answer)
        if last is None:
            return [t for t in prompt if t >= 0] + answer, answer
        if 0 < last <= len(answer):
            tail = answer[-last:]
        else:
            text = [t for t in prompt if t >= 0]
            tail = text + answer if last < 0 else text[max(0, len(text) - (last - len(answer))) :] + answer
        return tail, tail


@dataclass(frozen=True, slots=True)
class MediaInput:
    """A picture or a sound sent with a message: the file's bytes (PNG, JPEG, WAV, MP3 ...), checked at the
    HTTP edge, and ``where`` it came from in the request (``messages[0].content[1]``) for error messages."""

    kind: MediaKind
    data: bytes
    where: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("image", "audio"):
            raise InvalidRequest(f"A media part must be an image or audio, got '{self.kind}'.", param=self.where)
        if not self.data:
            raise InvalidRequest(f"{self.where or 'A media part'} is empty; send the file's bytes.", param=self.where)


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One turn of a conversation, already flattened to text.

    An assistant turn may carry ``tool_calls`` (and the ``reasoning`` it thought first); a ``tool``
    turn answers the call ``tool_call_id`` (of the function ``name``). ``media`` are the pictures and
    sounds of the turn, in order, each at a :data:`MEDIA_MARKER` in ``content``.
    """

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: str | None = None
    media: tuple[MediaInput, ...] = ()

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise InvalidRequest(
                f"A message's role must be one of {', '.join(ROLES)}, got '{self.role}'.", param="messages"
            )
        if not isinstance(self.content, str):
            raise InvalidRequest("A message's content must be text.", param="messages")


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    """Constrained output: ``json_object`` (any JSON object), ``json_schema`` (this schema), or ``grammar``: the
    output matches ``grammar``, written in ``syntax`` (GBNF as llama.cpp takes it, Lark as llguidance takes it, or
    a regular expression). ``param`` is the request field it came from, which an error names."""

    type: Literal["text", "json_object", "json_schema", "grammar"] = "text"
    schema: Mapping[str, Any] | None = None
    grammar: str | None = None
    syntax: Literal["gbnf", "lark", "regex"] = "gbnf"
    param: str = "response_format"

    def __post_init__(self) -> None:
        if self.type == "json_schema":
            check_schema(self.schema, param=self.param)
        elif self.type == "grammar":
            check_grammar(self.grammar, param=self.param)

    @classmethod
    def choice(cls, options: Any, *, param: str) -> ResponseFormat:
        """Output that is exactly one of ``options`` (texts), as vLLM's ``choice``."""
        if not isinstance(options, Sequence) or isinstance(options, str) or not options:
            raise InvalidRequest(f"'{param}' must be a list of texts, the answer being one of them.", param=param)
        if len(options) > MAX_CHOICES or not all(isinstance(o, str) and o for o in options):
            raise InvalidRequest(f"'{param}' must list 1 to {MAX_CHOICES} texts, none of them empty.", param=param)
        if sum(len(o) for o in options) > MAX_GRAMMAR_CHARS // 2:
            raise InvalidRequest(f"The texts of '{param}' come to over {MAX_GRAMMAR_CHARS // 2:,} characters; shorten "
                                 "them.", param=param)  # fmt: skip
        import json

        return cls(type="grammar", grammar="start: " + " | ".join(json.dumps(o) for o in options), syntax="lark", param=param)


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """What to generate: chat ``messages`` or a raw ``prompt`` (exactly one), for ``model``. A raw prompt may
    be given as token ids (``prompt_ids``, with ``prompt`` their text or ""), read as they are."""

    model: str
    messages: tuple[ChatMessage, ...] | None = None
    prompt: str | None = None
    prompt_ids: tuple[int, ...] | None = None
    # Fill in the middle (engine.infill): the code before and after the gap; ``prompt`` is then text typed at
    # the gap (usually ""), and the backend builds the prompt from its vocabulary's markers.
    infill: Infill | None = None
    # Ollama's ``context``: the token ids of an earlier exchange (its prompt and answer, as a response gave
    # them) that this chat's rendered prompt continues, read as they are (engine.backends.runtime.prompt_ids).
    context: tuple[int, ...] = ()
    return_context: bool = False  # the final chunk gives the prompt's and the answer's ids (GenerationChunk.context)
    params: SamplingParams = field(default_factory=SamplingParams)
    response_format: ResponseFormat = field(default_factory=ResponseFormat)
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    # Tool calling and thinking (engine.tools): the offered tools, whether a call is allowed or forced,
    # whether an answer may hold several calls (None, not said: a forced answer holds one, as small models
    # otherwise repeat calls until max_tokens, and calls the model chooses to make are as many as it writes);
    # ``thinking`` None keeps the model's default, and ``template_kwargs``
    # are extra variables for the chat template (such as ``reasoning_effort``).
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    thinking: bool | None = None
    require_thinking: bool = False  # Ollama's ``think``: a model whose template cannot think refuses the request
    template_kwargs: tuple[tuple[str, Any], ...] = ()
    # The last message is an assistant's answer to go on with (vLLM's ``continue_final_message``): the prompt
    # ends inside it, where its text ends, and what is generated is the rest of the same answer.
    continue_final: bool = False
    # Speculative decoding (engine.backends.speculative): None follows the server's setting, False turns it
    # off for this request, True turns prompt lookup on; ``prediction`` is text the answer is expected to
    # repeat (OpenAI's Predicted Outputs), drafted from first.
    speculative: bool | None = None
    prediction: str | None = None
    # The ``params`` fields the client did not set (left to Hearth's defaults): a model's own defaults, such
    # as an Ollama Modelfile's PARAMETERs, fill these and only these (engine.model_defaults).
    unset: frozenset[str] = frozenset()
    # The client's request these are choices of (``n`` choices share one): a loop shares its slots fairly
    # between such requests, not between their choices. None: the request stands alone.
    group: str | None = None

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt is None):
            raise InvalidRequest("Give either chat messages or a prompt, not both or neither.")
        if self.prompt_ids is not None and self.prompt is None:
            raise InvalidRequest("Token ids are a raw prompt; give them without chat messages.", param="prompt")
        if self.infill is not None and (self.prompt is None or self.prompt_ids is not None):
            raise InvalidRequest("Fill in the middle takes text before and after the gap, not chat messages or token ids.",
                                 param="prompt")  # fmt: skip
        if self.messages is not None:
            msgs = tuple(self.messages)
            if not msgs:
                raise InvalidRequest("'messages' must hold at least one message.", param="messages")
            object.__setattr__(self, "messages", msgs)
        if self.continue_final and (self.messages is None or self.messages[-1].role != "assistant"):
            raise InvalidRequest("'continue_final_message' goes on with an answer: the last message must be the "
                                 "assistant's.", param="continue_final_message")  # fmt: skip
        if self.context:
            if self.messages is None:
                raise InvalidRequest("'context' continues a chat; it cannot go with a raw prompt or a suffix.",
                                     param="context")  # fmt: skip
            if self.media:
                raise InvalidRequest("'context' cannot go with images; send the conversation as messages to /api/chat "
                                     "instead.", param="context")  # fmt: skip

    @property
    def media(self) -> tuple[MediaInput, ...]:
        """Every picture and sound of the chat, in the order their markers come in the rendered prompt."""
        return tuple(m for msg in self.messages or () for m in msg.media)


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """The chosen token's log-probability and the best alternatives at that position (a prompt's first token has
    neither: nothing comes before it)."""

    token: str
    token_id: int
    logprob: float | None
    bytes: tuple[int, ...]
    top: tuple[tuple[str, float, tuple[int, ...]], ...] = ()
    top_ids: tuple[int, ...] = ()  # the alternatives' token ids, in ``top``'s order

    @classmethod
    def of(cls, piece: Callable[[int], bytes], token: int, chosen: float, ids: Sequence[int], values: Sequence[float]) -> TokenLogprob:
        """``token``'s log-probability ``chosen`` with the best ``ids`` and their ``values``, their texts made
        from ``piece`` (a token's bytes)."""
        top = tuple((piece(t).decode("utf-8", errors="replace"), v, tuple(piece(t))) for t, v in zip(ids, values, strict=True))
        p = piece(token)
        return cls(token=p.decode("utf-8", errors="replace"), token_id=token, logprob=chosen, bytes=tuple(p), top=top,
                   top_ids=tuple(int(t) for t in ids))  # fmt: skip

    def as_openai(self) -> dict:
        """OpenAI's shape of it (chat completions' ``logprobs.content`` items, the Responses API's ``logprobs``)."""
        return {
            "token": self.token,
            "logprob": self.logprob,
            "bytes": list(self.bytes),
            "top_logprobs": [{"token": t, "logprob": v, "bytes": list(b)} for t, v, b in self.top],
        }


@dataclass(frozen=True, slots=True)
class GenerationChunk:
    """One item of a generation stream.

    ``text`` is the new text (never a partial stop-string match). The final chunk has
    ``finish_reason`` set, and its counters and timings cover the whole generation;
    ``stop_sequence`` is the stop string that ended it, when one did.
    """

    text: str = ""
    token_ids: tuple[int, ...] = ()
    finish_reason: FinishReason | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    time_to_first_token: float | None = None
    tokens_per_second: float | None = None
    logprobs: tuple[TokenLogprob, ...] = ()
    # With an ``error``: its code where the request itself is at fault (``schema_too_complex``: a 400), else None.
    error_code: str | None = None
    # On the first chunk of a request that asked for them: each prompt token with its log-probability, in order.
    prompt_logprobs: tuple[TokenLogprob, ...] = ()
    error: str | None = None
    # Set by engine.tools on chat streams: the thinking in this piece (kept out of ``text``), pieces of
    # tool calls, and on the final chunk every call and the number of thinking tokens.
    reasoning: str = ""
    tool_call_deltas: tuple[ToolCallDelta, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning_tokens: int = 0
    stop_sequence: str | None = None
    # On the final chunk of a request with ``return_context``: the prompt's token ids and the answer's, up to a
    # stop string (Ollama's ``context``).
    context: tuple[int, ...] = ()
    # On the final chunk: tokens drafted by speculative decoding, and how many of them were kept.
    draft_tokens: int = 0
    accepted_draft_tokens: int = 0


def answer_begun(messages: Sequence[ChatMessage] | None) -> bool:
    """Whether a chat ends with an answer begun: the last message the assistant's, with text and no tool calls.

    Anthropic's Messages and Ollama's chat go on with such an answer (a "prefill": ``{`` to start a JSON object,
    or an answer cut off at its token limit) rather than starting another after it."""
    if not messages:
        return False
    last = messages[-1]
    return last.role == "assistant" and bool(last.content.strip()) and not last.tool_calls


def as_messages(items: Sequence[Mapping[str, Any] | ChatMessage]) -> tuple[ChatMessage, ...]:
    """Build chat messages from ``{"role", "content"}`` mappings (text parts are joined)."""
    out = []
    for item in items:
        if isinstance(item, ChatMessage):
            out.append(item)
            continue
        content = item.get("content")
        if content is None:
            content = ""
        elif isinstance(content, list):
            texts = [part.get("text", "") for part in content if isinstance(part, Mapping) and part.get("type") == "text"]
            if any(not isinstance(text, str) for text in texts):
                raise InvalidRequest("A message's text part needs its 'text' as a string.", param="messages")
            content = "".join(texts)
        role = str(item.get("role", ""))
        tool_calls = ()
        if role == "assistant" and item.get("tool_calls"):
            from engine.tools.spec import parse_tool_calls

            tool_calls = parse_tool_calls(item["tool_calls"])
        reasoning = item.get("reasoning_content") or item.get("reasoning")
        out.append(
            ChatMessage(
                role=role,
                content=content,
                tool_calls=tool_calls,
                tool_call_id=item.get("tool_call_id") if role == "tool" else None,
                name=item.get("name") if isinstance(item.get("name"), str) else None,
                reasoning=reasoning if isinstance(reasoning, str) else None,
            )
        )
    return tuple(out)


ModelFormat = Literal["gguf", "safetensors", "mlx"]


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A local model a backend can load: its public name, where it lies, and its format."""

    name: str
    path: Path
    format: ModelFormat = "gguf"
    chat_template: str | None = None  # replaces the file's own template (an Ollama model's, translated)
    mmproj: Path | None = None  # the multimodal projector GGUF that lets the model see (and hear)


__all__ = [
    "answer_begun",
    "MEDIA_MARKER",
    "MediaInput",
    "MediaKind",
    "ModelFormat",
    "ModelSpec",
    "FinishReason",
    "SamplingParams",
    "ChatMessage",
    "ResponseFormat",
    "GenerationRequest",
    "TokenLogprob",
    "GenerationChunk",
    "as_messages",
]
