"""Request bodies of the OpenAI-compatible API. Unknown fields are accepted and ignored,
as OpenAI clients send many; known fields are type-checked. An explicit ``null`` is accepted
wherever OpenAI's spec allows one, and means the field's default (docs/api.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, WithJsonSchema, model_validator
from pydantic.config import JsonDict

from engine.model_defaults import left_unset
from engine.server.api_models.settings import LoadSettings


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")

    @model_validator(mode="after")
    def _null_means_default(self):
        # OpenAI's spec marks most fields nullable: `"n": null` is `n` left out.
        for name, info in type(self).model_fields.items():
            if getattr(self, name) is None and not info.is_required():
                default = info.get_default(call_default_factory=True)
                if default is not None:
                    setattr(self, name, default)
        return self


class StreamOptions(_Body):
    include_usage: StrictBool | None = False


class JSONSchemaFormat(_Body):
    name: str | None = "response"
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormatBody(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None


# Ollama's keep_alive (every dialect takes it): seconds (negative: never), a duration, or "never". The pattern
# says what the server reads (engine.validation.request_keep_alive, whose sentence refuses anything else).
KEEP_ALIVE_PATTERN = r"^\s*([Nn][Ee][Vv][Ee][Rr]|[0-9]+(\.[0-9]+)?|([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+)\s*$"
KeepAlive = float | Annotated[str, WithJsonSchema({"type": "string", "pattern": KEEP_ALIVE_PATTERN})] | None

# Ranges are stated here so that the server's OpenAPI document says what it accepts.
_TOKEN_IDS: JsonDict = {"propertyNames": {"pattern": "^[0-9]+$"}}  # checked by the engine, with the model's vocabulary


class _Sampling(_Body):
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
    seed: int | None = None
    stop: str | list[str] | None = None
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100)]] | None = Field(None, json_schema_extra=_TOKEN_IDS)
    n: int | None = Field(1, ge=1)
    stream: StrictBool | None = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    ignore_eos: StrictBool | None = False
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
                 "max_tokens": max_tokens}  # fmt: skip
        return left_unset(given)


class ChatMessageBody(_Body):
    # Checked by the engine (which names `messages` in the error); listed for the OpenAPI document.
    role: str = Field(json_schema_extra={"enum": ["system", "developer", "user", "assistant", "tool", "function"]})
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class PredictionBody(_Body):
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
    reasoning_effort: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    prediction: PredictionBody | None = None


_TEXT: JsonDict = {"type": "string", "minLength": 1}
_TEXTS: JsonDict = {"anyOf": [_TEXT, {"type": "array", "items": _TEXT, "minItems": 1}]}


class CompletionBody(_Sampling):
    # Token-id prompts and an empty prompt (null is one) are in OpenAI's spec; they are refused with a
    # clear message (docs/api.md), and left out of the OpenAPI document.
    prompt: str | list[str] | list[int] | list[list[int]] | None = Field(json_schema_extra=_TEXTS)
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: StrictBool | None = False
    suffix: str | None = None
    response_format: ResponseFormatBody | None = None


class EmbeddingBody(_Body):
    model: str = Field(min_length=1)
    input: str | list[str] | list[int] | list[list[int]] = Field(json_schema_extra=_TEXTS)
    encoding_format: Literal["float", "base64"] | None = "float"
    dimensions: int | None = None
    user: str | None = None


class LoadBody(_Body):
    model: str = Field(min_length=1)


class ModelLoadBody(LoadBody):
    """``POST /api/models/load``: the model, and settings for this load (left out: the worker's own)."""

    # The numbers' ranges are engine.validation's, checked by the route: the CLI's flags refuse with its sentences too.
    ctx: int | None = Field(default=None, description="context length of each sequence")
    parallel: int | None = Field(default=None, description="sequences generated at once")
    gpu_layers: int | None = Field(default=None, description="layers offloaded to the GPU")
    kv_type: Literal["f16", "q8_0", "q4_0", "fp8"] | None = Field(default=None, description="KV cache type")
    threads: int | None = Field(default=None, description="CPU threads")
    flash_attn: bool | None = Field(default=None, description="flash attention (llama.cpp)")
    batch: int | None = Field(default=None, description="prompt tokens computed in one call")
    rope_scale: float | None = Field(default=None, description="YaRN RoPE scaling factor")
    rope_orig_ctx: int | None = Field(default=None, description="the trained context YaRN scales from")
    cpu_moe: int | None = Field(default=None, ge=-1, description="MoE experts on the CPU: first N layers', -1 all")
    speculative: str | None = Field(default=None, description="speculative decoding: auto, ngram, draft:MODEL or off")
    save: bool = Field(default=False, description="remember these settings for every later load of the model")
    keep_alive: KeepAlive = Field(
        default=None, description="how long it stays loaded when idle: seconds, a duration ('10m') or 'never'"
    )


class ModelSettingsBody(LoadSettings):
    """``PUT /api/models/NAME/settings``: the settings every load of the model takes (null: Hearth chooses);
    the fields of the answer's ``settings``, and unknown ones kept to be refused by name."""

    model_config = ConfigDict(extra="allow", frozen=False)


class FolderBody(_Body):
    """``POST /api/folders``: a folder to find models in (``first``: downloads go to it)."""

    path: str = Field(min_length=1)
    first: bool = False


class DownloadBody(_Body):
    repo: str = Field(min_length=3)
    variant: str | None = None
    mmproj_variant: str | None = None  # the projector pulled with it (F16, Q8_0, a file name, "none"); F16 unset


class ImportBody(_Body):
    path: str = Field(min_length=1)
    name: str | None = None
    mmproj: str | None = None  # the projector to pair it with; unset: an mmproj*.gguf beside it, if there is one


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    """Every error the API answers with (OpenAI's shape): one sentence saying what to do."""

    error: ErrorDetail
