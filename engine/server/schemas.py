"""Request bodies of the OpenAI-compatible API. Unknown fields are accepted and ignored,
as OpenAI clients send many; known fields are type-checked. An explicit ``null`` is accepted
wherever OpenAI's spec allows one, and means the field's default (docs/api.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StrictBool
from pydantic.config import JsonDict

from engine.model_defaults import left_unset
from engine.server.api_models.base import KeepAlive, NullAsDefaultBody


class StreamOptions(NullAsDefaultBody):
    include_usage: StrictBool | None = False


class JSONSchemaFormat(NullAsDefaultBody):
    name: str | None = "response"
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormatBody(NullAsDefaultBody):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None


# Ranges are stated here so that the server's OpenAPI document says what it accepts.
_TOKEN_IDS: JsonDict = {"propertyNames": {"pattern": "^[0-9]+$"}}  # checked by the engine, with the model's vocabulary


class _Sampling(NullAsDefaultBody):
    model: str = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=0)
    min_p: float | None = Field(None, ge=0, le=1)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    repetition_penalty: float | None = Field(None, ge=0.01, le=10)
    repeat_penalty: float | None = Field(None, ge=0.01, le=10)
    # llama-server's: the penalties read the last N tokens of prompt and answer (unset: vLLM's and OpenAI's reading)
    repeat_last_n: int | None = Field(None, ge=-1)
    seed: int | None = None
    stop: str | list[str] | None = None
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100)]] | None = Field(None, json_schema_extra=_TOKEN_IDS)
    n: int | None = Field(1, ge=1)
    stream: StrictBool | None = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    ignore_eos: StrictBool | None = False
    stop_token_ids: list[Annotated[int, Field(ge=0)]] | None = Field(None, max_length=64)  # vLLM's: ids that end the answer
    include_stop_str_in_output: StrictBool | None = False  # vLLM's: the stop string that ended the answer ends it
    min_tokens: int | None = Field(0, ge=0)  # vLLM's: nothing ends the answer before this many tokens
    # Speculative decoding (docs/api.md): false turns it off for this request, true turns prompt lookup on.
    speculative: StrictBool | None = None
    # Ollama's keep_alive, in every dialect: how long the model stays loaded after this request (0: unloaded then).
    keep_alive: KeepAlive = None

    def unset_sampling(self, max_tokens: int | None) -> frozenset[str]:
        """The sampling fields this body leaves out (null counts as left out), which a model's own
        defaults may fill (engine.model_defaults); ``max_tokens``: the limit the client asked for."""
        rep = self.repetition_penalty if self.repetition_penalty is not None else self.repeat_penalty
        given = {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k, "min_p": self.min_p,
                 "repetition_penalty": rep, "presence_penalty": self.presence_penalty,
                 "frequency_penalty": self.frequency_penalty, "seed": self.seed, "stop": self.stop,
                 "max_tokens": max_tokens, "penalty_last_n": self.repeat_last_n}  # fmt: skip
        return left_unset(given)


class ChatMessageBody(NullAsDefaultBody):
    # Checked by the engine (which names `messages` in the error); listed for the OpenAPI document.
    role: str = Field(json_schema_extra={"enum": ["system", "developer", "user", "assistant", "tool", "function"]})
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    function_call: Any = None  # OpenAI's deprecated call (``{"name", "arguments"}``): read as a tool call
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class PredictionBody(NullAsDefaultBody):
    """OpenAI's Predicted Outputs: text the answer is expected to repeat, drafted from first."""

    type: str = Field("content", json_schema_extra={"enum": ["content"]})
    content: str | list[dict[str, Any]] = Field(max_length=100_000)

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(str(p.get("text", "")) for p in self.content if isinstance(p, dict) and p.get("type") == "text")


class ChatCompletionBody(_Sampling):
    messages: list[ChatMessageBody] = Field(json_schema_extra={"minItems": 1})  # the engine says so if empty
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: StrictBool | None = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    response_format: ResponseFormatBody | None = None
    # Tools and thinking (docs/tools.md); checked by engine.tools, which names a bad tool.
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None
    # OpenAI's deprecated functions (without tools): read as function tools, answered in their own shape
    functions: list[Any] | None = None
    function_call: str | dict[str, Any] | None = None
    reasoning_effort: str | None = None
    # tokens the model may think before its thinking is closed for it: vLLM's name and llama-server's (-1: no cap)
    thinking_token_budget: int | None = Field(None, ge=-1)
    thinking_budget_tokens: int | None = Field(None, ge=-1)
    chat_template_kwargs: dict[str, Any] | None = None
    continue_final_message: StrictBool = False  # vLLM's: go on with the last message, the assistant's answer
    prediction: PredictionBody | None = None

    @property
    def thinking_budget(self) -> int | None:
        """The thinking budget the request gives under either name (-1: no cap; None: it gives none)."""
        return self.thinking_token_budget if self.thinking_token_budget is not None else self.thinking_budget_tokens

    @property
    def legacy_functions(self) -> bool:
        """Whether the request offers OpenAI's deprecated ``functions`` (and no ``tools``): the answer's call is then
        a message's ``function_call``, with finish_reason ``function_call``."""
        return bool(self.functions) and not self.tools


_TEXT: JsonDict = {"type": "string", "minLength": 1}
_TEXTS: JsonDict = {"anyOf": [_TEXT, {"type": "array", "items": _TEXT, "minItems": 1}]}


_IDS: JsonDict = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}
_PROMPTS: JsonDict = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}, _IDS,
                                {"type": "array", "items": _IDS, "minItems": 1}]}  # fmt: skip


class CompletionBody(_Sampling):
    # Text, texts, token ids or lists of them, as OpenAI takes them (ids are read as the model's own tokens). An
    # empty prompt (null is one) starts from the model's start of a document, as OpenAI's.
    prompt: str | list[Any] | None = Field(json_schema_extra=_PROMPTS)  # its shapes are checked where it is read
    # 0 with `echo`: the prompt alone, scored with `logprobs` (the route refuses 0 without echo)
    max_tokens: int | None = Field(None, ge=0)
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: StrictBool | None = False
    suffix: str | None = None
    response_format: ResponseFormatBody | None = None


class EmbeddingBody(NullAsDefaultBody):
    model: str = Field(min_length=1)
    input: str | list[str] | list[int] | list[list[int]] = Field(json_schema_extra=_TEXTS)
    encoding_format: Literal["float", "base64"] | None = "float"
    dimensions: int | None = None
    user: str | None = None


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    """Every error the API answers with (OpenAI's shape): one sentence saying what to do."""

    error: ErrorDetail
