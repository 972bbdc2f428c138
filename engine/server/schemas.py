"""Request bodies of the OpenAI-compatible API. Unknown fields are accepted and ignored,
as OpenAI clients send many; known fields are type-checked."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")


class StreamOptions(_Body):
    include_usage: StrictBool = False


class JSONSchemaFormat(_Body):
    name: str = "response"
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormatBody(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None


class _Sampling(_Body):
    model: str = Field(min_length=1)
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    repeat_penalty: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    logit_bias: dict[str, float] | None = None
    n: int = 1
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    ignore_eos: StrictBool = False


class ChatMessageBody(_Body):
    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class ChatCompletionBody(_Sampling):
    messages: list[ChatMessageBody]
    max_completion_tokens: int | None = None
    logprobs: StrictBool = False
    top_logprobs: int | None = None
    response_format: ResponseFormatBody | None = None
    # Tools and thinking (docs/tools.md); checked by engine.tools, which names a bad tool.
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None
    reasoning_effort: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None


class CompletionBody(_Sampling):
    prompt: str | list[str]
    logprobs: int | None = None
    echo: StrictBool = False
    suffix: str | None = None
    response_format: ResponseFormatBody | None = None


class EmbeddingBody(_Body):
    model: str = Field(min_length=1)
    input: str | list[str]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None


class LoadBody(_Body):
    model: str = Field(min_length=1)


class DownloadBody(_Body):
    repo: str = Field(min_length=3)
    variant: str | None = None


class ImportBody(_Body):
    path: str = Field(min_length=1)
    name: str | None = None
